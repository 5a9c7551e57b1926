package proxy

import (
	"context"
	"errors"
	"io"
	"log"
	"net"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	socks5 "github.com/armon/go-socks5"

	"github.com/netproxy/netproxy/hostpolicy"
)

// SOCKS5 reply codes (RFC 1928 §6) that netproxy chooses itself.
const (
	socksSucceeded         = 0x00
	socksGeneralFailure    = 0x01
	socksNotAllowed        = 0x02
	socksHostUnreachable   = 0x04
	socksConnectionRefused = 0x05
	socksTTLExpired        = 0x06
)

// SOCKSProxy is the SOCKS5 listener's front end on github.com/armon/go-socks5:
// the library speaks the handshake (no-auth, or username/password when
// proxy clients are configured, proxyauth.go; CONNECT only), and
// netproxy supplies a resolver that never resolves, the policy check as the
// library's rule set, and the pinned dialer.
type SOCKSProxy struct {
	core   *Core
	limits Limits
	wg     sync.WaitGroup
	logger *log.Logger
}

// NewSOCKS builds the SOCKS5 front end over core.
func NewSOCKS(core *Core) *SOCKSProxy {
	return &SOCKSProxy{core: core, limits: core.Limits.withDefaults(), logger: log.New(io.Discard, "", 0)}
}

// Serve accepts admitted connections from g until it is closed.
func (s *SOCKSProxy) Serve(ctx context.Context, g *Gate) error {
	return serveAdmitted(ctx, g, &s.wg, s.ServeConn)
}

// Wait blocks until every connection handler returned.
func (s *SOCKSProxy) Wait() { s.wg.Wait() }

// noResolve keeps names as names: the policy sees the name first, and only
// the pinned dialer ever connects.
type noResolve struct{}

func (noResolve) Resolve(ctx context.Context, name string) (context.Context, net.IP, error) {
	return ctx, nil, nil
}

// socksConn is the connection the library sees. During the handshake it
// hands out one byte per read, so the library's buffered reader never holds
// bytes past the request (the tunnel takes the raw socket afterwards). Once
// netproxy has written the reply itself, it is muted so the library's own
// reply is never sent.
type socksConn struct {
	*Conn
	// pre is read before the socket: the greeting netproxy read itself
	// when proxy authentication is on, rewritten to the chosen method
	// (proxyauth.go).
	pre   []byte
	muted atomic.Bool
	// kept is set when a tunnel takes the connection over: the library's
	// closing of it on return is then ignored.
	kept atomic.Bool
}

func (c *socksConn) Close() error {
	if c.kept.Load() {
		return nil
	}
	return c.Conn.Close()
}

func (c *socksConn) Read(p []byte) (int, error) {
	if len(c.pre) > 0 {
		n := copy(p, c.pre)
		c.pre = c.pre[n:]
		return n, nil
	}
	if len(p) > 1 {
		p = p[:1]
	}
	return c.Conn.Read(p)
}

func (c *socksConn) Write(p []byte) (int, error) {
	if c.muted.Load() {
		return 0, errMuted
	}
	return c.Conn.Write(p)
}

var errMuted = errors.New("reply already sent")

// errTunnelDone tells the library the connection is finished (its reply
// write then fails on the muted connection and it returns).
var errTunnelDone = errors.New("tunnel finished")

type ruleFunc func(ctx context.Context, req *socks5.Request) (context.Context, bool)

func (f ruleFunc) Allow(ctx context.Context, req *socks5.Request) (context.Context, bool) {
	return f(ctx, req)
}

// ServeConn runs one SOCKS5 connection.
func (s *SOCKSProxy) ServeConn(ctx context.Context, c *Conn) {
	sc := &socksConn{Conn: c}
	// tunnel is set once the handshake succeeded: it runs after the
	// library returned, on fresh goroutines, so an open tunnel holds
	// neither the library's reader and server nor this handler's stack.
	var tunnel *Tunnel
	defer func() {
		if tunnel == nil {
			sc.Close()
			return
		}
		// The handler goroutine (with its larger stack) ends here; the tunnel
		// runs on fresh goroutines.
		tunnel.Start(&s.wg)
	}()
	c.SetDeadline(time.Now().Add(s.limits.HeaderTimeout))
	var decision hostpolicy.Decision
	var hreq hostpolicy.Request
	var gen uint64

	rules := ruleFunc(func(rctx context.Context, req *socks5.Request) (context.Context, bool) {
		if req.Command != socks5.ConnectCommand {
			return rctx, true // the library answers BIND/UDP with 0x07
		}
		if !s.core.stillAttributed(c) {
			return rctx, false
		}
		host := req.DestAddr.FQDN
		if host == "" && req.DestAddr.IP != nil {
			host = req.DestAddr.IP.String()
		}
		port := req.DestAddr.Port
		if port < 1 || port > 65535 {
			return rctx, false
		}
		hreq = s.core.request(c, host, uint16(port), hostpolicy.ProtoSOCKS5, "")
		// The handshake is over; a review may take a while.
		c.SetDeadline(time.Time{})
		gen = c.generation()
		decision = s.core.decideWatching(ctx, c, hreq)
		if !decision.Allowed() {
			return rctx, false
		}
		return rctx, true
	})
	dial := func(dctx context.Context, network, addr string) (net.Conn, error) {
		if !decision.Allowed() {
			return nil, ErrNoTarget
		}
		if decision.Intercept { // a credential's host on port 443 (docs/credentials.md)
			return nil, s.intercept(ctx, sc, decision, gen)
		}
		up, err := s.core.Dialer.DialTarget(ctx, TargetOf(decision))
		if err != nil {
			s.core.logger().Info("upstream failure", "protocol", "socks5-tcp", "host", decision.Host, "port", decision.Port, "error", err.Error())
			s.reply(sc, dialReply(err), nil)
			sc.muted.Store(true)
			return nil, err
		}
		if !s.core.bindTunnel(c, &decision, hostpolicy.ProtoSOCKS5, up, gen) {
			up.Close()
			sc.muted.Store(true)
			return nil, errTunnelDone // a change since the decision closed it
		}
		local, _ := up.LocalAddr().(*net.TCPAddr)
		if err := s.reply(sc, socksSucceeded, local); err != nil {
			up.Close()
			sc.muted.Store(true)
			return nil, err
		}
		sc.muted.Store(true)
		sc.kept.Store(true)
		tunnel = &Tunnel{Client: c.TCPConn, Upstream: up, Idle: s.limits.IdleTimeout, Protocol: hostpolicy.ProtoSOCKS5, Meter: s.core.Meter, Owner: c, Parker: s.core.Parker, budget: s.core.tunnelBudget(c)}
		tunnel.TLSName, tunnel.sni = s.core.tlsNameCheck(&decision)
		tunnel.acc = s.core.tunnelAccess(c, &decision, hostpolicy.ProtoSOCKS5, "", 0)
		return nil, errTunnelDone
	}
	auth := []socks5.Authenticator{socks5.NoAuthAuthenticator{}}
	if !c.Attributed && s.core.Clients != nil && s.core.Clients.Enabled() {
		// Proxy authentication (SPEC §4.4): netproxy picks the method.
		if !s.socksMethod(sc) {
			return
		}
		auth = append(auth, socksLogin{core: s.core, conn: c})
	}
	srv, err := socks5.New(&socks5.Config{
		AuthMethods: auth,
		Resolver:    noResolve{},
		Rules:       rules,
		Logger:      s.logger,
		Dial:        dial,
	})
	if err != nil {
		return
	}
	srv.ServeConn(sc)
}

// reply writes a SOCKS5 reply with the bound address (0.0.0.0:0 if none).
func (s *SOCKSProxy) reply(c *socksConn, code byte, bound *net.TCPAddr) error {
	msg := []byte{0x05, code, 0x00}
	if bound != nil && bound.IP.To4() != nil {
		msg = append(msg, 0x01)
		msg = append(msg, bound.IP.To4()...)
	} else if bound != nil && len(bound.IP) == net.IPv6len {
		msg = append(msg, 0x04)
		msg = append(msg, bound.IP...)
	} else {
		msg = append(msg, 0x01, 0, 0, 0, 0)
	}
	port := 0
	if bound != nil {
		port = bound.Port
	}
	msg = append(msg, byte(port>>8), byte(port))
	_, err := c.Conn.Write(msg)
	return err
}

// dialReply maps a dial failure to a SOCKS5 reply (SPEC §3.7).
func dialReply(err error) byte {
	switch {
	case errors.Is(err, ErrNonPublic), errors.Is(err, ErrSelf):
		return socksNotAllowed
	case errors.Is(err, syscall.ECONNREFUSED):
		return socksConnectionRefused
	case errors.Is(err, context.DeadlineExceeded), isTimeout(err):
		return socksTTLExpired
	case errors.Is(err, ErrNoAddresses), errors.Is(err, syscall.EHOSTUNREACH), errors.Is(err, syscall.ENETUNREACH):
		return socksHostUnreachable
	}
	var dnsErr *net.DNSError
	if errors.As(err, &dnsErr) {
		return socksHostUnreachable
	}
	return socksHostUnreachable
}
