package approvalsvc

import (
	"context"
	"os"
	"sync/atomic"
	"testing"

	"github.com/netproxy/netproxy/guardian"
	"github.com/netproxy/netproxy/hostpolicy"
)

// fixedReviewer answers every review with one verdict and counts calls.
type fixedReviewer struct {
	v     guardian.Verdict
	calls atomic.Int32
}

func (f *fixedReviewer) Review(context.Context, guardian.ReviewRequest) (guardian.Verdict, error) {
	f.calls.Add(1)
	return f.v, nil
}

// TestGuardianScope: a Guardian allow_session is cached for the session
// key; a verdict outside allow_once/allow_session/deny (a reviewer that
// bypassed the parser) denies and never amends the policy.
func TestGuardianScope(t *testing.T) {
	ctx := context.Background()
	sess := &fixedReviewer{v: guardian.Verdict{Decision: guardian.DecisionAllowSession, Risk: guardian.RiskLow}}
	r := newRig(t, func(o *Options) { o.Guardian = sess; o.Settings.Reviewer = "guardian" })
	req := hostpolicy.Request{Host: "alpha.test", SessionID: "s", EnvironmentID: "env"}
	if d := r.eval(ctx, req); !d.Allowed() || d.Override != "guardian:allow_session" {
		t.Fatalf("allow_session: %+v", d)
	}
	if d := r.eval(ctx, req); !d.Allowed() || d.Override != "cache:allow_session" || sess.calls.Load() != 1 {
		t.Fatalf("second request: %+v after %d calls, want a cache hit", d, sess.calls.Load())
	}

	for _, bad := range []string{"allow_always", "deny_always", "maybe"} {
		rev := &fixedReviewer{v: guardian.Verdict{Decision: bad}}
		r := newRig(t, func(o *Options) { o.Guardian = rev; o.Settings.Reviewer = "guardian" })
		if d := r.eval(ctx, hostpolicy.Request{Host: "bravo.test", SessionID: "s", EnvironmentID: "env"}); d.Allowed() {
			t.Fatalf("%s: allowed %+v", bad, d)
		}
		if d := r.eval(ctx, hostpolicy.Request{Host: "bravo.test", SessionID: "s", EnvironmentID: "env"}); d.Allowed() || rev.calls.Load() != 2 {
			t.Fatalf("%s: second request %+v, calls %d (a deny_always must not be cached from a Guardian)", bad, d, rev.calls.Load())
		}
		if _, err := os.Stat(r.rules); err == nil {
			t.Fatalf("%s: a rules file was written", bad)
		}
	}
}
