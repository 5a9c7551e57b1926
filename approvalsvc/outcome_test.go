package approvalsvc

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/netproxy/netproxy/attribution"
	"github.com/netproxy/netproxy/execcore/execpolicy"
	"github.com/netproxy/netproxy/guardian"
	"github.com/netproxy/netproxy/hostpolicy"
	"github.com/netproxy/netproxy/internal/observe"
	"github.com/netproxy/netproxy/metrics/audit"
)

func (r *rig) decideVia(req hostpolicy.Request, outcome string) hostpolicy.Decision {
	r.t.Helper()
	ch := r.goEval(req)
	a := r.waitPending(strings.ToLower(req.Host))
	if err := r.svc.DecideApproval(a.ID, outcome, ""); err != nil {
		r.t.Fatal(err)
	}
	return recv(r.t, ch)
}

func TestAllowAlwaysAmendsAndPersistsOnce(t *testing.T) {
	r := newRig(t)
	ctx := context.Background()
	if d := r.decideVia(hostpolicy.Request{Host: "alpha.test", Port: 80}, OutcomeAllowAlways); !d.Allowed() || d.Override != "user:allow_always" {
		t.Fatalf("%+v", d)
	}
	// Live allow list: any port and protocol, decided by the baseline.
	d := r.eval(ctx, hostpolicy.Request{Host: "alpha.test", Port: 9999, Protocol: hostpolicy.ProtoSOCKS5})
	if !d.Allowed() || d.Source != hostpolicy.SourceBaseline {
		t.Fatalf("other port after allow_always: %+v", d)
	}
	b, err := os.ReadFile(r.rules)
	if err != nil {
		t.Fatal(err)
	}
	want := execpolicy.FormatNetworkRule(execpolicy.NetworkRule{Host: "alpha.test", Protocol: "http", Decision: "allow", Justification: "Allow http access to alpha.test"})
	if strings.TrimSpace(string(b)) != want {
		t.Fatalf("rules file:\n%s\nwant:\n%s", b, want)
	}
	// The same amendment again (another session) is not duplicated.
	r.svc.amendNetwork(netReview{host: "alpha.test", proto: hostpolicy.ProtoHTTP}, hostpolicy.Allow)
	b2, _ := os.ReadFile(r.rules)
	if !bytes.Equal(b, b2) {
		t.Fatalf("rule duplicated:\n%s", b2)
	}
	// The file loads back (it is what `netproxy serve` reads at start).
	pol, err := execpolicy.LoadDirs(filepath.Dir(r.rules))
	if err != nil {
		t.Fatal(err)
	}
	if nr := pol.NetworkRules(); len(nr) != 1 || nr[0].Host != "alpha.test" || nr[0].Decision != "allow" {
		t.Fatalf("loaded back: %+v", nr)
	}
}

func TestDenyAlwaysAndOwnerEvents(t *testing.T) {
	r := newRig(t)
	e := r.register("s", "env")
	events, cancel, _ := r.reg.Subscribe(e.ID)
	defer cancel()
	req := hostpolicy.Request{Host: "alpha.test", Port: 80, ExecutionID: e.ID, SessionID: "s", EnvironmentID: "env"}
	d := r.decideVia(req, OutcomeDenyAlways)
	if d.Allowed() || d.Reason != hostpolicy.ReasonNotAllowed || d.Source != hostpolicy.SourceDecider || d.Verdict != hostpolicy.Deny {
		t.Fatalf("%+v", d)
	}
	select {
	case ev := <-events:
		if ev.Type != attribution.EventDeniedByUser || ev.Host != "alpha.test" || ev.Port != 80 || ev.Reason != "not_allowed" || ev.Source != "decider" {
			t.Fatalf("event %+v", ev)
		}
	case <-time.After(2 * time.Second):
		t.Fatal("no denied_by_user event")
	}
	// Live deny list: another port is denied by the baseline, no prompt.
	d = r.eval(context.Background(), hostpolicy.Request{Host: "alpha.test", Port: 443, Protocol: hostpolicy.ProtoHTTPS})
	if d.Reason != hostpolicy.ReasonDenied || r.pendingCount() != 0 {
		t.Fatalf("other port after deny_always: %+v", d)
	}
	b, _ := os.ReadFile(r.rules)
	if !strings.Contains(string(b), `network_rule(host="alpha.test", protocol="http", decision="deny"`) {
		t.Fatalf("rules file: %s", b)
	}
	// Plain deny: not cached, the next request asks again; owner told denied_by_user.
	r2 := newRig(t)
	if d := r2.decideVia(hostpolicy.Request{Host: "bravo.test"}, OutcomeDeny); d.Allowed() {
		t.Fatal(d)
	}
	ch := r2.goEval(hostpolicy.Request{Host: "bravo.test"})
	a := r2.waitPending("bravo.test")
	r2.svc.DecideApproval(a.ID, OutcomeAbort, "")
	if d := recv(t, ch); d.Allowed() {
		t.Fatal("abort allowed")
	}
}

func TestAmendmentHostMustMatch(t *testing.T) {
	r := newRig(t)
	ch := r.goEval(hostpolicy.Request{Host: "alpha.test"})
	a := r.waitPending("alpha.test")
	if err := r.svc.DecideApproval(a.ID, OutcomeAllowAlways, "evil.test"); !errors.Is(err, ErrHostMismatch) {
		t.Fatalf("mismatch: %v", err)
	}
	if r.pendingCount() != 1 {
		t.Fatal("a refused amendment must leave the approval pending")
	}
	if err := r.svc.DecideApproval(a.ID, OutcomeAllowAlways, "ALPHA.test.:443"); err != nil {
		t.Fatalf("normalised match refused: %v", err)
	}
	if d := recv(t, ch); !d.Allowed() {
		t.Fatal(d)
	}
	if _, err := os.Stat(r.rules); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(r.rules); strings.Contains(string(b), "evil") {
		t.Fatalf("wrong host persisted: %s", b)
	}
}

func TestUserReviewTimeoutDenies(t *testing.T) {
	r := newRig(t, withConfig(func(c *Settings) { c.Timeout = 150 * time.Millisecond }))
	start := time.Now()
	d := r.eval(context.Background(), hostpolicy.Request{Host: "alpha.test"})
	if d.Allowed() || d.Override != "user:timeout" || time.Since(start) < 150*time.Millisecond {
		t.Fatalf("%+v after %v", d, time.Since(start))
	}
	if r.pendingCount() != 0 {
		t.Fatal("timed-out approval still pending")
	}
	dec := r.svc.Approvals(StatusDecided)
	if len(dec) != 1 || dec[0].Decision != OutcomeTimeout || dec[0].DecidedAt == "" {
		t.Fatalf("decided list: %+v", dec)
	}
	if err := r.svc.DecideApproval(dec[0].ID, OutcomeAllowOnce, ""); !errors.Is(err, ErrNotFound) {
		t.Fatalf("deciding a timed-out approval: %v", err)
	}
}

func TestGuardianRouting(t *testing.T) {
	dir := t.TempDir()
	script := filepath.Join(dir, "g.star")
	os.WriteFile(script, []byte(`
def review(request):
    if request["host"] == "alpha.test":
        return {"decision": "allow", "rationale": "ok for " + request["cwd"], "risk": "low"}
    return {"decision": "deny", "rationale": "not needed", "risk": "high"}
`), 0o644)
	g, err := guardian.NewStarlark(script, guardian.StarlarkOptions{Timeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	useGuardian := func(o *Options) { o.Guardian = g; o.Settings.Reviewer = "guardian" }
	r := newRig(t, useGuardian)
	e := r.register("s", "env")
	events, cancel, _ := r.reg.Subscribe(e.ID)
	defer cancel()
	ctx := context.Background()
	d := r.eval(ctx, hostpolicy.Request{Host: "alpha.test", ExecutionID: e.ID, SessionID: "s", EnvironmentID: "env"})
	if !d.Allowed() || d.Override != "guardian:allow_once" || d.Rationale != "ok for /w" {
		t.Fatalf("guardian allow: %+v", d)
	}
	d = r.eval(ctx, hostpolicy.Request{Host: "bravo.test", ExecutionID: e.ID, SessionID: "s", EnvironmentID: "env"})
	if d.Allowed() || d.Reason != hostpolicy.ReasonNotAllowed || d.Source != hostpolicy.SourceDecider || d.Rationale != "not needed" {
		t.Fatalf("guardian deny: %+v", d)
	}
	if ev := <-events; ev.Type != attribution.EventDeniedByPolicy {
		t.Fatalf("guardian deny event %+v", ev)
	}
	// untrusted routes to the user even with reviewer guardian.
	r2 := newRig(t, useGuardian, withConfig(func(c *Settings) { c.Policy = "untrusted" }))
	ch := r2.goEval(hostpolicy.Request{Host: "alpha.test"})
	a := r2.waitPending("alpha.test")
	r2.svc.DecideApproval(a.ID, OutcomeDeny, "")
	recv(t, ch)
	// A registration narrowing the reviewer to user also routes to the user.
	r3 := newRig(t, useGuardian)
	e3, _, _ := r3.reg.Register(attribution.ExecutionSpec{SessionID: "s", EnvironmentID: "env", Reviewer: "user"})
	ch = r3.goEval(hostpolicy.Request{Host: "alpha.test", ExecutionID: e3.ID, SessionID: "s", EnvironmentID: "env"})
	a = r3.waitPending("alpha.test")
	r3.svc.DecideApproval(a.ID, OutcomeDeny, "")
	recv(t, ch)
}

func TestGuardianFailuresDeny(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var req guardian.ReviewRequest
		json.NewDecoder(r.Body).Decode(&req)
		switch req.Host {
		case "alpha.test":
			<-r.Context().Done()
		case "bravo.test":
			io.WriteString(w, "not a verdict")
		case "charlie.test":
			http.Error(w, "boom", 500)
		}
	}))
	defer srv.Close()
	g, _ := guardian.NewWebhook(srv.URL, guardian.WebhookOptions{Timeout: 200 * time.Millisecond})
	r := newRig(t, func(o *Options) { o.Guardian = g; o.Settings.Reviewer = "guardian" })
	for host, outcome := range map[string]string{"alpha.test": "guardian:timeout", "bravo.test": "guardian:error", "charlie.test": "guardian:error"} {
		d := r.eval(context.Background(), hostpolicy.Request{Host: host})
		if d.Allowed() || d.Override != outcome || !strings.HasPrefix(d.Rationale, "guardian: ") {
			t.Errorf("%s: %+v", host, d)
		}
	}
}

// recordingAudit is a real audit writer on a temp file.
func TestMetricsAndAuditHooks(t *testing.T) {
	dir := t.TempDir()
	w, err := audit.Open(filepath.Join(dir, "audit.jsonl"), 16, nil)
	if err != nil {
		t.Fatal(err)
	}
	m := &countingMetrics{}
	r := newRig(t, func(o *Options) { o.Audit = w; o.Metrics = m })
	ch := r.goEval(hostpolicy.Request{Host: "alpha.test"})
	a := r.waitPending("alpha.test")
	if got := m.pending(); got != 1 {
		t.Fatalf("pending gauge %d while waiting", got)
	}
	r.svc.DecideApproval(a.ID, OutcomeAllowOnce, "")
	recv(t, ch)
	if m.pending() != 0 || m.resolved() != "network/user/allow_once" {
		t.Fatalf("metrics: pending %d resolved %q", m.pending(), m.resolved())
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	w.Close(ctx)
	b, _ := os.ReadFile(filepath.Join(dir, "audit.jsonl"))
	if !strings.Contains(string(b), `"approval_resolved"`) || !strings.Contains(string(b), "alpha.test") || !strings.Contains(string(b), a.ID) {
		t.Fatalf("audit: %s", b)
	}
}

// countingMetrics records the metric calls (the Prometheus side is tested
// in metrics/).
type countingMetrics struct {
	mu   sync.Mutex
	gate int
	last string
}

func (c *countingMetrics) ApprovalPending(d int) { c.mu.Lock(); c.gate += d; c.mu.Unlock() }
func (c *countingMetrics) ApprovalResolved(kind, reviewer, outcome string, _ time.Duration) {
	c.mu.Lock()
	c.last = kind + "/" + reviewer + "/" + outcome
	c.mu.Unlock()
}
func (c *countingMetrics) pending() int     { c.mu.Lock(); defer c.mu.Unlock(); return c.gate }
func (c *countingMetrics) resolved() string { c.mu.Lock(); defer c.mu.Unlock(); return c.last }

func TestAdminAPI(t *testing.T) {
	r := newRig(t)
	api := httptest.NewServer(r.svc.APIHandler())
	defer api.Close()
	get := func(path string) (int, map[string]any) {
		resp, err := http.Get(api.URL + path)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var m map[string]any
		json.NewDecoder(resp.Body).Decode(&m)
		return resp.StatusCode, m
	}
	post := func(path, body string) int {
		resp, err := http.Post(api.URL+path, "application/json", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	e := r.register("s", "env")
	ch := r.goEval(hostpolicy.Request{Host: "alpha.test", Port: 8080, ExecutionID: e.ID, SessionID: "s", EnvironmentID: "env"})
	a := r.waitPending("alpha.test")
	code, m := get("/api/approvals?status=pending")
	list, _ := m["approvals"].([]any)
	if code != 200 || len(list) != 1 {
		t.Fatalf("list: %d %v", code, m)
	}
	entry := list[0].(map[string]any)
	for _, k := range []string{"id", "kind", "status", "session_id", "environment_id", "execution_id", "command", "cwd", "host", "protocol", "port", "reason", "created_at", "decided_at", "decision", "reviewer"} {
		if _, ok := entry[k]; !ok {
			t.Errorf("approval lacks %q: %v", k, entry)
		}
	}
	if entry["kind"] != "network" || entry["status"] != "pending" || entry["port"] != float64(8080) || entry["execution_id"] != e.ID {
		t.Fatalf("entry %v", entry)
	}
	if code, _ := get("/api/approvals?status=bogus"); code != 400 {
		t.Fatalf("bad status: %d", code)
	}
	if code, _ := get("/api/approvals/" + a.ID); code != 200 {
		t.Fatalf("show: %d", code)
	}
	if c := post("/api/approvals/nope/decision", `{"decision":"deny"}`); c != 404 {
		t.Fatalf("unknown id: %d", c)
	}
	for _, body := range []string{`{"decision":"maybe"}`, `{"decision":"deny","x":1}`, `not json`, `{"decision":"allow_always","host":"evil.test"}`} {
		if c := post("/api/approvals/"+a.ID+"/decision", body); c != 400 {
			t.Fatalf("%s: %d", body, c)
		}
	}
	if c := post("/api/approvals/"+a.ID+"/decision", `{"decision":"allow_session"}`); c != 200 {
		t.Fatalf("decision: %d", c)
	}
	if d := recv(t, ch); !d.Allowed() {
		t.Fatal(d)
	}
	if c := post("/api/approvals/"+a.ID+"/decision", `{"decision":"deny"}`); c != 404 {
		t.Fatalf("second decision: %d", c)
	}
	_, m = get("/api/approvals?status=decided")
	if list, _ := m["approvals"].([]any); len(list) != 1 || list[0].(map[string]any)["decision"] != "allow_session" || list[0].(map[string]any)["reviewer"] != "user" {
		t.Fatalf("decided: %v", m)
	}
	// Blocked ring: fed through the DecisionSink interface.
	var sink observe.DecisionSink = r.svc
	for i := range BlockedCapacity + 5 {
		sink.ObserveDecision(observe.DecisionEvent{Time: time.Now(), Request: hostpolicy.Request{Host: "denied.test", Port: uint16(i), Protocol: hostpolicy.ProtoHTTP, Method: "GET", Client: "127.0.0.1:1"},
			Decision: hostpolicy.Decision{Verdict: hostpolicy.Deny, Reason: hostpolicy.ReasonDenied, Source: hostpolicy.SourceBaseline, Host: "denied.test", Port: uint16(i)}})
	}
	sink.ObserveDecision(observe.DecisionEvent{Decision: hostpolicy.Decision{Verdict: hostpolicy.Allow, Host: "allowed.test"}})
	_, m = get("/api/blocked")
	bl, _ := m["blocked"].([]any)
	if len(bl) != BlockedCapacity {
		t.Fatalf("blocked: %d entries", len(bl))
	}
	first := bl[0].(map[string]any)
	if first["port"] != float64(BlockedCapacity+4) || first["reason"] != "denied" || first["source"] != "baseline_policy" || first["method"] != "GET" {
		t.Fatalf("newest blocked entry %v", first)
	}
}

func TestEventsPublished(t *testing.T) {
	r := newRig(t)
	evs, cancel := r.svc.Subscribe(16)
	defer cancel()
	ch := r.goEval(hostpolicy.Request{Host: "alpha.test"})
	a := r.waitPending("alpha.test")
	r.svc.DecideApproval(a.ID, OutcomeDeny, "")
	recv(t, ch)
	r.svc.ObserveDecision(observe.DecisionEvent{Decision: hostpolicy.Decision{Verdict: hostpolicy.Deny, Reason: hostpolicy.ReasonNotAllowed, Host: "alpha.test"}})
	var names []string
	for len(names) < 3 {
		select {
		case ev := <-evs:
			names = append(names, ev.Name)
			if !json.Valid(ev.Data) || !strings.Contains(string(ev.Data), "alpha.test") {
				t.Fatalf("event data %s", ev.Data)
			}
		case <-time.After(2 * time.Second):
			t.Fatalf("events so far: %v", names)
		}
	}
	if strings.Join(names, ",") != "approval_created,approval_decided,blocked" {
		t.Fatalf("events %v", names)
	}
}

func TestExecApprovals(t *testing.T) {
	r := newRig(t)
	ctl := httptest.NewServer(r.svc.ControlHandler())
	defer ctl.Close()
	ask := func(body string) (int, ExecResponse) {
		resp, err := http.Post(ctl.URL+"/v1/approvals", "application/json", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var er ExecResponse
		json.NewDecoder(resp.Body).Decode(&er)
		return resp.StatusCode, er
	}
	type reply struct {
		code int
		r    ExecResponse
	}
	goAsk := func(body string) <-chan reply {
		ch := make(chan reply, 1)
		go func() { c, er := ask(body); ch <- reply{c, er} }()
		return ch
	}
	waitExec := func() Approval {
		var got Approval
		waitFor(t, func() bool {
			for _, a := range r.svc.Approvals(StatusPending) {
				if a.Kind == KindExec {
					got = a
					return true
				}
			}
			return false
		})
		return got
	}
	body := `{"session_id":"s","environment_id":"env","command":["rm","-rf","build"],"cwd":"/w","sandbox_permissions":"require_escalated","reason":"needs approval","proposed_amendment":["rm","-rf"]}`
	ch := goAsk(body)
	a := waitExec()
	if a.Host != "" || a.Cwd != "/w" || len(a.Command) != 3 || a.SandboxPermissions != "require_escalated" || a.Reason != "needs approval" {
		t.Fatalf("pending exec approval %+v", a)
	}
	r.svc.DecideApproval(a.ID, OutcomeAllowSession, "")
	if rep := <-ch; rep.code != 200 || !rep.r.Approved || rep.r.Decision != "allow_session" || rep.r.Reviewer != "user" {
		t.Fatalf("%+v", rep)
	}
	// Same identity: served from the session cache.
	if code, er := ask(body); code != 200 || !er.Approved || er.Reviewer != "cache" {
		t.Fatalf("cached: %d %+v", code, er)
	}
	// Another shell running the script is another identity (SPEC §6.3).
	withShell := strings.Replace(body, `"cwd"`, `"shell":["/bin/sh","-c"],"cwd"`, 1)
	ch = goAsk(withShell)
	a = waitExec()
	r.svc.DecideApproval(a.ID, OutcomeAllowSession, "")
	if rep := <-ch; !rep.r.Approved || rep.r.Reviewer != "user" {
		t.Fatalf("another shell was served from the cache: %+v", rep)
	}
	if code, er := ask(withShell); code != 200 || er.Reviewer != "cache" {
		t.Fatalf("same shell: %d %+v", code, er)
	}
	// Another cwd is another identity.
	ch = goAsk(strings.Replace(body, `"/w"`, `"/other"`, 1))
	a = waitExec()
	r.svc.DecideApproval(a.ID, OutcomeAllowAlways, "")
	if rep := <-ch; !rep.r.Approved || !rep.r.AmendmentPersisted {
		t.Fatalf("%+v", rep)
	}
	if b, _ := os.ReadFile(r.rules); !strings.Contains(string(b), `prefix_rule(pattern=["rm", "-rf"], decision="allow")`) {
		t.Fatalf("rules: %s", b)
	}
	// Bad requests.
	for _, bad := range []string{`{}`, `{"command":"ls"}`, `{"command":["ls"],"sandbox_permissions":"root"}`, `{"command":["ls"],"bogus":1}`} {
		if code, _ := ask(bad); code != 400 {
			t.Errorf("%s: %d", bad, code)
		}
	}
	// An unknown execution id denies without review.
	if code, er := ask(`{"session_id":"s","environment_id":"env","execution_id":"exec_gone","command":["ls"]}`); code != 200 || er.Approved || er.Reviewer != "policy" {
		t.Fatalf("unknown execution: %+v", er)
	}
	// A hook decides exec approvals too.
	hook, _ := countingHook(t, `{"decision":"deny","message":"no rm"}`)
	r2 := newRig(t, withHooks(5*time.Second, hook))
	er, err := r2.svc.DecideExec(context.Background(), ExecRequest{SessionID: "s", EnvironmentID: "e", Command: []string{"rm", "x"}})
	if err != nil || er.Approved || er.Reviewer != "hook" || er.Rationale != "no rm" {
		t.Fatalf("hook exec: %+v %v", er, err)
	}
}
