package hostpolicy

import (
	"net/netip"
	"slices"
)

// addrSet holds the address entries of one list (SPEC §3.2): IP literals
// and CIDR prefixes. A lookup never scans the entries: there is one hash
// table per prefix length in use, probed from the longest length down, so
// its cost is bounded by the number of distinct lengths (at most 33 for
// IPv4, 129 for IPv6) whatever the number of entries — 10 000 prefixes
// cost about what 10 cost. It is immutable once built.
type addrSet struct {
	v4 []v4Level // longest prefix first
	v6 []v6Level
	n  int
}

type v4Level struct {
	bits int
	m    map[uint32]string // masked address → entry text
}

type v6Level struct {
	bits int
	m    map[[16]byte]string
}

// addrSetBuilder collects prefixes; build freezes them.
type addrSetBuilder struct {
	v4 map[int]map[uint32]string
	v6 map[int]map[[16]byte]string
	n  int
}

func newAddrSetBuilder() *addrSetBuilder {
	return &addrSetBuilder{v4: map[int]map[uint32]string{}, v6: map[int]map[[16]byte]string{}}
}

// add adds p (already masked, zone-free, IPv4-mapped prefixes unmapped);
// text is what a match reports.
func (b *addrSetBuilder) add(p netip.Prefix, text string) {
	bits := p.Bits()
	if p.Addr().Is4() {
		m := b.v4[bits]
		if m == nil {
			m = map[uint32]string{}
			b.v4[bits] = m
		}
		k := v4Key(p.Addr())
		if _, dup := m[k]; !dup {
			m[k] = text
			b.n++
		}
		return
	}
	m := b.v6[bits]
	if m == nil {
		m = map[[16]byte]string{}
		b.v6[bits] = m
	}
	k := p.Addr().As16()
	if _, dup := m[k]; !dup {
		m[k] = text
		b.n++
	}
}

func (b *addrSetBuilder) build() *addrSet {
	s := &addrSet{n: b.n}
	for bits, m := range b.v4 {
		s.v4 = append(s.v4, v4Level{bits, m})
	}
	for bits, m := range b.v6 {
		s.v6 = append(s.v6, v6Level{bits, m})
	}
	slices.SortFunc(s.v4, func(a, b v4Level) int { return b.bits - a.bits })
	slices.SortFunc(s.v6, func(a, b v6Level) int { return b.bits - a.bits })
	return s
}

func v4Key(a netip.Addr) uint32 {
	b := a.As4()
	return uint32(b[0])<<24 | uint32(b[1])<<16 | uint32(b[2])<<8 | uint32(b[3])
}

// empty reports whether the set holds no entry.
func (s *addrSet) empty() bool { return s == nil || s.n == 0 }

// match returns the most specific entry containing a. Zones are ignored; an
// IPv4-mapped address is judged as its IPv4 address, and an IPv6 address
// that embeds an IPv4 address (SPEC §3.3) also matches IPv4 entries.
func (s *addrSet) match(a netip.Addr) (string, bool) {
	if s.empty() || !a.IsValid() {
		return "", false
	}
	a = a.WithZone("").Unmap()
	if a.Is4() {
		return s.match4(a)
	}
	if t, ok := s.match6(a); ok {
		return t, true
	}
	if v4, ok := EmbeddedIPv4(a); ok {
		return s.match4(v4)
	}
	return "", false
}

func (s *addrSet) match4(a netip.Addr) (string, bool) {
	k := v4Key(a)
	for _, l := range s.v4 {
		var mask uint32
		if l.bits > 0 {
			mask = ^uint32(0) << (32 - l.bits)
		}
		if t, ok := l.m[k&mask]; ok {
			return t, true
		}
	}
	return "", false
}

func (s *addrSet) match6(a netip.Addr) (string, bool) {
	full := a.As16()
	for _, l := range s.v6 {
		k := full
		for i := range k {
			switch rem := l.bits - 8*i; {
			case rem >= 8:
			case rem <= 0:
				k[i] = 0
			default:
				k[i] &= byte(0xff << (8 - rem))
			}
		}
		if t, ok := l.m[k]; ok {
			return t, true
		}
	}
	return "", false
}

// matchAny returns the first of addrs inside the set and the entry it hit.
func (s *addrSet) matchAny(addrs []netip.Addr) (netip.Addr, string, bool) {
	if s.empty() {
		return netip.Addr{}, "", false
	}
	for _, a := range addrs {
		if t, ok := s.match(a); ok {
			return a, t, true
		}
	}
	return netip.Addr{}, "", false
}
