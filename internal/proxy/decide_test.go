package proxy

import (
	"context"
	"net"
	"testing"

	"github.com/netproxy/netproxy/hostpolicy"
	"github.com/netproxy/netproxy/internal/config"
	"github.com/netproxy/netproxy/internal/observe"
	"github.com/netproxy/netproxy/rollout"
)

// decidePolicyIn is the issue 29 profile's policy: an allow-listed host with
// a static answer on loopback, the local guard on (an allow-list prefix
// lets the answer through), approvals off.
func decidePolicyIn(mode string) string {
	return `
[network]
mode = "` + mode + `"
[network.domains]
"up.test" = "allow"
"127.0.0.1/32" = "allow"
"denied.test" = "deny"
"cafe.test" = "allow"
"**.example.com" = "allow"
"*.zone.test" = "allow"
"*.bad.test" = "deny"
"pub.test" = "allow"
[dns.hosts]
"up.test" = ["127.0.0.1"]
"denied.test" = ["127.0.0.1"]
"cafe.test" = ["127.0.0.1"]
"a.example.com" = ["127.0.0.1"]
"b.zone.test" = ["127.0.0.1"]
"pub.test" = ["93.184.216.34", "2606:2800:220:1:248:1893:25c8:1946"]
[approvals]
enabled = false
`
}

// discardSink takes decisions as an audit sink would: through the
// interface, so what escapes into the event escapes here too.
type discardSink struct{ n int }

func (s *discardSink) ObserveDecision(ev observe.DecisionEvent) {
	if ev.Decision.Allowed() {
		s.n++
	}
}

// decideCase is one request of the decide benchmark and its test.
type decideCase struct {
	name, host string
	want       hostpolicy.Reason
}

// decideCases: the profile's allowed host (a static answer let through
// by an allow-list prefix), a denied name, a name spelt in hex digits, a
// miss, names allowed or denied by wildcard patterns, and a name with
// public answers.
var decideCases = []decideCase{
	{"allowed", "up.test", hostpolicy.ReasonNone},
	{"denied", "denied.test", hostpolicy.ReasonDenied},
	{"allowed-hex-name", "cafe.test", hostpolicy.ReasonNone},
	{"not-allowed", "other.test", hostpolicy.ReasonNotAllowed},
	{"allowed-wildcard", "a.example.com", hostpolicy.ReasonNone},
	{"allowed-subdomain", "b.zone.test", hostpolicy.ReasonNone},
	{"denied-wildcard", "x.bad.test", hostpolicy.ReasonDenied},
	{"allowed-public", "pub.test", hostpolicy.ReasonNone},
}

// newDecideCore is serve's pipeline over policy (a rollout.Evaluator with
// an empty shadow) behind a Core, and a connection to decide for.
func newDecideCore(tb testing.TB, policy string) (*Core, *Conn) {
	tb.Helper()
	cfg, err := config.Parse([]byte(policy), "bench.toml")
	if err != nil {
		tb.Fatal(err)
	}
	eng := hostpolicy.NewEngine(buildSnapshot(tb, cfg), nil)
	core := &Core{Pipeline: rollout.NewEvaluator(eng, nil, rollout.NewShadow(nil, 10), false), Sink: &discardSink{}}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { ln.Close() })
	conn := &Conn{TCPConn: tcpPair(tb, ln), Listener: "http", client: "127.0.0.1:1"}
	tb.Cleanup(func() { conn.TCPConn.Close() })
	return core, conn
}

// decidePlain is servePlain's decision: Core.request, then decideIdentified.
func decidePlain(ctx context.Context, core *Core, conn *Conn, host string) hostpolicy.Decision {
	hreq := core.request(conn, host, 8080, hostpolicy.ProtoHTTP, "GET")
	hreq.Path = "/index.html"
	return core.decideIdentified(func() hostpolicy.Decision { return core.decide(ctx, conn, hreq) }, hreq, "")
}

// BenchmarkDecidePlain is one decision of servePlain's over serve's
// pipeline (no shadow candidate), full and limited mode.
func BenchmarkDecidePlain(b *testing.B) {
	for _, mode := range []string{"full", "limited"} {
		core, conn := newDecideCore(b, decidePolicyIn(mode))
		ctx := context.Background()
		for _, c := range decideCases {
			b.Run(mode+"/"+c.name, func(b *testing.B) {
				b.ReportAllocs()
				for b.Loop() {
					if d := decidePlain(ctx, core, conn, c.host); d.Reason != c.want {
						b.Fatalf("%s: reason %q, want %q", c.host, d.Reason, c.want)
					}
				}
			})
		}
	}
}

// TestDecidePlainAllocatesNothing: one data-path decision of a plain
// request, allowed or blocked, allocates nothing of its own (issue 29).
func TestDecidePlainAllocatesNothing(t *testing.T) {
	for _, mode := range []string{"full", "limited"} {
		core, conn := newDecideCore(t, decidePolicyIn(mode))
		ctx := context.Background()
		for _, c := range decideCases {
			if d := decidePlain(ctx, core, conn, c.host); d.Reason != c.want {
				t.Fatalf("%s %s: reason %q, want %q", mode, c.host, d.Reason, c.want)
			}
			if n := testing.AllocsPerRun(200, func() { decidePlain(ctx, core, conn, c.host) }); n != 0 {
				t.Errorf("%s %s: %v allocations per decision", mode, c.name, n)
			}
		}
	}
}
