package rollout

import (
	"context"
	"fmt"
	"net/netip"
	"strings"
	"sync"
	"testing"

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
