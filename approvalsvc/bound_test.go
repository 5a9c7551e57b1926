package approvalsvc

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/netproxy/netproxy/hostpolicy"
)

// TestPendingReviewsBounded: past approvals.max_pending_per_session a
// session's next review is refused at once with approvals_overloaded (no
// approval is queued), another session still gets its review, the global
// bound holds too, a review whose requester left keeps its slot and stays
// decidable, and deciding frees the slot.
func TestPendingReviewsBounded(t *testing.T) {
	r := newRig(t, withConfig(func(c *Settings) { c.MaxPending, c.MaxPendingPerSession = 3, 2 }))
	ctx, cancel := context.WithCancel(context.Background())
	// Two requests in session s1 open two reviews; the first requester
	// hangs up at once.
	first := make(chan hostpolicy.Decision, 1)
	go func() { first <- r.eval(ctx, hostpolicy.Request{Host: "alpha.test", SessionID: "s1"}) }()
	alpha := r.waitPending("alpha.test")
	cancel()
	<-first
	r.goEval(hostpolicy.Request{Host: "bravo.test", SessionID: "s1"})
	r.waitPending("bravo.test")

	// A third in s1 is refused without a review.
	d := r.eval(context.Background(), hostpolicy.Request{Host: "charlie.test", SessionID: "s1"})
	if d.Verdict != hostpolicy.Deny || d.Reason != ReasonOverloaded || d.Source != hostpolicy.SourceDecider {
		t.Fatalf("over the session bound: %+v", d)
	}
	if !strings.Contains(d.Rationale, "max_pending_per_session") {
		t.Fatalf("rationale %q names no key", d.Rationale)
	}
	if n := r.pendingCount(); n != 2 {
		t.Fatalf("pending = %d, want 2 (the refused request queued nothing)", n)
	}
	// Joining a review in flight adds none: allowed.
	join := r.goEval(hostpolicy.Request{Host: "bravo.test", SessionID: "s1"})

	// Another session still gets a review: 3 in all now.
	other := r.goEval(hostpolicy.Request{Host: "charlie.test", SessionID: "s2"})
	charlie := r.waitPending("charlie.test")
	// The global bound: a fourth review in s3 is refused.
	if d := r.eval(context.Background(), hostpolicy.Request{Host: "evil.test", SessionID: "s3"}); d.Reason != ReasonOverloaded || !strings.Contains(d.Rationale, "approvals.max_pending") {
		t.Fatalf("over the global bound: %+v", d)
	}
	if total, per := r.svc.PendingReviews(); total != 3 || per["s1"] != 2 || per["s2"] != 1 {
		t.Fatalf("PendingReviews = %d %v", total, per)
	}

	// The abandoned review is still decidable, and its amendment counts.
	if err := r.svc.DecideApproval(alpha.ID, OutcomeAllowAlways, ""); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for {
		if total, _ := r.svc.PendingReviews(); total == 2 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("deciding did not free the slot")
		}
		time.Sleep(2 * time.Millisecond)
	}
	if d := r.eval(context.Background(), hostpolicy.Request{Host: "alpha.test", SessionID: "s9"}); !d.Allowed() {
		t.Fatalf("allow_always of an abandoned review did not amend the list: %+v", d)
	}
	// s1 has room again.
	again := r.goEval(hostpolicy.Request{Host: "charlie.test", SessionID: "s1"})
	r.waitPendingIn("charlie.test", "s1")
	for _, a := range r.svc.Approvals(StatusPending) {
		if err := r.svc.DecideApproval(a.ID, OutcomeDeny, ""); err != nil {
			t.Fatal(err)
		}
	}
	for _, ch := range []<-chan hostpolicy.Decision{join, other, again} {
		if d := recv(t, ch); d.Reason != hostpolicy.ReasonNotAllowed {
			t.Fatalf("denied by the reviewer: %+v", d)
		}
	}
	_ = charlie
}

// TestExecApprovalsBounded: exec approvals share the bound.
func TestExecApprovalsBounded(t *testing.T) {
	r := newRig(t, withConfig(func(c *Settings) { c.MaxPending, c.MaxPendingPerSession = 1, 1 }))
	go r.svc.DecideExec(context.Background(), ExecRequest{SessionID: "s1", Command: []string{"rm", "-rf", "x"}, Cwd: "/w"})
	deadline := time.Now().Add(5 * time.Second)
	for r.pendingCount() != 1 {
		if time.Now().After(deadline) {
			t.Fatal("no pending exec approval")
		}
		time.Sleep(2 * time.Millisecond)
	}
	resp, err := r.svc.DecideExec(context.Background(), ExecRequest{SessionID: "s2", Command: []string{"ls"}, Cwd: "/w"})
	if err != nil || resp.Approved || resp.Decision != OutcomeDeny || !strings.HasPrefix(resp.Rationale, "approvals_overloaded") {
		t.Fatalf("over the bound: %+v %v", resp, err)
	}
}

func (r *rig) waitPendingIn(host, session string) Approval {
	r.t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for time.Now().Before(deadline) {
		for _, a := range r.svc.Approvals(StatusPending) {
			if a.Host == host && a.SessionID == session {
				return a
			}
		}
		time.Sleep(2 * time.Millisecond)
	}
	r.t.Fatalf("no pending approval for %s in %s", host, session)
	return Approval{}
}

// TestSettingsValidatedByNew: New refuses what the config loader refuses.
func TestSettingsValidatedByNew(t *testing.T) {
	for _, s := range []Settings{
		{MaxPending: -1},
		{MaxPending: 5, MaxPendingPerSession: 6},
		{Hooks: []Hook{{}}},
	} {
		if _, err := New(Options{Settings: s}); err == nil || !strings.HasPrefix(err.Error(), "approvals.") {
			t.Errorf("%+v: %v", s, err)
		}
	}
}
