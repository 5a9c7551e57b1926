package proxy

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"net"
	"net/http"
	"net/netip"
	"strings"

	"github.com/netproxy/netproxy/hostpolicy"
)

// ErrSelf is the dial error for a target on which netproxy itself listens
// (SPEC §3.5: netproxy never dials itself).
var ErrSelf = errors.New("refusing to dial netproxy's own listener")

// SelfAddrs are the addresses netproxy listens on (hostpolicy.SelfAddrs).
type SelfAddrs = hostpolicy.SelfAddrs

// NewSelfAddrs builds the set from the bound listener addresses.
func NewSelfAddrs(addrs ...net.Addr) *SelfAddrs {
	aps := make([]netip.AddrPort, 0, len(addrs))
	for _, a := range addrs {
		if ta, ok := a.(*net.TCPAddr); ok && ta != nil {
			aps = append(aps, ta.AddrPort())
		}
	}
	return hostpolicy.NewSelfAddrs(nil, aps...)
}

// NewInstanceID returns a random per-process id for the Via token.
func NewInstanceID() (string, error) {
	var b [8]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", err
	}
	return hex.EncodeToString(b[:]), nil
}

// via is this process's Via value and the token that recognises it.
type via struct {
	token string   // "netproxy-<instance>"
	value []string // {"1.1 netproxy-<instance>"}, shared, never mutated
}

func newVia(instance string) via {
	if instance == "" {
		return via{}
	}
	return via{token: "netproxy-" + instance, value: []string{ViaValue(instance)}}
}

// ViaValue is the Via element of this process: "1.1 netproxy-<instance>".
func ViaValue(instance string) string { return "1.1 netproxy-" + instance }

// looped reports whether a request already passed through this process
// (its Via carries our token).
func (v via) looped(h http.Header) bool {
	if v.token == "" {
		return false
	}
	for _, s := range h["Via"] {
		if strings.Contains(s, v.token) {
			return true
		}
	}
	return false
}

// add appends this hop to the request's Via (RFC 9110 §7.6.3).
func (v via) add(h http.Header) {
	if v.token == "" {
		return
	}
	if cur := h["Via"]; len(cur) > 0 {
		h["Via"] = append(cur[:len(cur):len(cur)], v.value[0])
		return
	}
	h["Via"] = v.value
}

// ReasonProxyLoop is the block reason of a request that came back to this
// process (SPEC §3.6 proxy_loop): 508, x-proxy-error blocked-by-policy.
const ReasonProxyLoop hostpolicy.Reason = "proxy_loop"

// loopDecision is the block of a looped request; it is reported to the
// sinks (counted and audited) like every decision.
func (c *Core) loopDecision(req hostpolicy.Request) hostpolicy.Decision {
	d := hostpolicy.Decision{Verdict: hostpolicy.Deny, Reason: ReasonProxyLoop, Source: hostpolicy.SourceProxyState}
	d.Steps = []hostpolicy.Step{{Step: "mode", Result: "block", Detail: "Via: the request already passed through this netproxy"}}
	return c.ownDecision(req, d)
}

// refusedAtDial reports a dial the dialer refused for policy (a non-public
// or own address found only at dial time) rather than a network failure.
func refusedAtDial(err error) bool {
	return err != nil && (errors.Is(err, ErrSelf) || errors.Is(err, ErrNonPublic))
}

// refusedDecision is what the client is told about such a dial.
func refusedDecision(d hostpolicy.Decision) hostpolicy.Decision {
	d.Verdict, d.Reason, d.Source = hostpolicy.Deny, hostpolicy.ReasonNotAllowedLocal, hostpolicy.SourceBaseline
	return d
}
