package metrics

import (
	"fmt"
	"strings"
	"sync"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/netproxy/netproxy/hostpolicy"
	"github.com/netproxy/netproxy/internal/observe"
)

// TestRequestSeriesAreWhatWithLabelValuesGives: however the requests_total
// child is found, every decision — known values, empty ones, and more
// distinct junk values than the cache holds, from concurrent goroutines —
// lands on exactly the series clamp + WithLabelValues names, and the cache
// stays within its bound.
func TestRequestSeriesAreWhatWithLabelValuesGives(t *testing.T) {
	m := New(10)
	want := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "netproxy_requests_total",
		Help: "Network decisions made, by protocol, decision (allow|deny|ask), block reason (none when allowed) and deciding source.",
	}, []string{"protocol", "decision", "reason", "source"})
	// The pre-created series of New, as New makes them.
	for p := range protocolValues {
		for _, c := range commonDecisions {
			want.WithLabelValues(p, c[0], c[1], c[2])
		}
	}
	protocols := []string{"http", "https", "socks5-tcp", "", "gopher"}
	verdicts := []string{"allow", "deny", "ask", "", "maybe"}
	reasons := append([]string{"", "nonsense"}, keys(reasonValues)...)
	sources := append([]string{"", "elsewhere"}, keys(sourceValues)...)
	var tuples []requestKey
	for _, p := range protocols {
		for _, v := range verdicts {
			for _, r := range reasons {
				for _, s := range sources {
					tuples = append(tuples, requestKey{p, v, r, s})
				}
			}
		}
	}
	for i := range 2 * maxRequestSeries {
		tuples = append(tuples, requestKey{"http", "deny", fmt.Sprintf("junk-%d", i), "decider"})
	}
	var wg sync.WaitGroup
	for g := range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for round := range 3 {
				for i, k := range tuples {
					if (i+round)%2 != g {
						continue
					}
					m.ObserveDecision(observe.DecisionEvent{
						Request:  hostpolicy.Request{Protocol: hostpolicy.Protocol(k.protocol)},
						Decision: hostpolicy.Decision{Verdict: hostpolicy.Verdict(k.decision), Reason: hostpolicy.Reason(k.reason), Source: hostpolicy.Source(k.source), Host: "h.test"},
					})
				}
			}
		}()
	}
	wg.Wait()
	for _, k := range tuples {
		for range 3 {
			want.WithLabelValues(clamp(k.protocol, protocolValues), clamp(k.decision, decisionValues), clamp(k.reason, reasonValues), clamp(k.source, sourceValues)).Inc()
		}
	}
	wantReg := prometheus.NewPedanticRegistry()
	wantReg.MustRegister(want)
	got, exp := seriesOf(t, m.reg, "netproxy_requests_total"), seriesOf(t, wantReg, "netproxy_requests_total")
	if got != exp {
		t.Fatalf("requests_total differs from clamp + WithLabelValues:\n got %s\nwant %s", got, exp)
	}
	if n := m.requestsBy.cached(); n > maxRequestSeries || n == 0 {
		t.Fatalf("cache holds %d tuples, want 1..%d", n, maxRequestSeries)
	}
}

func keys(s map[string]struct{}) []string {
	var out []string
	for k := range s {
		out = append(out, k)
	}
	return out
}

// seriesOf is the family name's series and values in reg, one a line.
func seriesOf(t *testing.T, reg prometheus.Gatherer, name string) string {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, mt := range mf.GetMetric() {
			for _, lp := range mt.GetLabel() {
				fmt.Fprintf(&b, "%s=%q ", lp.GetName(), lp.GetValue())
			}
			fmt.Fprintf(&b, "%v\n", mt.GetCounter().GetValue())
		}
	}
	return b.String()
}
