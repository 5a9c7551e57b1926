package hostpolicy

import (
	"net"
	"net/netip"
	"strconv"
	"strings"
)

// netproxy never dials itself (SPEC §3.5). The pipeline's own_listener
// stage judges a decision's addresses against the snapshot's listen
// addresses (so that `netproxy replay` and the shadow agree with serve),
// and the data path's dialer against the bound ones at dial time.

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

// NewSelfAddrs builds the set from listen addresses; local, when set,
// replaces net.InterfaceAddrs for wildcard binds (tests).
func NewSelfAddrs(local func() []netip.Addr, addrs ...netip.AddrPort) *SelfAddrs {
	s := &SelfAddrs{exact: map[netip.AddrPort]struct{}{}, wildcard: map[uint16]struct{}{}, ports: map[uint16]struct{}{}, local: local}
	for _, ap := range addrs {
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

// selfFromListen builds the own-listener set from "host:port" listen
// addresses: IP literals (a wildcard is every local address) and
// localhost (both loopbacks); port 0 and other names are left to the
// dialer, which refuses the bound addresses at dial time.
func selfFromListen(listen []string) *SelfAddrs {
	var aps []netip.AddrPort
	for _, l := range listen {
		host, port, err := net.SplitHostPort(l)
		if err != nil {
			continue
		}
		pn, err := strconv.ParseUint(port, 10, 16)
		if err != nil || pn == 0 {
			continue
		}
		if host == "" {
			host = "0.0.0.0"
		}
		if strings.EqualFold(host, "localhost") {
			aps = append(aps, netip.AddrPortFrom(netip.AddrFrom4([4]byte{127, 0, 0, 1}), uint16(pn)), netip.AddrPortFrom(netip.IPv6Loopback(), uint16(pn)))
			continue
		}
		if a, err := netip.ParseAddr(host); err == nil {
			aps = append(aps, netip.AddrPortFrom(a, uint16(pn)))
		}
	}
	if len(aps) == 0 {
		return nil
	}
	return NewSelfAddrs(nil, aps...)
}
