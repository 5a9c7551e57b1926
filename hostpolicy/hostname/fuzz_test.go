package hostname

import (
	"net/netip"
	"strings"
	"testing"
)

var fuzzSeeds = []string{
	"example.com", "  ExAmPlE.CoM.:443 ", "[::1]:443", "[fe80::1%25lo0]", "fe80::1%lo0",
	"2130706433", "0x7f.1", "0177.0.0.1", "127%2e0%2e0%2e1", "bücher.example", "127。0。0。1",
	"１２７．０．０．１", "ⓛⓞⓒⓐⓛⓗⓞⓢⓣ", "[::ffff:127.0.0.1]", "*.example.com", "**.x.test",
	"region*.glob.test", "[", "[*]", "a..b", "xn--bcher-kva.example", "%", "\x00", "0x", "1.2.3.4.5",
}

// FuzzNormalize: never panics; a result is canonical (normalising it again
// gives itself) and is either an IP literal or a lowercase LDH name.
func FuzzNormalize(f *testing.F) {
	for _, s := range fuzzSeeds {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, in string) {
		out, err := Normalize(in)
		if err != nil {
			if out != "" {
				t.Fatalf("Normalize(%q) returned %q with error %v", in, out, err)
			}
			return
		}
		if out == "" {
			t.Fatalf("Normalize(%q) returned empty without error", in)
		}
		again, err := Normalize(out)
		if err != nil || again != out {
			t.Fatalf("Normalize not idempotent: %q → %q → %q, %v", in, out, again, err)
		}
		if a, err := netip.ParseAddr(out); err == nil {
			if a.String() != out {
				t.Fatalf("IP literal %q not canonical (%s)", out, a)
			}
			return
		}
		if err := checkName(out); err != nil {
			t.Fatalf("Normalize(%q) = %q, not a valid name: %v", in, out, err)
		}
		if endsInNumber(out) {
			t.Fatalf("Normalize(%q) = %q: numeric name escaped the IPv4 parser", in, out)
		}
	})
}

// FuzzParsePattern: never panics; the canonical text parses to itself, and a
// parsed pattern's Match never panics on the input.
func FuzzParsePattern(f *testing.F) {
	for _, s := range fuzzSeeds {
		f.Add(s, "api.example.com")
	}
	f.Fuzz(func(t *testing.T, in, host string) {
		p, err := ParsePattern(in)
		if err != nil {
			return
		}
		q, err := ParsePattern(p.Text)
		if err != nil || q.Text != p.Text || q.Kind != p.Kind {
			t.Fatalf("ParsePattern not idempotent: %q → %+v → %+v, %v", in, p, q, err)
		}
		_ = CheckDeny(p)
		if h, err := Normalize(host); err == nil {
			p.Match(h)
		}
		if p.Kind == Glob {
			for _, g := range p.Globs {
				if k := GlobSuffixKey(g); k != "" && !strings.HasSuffix(g, "."+k) {
					t.Fatalf("GlobSuffixKey(%q) = %q is not a suffix", g, k)
				}
			}
		}
	})
}
