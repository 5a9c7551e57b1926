package hostpolicy

import (
	"net/netip"
	"testing"
)

// parseLiteralSeeds are hosts around every branch of mayBeLiteral.
var parseLiteralSeeds = []string{
	"", "up.test", "denied.test", "deadbeef.test", "cafe", "a.b", "1.2.3.4", "1.2.3.4.test", "01.2.3.4",
	"127.0.0.1", "256.1.1.1", "1.2.3", "1.2.3.4%eth0", "::1", "::ffff:127.0.0.1", "fe80::1%eth0",
	"fe80::1%25eth0", "ABCD::1", "aB::1", "2001:db8::1", "g::1", "%eth0", "1%2", ":", "::", "1.2.3.4:80",
	"[::1]", "1:2:3:4:5:6:7:8", "1::2::3", "0.0.0.0", "999", "0x7f.1", ".1.2.3", "1..2.3", "x", "f", "1",
}

// mayBeLiteral only spares ParseAddr's refusals: parseLiteral answers as
// ParseAddr with the old first-character screen would.
func FuzzParseLiteral(f *testing.F) {
	for _, s := range parseLiteralSeeds {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, host string) {
		var want netip.Addr
		wantOK := false
		if host != "" {
			if c := host[0]; c >= '0' && c <= '9' || c >= 'a' && c <= 'f' || c == ':' {
				a, err := netip.ParseAddr(host)
				want, wantOK = a, err == nil
			}
		}
		got, ok := parseLiteral(host)
		if ok != wantOK || got != want {
			t.Fatalf("parseLiteral(%q) = %v, %v; ParseAddr says %v, %v", host, got, ok, want, wantOK)
		}
	})
}

// A name the pipeline judges is never handed to ParseAddr to be refused
// (its error allocates on every request).
func TestParseLiteralNameAllocatesNothing(t *testing.T) {
	for _, h := range []string{"denied.test", "deadbeef.test", "cafe", "up.test"} {
		if n := testing.AllocsPerRun(100, func() { parseLiteral(h) }); n != 0 {
			t.Errorf("parseLiteral(%q): %v allocations", h, n)
		}
	}
}

// The first-octet screen of v4NonPublic answers as the scan of the ranges
// alone: every first octet, at both ends and inside each range.
func TestV4NonPublicScreen(t *testing.T) {
	scan := func(a netip.Addr) bool {
		for _, p := range nonPublicV4 {
			if p.Contains(a) {
				return true
			}
		}
		return false
	}
	for o := 0; o < 256; o++ {
		for _, rest := range [][3]byte{{0, 0, 0}, {255, 255, 255}, {0, 2, 1}, {51, 100, 7}, {64, 0, 1}, {168, 1, 1}, {254, 3, 9}, {16, 0, 0}, {31, 255, 255}, {0, 113, 5}, {18, 0, 0}, {19, 255, 1}} {
			a := netip.AddrFrom4([4]byte{byte(o), rest[0], rest[1], rest[2]})
			if got, want := v4NonPublic(a), scan(a); got != want {
				t.Errorf("v4NonPublic(%s) = %v, the ranges say %v", a, got, want)
			}
		}
	}
}

// A host already spelt as its canonical dotted quad normalises to itself
// without a new string; any other spelling still gets the canonical one.
func TestNormalizeCanonicalQuadAllocatesNothing(t *testing.T) {
	for in, want := range map[string]string{"93.184.216.34": "93.184.216.34", "127.1": "127.0.0.1", "0x7f000001": "127.0.0.1", "010.0.0.1": "8.0.0.1", "1.2.3.4.": "1.2.3.4"} {
		if got, err := Normalize(in); err != nil || got != want {
			t.Errorf("Normalize(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
	if n := testing.AllocsPerRun(100, func() { Normalize("93.184.216.34") }); n != 0 {
		t.Errorf("Normalize of a canonical dotted quad: %v allocations", n)
	}
}
