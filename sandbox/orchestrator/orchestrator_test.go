package orchestrator

import (
	"context"
	"errors"
	"github.com/netproxy/netproxy/execcore"
	"github.com/netproxy/netproxy/execcore/approvalpolicy"
	"testing"

	"github.com/netproxy/netproxy/sandbox"
)

// scripted answers approvals in order and records the questions.
type scripted struct {
	answers []Answer
	err     error
	asked   []Question
}

func (s *scripted) Approve(_ context.Context, q Question) (Answer, error) {
	s.asked = append(s.asked, q)
	if s.err != nil {
		return Answer{}, s.err
	}
	if len(s.answers) == 0 {
		return Answer{Decision: "deny"}, nil
	}
	a := s.answers[0]
	s.answers = s.answers[1:]
	return a, nil
}

// attempts returns an AttemptFunc that plays results in order and records
// whether each ran sandboxed.
func attempts(results ...AttemptResult) (AttemptFunc, *[]bool) {
	var sandboxed []bool
	return func(_ context.Context, sb bool) (AttemptResult, error) {
		sandboxed = append(sandboxed, sb)
		r := results[0]
		if len(results) > 1 {
			results = results[1:]
		}
		return r, nil
	}, &sandboxed
}

var (
	ok     = AttemptResult{Result: sandbox.Result{ExitCode: 0}}
	erofs  = AttemptResult{Result: sandbox.Result{ExitCode: 1}, Stderr: []byte("touch: cannot touch '/etc/x': Read-only file system")}
	netDen = AttemptResult{Result: sandbox.Result{ExitCode: 22}, NetworkDenials: []NetworkDenial{{Host: "x.test", Reason: "not_allowed", Decision: "deny"}}}
	yes    = Answer{Approved: true, Decision: "allow_once"}
	no     = Answer{Decision: "deny"}
)

func TestOrchestrator(t *testing.T) {
	cases := []struct {
		name         string
		req          execcore.Requirement
		policy       string
		perms        string
		answers      []Answer
		results      []AttemptResult
		wantSandbox  []bool
		wantAsked    int
		wantRejected string
		wantDenied   bool
	}{
		{name: "forbidden runs nothing", req: execcore.Requirement{Kind: execcore.Forbidden, Reason: "no"}, policy: "on-request", results: []AttemptResult{ok}, wantRejected: "forbidden"},
		{name: "skip runs sandboxed", req: execcore.Requirement{Kind: execcore.Skip}, policy: "on-request", results: []AttemptResult{ok}, wantSandbox: []bool{true}},
		{name: "skip bypass runs unsandboxed", req: execcore.Requirement{Kind: execcore.Skip, BypassSandbox: true}, policy: "on-request", results: []AttemptResult{ok}, wantSandbox: []bool{false}},
		{name: "approval denied runs nothing", req: execcore.Requirement{Kind: execcore.NeedsApproval}, policy: "untrusted", answers: []Answer{no}, results: []AttemptResult{ok}, wantAsked: 1, wantRejected: "approval"},
		{name: "approval granted runs sandboxed", req: execcore.Requirement{Kind: execcore.NeedsApproval}, policy: "untrusted", answers: []Answer{yes}, results: []AttemptResult{ok}, wantSandbox: []bool{true}, wantAsked: 1},
		{name: "approved escalation runs unsandboxed", req: execcore.Requirement{Kind: execcore.NeedsApproval}, policy: "on-request", perms: "require_escalated", answers: []Answer{yes}, results: []AttemptResult{ok}, wantSandbox: []bool{false}, wantAsked: 1},
		{name: "unapproved escalation stays sandboxed", req: execcore.Requirement{Kind: execcore.Skip}, policy: "on-request", perms: "require_escalated", results: []AttemptResult{ok}, wantSandbox: []bool{true}},
		{name: "on-request denial is reported, no retry", req: execcore.Requirement{Kind: execcore.Skip}, policy: "on-request", results: []AttemptResult{erofs}, wantSandbox: []bool{true}, wantDenied: true},
		{name: "never denial is reported, no retry", req: execcore.Requirement{Kind: execcore.Skip}, policy: "never", results: []AttemptResult{erofs}, wantSandbox: []bool{true}, wantDenied: true},
		{name: "untrusted denial asks and retries", req: execcore.Requirement{Kind: execcore.Skip}, policy: "untrusted", answers: []Answer{yes}, results: []AttemptResult{erofs, ok}, wantSandbox: []bool{true, false}, wantAsked: 1, wantDenied: true},
		{name: "untrusted denial, retry refused", req: execcore.Requirement{Kind: execcore.Skip}, policy: "untrusted", answers: []Answer{no}, results: []AttemptResult{erofs}, wantSandbox: []bool{true}, wantAsked: 1, wantDenied: true},
		{name: "already approved retries without asking", req: execcore.Requirement{Kind: execcore.NeedsApproval}, policy: "untrusted", answers: []Answer{yes}, results: []AttemptResult{erofs, ok}, wantSandbox: []bool{true, false}, wantAsked: 1, wantDenied: true},
		{name: "granular sandbox_approval retries", req: execcore.Requirement{Kind: execcore.Skip}, policy: "granular:sandbox_approval", answers: []Answer{yes}, results: []AttemptResult{erofs, ok}, wantSandbox: []bool{true, false}, wantAsked: 1, wantDenied: true},
		{name: "granular without sandbox_approval does not", req: execcore.Requirement{Kind: execcore.Skip}, policy: "granular:rules", results: []AttemptResult{erofs}, wantSandbox: []bool{true}, wantDenied: true},
		{name: "network denial is never retried unsandboxed", req: execcore.Requirement{Kind: execcore.Skip}, policy: "untrusted", answers: []Answer{yes}, results: []AttemptResult{netDen}, wantSandbox: []bool{true}, wantDenied: true},
		{name: "timeout is not a denial", req: execcore.Requirement{Kind: execcore.Skip}, policy: "untrusted", results: []AttemptResult{{Result: sandbox.Result{ExitCode: 124, TimedOut: true}, Stderr: []byte("permission denied")}}, wantSandbox: []bool{true}},
		{name: "denied_by_user ends the run", req: execcore.Requirement{Kind: execcore.Skip}, policy: "untrusted", results: []AttemptResult{{Result: sandbox.Result{ExitCode: 137}, DeniedByUser: true, Stderr: []byte("permission denied")}}, wantSandbox: []bool{true}},
		{name: "unsandboxed failure is not a denial", req: execcore.Requirement{Kind: execcore.Skip, BypassSandbox: true}, policy: "untrusted", results: []AttemptResult{erofs}, wantSandbox: []bool{false}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			pol, err := approvalpolicy.Parse(c.policy)
			if err != nil {
				t.Fatal(err)
			}
			ap := &scripted{answers: c.answers}
			att, ran := attempts(c.results...)
			out, err := Run(context.Background(), Plan{Requirement: c.req, Policy: pol, SandboxPermissions: c.perms,
				Confining: true, Approver: ap, Attempt: att})
			if err != nil {
				t.Fatal(err)
			}
			if len(*ran) != len(c.wantSandbox) {
				t.Fatalf("attempts sandboxed=%v, want %v", *ran, c.wantSandbox)
			}
			for i := range *ran {
				if (*ran)[i] != c.wantSandbox[i] {
					t.Fatalf("attempts sandboxed=%v, want %v", *ran, c.wantSandbox)
				}
			}
			if len(ap.asked) != c.wantAsked {
				t.Fatalf("asked %d times (%+v), want %d", len(ap.asked), ap.asked, c.wantAsked)
			}
			if out.RejectedBy != c.wantRejected {
				t.Fatalf("rejected by %q, want %q", out.RejectedBy, c.wantRejected)
			}
			if out.Denied != c.wantDenied {
				t.Fatalf("denied %v (%v), want %v", out.Denied, out.Evidence, c.wantDenied)
			}
			if len(out.Attempts) != len(c.wantSandbox) {
				t.Fatalf("records %d", len(out.Attempts))
			}
		})
	}
}

func TestRetryQuestion(t *testing.T) {
	ap := &scripted{answers: []Answer{yes}}
	att, _ := attempts(erofs, ok)
	pol, _ := approvalpolicy.Parse("untrusted")
	if _, err := Run(context.Background(), Plan{Requirement: execcore.Requirement{Kind: execcore.Skip}, Policy: pol, Confining: true, Approver: ap, Attempt: att}); err != nil {
		t.Fatal(err)
	}
	if len(ap.asked) != 1 || !ap.asked[0].Retry || ap.asked[0].Reason != RetryReason {
		t.Fatalf("asked %+v", ap.asked)
	}
}

func TestApproverErrorFailsClosed(t *testing.T) {
	ap := &scripted{err: errors.New("no reviewer")}
	att, ran := attempts(ok)
	pol, _ := approvalpolicy.Parse("on-request")
	out, err := Run(context.Background(), Plan{Requirement: execcore.Requirement{Kind: execcore.NeedsApproval}, Policy: pol, Confining: true, Approver: ap, Attempt: att})
	if err != nil {
		t.Fatal(err)
	}
	if len(*ran) != 0 || out.RejectedBy != "approval" {
		t.Fatalf("ran %v rejected %q", *ran, out.RejectedBy)
	}
}

func TestWantsNoSandboxApproval(t *testing.T) {
	for in, want := range map[string]bool{
		"never": false, "on-request": false, "untrusted": true,
		"granular": false, "granular:rules": false, "granular:sandbox_approval,rules": true,
	} {
		p, err := approvalpolicy.Parse(in)
		if err != nil {
			t.Fatal(err)
		}
		if got := wantsNoSandboxApproval(p); got != want {
			t.Errorf("wantsNoSandboxApproval(%q) = %v, want %v", in, got, want)
		}
	}
}
