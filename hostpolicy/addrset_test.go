package hostpolicy

import (
	"math/rand/v2"
	"net/netip"
	"strings"
	"testing"
)

// naiveMatch is the reference semantics of addrSet.match: the longest
// prefix containing a (or its embedded IPv4 address).
func naiveMatch(ps []netip.Prefix, a netip.Addr) (netip.Prefix, bool) {
	try := func(x netip.Addr) (netip.Prefix, bool) {
		best, ok := netip.Prefix{}, false
		for _, p := range ps {
			if p.Contains(x) && (!ok || p.Bits() > best.Bits()) {
				best, ok = p, true
			}
		}
		return best, ok
	}
	a = a.WithZone("").Unmap()
	if p, ok := try(a); ok {
		return p, true
	}
	if v4, ok := EmbeddedIPv4(a); ok {
		return try(v4)
	}
	return netip.Prefix{}, false
}

func randPrefix(r *rand.Rand) netip.Prefix {
	if r.IntN(3) == 0 {
		var b [16]byte
		b[0], b[1], b[2] = byte(r.IntN(4)), byte(r.IntN(4)), byte(r.IntN(256))
		return netip.PrefixFrom(netip.AddrFrom16(b), r.IntN(129)).Masked()
	}
	a := netip.AddrFrom4([4]byte{byte(10 + r.IntN(3)), byte(r.IntN(4)), byte(r.IntN(256)), byte(r.IntN(256))})
	return netip.PrefixFrom(a, r.IntN(33)).Masked()
}

// TestAddrSetAgreesWithScan: the sorted-range lookup answers what a scan
// of every prefix answers (most specific prefix), for nested, disjoint and
// IPv4-embedding cases.
func TestAddrSetAgreesWithScan(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for round := 0; round < 200; round++ {
		b := newAddrSetBuilder()
		var ps []netip.Prefix
		for i := 0; i < 1+r.IntN(60); i++ {
			p := randPrefix(r)
			ps = append(ps, p)
			b.add(p, p.String())
		}
		s := b.build()
		for i := 0; i < 300; i++ {
			var a netip.Addr
			switch r.IntN(4) {
			case 0:
				a = netip.AddrFrom4([4]byte{byte(10 + r.IntN(3)), byte(r.IntN(4)), byte(r.IntN(256)), byte(r.IntN(256))})
			case 1:
				v4 := [4]byte{byte(10 + r.IntN(3)), byte(r.IntN(4)), byte(r.IntN(256)), byte(r.IntN(256))}
				a = netip.AddrFrom16([16]byte{0, 0x64, 0xff, 0x9b, 10: 0, 11: 0, 12: v4[0], 13: v4[1], 14: v4[2], 15: v4[3]}) // NAT64
			default:
				var x [16]byte
				x[0], x[1], x[2], x[3] = byte(r.IntN(4)), byte(r.IntN(4)), byte(r.IntN(256)), byte(r.IntN(256))
				a = netip.AddrFrom16(x)
			}
			want, wok := naiveMatch(ps, a)
			got, gok := s.match(a)
			if wok != gok || (wok && got != want.String()) {
				t.Fatalf("round %d: match(%s) = %q %v, scan says %s %v (prefixes %v)", round, a, got, gok, want, wok, ps)
			}
		}
	}
}

// FuzzAddressEntry feeds arbitrary list entries to the entry parser (the
// new parser of untrusted configuration bytes): it never panics, and an
// accepted CIDR matches its own first address.
func FuzzAddressEntry(f *testing.F) {
	for _, s := range []string{"10.0.0.0/8", "fd00::/8", "169.254.169.254", "10.0.0.1/8", "10.0.0.0/8:443", "[fd00::]/8",
		"::ffff:10.0.0.0/104", "0.0.0.0/0", "*.10.0.0.0/8", "1.2.3.4/32", "a/b/c", "/", "10.0.0.0/-1", "fe80::%eth0/64"} {
		f.Add(s, true)
	}
	f.Fuzz(func(t *testing.T, entry string, deny bool) {
		decision := EntryAllow
		if deny {
			decision = EntryDeny
		}
		pe, err := parseEntry(entry, decision)
		if err != nil || !pe.hasPrefix {
			return
		}
		b := newAddrSetBuilder()
		b.add(pe.prefix, entry)
		if _, ok := b.build().match(pe.prefix.Addr()); !ok {
			t.Fatalf("%q (%s) does not match its own address", entry, pe.prefix)
		}
		if strings.Contains(entry, "/") && pe.prefix != pe.prefix.Masked() {
			t.Fatalf("%q accepted unmasked", entry)
		}
	})
}

// BenchmarkAddrSetMatch is the address-entry lookup alone: 10 vs 10 000
// prefixes of mixed lengths, for an IPv4 miss, an IPv4 hit, an IPv6 miss
// and a NAT64 address judged by its IPv4 address.
func BenchmarkAddrSetMatch(b *testing.B) {
	for _, n := range []int{10, 10000} {
		r := rand.New(rand.NewPCG(3, 4))
		bld := newAddrSetBuilder()
		for i := 0; i < n; i++ {
			p := randPrefix(r)
			bld.add(p, p.String())
		}
		bld.add(netip.MustParsePrefix("169.254.0.0/16"), "169.254.0.0/16")
		s := bld.build()
		for _, c := range []struct{ name, addr string }{
			{"v4-miss", "93.184.216.34"}, {"v4-hit", "169.254.169.254"}, {"v6-miss", "2606:4700::1111"}, {"nat64", "64:ff9b::a9fe:a9fe"},
		} {
			a := netip.MustParseAddr(c.addr)
			b.Run(c.name+"/prefixes="+itoa(n), func(b *testing.B) {
				for b.Loop() {
					s.match(a)
				}
			})
		}
	}
}

func itoa(n int) string {
	if n == 10 {
		return "10"
	}
	return "10000"
}
