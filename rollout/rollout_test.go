package rollout

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"sync"
	"testing"

	"github.com/netproxy/netproxy/attribution"
	"github.com/netproxy/netproxy/hostpolicy"
)

type countMeter struct {
	mu sync.Mutex
	n  map[[2]string]int
}

func (m *countMeter) ShadowDecision(live, shadow string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.n == nil {
		m.n = map[[2]string]int{}
	}
	m.n[[2]string{live, shadow}]++
}

func build(t testing.TB, domains map[string]string) *hostpolicy.Snapshot {
	t.Helper()
	var es []hostpolicy.Entry
	for k, v := range domains {
		es = append(es, hostpolicy.Entry{Pattern: k, Decision: v})
	}
	s, err := hostpolicy.Build(hostpolicy.Options{Enabled: true, Mode: hostpolicy.ModeFull, Entries: es,
		DNS: hostpolicy.DNSOptions{Hosts: map[string][]netip.Addr{
			"up.test": {netip.MustParseAddr("93.184.216.34")}, "gone.test": {netip.MustParseAddr("93.184.216.34")},
		}}})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func req(host string) hostpolicy.Request {
	return hostpolicy.Request{Host: host, Port: 443, Protocol: hostpolicy.ProtoHTTPS, Method: "CONNECT"}
}

func TestShadowNeverChangesTheLiveDecision(t *testing.T) {
	live := build(t, map[string]string{"up.test": "allow", "gone.test": "allow"})
	cand := build(t, map[string]string{"up.test": "allow", "new.test": "allow"})
	m := &countMeter{}
	sh := NewShadow(m, 10)
	sh.Set("cand.toml", cand)
	ev := NewEvaluator(hostpolicy.NewEngine(live, nil), nil, sh, true)
	d := ev.Evaluate(context.Background(), req("gone.test"))
	if !d.Allowed() || d.Shadow == nil || d.Shadow.Verdict != hostpolicy.Ask || d.Shadow.Reason != hostpolicy.ReasonNotAllowed {
		t.Fatalf("gone.test: live %s shadow %+v", d.Verdict, d.Shadow)
	}
	if d := ev.Evaluate(context.Background(), req("up.test")); !d.Allowed() || d.Shadow != nil {
		t.Fatalf("up.test: %+v", d)
	}
	if m.n[[2]string{"allow", "ask"}] != 1 || len(m.n) != 1 {
		t.Fatalf("meter %v", m.n)
	}
	sum := sh.Summary()
	if sum.Status != "active" || sum.Disagreements != 1 || len(sum.Hosts) != 1 || sum.Hosts[0].AllowBlock != 1 {
		t.Fatalf("summary %+v", sum)
	}
	sh.SetError("cand.toml", fmt.Errorf("bad"))
	if d := ev.Evaluate(context.Background(), req("gone.test")); d.Shadow != nil {
		t.Fatal("a failed candidate still judged")
	}
	if s := sh.Summary(); s.Status != "error" || s.Error != "bad" || s.Disagreements != 0 {
		t.Fatalf("error summary %+v", s)
	}
}

func TestShadowSummaryIsBounded(t *testing.T) {
	sh := NewShadow(nil, 3)
	sh.Set("c", build(t, nil))
	allow := hostpolicy.Decision{Verdict: hostpolicy.Allow}
	deny := hostpolicy.Decision{Verdict: hostpolicy.Deny, Reason: hostpolicy.ReasonNotAllowed}
	for i := 0; i < 1000; i++ {
		sh.record(fmt.Sprintf("h%d.test", i), allow, deny)
	}
	sh.record(strings.Repeat("a", 300), allow, deny)
	s := sh.Summary()
	if len(s.Hosts) != 3 || s.Other == nil || s.Other.AllowBlock != 998 || s.Disagreements != 1001 {
		t.Fatalf("hosts %d other %+v total %d", len(s.Hosts), s.Other, s.Disagreements)
	}
}

func TestScopesForExecutionAndSession(t *testing.T) {
	s := NewScopes()
	kicks := 0
	s.Subscribe(func() { kicks++ })
	if s.For("e1", "s1") != nil {
		t.Fatal("scopes without any policy")
	}
	s.ExecutionChanged(attribution.ExecutionStarted, attribution.Execution{ID: "e1", Network: &attribution.NetworkPolicy{Allow: []string{"up.test"}}})
	// A policy that somehow does not compile fails closed.
	s.ExecutionChanged(attribution.ExecutionStarted, attribution.Execution{ID: "e2", Network: &attribution.NetworkPolicy{Allow: []string{"a/b"}}})
	sc, _ := hostpolicy.BuildScope(hostpolicy.LevelSession, hostpolicy.ScopeSpec{Deny: []string{"x.test"}})
	s.SetSession("s1", sc)
	if got := s.For("e1", "s1"); len(got) != 2 || got[0].Level() != "session" || got[1].Level() != "execution" {
		t.Fatalf("For = %v", got)
	}
	e := hostpolicy.NewEngine(build(t, map[string]string{"up.test": "allow", "other.test": "allow"}), nil)
	if d := e.EvaluateScoped(context.Background(), req("up.test"), s.For("e2", "")); d.Reason != hostpolicy.ReasonPolicyDenied {
		t.Fatalf("uncompilable execution policy did not fail closed: %s", d.Reason)
	}
	s.ExecutionChanged(attribution.ExecutionEnded, attribution.Execution{ID: "e1"})
	if got := s.For("e1", "s1"); len(got) != 1 {
		t.Fatalf("after end: %v", got)
	}
	// Unattributed requests belong to the default session.
	s.SetSession(attribution.DefaultSession, sc)
	if got := s.For("", ""); len(got) != 1 {
		t.Fatalf("default session: %v", got)
	}
	if kicks != 2 {
		t.Fatalf("kicks %d", kicks)
	}
}

func TestSessionNetworkAPI(t *testing.T) {
	ev := NewEvaluator(hostpolicy.NewEngine(build(t, map[string]string{"up.test": "allow", "bad.test": "deny"}), nil), nil, nil, false)
	mux := http.NewServeMux()
	for _, m := range []string{"GET", "PUT", "DELETE"} {
		mux.Handle(m+" /v1/sessions/{id}/network", ev.SessionNetwork())
	}
	do := func(method, body string) (int, string) {
		rec := httptest.NewRecorder()
		mux.ServeHTTP(rec, httptest.NewRequest(method, "/v1/sessions/s1/network", strings.NewReader(body)))
		return rec.Code, rec.Body.String()
	}
	if c, b := do("PUT", `{"allow":["bad.test"],"mode":"limited"}`); c != 200 || !strings.Contains(b, "no effect") {
		t.Fatalf("PUT: %d %s", c, b)
	}
	if c, b := do("GET", ""); c != 200 || !strings.Contains(b, `"mode":"limited"`) {
		t.Fatalf("GET: %d %s", c, b)
	}
	for _, bad := range []string{`{"allow":["a/b"]}`, `{"allow":"x"}`, `{"nope":1}`, `{} {}`} {
		if c, _ := do("PUT", bad); c != 400 {
			t.Fatalf("PUT %s: %d", bad, c)
		}
	}
	if c, _ := do("DELETE", ""); c != 204 {
		t.Fatalf("DELETE: %d", c)
	}
	if c, _ := do("GET", ""); c != 404 {
		t.Fatalf("GET after DELETE: %d", c)
	}
}

// BenchmarkDecision measures what the shadow policy adds to one live
// decision on the data path (target ≤ 1 µs): the same allowed CONNECT
// with no candidate, with an agreeing candidate, and with a disagreeing
// one (recorded in the summary and the meter).
func BenchmarkDecision(b *testing.B) {
	live := build(b, map[string]string{"up.test": "allow", "gone.test": "allow", "**.example.com": "allow"})
	agree := build(b, map[string]string{"up.test": "allow", "gone.test": "allow", "**.example.com": "allow"})
	disagree := build(b, map[string]string{"up.test": "allow"})
	for _, c := range []struct {
		name string
		cand *hostpolicy.Snapshot
		host string
	}{{"live-only", nil, "gone.test"}, {"shadow-agrees", agree, "gone.test"}, {"shadow-disagrees", disagree, "gone.test"}} {
		b.Run(c.name, func(b *testing.B) {
			sh := NewShadow(&countMeter{}, 100)
			if c.cand != nil {
				sh.Set("c", c.cand)
			}
			ev := NewEvaluator(hostpolicy.NewEngine(live, nil), nil, sh, false)
			r := req(c.host)
			ctx := context.Background()
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				if d := ev.Evaluate(ctx, r); !d.Allowed() {
					b.Fatal(d.Reason)
				}
			}
		})
	}
}

// reviewer blocks until release, then allows: a narrower policy installed
// while it decides must still apply to its answer.
type slowReviewer struct{ started, release chan struct{} }

func (r slowReviewer) Decide(_ context.Context, _ hostpolicy.Request, base hostpolicy.Decision) hostpolicy.Decision {
	close(r.started)
	<-r.release
	base.Verdict, base.Reason = hostpolicy.Allow, hostpolicy.ReasonNone
	return base
}

func TestSessionPolicyInstalledDuringReviewApplies(t *testing.T) {
	r := slowReviewer{started: make(chan struct{}), release: make(chan struct{})}
	ev := NewEvaluator(hostpolicy.NewEngine(build(t, map[string]string{"up.test": "allow"}), r), nil, nil, true)
	done := make(chan hostpolicy.Decision, 1)
	rq := req("gone.test")
	rq.SessionID, rq.ExecutionID = "s1", "e1"
	go func() { done <- ev.Evaluate(context.Background(), rq) }()
	<-r.started
	sc, _ := hostpolicy.BuildScope(hostpolicy.LevelSession, hostpolicy.ScopeSpec{Deny: []string{"gone.test"}})
	ev.Scopes().SetSession("s1", sc)
	close(r.release)
	if d := <-done; d.Reason != hostpolicy.ReasonPolicyDenied || d.Level != hostpolicy.LevelSession {
		t.Fatalf("reviewed request after a session deny: %s/%s level %q", d.Verdict, d.Reason, d.Level)
	}
}
