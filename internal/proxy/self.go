package proxy

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"net"
	"net/http"
	"net/netip"
	"strings"
	"time"

	"github.com/netproxy/netproxy/hostpolicy"
	"github.com/netproxy/netproxy/internal/observe"
)

// ErrSelf is the dial error for a target on which netproxy itself listens
// (SPEC §3.5: netproxy never dials itself).
var ErrSelf = errors.New("refusing to dial netproxy's own listener")

// SelfAddrs are the addresses netproxy listens on (the HTTP, SOCKS5 and
// admin listeners). A target that is one of them is never dialed, whatever
// allow_local_binding or an allow-listed local literal says: a connection
// to its own listener escapes attribution and can loop until descriptors
// run out. A wildcard bind (0.0.0.0, ::) counts as every local address.
// It is immutable once built.
type SelfAddrs struct {
	exact    map[netip.AddrPort]struct{}
	wildcard map[uint16]struct{} // ports bound on 0.0.0.0 or ::
	ports    map[uint16]struct{} // every bound port
	// local lists the host's interface addresses (for wildcard binds);
	// nil means net.InterfaceAddrs.
	local func() []netip.Addr
}

// NewSelfAddrs builds the set from the bound listener addresses.
func NewSelfAddrs(addrs ...net.Addr) *SelfAddrs {
	s := &SelfAddrs{exact: map[netip.AddrPort]struct{}{}, wildcard: map[uint16]struct{}{}, ports: map[uint16]struct{}{}}
	for _, a := range addrs {
		ta, ok := a.(*net.TCPAddr)
		if !ok || ta == nil {
			continue
		}
		ap := ta.AddrPort()
		ip := ap.Addr().Unmap().WithZone("")
		port := ap.Port()
		s.ports[port] = struct{}{}
		if ip.IsUnspecified() {
			s.wildcard[port] = struct{}{}
			continue
		}
		s.exact[netip.AddrPortFrom(ip, port)] = struct{}{}
	}
	return s
}

// Contains reports whether dialing a:port would reach one of netproxy's
// own listeners.
func (s *SelfAddrs) Contains(a netip.Addr, port uint16) bool {
	if s == nil {
		return false
	}
	if _, ok := s.ports[port]; !ok {
		return false // the common case: one map probe
	}
	a = a.Unmap().WithZone("")
	if a.IsUnspecified() {
		return true // connecting to 0.0.0.0 / :: reaches this host
	}
	if _, ok := s.exact[netip.AddrPortFrom(a, port)]; ok {
		return true
	}
	if _, ok := s.wildcard[port]; !ok {
		return false
	}
	if a.IsLoopback() {
		return true
	}
	for _, l := range s.localAddrs() {
		if l == a {
			return true
		}
	}
	return false
}

// ContainsAny reports whether any of addrs on port is a listener of ours.
func (s *SelfAddrs) ContainsAny(addrs []netip.Addr, port uint16) bool {
	if s == nil {
		return false
	}
	for _, a := range addrs {
		if s.Contains(a, port) {
			return true
		}
	}
	return false
}

func (s *SelfAddrs) localAddrs() []netip.Addr {
	if s.local != nil {
		return s.local()
	}
	ifs, err := net.InterfaceAddrs()
	if err != nil {
		return nil
	}
	out := make([]netip.Addr, 0, len(ifs))
	for _, ia := range ifs {
		if pn, ok := ia.(*net.IPNet); ok {
			if a, ok := netip.AddrFromSlice(pn.IP); ok {
				out = append(out, a.Unmap())
			}
		}
	}
	return out
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
	d := hostpolicy.Decision{Verdict: hostpolicy.Deny, Reason: ReasonProxyLoop, Source: hostpolicy.SourceProxyState, Port: req.Port}
	if h, err := hostpolicy.Normalize(req.Host); err == nil {
		d.Host = h
	} else {
		d.Host = strings.ToLower(req.Host)
	}
	d.Steps = []hostpolicy.Step{{Step: "mode", Result: "block", Detail: "Via: the request already passed through this netproxy"}}
	if c.Sink != nil {
		c.Sink.ObserveDecision(observe.DecisionEvent{Time: time.Now(), Request: req, Decision: d})
	}
	return d
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
