package hostpolicy

import (
	"net/netip"
	"slices"

	"github.com/netproxy/netproxy/hostpolicy/hostname"
)

// list is one compiled policy list (allow or deny, host-wide or of a
// scope): name patterns, address entries, and — for an allow list — the
// CIDR prefixes that exempt a name's answers from the local guard.
//
// Entries scoped to ports (SPEC §3.2) live in sub-lists of the same shape,
// one per distinct port range, beside the unscoped entries: a single port
// is one map probe away, a range is found by scanning the few distinct
// ranges. So a lookup costs one probe of the unscoped tables plus one per
// distinct range containing the port — never a scan of the patterns — and
// a list without port-scoped entries costs exactly what it did before.
// A match of a scoped entry reports the entry with its port suffix.
type list struct {
	names *matcher
	addrs *addrSet
	// prefixes are the CIDR entries only (allow list): an exact literal
	// entry allows that literal as a target, never a name resolving to it.
	prefixes *addrSet
	count    int

	byPort map[uint16]*list // entries scoped to exactly one port
	ranges []rangedList     // entries scoped to a range of ports
}

type rangedList struct {
	ports hostname.PortRange
	l     *list
}

// scoped calls fn with each port-scoped sub-list that covers port, until fn
// returns true.
func (l *list) scoped(port uint16, fn func(*list) bool) bool {
	if l == nil || port == 0 {
		return false
	}
	if len(l.byPort) > 0 {
		if sub, ok := l.byPort[port]; ok && fn(sub) {
			return true
		}
	}
	for _, r := range l.ranges {
		if r.ports.Contains(port) && fn(r.l) {
			return true
		}
	}
	return false
}

// find returns the first answer of f for the unscoped entries, then for
// each port-scoped sub-list covering port.
func (l *list) find(port uint16, f func(*list) (string, bool)) (text string, ok bool) {
	if l == nil {
		return "", false
	}
	if text, ok = f(l); ok {
		return text, true
	}
	l.scoped(port, func(sub *list) bool {
		text, ok = f(sub)
		return ok
	})
	return text, ok
}

// matchName returns the entry matching host on port: an unscoped pattern
// first (the most specific, as matcher.match), then a port-scoped one.
func (l *list) matchName(host string, port uint16) (string, bool) {
	if l == nil {
		return "", false
	}
	// The unscoped entries directly: most lists have no port-scoped ones,
	// and a name is matched twice per decision (deny, then allow).
	if text, ok := l.names.match(host); ok || (len(l.byPort) == 0 && len(l.ranges) == 0) {
		return text, ok
	}
	return l.find(port, func(x *list) (string, bool) { return x.names.match(host) })
}

// matchExact returns an exact (non-wildcard) name entry equal to host on port.
func (l *list) matchExact(host string, port uint16) (string, bool) {
	return l.find(port, func(x *list) (string, bool) { return x.names.matchExact(host) })
}

// matchAddr returns the most specific address entry containing a on port.
func (l *list) matchAddr(a netip.Addr, port uint16) (string, bool) {
	return l.find(port, func(x *list) (string, bool) { return x.addrs.match(a) })
}

// matchAnyAddr returns the first of addrs inside an address entry on port.
func (l *list) matchAnyAddr(addrs []netip.Addr, port uint16) (netip.Addr, string, bool) {
	if l == nil || len(addrs) == 0 || !l.hasAddrs() {
		return netip.Addr{}, "", false
	}
	for _, a := range addrs {
		if entry, ok := l.matchAddr(a, port); ok {
			return a, entry, true
		}
	}
	return netip.Addr{}, "", false
}

// matchPrefix returns the CIDR entry containing a on port (allow list).
func (l *list) matchPrefix(a netip.Addr, port uint16) (string, bool) {
	return l.find(port, func(x *list) (string, bool) { return x.prefixes.match(a) })
}

// hasAddrs reports whether the list holds any address entry, on any port.
func (l *list) hasAddrs() bool {
	if l == nil {
		return false
	}
	if !l.addrs.empty() {
		return true
	}
	for _, sub := range l.byPort {
		if !sub.addrs.empty() {
			return true
		}
	}
	for _, r := range l.ranges {
		if !r.l.addrs.empty() {
			return true
		}
	}
	return false
}

// listBuilder collects the entries of one list.
type listBuilder struct {
	names           *matcherBuilder
	addrs, prefixes *addrSetBuilder
	suffix          string // the port suffix reported with a match
	count           int    // CIDR entries (patterns are counted by names)
	scoped          map[hostname.PortRange]*listBuilder
}

func newListBuilder(suffix string) *listBuilder {
	lb := &listBuilder{names: newMatcherBuilder(), addrs: newAddrSetBuilder(), prefixes: newAddrSetBuilder(), suffix: suffix}
	lb.names.m.suffix = suffix
	return lb
}

// add adds a parsed entry; allow tells whether a CIDR entry exempts answers.
func (lb *listBuilder) add(pe parsedEntry, allow bool) {
	if !pe.ports.Any() {
		if lb.scoped == nil {
			lb.scoped = map[hostname.PortRange]*listBuilder{}
		}
		sub := lb.scoped[pe.ports]
		if sub == nil {
			sub = newListBuilder(pe.ports.String())
			lb.scoped[pe.ports] = sub
		}
		pe.ports = hostname.PortRange{}
		sub.add(pe, allow)
		return
	}
	if pe.pattern != nil {
		lb.names.add(*pe.pattern)
	} else {
		lb.count++ // a CIDR entry: counted with the list's patterns
	}
	if pe.hasPrefix {
		text := pe.prefix.String()
		if pe.pattern != nil {
			text = pe.pattern.Text
		}
		lb.addrs.add(pe.prefix, text+lb.suffix)
		if pe.pattern == nil && allow {
			lb.prefixes.add(pe.prefix, text+lb.suffix)
		}
	}
}

func (lb *listBuilder) build() *list {
	names := lb.names.build()
	l := &list{names: names, addrs: lb.addrs.build(), prefixes: lb.prefixes.build(), count: names.count + lb.count}
	for pr, sub := range lb.scoped {
		sl := sub.build()
		l.count += sl.count
		if pr.Lo == pr.Hi {
			if l.byPort == nil {
				l.byPort = map[uint16]*list{}
			}
			l.byPort[pr.Lo] = sl
		} else {
			l.ranges = append(l.ranges, rangedList{ports: pr, l: sl})
		}
	}
	// A deterministic order: the report of a match does not depend on map order.
	slices.SortFunc(l.ranges, func(a, b rangedList) int {
		if a.ports.Lo != b.ports.Lo {
			return int(a.ports.Lo) - int(b.ports.Lo)
		}
		return int(a.ports.Hi) - int(b.ports.Hi)
	})
	return l
}
