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
)

// benchPolicy compiles n exact and n "*." patterns in each list (4n in all)
// plus cidrs CIDR prefixes of mixed lengths (/8 to /32, IPv4 and IPv6) in the
// deny list.
func benchPolicy(tb testing.TB, n, cidrs int) *Snapshot {
	return benchPolicyPorts(tb, n, cidrs, false)
}

// benchPorts are the port scopes of the ported benchmark: single ports and
// ranges, as a real policy would have (a few dozen distinct scopes).
var benchPorts = func() []string {
	out := []string{":443", ":8443", ":5432", ":8000-8999", ":9000-9100", ":1-1024"}
	for p := 10000; len(out) < 30; p += 7 {
		out = append(out, fmt.Sprintf(":%d", p))
	}
	return out
}()

// benchPolicyPorts is benchPolicy; with ported, every tenth entry of each
// kind carries one of benchPorts (SPEC §3.2 port scopes).
func benchPolicyPorts(tb testing.TB, n, cidrs int, ported bool) *Snapshot {
	tb.Helper()
	var allow, deny strings.Builder
	for i := 0; i < n; i++ {
		port := ""
		if ported && i%10 == 0 {
			port = benchPorts[(i/10)%len(benchPorts)]
		}
		fmt.Fprintf(&allow, "allow%d.example.com%s\n*.allowzone%d.test%s\n", i, port, i, port)
		fmt.Fprintf(&deny, "deny%d.example.net%s\n*.denyzone%d.test%s\n", i, port, i, port)
	}
	for i := 0; i < cidrs; i++ {
		bits := 8 + i%25
		if i%4 == 3 {
			fmt.Fprintf(&deny, "%s\n", netip.PrefixFrom(netip.AddrFrom16([16]byte{0x20, 0x01, 0x0d, 0xb9, byte(i >> 8), byte(i)}), 32+i%97).Masked())
			continue
		}
		a := netip.AddrFrom4([4]byte{byte(11 + i%100), byte(i >> 8), byte(i), 0})
		fmt.Fprintf(&deny, "%s\n", netip.PrefixFrom(a, bits).Masked())
	}
	dir := tb.TempDir()
	os.WriteFile(filepath.Join(dir, "allow.txt"), []byte(allow.String()), 0o644)
	os.WriteFile(filepath.Join(dir, "deny.txt"), []byte(deny.String()), 0o644)
	p, err := Build(Options{Enabled: true, Mode: ModeFull, DomainFiles: []DomainFile{
		{Path: filepath.Join(dir, "allow.txt"), Decision: "allow"}, {Path: filepath.Join(dir, "deny.txt"), Decision: "deny"}}})
	if err != nil {
		tb.Fatal(err)
	}
	return p
}

// benchResolver answers every benchmark name from static hosts (no DNS).
func benchResolver(n int, extra ...string) Resolver {
	pub := []netip.Addr{netip.MustParseAddr("93.184.216.34")}
	static := map[string][]netip.Addr{
		"miss.unlisted.org":                             pub,
		fmt.Sprintf("allow%d.example.com", n/2):         pub,
		fmt.Sprintf("a.b.allowzone%d.test", n/2):        pub,
		fmt.Sprintf("deep.x.y.z.allowzone%d.test", n-1): pub,
	}
	for _, h := range extra {
		static[h] = pub
	}
	return NewResolver(static, DefaultDNSTimeout)
}

func BenchmarkHostBlocked(b *testing.B) {
	for _, n := range []int{10, 1000, 100000} {
		p := benchPolicy(b, n, 0)
		e := newTestEngine(p, benchResolver(n), ModeFull, nil)
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

// BenchmarkHostBlockedPorts is BenchmarkHostBlocked with a tenth of the
// entries port-scoped (30 distinct scopes, ranges among them): a lookup
// stays one probe per label plus one per scope covering the port.
func BenchmarkHostBlockedPorts(b *testing.B) {
	for _, n := range []int{10, 1000, 100000} {
		p := benchPolicyPorts(b, n, 0, true)
		scoped := (n / 2) / 10 * 10 // an index with a port scope
		e := newTestEngine(p, benchResolver(n, fmt.Sprintf("allow%d.example.com", n/2+1),
			fmt.Sprintf("a.b.allowzone%d.test", n/2+1), fmt.Sprintf("allow%d.example.com", scoped)), ModeFull, nil)
		cases := []struct {
			name, host string
			port       uint16
			want       Reason
		}{
			{"miss", "miss.unlisted.org", 443, ReasonNotAllowed},
			{"miss-port-8080", "miss.unlisted.org", 8080, ReasonNotAllowed},
			{"hit-deny-exact", fmt.Sprintf("deny%d.example.net", n/2+1), 443, ReasonDenied},
			{"hit-allow-exact", fmt.Sprintf("allow%d.example.com", n/2+1), 443, ReasonNone},
			{"hit-allow-suffix", fmt.Sprintf("a.b.allowzone%d.test", n/2+1), 443, ReasonNone},
			{"scoped-other-port", fmt.Sprintf("allow%d.example.com", scoped), 1, ReasonNone},
		}
		if benchPorts[(scoped/10)%len(benchPorts)] != ":1-1024" {
			cases[len(cases)-1].want = ReasonNotAllowed
		}
		for _, c := range cases {
			req := Request{Host: c.host, Port: c.port, Protocol: ProtoHTTPS, Method: "CONNECT"}
			if d := e.Evaluate(context.Background(), req); d.Reason != c.want {
				b.Fatalf("%s:%d: reason %q, want %q (%+v)", c.host, c.port, d.Reason, c.want, d.Steps)
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
	opts := Options{Enabled: true, Mode: ModeFull, DomainFiles: []DomainFile{{Path: filepath.Join(dir, "deny.txt"), Decision: "deny"}}}
	b.ReportAllocs()
	var keep *Snapshot
	for b.Loop() {
		p, err := Build(opts)
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
	keep, _ = Build(opts)
	runtime.GC()
	runtime.ReadMemStats(&after)
	if _, d := keep.PatternCounts(); d != 100000 {
		b.Fatalf("compiled %d patterns", d)
	}
	b.ReportMetric(float64(after.HeapAlloc-before.HeapAlloc)/(1<<20), "retained-MB")
	runtime.KeepAlive(keep)
}

// BenchmarkAddressEntries is the 100 000-pattern policy with 10 and with
// 10 000 CIDR prefixes in the deny list: a miss, an allowed name whose
// answer is checked against every prefix, and an IP literal inside a
// prefix. The prefix lookup is per prefix length, never a scan.
func BenchmarkAddressEntries(b *testing.B) {
	const n = 25000 // 4n = 100 000 patterns
	for _, cidrs := range []int{10, 10000} {
		p := benchPolicy(b, n, cidrs)
		e := newTestEngine(p, benchResolver(n), ModeFull, nil)
		cases := []struct {
			name, host string
			want       Reason
		}{
			{"miss", "miss.unlisted.org", ReasonNotAllowed},
			{"miss-ip", "93.184.216.34", ReasonNotAllowed},
			{"hit-allow-exact-answer-checked", fmt.Sprintf("allow%d.example.com", n/2), ReasonNone},
			{"hit-deny-cidr-literal", "11.0.0.1", ReasonDenied},
		}
		for _, c := range cases {
			req := Request{Host: c.host, Port: 443, Protocol: ProtoHTTPS, Method: "CONNECT"}
			if d := e.Evaluate(context.Background(), req); d.Reason != c.want {
				b.Fatalf("%s: reason %q, want %q (%+v)", c.host, d.Reason, c.want, d.Steps)
			}
			b.Run(fmt.Sprintf("patterns=%d/cidrs=%d/%s", 4*n, cidrs, c.name), func(b *testing.B) {
				ctx := context.Background()
				b.ReportAllocs()
				for b.Loop() {
					e.Evaluate(ctx, req)
				}
			})
		}
	}
}
