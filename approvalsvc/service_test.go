package approvalsvc

import (
	"context"
	"errors"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/netproxy/netproxy/attribution"
	"github.com/netproxy/netproxy/guardian"
	"github.com/netproxy/netproxy/hostpolicy"
)

// Only not_allowed reaches the service: no hook, cache, reviewer or earlier
// approval turns denied or not_allowed_local into an allow — including a deny
// added by reload after a session approval.
func TestHardDenialsAreNeverOverridden(t *testing.T) {
	hook, calls := countingHook(t, `{"decision":"allow"}`)
	r := newRig(t, withHooks(5*time.Second, hook))
	ctx := context.Background()

	for _, host := range []string{"denied.test", "local.test", "127.0.0.1", "10.1.2.3"} {
		d := r.eval(ctx, hostpolicy.Request{Host: host})
		if d.Allowed() || d.Source != hostpolicy.SourceBaseline {
			t.Fatalf("%s: got %+v, want a baseline block", host, d)
		}
	}
	if calls() != 0 {
		t.Fatalf("the hook ran %d times for hard denials", calls())
	}
	// Direct calls with a non-not_allowed baseline return it unchanged.
	for _, reason := range []hostpolicy.Reason{hostpolicy.ReasonDenied, hostpolicy.ReasonNotAllowedLocal, hostpolicy.ReasonMethodNotAllowed} {
		base := hostpolicy.Decision{Verdict: hostpolicy.Deny, Reason: reason, Source: hostpolicy.SourceBaseline, Host: "alpha.test", Port: 80}
		if got := r.svc.Decide(ctx, hostpolicy.Request{Host: "alpha.test", Port: 80, Protocol: hostpolicy.ProtoHTTP}, base); got.Verdict != hostpolicy.Deny || got.Reason != reason || got.Source != hostpolicy.SourceBaseline {
			t.Fatalf("%s: decider changed it to %+v", reason, got)
		}
	}
	if calls() != 0 {
		t.Fatalf("the hook ran for a direct hard denial")
	}

	// A session approval for alpha.test (user, allow_session) ...
	r2 := newRig(t)
	ch := r2.goEval(hostpolicy.Request{Host: "alpha.test"})
	a := r2.waitPending("alpha.test")
	if err := r2.svc.DecideApproval(a.ID, OutcomeAllowSession, ""); err != nil {
		t.Fatal(err)
	}
	if d := recv(t, ch); !d.Allowed() {
		t.Fatalf("after allow_session: %+v", d)
	}
	if d := r2.eval(ctx, hostpolicy.Request{Host: "alpha.test"}); !d.Allowed() || d.Source != hostpolicy.SourceDecider {
		t.Fatalf("cached: %+v", d)
	}
	// ... is beaten by a deny added by reload.
	r2.engine.Swap(testSnapshot(t, testPolicyConfig(map[string]string{"alpha.test": "deny"})))
	d := r2.eval(ctx, hostpolicy.Request{Host: "alpha.test"})
	if d.Allowed() || d.Reason != hostpolicy.ReasonDenied || d.Source != hostpolicy.SourceBaseline {
		t.Fatalf("after reload deny: %+v", d)
	}
	// A reload that puts alpha.test on a private address: local guard wins.
	if r2.pendingCount() != 0 {
		t.Fatal("a hard denial created a pending approval")
	}
}

func TestOwnerResolution(t *testing.T) {
	r := newRig(t)
	s := r.svc

	t.Run("execution id active", func(t *testing.T) {
		e := r.register("s1", "envA")
		owner, sess, env, err := s.resolveOwner(e.ID, "", "")
		if err != nil || owner == nil || owner.ID != e.ID || sess != "s1" || env != "envA" {
			t.Fatalf("got %v %s %s %v", owner, sess, env, err)
		}
	})
	t.Run("execution id not active denies", func(t *testing.T) {
		e := r.register("s1", "envA")
		r.reg.Revoke(e.ID)
		if _, _, _, err := s.resolveOwner(e.ID, "", ""); !errors.Is(err, errAttribution) {
			t.Fatalf("revoked: got %v", err)
		}
		if _, _, _, err := s.resolveOwner("exec_unknown", "", ""); !errors.Is(err, errAttribution) {
			t.Fatalf("unknown: got %v", err)
		}
	})
	t.Run("execution id with another environment denies", func(t *testing.T) {
		e := r.register("s1", "envA")
		if _, _, _, err := s.resolveOwner(e.ID, "", "envB"); !errors.Is(err, errAttribution) {
			t.Fatalf("got %v", err)
		}
	})
	t.Run("environment only, single execution", func(t *testing.T) {
		e := r.register("s2", "envSolo")
		owner, sess, env, err := s.resolveOwner("", "", "envSolo")
		if err != nil || owner == nil || owner.ID != e.ID || env != "envSolo" || sess != DefaultSession {
			t.Fatalf("got %v %s %s %v", owner, sess, env, err)
		}
	})
	t.Run("environment only, two executions → no owner", func(t *testing.T) {
		r.register("s3", "envDuo")
		r.register("s3", "envDuo")
		owner, _, env, err := s.resolveOwner("", "", "envDuo")
		if err != nil || owner != nil || env != "envDuo" {
			t.Fatalf("got %v %s %v", owner, env, err)
		}
	})
	t.Run("environment only, none → no owner", func(t *testing.T) {
		owner, _, env, err := s.resolveOwner("", "", "envEmpty")
		if err != nil || owner != nil || env != "envEmpty" {
			t.Fatalf("got %v %s %v", owner, env, err)
		}
	})
	t.Run("unattributed, no default-session execution → no owner", func(t *testing.T) {
		owner, sess, env, err := s.resolveOwner("", "", "")
		if err != nil || owner != nil || sess != DefaultSession || env != "" {
			t.Fatalf("got %v %s %q %v", owner, sess, env, err)
		}
		// The environment falls back to the session default.
		if got := s.session(sess, nil).defaultEnv; got != DefaultSession {
			t.Fatalf("default env %q", got)
		}
	})
	t.Run("unattributed, one default-session execution → owner", func(t *testing.T) {
		e := r.register(DefaultSession, "envD")
		defer r.reg.Revoke(e.ID)
		owner, sess, env, err := s.resolveOwner("", "", "")
		if err != nil || owner == nil || owner.ID != e.ID || sess != DefaultSession || env != "envD" {
			t.Fatalf("got %v %s %s %v", owner, sess, env, err)
		}
	})
	t.Run("unattributed, two default-session executions → deny (ambiguous)", func(t *testing.T) {
		e1 := r.register(DefaultSession, "envD")
		e2 := r.register(DefaultSession, "envE")
		defer r.reg.Revoke(e1.ID)
		defer r.reg.Revoke(e2.ID)
		if _, _, _, err := s.resolveOwner("", "", ""); !errors.Is(err, errAttribution) || !strings.Contains(err.Error(), "ambiguous") {
			t.Fatalf("got %v", err)
		}
		// Through the chain: denied without a prompt.
		d := r.eval(context.Background(), hostpolicy.Request{Host: "alpha.test"})
		if d.Allowed() || d.Reason != hostpolicy.ReasonNotAllowed || d.Source != hostpolicy.SourceDecider || r.pendingCount() != 0 {
			t.Fatalf("ambiguous request: %+v pending=%d", d, r.pendingCount())
		}
	})
}

// The cache key is (session, environment, host, protocol, port): another
// port, protocol, environment or session asks again.
func TestSessionCacheKey(t *testing.T) {
	r := newRig(t)
	ctx := context.Background()
	approve := func(req hostpolicy.Request, outcome string) hostpolicy.Decision {
		t.Helper()
		ch := r.goEval(req)
		a := r.waitPending(req.Host)
		if err := r.svc.DecideApproval(a.ID, outcome, ""); err != nil {
			t.Fatal(err)
		}
		return recv(t, ch)
	}
	if d := approve(hostpolicy.Request{Host: "alpha.test", Port: 80}, OutcomeAllowSession); !d.Allowed() {
		t.Fatalf("%+v", d)
	}
	if d := r.eval(ctx, hostpolicy.Request{Host: "ALPHA.test.", Port: 80}); !d.Allowed() {
		t.Fatalf("same key (normalised host) should be cached: %+v", d)
	}
	for _, req := range []hostpolicy.Request{
		{Host: "alpha.test", Port: 8080},
		{Host: "alpha.test", Port: 80, Protocol: hostpolicy.ProtoHTTPS},
		{Host: "alpha.test", Port: 80, Protocol: hostpolicy.ProtoSOCKS5},
	} {
		ch := r.goEval(req)
		a := r.waitPending("alpha.test")
		if a.Port != req.Port {
			t.Fatalf("pending port %d", a.Port)
		}
		r.svc.DecideApproval(a.ID, OutcomeDeny, "")
		if d := recv(t, ch); d.Allowed() || d.Reason != hostpolicy.ReasonNotAllowed || d.Source != hostpolicy.SourceDecider {
			t.Fatalf("%+v: %+v", req, d)
		}
	}
	// Another environment (an execution in envX of the default session) asks again.
	e := r.register("other", "envX")
	ch := r.goEval(hostpolicy.Request{Host: "alpha.test", Port: 80, ExecutionID: e.ID, SessionID: "other", EnvironmentID: "envX"})
	a := r.waitPending("alpha.test")
	if a.SessionID != "other" || a.EnvironmentID != "envX" || a.ExecutionID != e.ID || a.Cwd != "/w" || len(a.Command) != 2 {
		t.Fatalf("pending approval lacks the owner's context: %+v", a)
	}
	r.svc.DecideApproval(a.ID, OutcomeDeny, "")
	recv(t, ch)
	// allow_once is not cached.
	if d := approve(hostpolicy.Request{Host: "bravo.test"}, OutcomeAllowOnce); !d.Allowed() {
		t.Fatalf("%+v", d)
	}
	ch = r.goEval(hostpolicy.Request{Host: "bravo.test"})
	a = r.waitPending("bravo.test")
	r.svc.DecideApproval(a.ID, OutcomeDeny, "")
	recv(t, ch)
}

// Deny cache is consulted before the allow cache.
func TestDenyCacheBeforeAllowCache(t *testing.T) {
	r := newRig(t)
	sess := r.svc.session("s", nil)
	k := cacheKey{kind: KindNetwork, session: "s", host: "h", port: 1}
	sess.allow.Add(k, struct{}{})
	sess.deny.Add(k, struct{}{})
	if hit, allow := sess.cached(k); !hit || allow {
		t.Fatalf("hit=%t allow=%t, want the deny cache", hit, allow)
	}
}

// 100 concurrent requests on one key → exactly one reviewer call.
func TestSingleFlightOneReviewerCall(t *testing.T) {
	var calls, release = make(chan struct{}, 1000), make(chan struct{})
	rev := &gatedReviewer{calls: calls, release: release}
	r := newRig(t, func(o *Options) { o.Guardian = rev; o.Settings.Reviewer = "guardian" })
	const n = 100
	var wg sync.WaitGroup
	results := make(chan hostpolicy.Decision, n)
	for range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			results <- r.eval(context.Background(), hostpolicy.Request{Host: "alpha.test"})
		}()
	}
	select { // the first (and only) review started
	case <-calls:
	case <-time.After(10 * time.Second):
		t.Fatal("the reviewer was never called")
	}
	// Let every request reach the service before the verdict.
	waitFor(t, func() bool { return r.svc.waiters() == n })
	time.Sleep(50 * time.Millisecond)
	close(release)
	wg.Wait()
	close(results)
	for d := range results {
		if !d.Allowed() {
			t.Fatalf("waiter got %+v", d)
		}
	}
	if got := len(calls); got != 0 {
		t.Fatalf("reviewer called %d extra times", got)
	}
	// Also through the user queue: one pending entry for 100 waiters.
	r2 := newRig(t)
	chans := make([]<-chan hostpolicy.Decision, n)
	for i := range chans {
		chans[i] = r2.goEval(hostpolicy.Request{Host: "bravo.test"})
	}
	a := r2.waitPending("bravo.test")
	time.Sleep(100 * time.Millisecond)
	if c := r2.pendingCount(); c != 1 {
		t.Fatalf("%d pending entries", c)
	}
	r2.svc.DecideApproval(a.ID, OutcomeAllowSession, "")
	for _, ch := range chans {
		if d := recv(t, ch); !d.Allowed() {
			t.Fatalf("%+v", d)
		}
	}
}

// gatedReviewer is a Guardian that reports each call and answers allow
// when released. (The Starlark, webhook and OpenAI backends are tested in
// guardian/ and end to end; this one exists to hold a review open.)
type gatedReviewer struct {
	calls   chan struct{}
	release chan struct{}
}

func (g *gatedReviewer) Review(ctx context.Context, _ guardian.ReviewRequest) (guardian.Verdict, error) {
	g.calls <- struct{}{}
	select {
	case <-g.release:
		return guardian.Verdict{Decision: "allow", Rationale: "released"}, nil
	case <-ctx.Done():
		return guardian.Verdict{}, ctx.Err()
	}
}

func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("condition not met within 5s")
		}
		time.Sleep(time.Millisecond)
	}
}

func TestFailClosedGates(t *testing.T) {
	hook, calls := countingHook(t, `{"decision":"allow"}`)
	cases := map[string]rigOpt{
		"policy never":        withConfig(func(c *Settings) { c.Policy = "never" }),
		"approvals disabled":  withConfig(func(c *Settings) { c.Enabled = false }),
		"no guardian":         withConfig(func(c *Settings) { c.Reviewer = "guardian" }),
		"no human reviewer":   func(o *Options) { o.UserReviewer = false },
		"registration narrow": nil,
	}
	for name, opt := range cases {
		opts := []rigOpt{withHooks(5*time.Second, hook)}
		if opt != nil {
			opts = append(opts, opt)
		}
		r := newRig(t, opts...)
		req := hostpolicy.Request{Host: "alpha.test"}
		if name == "registration narrow" {
			// A registration narrowing on-request to never.
			e, _, _ := r.reg.Register(attribution.ExecutionSpec{SessionID: "n", EnvironmentID: "e", ApprovalPolicy: "never"})
			req.ExecutionID, req.SessionID, req.EnvironmentID = e.ID, "n", "e"
		}
		before := calls()
		d := r.eval(context.Background(), req)
		if d.Allowed() || d.Reason != hostpolicy.ReasonNotAllowed || d.Source != hostpolicy.SourceDecider {
			t.Errorf("%s: got %+v", name, d)
		}
		if calls() != before {
			t.Errorf("%s: a hook ran behind a closed gate", name)
		}
		if r.pendingCount() != 0 {
			t.Errorf("%s: a pending entry was created", name)
		}
	}
}

func TestNarrowing(t *testing.T) {
	on, _ := ParsePolicy("on-request")
	g, _ := ParsePolicy("granular:sandbox_approval,rules")
	cases := []struct {
		base ApprovalPolicy
		req  string
		want string
	}{
		{on, "never", "never"}, {on, "untrusted", "untrusted"}, {on, "granular:rules", "granular:rules"},
		{ApprovalPolicy{Kind: PolicyNever}, "on-request", "never"}, {ApprovalPolicy{Kind: PolicyUntrusted}, "on-request", "untrusted"},
		{g, "granular:rules", "granular:rules"}, {ApprovalPolicy{Kind: PolicyGranular, Rules: true}, "granular:sandbox_approval,rules", "granular:rules"},
		{on, "bogus", "on-request"}, {on, "", "on-request"},
	}
	for _, c := range cases {
		if got := Narrow(c.base, c.req).String(); got != c.want {
			t.Errorf("Narrow(%s, %q) = %s, want %s", c.base, c.req, got, c.want)
		}
	}
	if NarrowReviewer(ReviewerUser, ReviewerGuardian) != ReviewerUser || NarrowReviewer(ReviewerGuardian, ReviewerUser) != ReviewerUser {
		t.Error("reviewer narrowing")
	}
	if _, err := ParsePolicy("granular:bogus"); err == nil {
		t.Error("bad granular flag accepted")
	}
	if _, err := New(Options{Settings: Settings{Policy: "sometimes"}}); err == nil || !strings.Contains(err.Error(), "approvals.policy") {
		t.Errorf("bad policy: %v", err)
	}
}

func TestHooks(t *testing.T) {
	ctx := context.Background()
	t.Run("allow is final and not cached", func(t *testing.T) {
		hook, calls := countingHook(t, `{"decision":"allow","message":"ok by hook"}`)
		r := newRig(t, withHooks(5*time.Second, hook))
		for i := 1; i <= 2; i++ {
			d := r.eval(ctx, hostpolicy.Request{Host: "alpha.test"})
			if !d.Allowed() || d.Override != "hook:allow_once" {
				t.Fatalf("run %d: %+v", i, d)
			}
			if calls() != i {
				t.Fatalf("hook calls %d, want %d", calls(), i)
			}
		}
	})
	t.Run("deny is final and tells the owner", func(t *testing.T) {
		hook, _ := countingHook(t, `{"decision":"deny","message":"blocked by corp hook"}`)
		r := newRig(t, withHooks(5*time.Second, hook))
		e := r.register("s", "env")
		events, cancel, _ := r.reg.Subscribe(e.ID)
		defer cancel()
		d := r.eval(ctx, hostpolicy.Request{Host: "alpha.test", ExecutionID: e.ID, SessionID: "s", EnvironmentID: "env"})
		if d.Allowed() || d.Reason != hostpolicy.ReasonNotAllowed || d.Source != hostpolicy.SourceDecider || d.Rationale != "blocked by corp hook" {
			t.Fatalf("%+v", d)
		}
		select {
		case ev := <-events:
			if ev.Type != attribution.EventDeniedByPolicy || ev.Host != "alpha.test" || ev.ApprovalID == "" {
				t.Fatalf("event %+v", ev)
			}
		case <-time.After(2 * time.Second):
			t.Fatal("no owner event")
		}
	})
	t.Run("first decisive answer wins; failing, garbage and none fall through", func(t *testing.T) {
		none, nCalls := countingHook(t, `{"decision":"none"}`)
		garbage, _ := hookScript(t, "echo 'this is not json'")
		failing, _ := hookScript(t, "echo '{\"decision\":\"allow\"}'; exit 3")
		deny, _ := countingHook(t, `{"decision":"deny","message":"second"}`)
		allow, aCalls := countingHook(t, `{"decision":"allow"}`)
		r := newRig(t, withHooks(5*time.Second, none, garbage, failing, "/nonexistent/hook", deny, allow))
		d := r.eval(ctx, hostpolicy.Request{Host: "alpha.test"})
		if d.Allowed() || d.Rationale != "second" {
			t.Fatalf("%+v", d)
		}
		if nCalls() != 1 || aCalls() != 0 {
			t.Fatalf("none ran %d, allow ran %d", nCalls(), aCalls())
		}
	})
	t.Run("all undecided falls through to the user", func(t *testing.T) {
		none, _ := countingHook(t, `{"decision":"none"}`)
		r := newRig(t, withHooks(5*time.Second, none))
		ch := r.goEval(hostpolicy.Request{Host: "alpha.test"})
		a := r.waitPending("alpha.test")
		r.svc.DecideApproval(a.ID, OutcomeAllowOnce, "")
		if d := recv(t, ch); !d.Allowed() {
			t.Fatalf("%+v", d)
		}
	})
	t.Run("a hanging hook and its children are killed at the timeout", func(t *testing.T) {
		pidFile := t.TempDir() + "/child.pid"
		hang, _ := hookScript(t, "sleep 30 &\necho $! > "+pidFile+"\nsleep 30")
		allow, _ := countingHook(t, `{"decision":"allow"}`)
		r := newRig(t, withHooks(300*time.Millisecond, hang, allow))
		start := time.Now()
		d := r.eval(ctx, hostpolicy.Request{Host: "alpha.test"})
		if el := time.Since(start); el > 3*time.Second {
			t.Fatalf("hanging hook held the request %v", el)
		}
		if !d.Allowed() {
			t.Fatalf("the next hook should decide: %+v", d)
		}
		b, err := os.ReadFile(pidFile)
		if err != nil {
			t.Fatal(err)
		}
		pid := strings.TrimSpace(string(b))
		waitFor(t, func() bool {
			st, err := os.ReadFile("/proc/" + pid + "/stat")
			return err != nil || strings.Contains(string(st), ") Z ")
		})
	})
	t.Run("the hook gets the request as JSON and no secrets", func(t *testing.T) {
		out := t.TempDir() + "/stdin.json"
		hook, _ := hookScript(t, "cat > "+out+"\nenv >> "+out+"\necho '{\"decision\":\"allow\"}'")
		t.Setenv("APPROVALS_TEST_SECRET", "s3cret")
		r := newRig(t, withHooks(5*time.Second, hook), func(o *Options) { o.HookEnv = nil; o.SecretEnv = []string{"APPROVALS_TEST_SECRET"} })
		r.eval(ctx, hostpolicy.Request{Host: "alpha.test", Port: 8443, Protocol: hostpolicy.ProtoHTTPS})
		b, _ := os.ReadFile(out)
		s := string(b)
		for _, want := range []string{`"type":"network_approval"`, `"host":"alpha.test"`, `"port":8443`, `"protocol":"https"`} {
			if !strings.Contains(s, want) {
				t.Errorf("hook input lacks %s: %s", want, s)
			}
		}
		if strings.Contains(s, "s3cret") {
			t.Error("the hook saw a secret variable")
		}
	})
}

func TestParseHookAnswer(t *testing.T) {
	for in, want := range map[string]HookAnswer{
		`{"decision":"allow"}`:                         {Decision: "allow"},
		" {\"decision\":\"DENY\",\"message\":\"m\"}\n": {Decision: "deny", Message: "m"},
		`{"decision":"none","message":null}`:           {Decision: "none"},
	} {
		got, err := ParseHookAnswer([]byte(in))
		if err != nil || got != want {
			t.Errorf("%q: %+v %v", in, got, err)
		}
	}
	for _, in := range []string{"", "allow", `{"decision":"yes"}`, `{}`, `{"decision":1}`, `{"decision":"allow","message":3}`, `{"decision":"allow"}{}`, `[]`} {
		if a, err := ParseHookAnswer([]byte(in)); err == nil {
			t.Errorf("%q: accepted %+v", in, a)
		}
	}
}

func FuzzParseHookAnswer(f *testing.F) {
	for _, s := range []string{`{"decision":"allow"}`, `{"decision":"deny","message":"x"}`, `null`, `{"decision":"none"}`, "\x00"} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		a, err := ParseHookAnswer(b)
		if err == nil && a.Decision != "allow" && a.Decision != "deny" && a.Decision != "none" {
			t.Fatalf("accepted %q", a.Decision)
		}
	})
}
