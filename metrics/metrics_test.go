package metrics

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	dto "github.com/prometheus/client_model/go"

	"github.com/netproxy/netproxy/hostpolicy"
	"github.com/netproxy/netproxy/internal/observe"
)

// specMetrics is every metric of SPEC §7.4 (plus the audit drop counter).
var specMetrics = []string{
	"netproxy_requests_total", "netproxy_denied_hosts_total", "netproxy_decision_seconds",
	"netproxy_approvals_total", "netproxy_approvals_pending", "netproxy_approval_wait_seconds",
	"netproxy_connections_active", "netproxy_connections_total", "netproxy_attribution_total",
	"netproxy_upstream_dial_seconds", "netproxy_upstream_errors_total", "netproxy_bytes_total",
	"netproxy_policy_reloads_total", "netproxy_policy_patterns", "netproxy_executions_active",
	"netproxy_exec_decisions_total", "netproxy_audit_dropped_total",
}

func denyEvent(host string, reason hostpolicy.Reason) observe.DecisionEvent {
	return observe.DecisionEvent{
		Time:     time.Now(),
		Request:  hostpolicy.Request{Host: host, Port: 80, Protocol: hostpolicy.ProtoHTTP, Method: "GET"},
		Decision: hostpolicy.Decision{Verdict: hostpolicy.Deny, Reason: reason, Source: hostpolicy.SourceBaseline, Host: host, Port: 80},
		Elapsed:  20 * time.Microsecond,
	}
}

func exercise(m *Metrics) {
	m.ObserveDecision(denyEvent("denied.test", hostpolicy.ReasonDenied))
	m.ObserveDecision(observe.DecisionEvent{
		Request:  hostpolicy.Request{Host: "up.test", Port: 443, Protocol: hostpolicy.ProtoHTTPS},
		Decision: hostpolicy.Decision{Verdict: hostpolicy.Allow, Source: hostpolicy.SourceBaseline, Host: "up.test"},
	})
	m.ConnOpened("http")
	m.ConnClosed("http")
	m.Attribution("bad_magic")
	m.UpstreamDial(3 * time.Millisecond)
	m.UpstreamError("refused")
	m.Bytes("up", "http", 10)
	m.Bytes("down", "https", 20)
	m.PolicyReload(true)
	m.PolicyReload(false)
	m.PolicyPatterns("allow", 3)
	m.ExecutionsActive(2)
	m.ApprovalPending(1)
	m.ApprovalPending(-1)
	m.ApprovalResolved("network", "user", "allow_once", 2*time.Second)
	m.ExecDecision("needs_approval", "heuristics")
	m.AuditDropped()
	_ = m.Registry()
}

func TestNilReceiverIsSafe(t *testing.T) {
	var m *Metrics
	exercise(m) // must not panic
	rec := httptest.NewRecorder()
	m.Handler().ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	if rec.Code != http.StatusServiceUnavailable {
		t.Fatalf("nil Metrics handler status = %d, want 503", rec.Code)
	}
	if m.Registry() != nil {
		t.Fatal("nil Metrics returned a registry")
	}
}

func scrape(t *testing.T, m *Metrics) string {
	t.Helper()
	srv := httptest.NewServer(m.Handler())
	defer srv.Close()
	resp, err := http.Get(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != 200 {
		t.Fatalf("GET /metrics = %d: %s", resp.StatusCode, b)
	}
	return string(b)
}

func TestEverySpecMetricIsExposedWithHelp(t *testing.T) {
	m := New(10)
	exercise(m)
	text := scrape(t, m)
	for _, name := range specMetrics {
		if !strings.Contains(text, "# HELP "+name+" ") {
			t.Errorf("no HELP line for %s", name)
		}
		if !strings.Contains(text, "\n"+name) {
			t.Errorf("no sample of %s", name)
		}
	}
	for _, want := range []string{"go_goroutines", "process_cpu_seconds_total"} {
		if !strings.Contains(text, want) {
			t.Errorf("collector metric %s missing", want)
		}
	}
}

func TestObserveDecisionLabels(t *testing.T) {
	m := New(10)
	m.ObserveDecision(denyEvent("denied.test", hostpolicy.ReasonDenied))
	m.ObserveDecision(denyEvent("denied.test", hostpolicy.ReasonDenied))
	allow := observe.DecisionEvent{
		Request:  hostpolicy.Request{Host: "up.test", Protocol: hostpolicy.ProtoHTTP},
		Decision: hostpolicy.Decision{Verdict: hostpolicy.Allow, Source: hostpolicy.SourceBaseline, Host: "up.test"},
	}
	m.ObserveDecision(allow)

	if v := testutil.ToFloat64(m.requests.WithLabelValues("http", "deny", "denied", "baseline_policy")); v != 2 {
		t.Errorf("requests_total{deny,denied} = %v, want 2", v)
	}
	if v := testutil.ToFloat64(m.requests.WithLabelValues("http", "allow", "none", "baseline_policy")); v != 1 {
		t.Errorf("requests_total{allow} = %v, want 1", v)
	}
	if v := testutil.ToFloat64(m.deniedHosts.WithLabelValues("denied.test")); v != 2 {
		t.Errorf("denied_hosts_total{denied.test} = %v, want 2", v)
	}
	// An allowed host never gets a denied_hosts series.
	if strings.Contains(scrape(t, m), `netproxy_denied_hosts_total{host="up.test"}`) {
		t.Error("allowed host counted as denied")
	}
	if n := testutil.CollectAndCount(m.decisionSeconds); n != 1 {
		t.Errorf("decision_seconds series = %d", n)
	}
}

// The kill switch's reason and source are known label values: they keep
// their names, never "other".
func TestProxyDisabledLabels(t *testing.T) {
	m := New(10)
	for _, p := range []hostpolicy.Protocol{hostpolicy.ProtoHTTP, hostpolicy.ProtoHTTPS, hostpolicy.ProtoSOCKS5} {
		m.ObserveDecision(observe.DecisionEvent{
			Request:  hostpolicy.Request{Host: "up.test", Port: 443, Protocol: p},
			Decision: hostpolicy.Decision{Verdict: hostpolicy.Deny, Reason: hostpolicy.ReasonProxyDisabled, Source: hostpolicy.SourceProxyState, Host: "up.test", Port: 443},
		})
		if v := testutil.ToFloat64(m.requests.WithLabelValues(string(p), "deny", "proxy_disabled", "proxy_state")); v != 1 {
			t.Errorf("requests_total{%s,deny,proxy_disabled,proxy_state} = %v, want 1", p, v)
		}
	}
	if v := testutil.ToFloat64(m.requests.WithLabelValues("http", "deny", OtherLabel, "proxy_state")); v != 0 {
		t.Errorf("proxy_disabled clamped to other: %v", v)
	}
	if v := testutil.ToFloat64(m.requests.WithLabelValues("http", "deny", "proxy_disabled", OtherLabel)); v != 0 {
		t.Errorf("proxy_state clamped to other: %v", v)
	}
	if v := testutil.ToFloat64(m.deniedHosts.WithLabelValues("up.test")); v != 3 {
		t.Errorf("denied_hosts_total{up.test} = %v, want 3", v)
	}
}

func TestUnknownLabelValuesAreClamped(t *testing.T) {
	m := New(10)
	for i := 0; i < 50; i++ {
		junk := fmt.Sprintf("junk-%d", i)
		m.ObserveDecision(observe.DecisionEvent{
			Request:  hostpolicy.Request{Protocol: hostpolicy.Protocol(junk)},
			Decision: hostpolicy.Decision{Verdict: hostpolicy.Verdict(junk), Reason: hostpolicy.Reason(junk), Source: hostpolicy.Source(junk), Host: "h.test"},
		})
		m.ConnOpened(junk)
		m.Attribution(junk)
		m.UpstreamError(junk)
		m.Bytes(junk, junk, 1)
		m.PolicyPatterns(junk, 1)
		m.ApprovalResolved(junk, junk, junk, time.Second)
		m.ExecDecision(junk, junk)
	}
	text := scrape(t, m)
	if strings.Contains(text, "junk-") {
		t.Fatalf("an unknown label value reached the exposition:\n%s", grepLines(text, "junk-"))
	}
	if v := testutil.ToFloat64(m.requests.WithLabelValues("other", "other", "other", "other")); v != 50 {
		t.Errorf("clamped requests_total = %v, want 50", v)
	}
	if v := testutil.ToFloat64(m.approvals.WithLabelValues("other", "other", "other")); v != 50 {
		t.Errorf("clamped approvals_total = %v, want 50", v)
	}
}

func grepLines(text, sub string) string {
	var out []string
	for _, l := range strings.Split(text, "\n") {
		if strings.Contains(l, sub) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}

func TestPendingGaugeAndGauges(t *testing.T) {
	m := New(0)
	m.ApprovalPending(1)
	m.ApprovalPending(1)
	m.ApprovalPending(-1)
	if v := testutil.ToFloat64(m.approvalsPending); v != 1 {
		t.Errorf("approvals_pending = %v, want 1", v)
	}
	m.ConnOpened("socks5")
	m.ConnOpened("socks5")
	m.ConnClosed("socks5")
	if v := testutil.ToFloat64(m.connsActive.WithLabelValues("socks5")); v != 1 {
		t.Errorf("connections_active{socks5} = %v, want 1", v)
	}
	if v := testutil.ToFloat64(m.connsTotal.WithLabelValues("socks5")); v != 2 {
		t.Errorf("connections_total{socks5} = %v, want 2", v)
	}
	m.ExecutionsActive(3)
	if v := testutil.ToFloat64(m.executionsActive); v != 3 {
		t.Errorf("executions_active = %v, want 3", v)
	}
	m.PolicyPatterns("deny", 100000)
	if v := testutil.ToFloat64(m.policyPatterns.WithLabelValues("deny")); v != 100000 {
		t.Errorf("policy_patterns{deny} = %v", v)
	}
	m.PolicyReload(false)
	if v := testutil.ToFloat64(m.policyReloads.WithLabelValues("error")); v != 1 {
		t.Errorf("policy_reloads_total{error} = %v", v)
	}
}

func TestDedicatedRegistries(t *testing.T) {
	a, b := New(5), New(5)
	a.ObserveDecision(denyEvent("x.test", hostpolicy.ReasonDenied))
	if v := testutil.ToFloat64(b.requests.WithLabelValues("http", "deny", "denied", "baseline_policy")); v != 0 {
		t.Fatalf("two Metrics share state: %v", v)
	}
	if err := prometheus.DefaultRegisterer.Register(a.requests); err != nil {
		t.Fatalf("metrics leaked onto the default registry: %v", err)
	}
	prometheus.DefaultRegisterer.Unregister(a.requests)
}

// fakeClock is a manually advanced clock for the host LRU.
type fakeClock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *fakeClock) now() time.Time      { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *fakeClock) add(d time.Duration) { c.mu.Lock(); c.t = c.t.Add(d); c.mu.Unlock() }

func hostSeries(t *testing.T, vec *prometheus.CounterVec) map[string]float64 {
	t.Helper()
	ch := make(chan prometheus.Metric, 1000)
	vec.Collect(ch)
	close(ch)
	out := map[string]float64{}
	for m := range ch {
		var pb = new(dtoMetric)
		if err := m.Write(&pb.Metric); err != nil {
			t.Fatal(err)
		}
		out[pb.Metric.GetLabel()[0].GetValue()] = pb.Metric.GetCounter().GetValue()
	}
	return out
}

func TestDeniedHostsBoundedByLRU(t *testing.T) {
	vec := prometheus.NewCounterVec(prometheus.CounterOpts{Name: "h", Help: "h"}, []string{"host"})
	clk := &fakeClock{t: time.Unix(1000, 0)}
	h := newHostLabels(3, vec, clk.now)

	for _, host := range []string{"a.test", "b.test", "c.test"} {
		h.inc(host)
	}
	// Full and every tracked host is fresh: a new host goes to "other".
	h.inc("d.test")
	h.inc("e.test")
	got := hostSeries(t, vec)
	if got["other"] != 2 || len(got) != 4 {
		t.Fatalf("series = %v, want a,b,c + other=2", got)
	}
	// Tracked hosts keep counting under their own label.
	h.inc("a.test")
	if got := hostSeries(t, vec); got["a.test"] != 2 {
		t.Fatalf("a.test = %v, want 2", got["a.test"])
	}

	// After b and c go stale, a new host evicts the least recently denied
	// (b.test: a.test was denied later), and b's series is deleted.
	clk.add(hostStaleAfter + time.Second)
	h.inc("a.test") // a stays fresh
	h.inc("d.test")
	got = hostSeries(t, vec)
	if _, ok := got["b.test"]; ok {
		t.Fatalf("evicted b.test still exported: %v", got)
	}
	if got["d.test"] != 1 || got["a.test"] != 3 || got["c.test"] != 1 {
		t.Fatalf("series after eviction = %v", got)
	}
	if n := len(got); n > 3+1 {
		t.Fatalf("%d series, want at most max+1 (other)", n)
	}

	// Invalid label values never become series.
	for _, bad := range []string{"", "other", "none", "UPPER.test", "a b", "x/y", strings.Repeat("a", 254), "h?q=1"} {
		h.inc(bad)
	}
	got = hostSeries(t, vec)
	if got["other"] != 2+8 {
		t.Fatalf("other = %v, want 10 (invalid values)", got["other"])
	}
}

func TestDeniedHostsBoundUnderConcurrency(t *testing.T) {
	m := New(20)
	var wg sync.WaitGroup
	for g := 0; g < 8; g++ {
		wg.Add(1)
		go func(g int) {
			defer wg.Done()
			for i := 0; i < 500; i++ {
				m.ObserveDecision(denyEvent(fmt.Sprintf("h%d-%d.test", g, i), hostpolicy.ReasonNotAllowed))
			}
		}(g)
	}
	wg.Wait()
	if n := testutil.CollectAndCount(m.deniedHosts); n > 21 {
		t.Fatalf("denied_hosts_total has %d series, want ≤ 21", n)
	}
	var total float64
	for _, v := range hostSeries(t, m.deniedHosts) {
		total += v
	}
	if total != 8*500 {
		t.Fatalf("sum of denied_hosts_total = %v, want %d (no denial lost)", total, 8*500)
	}
}

type dtoMetric struct{ Metric dto.Metric }

// Counters that dashboards rate() must exist at 0 before the first event,
// or increase() would miss the events of their first sample.
func TestCommonSeriesExistBeforeTheFirstEvent(t *testing.T) {
	text := scrape(t, New(0))
	for _, want := range []string{
		`netproxy_requests_total{decision="deny",protocol="http",reason="denied",source="baseline_policy"} 0`,
		`netproxy_requests_total{decision="allow",protocol="socks5-tcp",reason="none",source="baseline_policy"} 0`,
		`netproxy_requests_total{decision="ask",protocol="https",reason="not_allowed",source="decider"} 0`,
		`netproxy_requests_total{decision="deny",protocol="http",reason="proxy_disabled",source="proxy_state"} 0`,
		`netproxy_denied_hosts_total{host="other"} 0`,
		`netproxy_approvals_total{kind="network",outcome="allow_once",reviewer="user"} 0`,
		`netproxy_exec_decisions_total{requirement="forbidden",source="prefix"} 0`,
		`netproxy_attribution_total{result="bad_magic"} 0`,
		`netproxy_policy_reloads_total{result="error"} 0`,
		`netproxy_bytes_total{direction="down",protocol="https"} 0`,
		`netproxy_audit_dropped_total 0`,
	} {
		if !strings.Contains(text, want) {
			t.Errorf("missing pre-created series %s", want)
		}
	}
}
