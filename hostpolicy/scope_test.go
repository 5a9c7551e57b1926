package hostpolicy

import (
	"context"
	"net/netip"
	"strings"
	"sync/atomic"
	"testing"
)

// noDNS fails the test on any lookup: shadow and replay judgements and
// scope checks must never resolve.
type noDNS struct{ t testing.TB }

func (r noDNS) LookupNetIP(_ context.Context, host string) ([]netip.Addr, error) {
	r.t.Errorf("unexpected DNS lookup of %q", host)
	return nil, ErrNoAddresses
}

type fixedDNS map[string][]netip.Addr

func (r fixedDNS) LookupNetIP(_ context.Context, host string) ([]netip.Addr, error) {
	if a, ok := r[host]; ok {
		return a, nil
	}
	return nil, ErrNoAddresses
}

// allowAll is a decider that allows every not_allowed and counts calls.
type allowAll struct{ calls atomic.Int32 }

func (a *allowAll) Decide(_ context.Context, _ Request, base Decision) Decision {
	a.calls.Add(1)
	base.Verdict, base.Reason, base.Override = Allow, ReasonNone, "allow_session"
	return base
}

func mustScope(t testing.TB, level string, spec ScopeSpec) *Scope {
	t.Helper()
	sc, err := BuildScope(level, spec)
	if err != nil {
		t.Fatal(err)
	}
	return sc
}

func scopeEngine(t *testing.T, d Decider) *Engine {
	p := mustCompile(t, map[string]string{"up.test": "allow", "closed.test": "allow", "denied.test": "deny", "**.wide.test": "allow"}, true)
	return newTestEngine(p, fixedDNS{}, ModeFull, d)
}

func TestScopeOnlyNarrows(t *testing.T) {
	e := scopeEngine(t, nil)
	ctx := context.Background()
	exec := mustScope(t, LevelExecution, ScopeSpec{Allow: []string{"up.test", "denied.test", "**.wide.test"}, Deny: []string{"b.wide.test"}})
	sess := mustScope(t, LevelSession, ScopeSpec{Deny: []string{"c.wide.test"}})
	cases := []struct {
		host   string
		scopes []*Scope
		want   Verdict
		reason Reason
		level  string
	}{
		{"up.test", []*Scope{exec}, Allow, ReasonNone, ""},
		{"closed.test", []*Scope{exec}, Deny, ReasonPolicyDenied, LevelExecution},
		{"closed.test", nil, Allow, ReasonNone, ""},
		// A narrower allow never widens the host-wide deny list.
		{"denied.test", []*Scope{exec}, Deny, ReasonDenied, ""},
		// Deny beats allow inside a scope and across levels.
		{"a.wide.test", []*Scope{sess, exec}, Allow, ReasonNone, ""},
		{"b.wide.test", []*Scope{sess, exec}, Deny, ReasonPolicyDenied, LevelExecution},
		{"c.wide.test", []*Scope{sess, exec}, Deny, ReasonPolicyDenied, LevelSession},
		// Not host-wide allowed: the narrower allow does not allow it.
		{"other.test", []*Scope{mustScope(t, LevelExecution, ScopeSpec{Allow: []string{"other.test"}})}, Deny, ReasonNotAllowed, ""},
	}
	for _, c := range cases {
		d := e.EvaluateScoped(ctx, Request{Host: c.host, Port: 80, Protocol: ProtoHTTP, Method: "GET"}, c.scopes)
		if d.Verdict != c.want || d.Reason != c.reason || d.Level != c.level {
			t.Errorf("%s: got %s/%s level %q, want %s/%s level %q", c.host, d.Verdict, d.Reason, d.Level, c.want, c.reason, c.level)
		}
		if d.Reason == ReasonPolicyDenied && d.Source != SourceBaseline {
			t.Errorf("%s: source %s", c.host, d.Source)
		}
	}
}

func TestScopeDenyIsNeverReviewed(t *testing.T) {
	dec := &allowAll{}
	e := scopeEngine(t, dec)
	sc := mustScope(t, LevelSession, ScopeSpec{Deny: []string{"other.test"}})
	d := e.EvaluateScoped(context.Background(), Request{Host: "other.test", Port: 80, Protocol: ProtoHTTP, Method: "GET"}, []*Scope{sc})
	if d.Reason != ReasonPolicyDenied || dec.calls.Load() != 0 {
		t.Fatalf("session deny: %s, decider called %d times", d.Reason, dec.calls.Load())
	}
	// An execution allow list that misses is not reviewed either.
	sc = mustScope(t, LevelExecution, ScopeSpec{Allow: []string{"up.test"}})
	d = e.EvaluateScoped(context.Background(), Request{Host: "other.test", Port: 80, Protocol: ProtoHTTP, Method: "GET"}, []*Scope{sc})
	if d.Reason != ReasonPolicyDenied || dec.calls.Load() != 0 {
		t.Fatalf("allow miss: %s, decider called %d times", d.Reason, dec.calls.Load())
	}
	// Passing the scope, the reviewer is asked as usual.
	sc = mustScope(t, LevelExecution, ScopeSpec{Allow: []string{"other.test"}})
	d = e.EvaluateScoped(context.Background(), Request{Host: "other.test", Port: 80, Protocol: ProtoHTTP, Method: "GET"}, []*Scope{sc})
	if !d.Allowed() || dec.calls.Load() != 1 {
		t.Fatalf("reviewed: %s, calls %d", d.Verdict, dec.calls.Load())
	}
}

func TestScopeLimitedMode(t *testing.T) {
	e := scopeEngine(t, nil)
	sc := mustScope(t, LevelExecution, ScopeSpec{Mode: ModeLimited})
	d := e.EvaluateScoped(context.Background(), Request{Host: "up.test", Port: 80, Protocol: ProtoHTTP, Method: "POST"}, []*Scope{sc})
	if d.Reason != ReasonMethodNotAllowed || d.Level != LevelExecution {
		t.Fatalf("POST under a limited scope: %s level %q", d.Reason, d.Level)
	}
	d = e.EvaluateScoped(context.Background(), Request{Host: "up.test", Port: 80, Protocol: ProtoHTTP, Method: "GET"}, []*Scope{sc})
	if !d.Allowed() {
		t.Fatalf("GET under a limited scope: %s", d.Reason)
	}
	d = e.InnerDecisionScoped(context.Background(), Request{Host: "up.test", Port: 443, Protocol: ProtoHTTPS, Method: "PUT"}, []*Scope{sc})
	if d.Reason != ReasonMethodNotAllowed {
		t.Fatalf("inner PUT: %s", d.Reason)
	}
}

func TestRecheckScoped(t *testing.T) {
	e := scopeEngine(t, nil)
	addrs := []netip.Addr{netip.MustParseAddr("192.0.2.7")}
	sc := mustScope(t, LevelSession, ScopeSpec{Deny: []string{"192.0.2.0/24"}})
	if d := e.RecheckScoped("up.test", 80, addrs, []*Scope{sc}); d.Reason != ReasonPolicyDenied || d.Level != LevelSession {
		t.Fatalf("pinned address in a session deny prefix: %s", d.Reason)
	}
	if d := e.RecheckScoped("up.test", 80, addrs, nil); d.Reason != ReasonNone {
		t.Fatalf("no scope: %s", d.Reason)
	}
}

func TestScopeNotes(t *testing.T) {
	p := mustCompile(t, map[string]string{"up.test": "allow", "denied.test": "deny", "**.bad.test": "deny", "10.0.0.0/8": "deny"}, false)
	notes := p.Notes(ScopeSpec{Allow: []string{"up.test", "denied.test", "*.bad.test", "10.1.2.3"}})
	if len(notes) != 3 || !strings.Contains(notes[0], "denied.test") || !strings.Contains(notes[1], "*.bad.test") || !strings.Contains(notes[2], "10.1.2.3") {
		t.Fatalf("notes %q", notes)
	}
	lim := testSnap(p, nil, ModeLimited)
	if n := lim.Notes(ScopeSpec{Mode: ModeFull}); len(n) != 1 {
		t.Fatalf("mode full under limited: %q", n)
	}
}

func TestBuildScopeErrorsNameTheirKey(t *testing.T) {
	_, err := BuildScope(LevelExecution, ScopeSpec{Allow: []string{"ok.test", "a/b"}, Deny: []string{"*"}, Mode: "wide"})
	if err == nil {
		t.Fatal("no error")
	}
	for _, k := range []string{"allow[1]", "deny[0]", "mode"} {
		if !strings.Contains(err.Error(), k) {
			t.Errorf("error lacks %s: %v", k, err)
		}
	}
}

func TestPredictNeverResolvesOrReviews(t *testing.T) {
	cand, err := Build(Options{Enabled: true, Mode: ModeFull, Resolver: noDNS{t},
		Entries: domainEntries(map[string]string{"up.test": "allow", "new.test": "allow", "192.0.2.0/24": "deny", "127.0.0.0/8": "allow"})})
	if err != nil {
		t.Fatal(err)
	}
	pinned := []netip.Addr{netip.MustParseAddr("192.0.2.9")}
	cases := []struct {
		name string
		req  Request
		live Decision
		o    PredictOptions
		want Verdict
		r    Reason
	}{
		{"pinned answer in a deny prefix", Request{Host: "up.test", Port: 80, Protocol: ProtoHTTP, Method: "GET"},
			Decision{Verdict: Allow, Addrs: pinned}, PredictOptions{}, Deny, ReasonDenied},
		{"public pinned answer", Request{Host: "up.test", Port: 80, Protocol: ProtoHTTP, Method: "GET"},
			Decision{Verdict: Allow, Addrs: []netip.Addr{netip.MustParseAddr("93.184.216.34")}}, PredictOptions{}, Allow, ReasonNone},
		{"loopback pinned answer inside an allow prefix", Request{Host: "up.test", Port: 80, Protocol: ProtoHTTP, Method: "GET"},
			Decision{Verdict: Allow, Addrs: []netip.Addr{netip.MustParseAddr("127.0.0.5")}}, PredictOptions{}, Allow, ReasonNone},
		{"never resolved live: no lookup", Request{Host: "new.test", Port: 80, Protocol: ProtoHTTP, Method: "GET"},
			Decision{Verdict: Deny, Reason: ReasonNotAllowed, Source: SourceBaseline}, PredictOptions{}, Allow, ReasonNone},
		{"not_allowed with approvals is ask", Request{Host: "gone.test", Port: 80, Protocol: ProtoHTTP, Method: "GET"},
			Decision{Verdict: Allow, Source: SourceBaseline}, PredictOptions{Approvals: true}, Ask, ReasonNotAllowed},
		{"not_allowed without approvals", Request{Host: "gone.test", Port: 80, Protocol: ProtoHTTP, Method: "GET"},
			Decision{Verdict: Allow, Source: SourceBaseline}, PredictOptions{}, Deny, ReasonNotAllowed},
		{"the same reviewer answered live", Request{Host: "gone.test", Port: 80, Protocol: ProtoHTTP, Method: "GET"},
			Decision{Verdict: Allow, Source: SourceDecider}, PredictOptions{Approvals: true}, Allow, ReasonNone},
		{"live narrower block stays", Request{Host: "up.test", Port: 80, Protocol: ProtoHTTP, Method: "GET"},
			Decision{Verdict: Deny, Reason: ReasonPolicyDenied, Level: LevelExecution}, PredictOptions{}, Deny, ReasonPolicyDenied},
	}
	for _, c := range cases {
		d := cand.Predict(c.req, c.live, c.o)
		if d.Verdict != c.want || d.Reason != c.r {
			t.Errorf("%s: got %s/%s, want %s/%s", c.name, d.Verdict, d.Reason, c.want, c.r)
		}
	}
}

// FuzzBuildScope: whatever a client sends as a narrower policy, building
// it never panics, and a built scope never allows what the host-wide chain
// blocks.
func FuzzBuildScope(f *testing.F) {
	f.Add("up.test", "x.test", "limited", "up.test")
	f.Add("**.a", "*", "", "b.a")
	f.Add("10.0.0.0/8", "[::1]", "full", "10.1.1.1")
	p, err := Build(testOptions(true, map[string]string{"up.test": "allow", "denied.test": "deny", "10.0.0.0/8": "allow"}, true))
	if err != nil {
		f.Fatal(err)
	}
	e := NewEngine(testSnap(p, fixedDNS{}, ModeFull), nil)
	f.Fuzz(func(t *testing.T, allow, deny, mode, host string) {
		sc, err := BuildScope(LevelExecution, ScopeSpec{Allow: []string{allow}, Deny: []string{deny}, Mode: mode})
		if err != nil {
			return
		}
		req := Request{Host: host, Port: 80, Protocol: ProtoHTTP, Method: "GET"}
		base := e.Evaluate(context.Background(), req)
		d := e.EvaluateScoped(context.Background(), req, []*Scope{sc})
		if d.Allowed() && !base.Allowed() {
			t.Fatalf("scope widened %q: base %s/%s", host, base.Verdict, base.Reason)
		}
		p.Notes(sc.Spec())
	})
}
