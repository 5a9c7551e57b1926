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

// decidePolicy is the issue 29 profile's policy: an allow-listed host with
// a static answer on loopback, the local guard on (an allow-list prefix
// lets the answer through), approvals off.
const decidePolicy = `
[network]
mode = "full"
[network.domains]
"up.test" = "allow"
"127.0.0.1/32" = "allow"
"denied.test" = "deny"
[dns.hosts]
"up.test" = ["127.0.0.1"]
"denied.test" = ["127.0.0.1"]
[approvals]
enabled = false
`

// discardSink takes decisions as an audit sink would: through the
// interface, so what escapes into the event escapes here too.
type discardSink struct{ n int }

func (s *discardSink) ObserveDecision(ev observe.DecisionEvent) {
	if ev.Decision.Allowed() {
		s.n++
	}
}

// BenchmarkDecidePlain is one decision of servePlain's: Core.request and
// decideIdentified over serve's pipeline (a rollout.Evaluator without a
// shadow candidate) for an allowed and a denied plain-HTTP request.
func BenchmarkDecidePlain(b *testing.B) {
	cfg, err := config.Parse([]byte(decidePolicy), "bench.toml")
	if err != nil {
		b.Fatal(err)
	}
	o, err := config.PolicyOptions(cfg)
	if err != nil {
		b.Fatal(err)
	}
	pol, err := hostpolicy.Build(o)
	if err != nil {
		b.Fatal(err)
	}
	eng := hostpolicy.NewEngine(pol, nil)
	core := &Core{Pipeline: rollout.NewEvaluator(eng, nil, rollout.NewShadow(nil, 10), false), Sink: &discardSink{}}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	defer ln.Close()
	conn := &Conn{TCPConn: tcpPair(b, ln), Listener: "http", client: "127.0.0.1:1"}
	defer conn.TCPConn.Close()
	ctx := context.Background()
	for _, c := range []struct {
		name, host string
		want       hostpolicy.Reason
	}{{"allowed", "up.test", hostpolicy.ReasonNone}, {"denied", "denied.test", hostpolicy.ReasonDenied}} {
		b.Run(c.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				hreq := core.request(conn, c.host, 8080, hostpolicy.ProtoHTTP, "GET")
				hreq.Path = "/index.html"
				d := core.decideIdentified(func() hostpolicy.Decision { return core.decide(ctx, conn, hreq) }, hreq, "")
				if d.Reason != c.want {
					b.Fatalf("%s: reason %q, want %q", c.host, d.Reason, c.want)
				}
			}
		})
	}
}
