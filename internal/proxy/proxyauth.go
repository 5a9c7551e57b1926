package proxy

import (
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	socks5 "github.com/armon/go-socks5"

	"github.com/netproxy/netproxy/attribution"
	"github.com/netproxy/netproxy/hostpolicy"
	"github.com/netproxy/netproxy/internal/observe"
)

// Client identity (SPEC §4.4, docs/proxy.md "Proxy authentication").
//
// An unframed client may say who it is: Basic Proxy-Authorization on a
// plain-HTTP request or a CONNECT, RFC 1929 username/password on SOCKS5.
// A wrong secret (an unknown name, a malformed header), or none while
// proxy_auth.required is true, is refused with 407 (SOCKS5: status 1, then
// close), counted and audited without the secret. An authenticated
// client's requests carry its session ("client:NAME") and name (the
// audit's client), its narrower policy applies (the scopes stage) and its
// budget counts them. An attribution frame identifies the execution and
// wins: a framed connection is never asked.
//
// Identity is per request, not per connection: on a keep-alive plain-HTTP
// connection every request is judged by its own Proxy-Authorization (curl,
// git, pip and Python send it on each), so a request with another
// identity, or none, never inherits an earlier request's session. A
// CONNECT's and a SOCKS5 handshake's identity holds for their tunnel
// (and every request intercepted inside it). The header itself is never
// forwarded (forward.go's hop-by-hop list, mitm's), logged or audited.

// Results of netproxy_proxy_auth_total.
const (
	authOK      = "ok"
	authFailed  = "failed"  // wrong secret, unknown name, malformed
	authMissing = "missing" // none, with required = true
)

// Proxy-Authenticate challenge of a 407 (SPEC §3.7).
const proxyAuthChallenge = `Basic realm="netproxy"`

// identify sets c's identity for one request with header h (its
// Proxy-Authorization, read only when proxy authentication is on). It
// returns "" when the request may go on (as a client, or anonymously),
// else the cause of its refusal. A framed connection is its execution's:
// nothing is asked.
func (core *Core) identify(c *Conn, h http.Header) hostpolicy.Cause {
	if c.Attributed {
		return ""
	}
	cl := core.Clients
	if cl == nil || !cl.Enabled() {
		return ""
	}
	c.setClient(nil)
	hdr := h.Get("Proxy-Authorization")
	if hdr == "" {
		if cl.Required() {
			core.Meter.ProxyAuth(authMissing)
			return hostpolicy.CauseProxyAuthMissing
		}
		return ""
	}
	name, secret, ok := attribution.ParseBasic(hdr)
	if !ok {
		core.Meter.ProxyAuth(authFailed)
		return hostpolicy.CauseProxyAuthFailed
	}
	return core.login(c, name, secret)
}

// login checks name and secret and makes c the client's.
func (core *Core) login(c *Conn, name, secret string) hostpolicy.Cause {
	client, ok := core.Clients.Authenticate(name, secret)
	if !ok {
		core.Meter.ProxyAuth(authFailed)
		return hostpolicy.CauseProxyAuthFailed
	}
	core.Meter.ProxyAuth(authOK)
	c.setClient(client)
	return ""
}

// setClient makes c's current requests client's (nil: anonymous), with
// its budget. Only the connection's own goroutine calls it, between
// requests; the re-check walk reads the identity atomically.
func (c *Conn) setClient(client *attribution.Client) {
	c.ident.Store(client)
	c.budget = nil
	if client != nil {
		c.budget = client.Budget
	}
}

// identity is the client name and session id c's current requests carry
// ("" and "" for an anonymous or framed connection).
func (c *Conn) identity() (name, session string) {
	if cl := c.ident.Load(); cl != nil {
		return cl.Name, cl.SessionID
	}
	return "", ""
}

// decideIdentified is decide for a request identify let through (cause
// ""), and the proxy_auth_required block of one it refused.
func (core *Core) decideIdentified(decide func() hostpolicy.Decision, req hostpolicy.Request, cause hostpolicy.Cause) hostpolicy.Decision {
	if cause == "" {
		return decide()
	}
	d := hostpolicy.Decision{Verdict: hostpolicy.Deny, Reason: hostpolicy.ReasonProxyAuthRequired, Source: hostpolicy.SourceProxyState, Cause: cause}
	detail := "proxy authentication failed"
	if cause == hostpolicy.CauseProxyAuthMissing {
		detail = "proxy authentication required (proxy_auth.required)"
	}
	d.Steps = []hostpolicy.Step{{Step: hostpolicy.StepMode, Result: hostpolicy.ResultBlock, Detail: detail}}
	return core.ownDecision(req, d)
}

// ownDecision reports a decision the proxy makes itself, outside the
// pipeline (a loop, a refused authentication), with the request's host
// normalised where it can be.
func (core *Core) ownDecision(req hostpolicy.Request, d hostpolicy.Decision) hostpolicy.Decision {
	d.Port = req.Port
	if h, err := hostpolicy.Normalize(req.Host); err == nil {
		d.Host = h
	} else {
		d.Host = strings.ToLower(req.Host)
	}
	if core.Sink != nil {
		core.Sink.ObserveDecision(observe.DecisionEvent{Time: time.Now(), Request: req, Decision: d})
	}
	return d
}

// SOCKS5 methods (RFC 1928 §3).
const (
	socksNoAuth       = 0x00
	socksUserPass     = 0x02
	socksNoAcceptable = 0xFF
)

// socksMethod reads the client's SOCKS5 greeting itself and chooses the
// method when proxy authentication is on (SPEC §4.4): username/password
// when offered (it wins over no authentication), else no authentication
// unless required. The library then sees a greeting offering only the
// chosen method (sc.pre). false: the connection is to be closed (0xFF was
// sent, or the greeting was not SOCKS5).
func (s *SOCKSProxy) socksMethod(sc *socksConn) bool {
	c := sc.Conn
	var head [2]byte
	if _, err := io.ReadFull(c, head[:]); err != nil || head[0] != 0x05 {
		return false
	}
	methods := make([]byte, head[1])
	if _, err := io.ReadFull(c, methods); err != nil {
		return false
	}
	var user, none bool
	for _, m := range methods {
		user = user || m == socksUserPass
		none = none || m == socksNoAuth
	}
	chosen := byte(socksNoAcceptable)
	switch {
	case user:
		chosen = socksUserPass
	case none && !s.core.Clients.Required():
		chosen = socksNoAuth
	}
	if chosen == socksNoAcceptable {
		c.Write([]byte{0x05, socksNoAcceptable})
		if none { // it would have gone on anonymously: a refusal to count
			s.core.Meter.ProxyAuth(authMissing)
			s.core.decideIdentified(nil, s.core.request(c, "", 0, hostpolicy.ProtoSOCKS5, ""), hostpolicy.CauseProxyAuthMissing)
		}
		return false
	}
	sc.pre = []byte{0x05, 0x01, chosen}
	return true
}

// errSOCKSAuth ends a SOCKS5 handshake whose username/password failed.
var errSOCKSAuth = errors.New("socks5: proxy authentication failed")

// socksLogin is the library's username/password method (RFC 1929),
// checked against the configured clients.
type socksLogin struct {
	core *Core
	conn *Conn
}

func (socksLogin) GetCode() uint8 { return socksUserPass }

// Authenticate runs the RFC 1929 sub-negotiation: status 0 and the
// connection is the client's, or status 1 and the library closes it.
func (a socksLogin) Authenticate(r io.Reader, w io.Writer) (*socks5.AuthContext, error) {
	if _, err := w.Write([]byte{0x05, socksUserPass}); err != nil {
		return nil, err
	}
	field := func() ([]byte, error) {
		var n [1]byte
		if _, err := io.ReadFull(r, n[:]); err != nil {
			return nil, err
		}
		b := make([]byte, n[0])
		_, err := io.ReadFull(r, b)
		return b, err
	}
	var ver [1]byte
	if _, err := io.ReadFull(r, ver[:]); err != nil {
		return nil, err
	}
	if ver[0] != 0x01 {
		return nil, fmt.Errorf("socks5: username/password version %d, want 1", ver[0])
	}
	user, err := field()
	if err != nil {
		return nil, err
	}
	pass, err := field()
	if err != nil {
		return nil, err
	}
	if cause := a.core.login(a.conn, string(user), string(pass)); cause != "" {
		w.Write([]byte{0x01, 0x01})
		a.core.decideIdentified(nil, a.core.request(a.conn, "", 0, hostpolicy.ProtoSOCKS5, ""), cause)
		return nil, errSOCKSAuth
	}
	if _, err := w.Write([]byte{0x01, 0x00}); err != nil {
		return nil, err
	}
	return &socks5.AuthContext{Method: socksUserPass}, nil
}
