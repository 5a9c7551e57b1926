package hostpolicy

import (
	"encoding/binary"
	"net/netip"
	"slices"
)

// addrSet holds the address entries of one list (SPEC §3.2): IP literals
// and CIDR prefixes. A lookup never scans the entries: the prefixes of each
// family are sorted ranges and a lookup is one binary search plus a walk up
// the enclosing prefixes (CIDR prefixes nest or are disjoint), so 10 000
// prefixes cost a few more comparisons than 10. It is immutable once built.
type addrSet struct {
	v4, v6 []span
	n      int
}

// u128 is an address as a 128-bit number (big-endian halves).
type u128 struct{ hi, lo uint64 }

func (a u128) cmp(b u128) int {
	switch {
	case a.hi < b.hi:
		return -1
	case a.hi > b.hi:
		return 1
	case a.lo < b.lo:
		return -1
	case a.lo > b.lo:
		return 1
	}
	return 0
}

// span is one prefix as the range [start, end].
type span struct {
	start, end u128
	bits       int   // prefix length in the 128-bit space
	parent     int32 // index of the nearest enclosing span, -1 for none
	text       string
}

// addrSetBuilder collects prefixes; build freezes them.
type addrSetBuilder struct {
	seen map[netip.Prefix]string
}

func newAddrSetBuilder() *addrSetBuilder {
	return &addrSetBuilder{seen: map[netip.Prefix]string{}}
}

// add adds p (masked, zone-free, IPv4-mapped prefixes already unmapped);
// text is what a match reports. The first text of a prefix wins.
func (b *addrSetBuilder) add(p netip.Prefix, text string) {
	if _, dup := b.seen[p]; !dup {
		b.seen[p] = text
	}
}

func (b *addrSetBuilder) build() *addrSet {
	s := &addrSet{n: len(b.seen)}
	for p, text := range b.seen {
		bits := p.Bits()
		if p.Addr().Is4() {
			// IPv4 lives in its own table, as the low bits of the IPv4-mapped form.
			start := toU128(p.Addr())
			s.v4 = append(s.v4, span{start: start, end: lastOf(start, bits+96), bits: bits, text: text})
			continue
		}
		start := toU128(p.Addr())
		s.v6 = append(s.v6, span{start: start, end: lastOf(start, bits), bits: bits, text: text})
	}
	nest(s.v4)
	nest(s.v6)
	b.seen = nil
	return s
}

// nest sorts spans by start, and for one start the widest first, so that
// the last span starting at or before an address is the most specific
// candidate, and links each span to its nearest enclosing one.
func nest(spans []span) {
	slices.SortFunc(spans, func(a, b span) int {
		if c := a.start.cmp(b.start); c != 0 {
			return c
		}
		return a.bits - b.bits
	})
	var stack []int32
	for i := range spans {
		for len(stack) > 0 && spans[stack[len(stack)-1]].end.cmp(spans[i].start) < 0 {
			stack = stack[:len(stack)-1]
		}
		spans[i].parent = -1
		if len(stack) > 0 {
			spans[i].parent = stack[len(stack)-1]
		}
		stack = append(stack, int32(i))
	}
}

func toU128(a netip.Addr) u128 {
	b := a.As16() // IPv4 as ::ffff:a.b.c.d
	return u128{binary.BigEndian.Uint64(b[:8]), binary.BigEndian.Uint64(b[8:])}
}

// lastOf is the last address of the prefix start/bits.
func lastOf(start u128, bits int) u128 {
	switch {
	case bits <= 0:
		return u128{^uint64(0), ^uint64(0)}
	case bits < 64:
		return u128{start.hi | ^uint64(0)>>bits, ^uint64(0)}
	case bits < 128:
		return u128{start.hi, start.lo | ^uint64(0)>>(bits-64)}
	}
	return start
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
		return lookup(s.v4, toU128(a))
	}
	if t, ok := lookup(s.v6, toU128(a)); ok {
		return t, true
	}
	if v4, ok := EmbeddedIPv4(a); ok {
		return lookup(s.v4, toU128(v4))
	}
	return "", false
}

func lookup(spans []span, x u128) (string, bool) {
	// The last span starting at or before x.
	lo, hi := 0, len(spans)
	for lo < hi {
		m := int(uint(lo+hi) >> 1)
		if spans[m].start.cmp(x) <= 0 {
			lo = m + 1
		} else {
			hi = m
		}
	}
	for i := int32(lo - 1); i >= 0; i = spans[i].parent {
		if x.cmp(spans[i].end) <= 0 {
			return spans[i].text, true
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
