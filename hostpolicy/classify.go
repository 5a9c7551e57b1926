package hostpolicy

import (
	"net/netip"
)

// nonPublicV4 are the IPv4 ranges of SPEC §3.3.
var nonPublicV4 = mustPrefixes(
	"0.0.0.0/8", "10.0.0.0/8", "100.64.0.0/10", "127.0.0.0/8", "169.254.0.0/16",
	"172.16.0.0/12", "192.0.0.0/24", "192.0.2.0/24", "192.168.0.0/16", "198.18.0.0/15",
	"198.51.100.0/24", "203.0.113.0/24", "224.0.0.0/4", "240.0.0.0/4",
)

// nonPublicV6 are the IPv6 ranges of SPEC §3.3 judged as a whole, plus the
// IANA special-purpose blocks that mirror IPv4 ranges SPEC already blocks
// (discard-only 100::/64, benchmarking 2001:2::/48, documentation 3fff::/20):
// the classifier is the security boundary, so it errs on the closed side.
var nonPublicV6 = mustPrefixes(
	"::/128", "::1/128", "fc00::/7", "fe80::/10", "fec0::/10", "ff00::/8",
	"2001:db8::/32", "64:ff9b:1::/48",
	"100::/64", "2001:2::/48", "3fff::/20",
)

var (
	compatPrefix = netip.MustParsePrefix("::/96")         // ::a.b.c.d (deprecated IPv4-compatible)
	nat64Prefix  = netip.MustParsePrefix("64:ff9b::/96")  // well-known NAT64
	sixToFour    = netip.MustParsePrefix("2002::/16")     // 6to4: bits 16–47
	teredo       = netip.MustParsePrefix("2001::/32")     // Teredo: client = ^last 32 bits
	mappedPrefix = netip.MustParsePrefix("::ffff:0:0/96") // ::ffff:a.b.c.d
	// SIIT "IPv4-translated" ::ffff:0:a.b.c.d (RFC 2765) — beyond SPEC, same idea.
	translatedPrefix = netip.MustParsePrefix("::ffff:0:0:0/96")
)

func mustPrefixes(ss ...string) []netip.Prefix {
	out := make([]netip.Prefix, len(ss))
	for i, s := range ss {
		out[i] = netip.MustParsePrefix(s)
	}
	return out
}

// IsNonPublic reports whether a is an address a sandboxed client must not
// reach without an explicit exception (SPEC §3.3). It is THE classifier: the
// policy calls it on literals and resolved answers, and the dialer calls it
// again on every address it dials. An invalid address is non-public (fail
// closed). Zones are ignored: a scoped address is judged by its address.
func IsNonPublic(a netip.Addr) bool {
	if !a.IsValid() {
		return true
	}
	a = a.WithZone("")
	if a.Is4() {
		return v4NonPublic(a)
	}
	if a.Is4In6() {
		return v4NonPublic(a.Unmap())
	}
	for _, p := range nonPublicV6 {
		if p.Contains(a) {
			return true
		}
	}
	if v4, ok := EmbeddedIPv4(a); ok {
		return v4NonPublic(v4)
	}
	return false
}

// EmbeddedIPv4 returns the IPv4 address an IPv6 address carries in one of the
// transition forms of SPEC §3.3: mapped, compatible, NAT64 (64:ff9b::/96),
// 6to4 (2002::/16) and Teredo (2001::/32, client address bit-inverted), and
// the SIIT-translated form ::ffff:0:a.b.c.d.
func EmbeddedIPv4(a netip.Addr) (netip.Addr, bool) {
	if !a.Is6() {
		return netip.Addr{}, false
	}
	a = a.WithZone("")
	b := a.As16()
	last := [4]byte{b[12], b[13], b[14], b[15]}
	switch {
	case mappedPrefix.Contains(a), compatPrefix.Contains(a), nat64Prefix.Contains(a), translatedPrefix.Contains(a):
		return netip.AddrFrom4(last), true
	case sixToFour.Contains(a):
		return netip.AddrFrom4([4]byte{b[2], b[3], b[4], b[5]}), true
	case teredo.Contains(a):
		return netip.AddrFrom4([4]byte{^b[12], ^b[13], ^b[14], ^b[15]}), true
	}
	return netip.Addr{}, false
}

// nonPublicFirstOctet flags each first octet some nonPublicV4 range holds
// an address of (derived from the list, so it cannot drift from it): most
// public addresses are judged by one load instead of a scan of the ranges.
var nonPublicFirstOctet = func() (t [256]bool) {
	for _, p := range nonPublicV4 {
		first := p.Addr().As4()[0]
		n := 1
		if p.Bits() < 8 {
			n = 1 << (8 - p.Bits())
		}
		for i := 0; i < n; i++ {
			t[int(first)+i] = true
		}
	}
	return t
}()

func v4NonPublic(a netip.Addr) bool {
	if !nonPublicFirstOctet[a.As4()[0]] {
		return false
	}
	for _, p := range nonPublicV4 {
		if p.Contains(a) {
			return true
		}
	}
	return false
}
