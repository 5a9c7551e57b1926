package approvalsvc

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/netproxy/netproxy/hostpolicy"
)

// A requester waits client_wait, then leaves with pending (decision ask)
// and the id while the review stays open; a retry joins it.
func TestClientWaitPendingThenJoin(t *testing.T) {
	r := newRig(t, withConfig(func(c *Settings) { c.ClientWait = 100 * time.Millisecond }))
	start := time.Now()
	d := r.eval(context.Background(), hostpolicy.Request{Host: "alpha.test"})
	if d.Verdict != hostpolicy.Ask || d.ApprovalOutcome != ClientPending || d.Reason != hostpolicy.ReasonNotAllowed ||
		d.Source != hostpolicy.SourceDecider || d.ApprovalID == "" || time.Since(start) < 100*time.Millisecond {
		t.Fatalf("%+v after %v", d, time.Since(start))
	}
	a := r.waitPending("alpha.test")
	if a.ID != d.ApprovalID || a.Waiting != 0 {
		t.Fatalf("pending %+v", a)
	}
	d2 := r.eval(context.Background(), hostpolicy.Request{Host: "alpha.test", HasApprovalWait: true})
	if d2.ApprovalOutcome != ClientPending || d2.ApprovalID != a.ID || r.pendingCount() != 1 {
		t.Fatalf("wait 0 retry: %+v (pending %d)", d2, r.pendingCount())
	}
}

// A gate's denial is immediate and never reported as pending, even with
// x-proxy-approval-wait: 0.
func TestGateDenialIsNotPending(t *testing.T) {
	r := newRig(t, withConfig(func(c *Settings) { c.Policy = "never" }))
	d := r.eval(context.Background(), hostpolicy.Request{Host: "alpha.test", HasApprovalWait: true})
	if d.Verdict != hostpolicy.Deny || d.ApprovalOutcome != ClientDenied {
		t.Fatalf("%+v", d)
	}
}

// allow_once decided after every requester left admits exactly one
// identical request, and only within leftResultTTL.
func TestAllowOnceAfterLeaveAdmitsOne(t *testing.T) {
	var skew atomic.Int64 // the test's clock runs ahead of time by this
	r := newRig(t, func(o *Options) { o.Now = func() time.Time { return time.Now().Add(time.Duration(skew.Load())) } })
	req := hostpolicy.Request{Host: "alpha.test", HasApprovalWait: true}
	d := r.eval(context.Background(), req)
	if d.ApprovalOutcome != ClientPending {
		t.Fatalf("%+v", d)
	}
	if err := r.svc.DecideApproval(d.ApprovalID, OutcomeAllowOnce, ""); err != nil {
		t.Fatal(err)
	}
	waitFor(t, func() bool { return r.pendingCount() == 0 && r.svc.waiters() == 0 })
	if d := r.eval(context.Background(), req); !d.Allowed() || d.ApprovalID == "" {
		t.Fatalf("first retry: %+v", d)
	}
	if d := r.eval(context.Background(), req); d.ApprovalOutcome != ClientPending {
		t.Fatalf("second retry: %+v", d)
	}
	// A second allow_once, then a retry after 61 s: asks again.
	id := r.waitPending("alpha.test").ID
	r.svc.DecideApproval(id, OutcomeAllowOnce, "")
	waitFor(t, func() bool { return r.pendingCount() == 0 && r.svc.waiters() == 0 })
	skew.Store(int64(61 * time.Second))
	if d := r.eval(context.Background(), req); d.ApprovalOutcome != ClientPending || d.ApprovalID == id {
		t.Fatalf("retry after 61 s: %+v", d)
	}
}

// A timeout is never shown as a reviewer's decision; a requester that
// waited through it is told timed_out.
func TestTimeoutNamesNoReviewer(t *testing.T) {
	r := newRig(t, withConfig(func(c *Settings) { c.Timeout = 100 * time.Millisecond }))
	d := r.eval(context.Background(), hostpolicy.Request{Host: "alpha.test"})
	if d.ApprovalOutcome != ClientTimedOut || d.Verdict != hostpolicy.Deny {
		t.Fatalf("%+v", d)
	}
	dec := r.svc.Approvals(StatusDecided)
	if len(dec) != 1 || dec[0].Decision != OutcomeTimeout || dec[0].Reviewer != "" || dec[0].Status != StatusDecided {
		t.Fatalf("decided: %+v", dec)
	}
}

// Exec approvals are not bounded by client_wait: execwrap waits for the
// decision as before.
func TestExecIgnoresClientWait(t *testing.T) {
	r := newRig(t, withConfig(func(c *Settings) { c.ClientWait = 50 * time.Millisecond }))
	ch := make(chan ExecResponse, 1)
	go func() {
		resp, _ := r.svc.DecideExec(context.Background(), ExecRequest{SessionID: "s", Command: []string{"make"}, Cwd: "/w", Reason: "r"})
		ch <- resp
	}()
	var id string
	waitFor(t, func() bool {
		for _, a := range r.svc.Approvals(StatusPending) {
			if a.Kind == KindExec {
				id = a.ID
				return a.Waiting == 1
			}
		}
		return false
	})
	time.Sleep(150 * time.Millisecond)
	select {
	case resp := <-ch:
		t.Fatalf("exec approval answered before a decision: %+v", resp)
	default:
	}
	r.svc.DecideApproval(id, OutcomeAllowOnce, "")
	if resp := <-ch; !resp.Approved {
		t.Fatalf("%+v", resp)
	}
}
