package hostpolicy

import (
	"context"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"github.com/netproxy/netproxy/internal/config"
)

// benchPolicy compiles n exact and n "*." patterns in each list (4n in all).
func benchPolicy(tb testing.TB, n int) *Policy {
	tb.Helper()
	var allow, deny strings.Builder
	for i := 0; i < n; i++ {
		fmt.Fprintf(&allow, "allow%d.example.com\n*.allowzone%d.test\n", i, i)
		fmt.Fprintf(&deny, "deny%d.example.net\n*.denyzone%d.test\n", i, i)
	}
	dir := tb.TempDir()
	os.WriteFile(filepath.Join(dir, "allow.txt"), []byte(allow.String()), 0o644)
	os.WriteFile(filepath.Join(dir, "deny.txt"), []byte(deny.String()), 0o644)
	cfg := config.Default()
	cfg.Path = filepath.Join(dir, "netproxy.toml")
	cfg.Network.DomainFiles = []config.DomainFile{{Path: "allow.txt", Decision: "allow"}, {Path: "deny.txt", Decision: "deny"}}
	p, err := Compile(cfg)
	if err != nil {
		tb.Fatal(err)
	}
	return p
}

// benchResolver answers every benchmark name from static hosts (no DNS).
func benchResolver(n int) Resolver {
	pub := []netip.Addr{netip.MustParseAddr("93.184.216.34")}
	static := map[string][]netip.Addr{
		"miss.unlisted.org":                             pub,
		fmt.Sprintf("allow%d.example.com", n/2):         pub,
		fmt.Sprintf("a.b.allowzone%d.test", n/2):        pub,
		fmt.Sprintf("deep.x.y.z.allowzone%d.test", n-1): pub,
	}
	return NewResolver(static, DefaultDNSTimeout)
}

func BenchmarkHostBlocked(b *testing.B) {
	for _, n := range []int{10, 1000, 100000} {
		p := benchPolicy(b, n)
		e := NewEngine(p, benchResolver(n), ModeFull, nil)
		cases := []struct {
			name, host string
			want       Reason
		}{
			{"miss", "miss.unlisted.org", ReasonNotAllowed},
			{"miss-ip", "93.184.216.34", ReasonNotAllowed},
			{"hit-deny-exact", fmt.Sprintf("deny%d.example.net", n/2), ReasonDenied},
			{"hit-deny-suffix", fmt.Sprintf("x.denyzone%d.test", n/2), ReasonDenied},
			{"hit-allow-exact", fmt.Sprintf("allow%d.example.com", n/2), ReasonNone},
			{"hit-allow-suffix", fmt.Sprintf("a.b.allowzone%d.test", n/2), ReasonNone},
		}
		for _, c := range cases {
			req := Request{Host: c.host, Port: 443, Protocol: ProtoHTTPS, Method: "CONNECT"}
			if d := e.Evaluate(context.Background(), req); d.Reason != c.want {
				b.Fatalf("%s: reason %q, want %q (%+v)", c.host, d.Reason, c.want, d.Steps)
			}
			b.Run(fmt.Sprintf("patterns=%d/%s", n, c.name), func(b *testing.B) {
				ctx := context.Background()
				b.ReportAllocs()
				for b.Loop() {
					e.Evaluate(ctx, req)
				}
			})
		}
	}
}

// BenchmarkCompile100k compiles 100 000 patterns (50 000 exact and 50 000
// "*.") from a domain file, and reports the heap the compiled policy keeps.
func BenchmarkCompile100k(b *testing.B) {
	var list strings.Builder
	for i := 0; i < 50000; i++ {
		fmt.Fprintf(&list, "host%d.example.com\n*.zone%d.example.org\n", i, i)
	}
	dir := b.TempDir()
	os.WriteFile(filepath.Join(dir, "deny.txt"), []byte(list.String()), 0o644)
	cfg := config.Default()
	cfg.Path = filepath.Join(dir, "netproxy.toml")
	cfg.Network.DomainFiles = []config.DomainFile{{Path: "deny.txt", Decision: "deny"}}
	b.ReportAllocs()
	var keep *Policy
	for b.Loop() {
		p, err := Compile(cfg)
		if err != nil {
			b.Fatal(err)
		}
		keep = p
	}
	b.StopTimer()
	var before, after runtime.MemStats
	keep = nil
	runtime.GC()
	runtime.ReadMemStats(&before)
	keep, _ = Compile(cfg)
	runtime.GC()
	runtime.ReadMemStats(&after)
	if _, d := keep.PatternCounts(); d != 100000 {
		b.Fatalf("compiled %d patterns", d)
	}
	b.ReportMetric(float64(after.HeapAlloc-before.HeapAlloc)/(1<<20), "retained-MB")
	runtime.KeepAlive(keep)
}
