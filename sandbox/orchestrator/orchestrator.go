// Package orchestrator runs one command through approval → first-attempt
// sandbox → attempt → denial detection → escalated retry (SPEC §6.4,
// reference codex-execpolicy.md §7).
//
// It owns the decisions between attempts (Run) and what one attempt keeps
// when it runs unsandboxed (Attempter: --network none keeps the sandbox, a
// git repository that names a program refuses a rule's bypass), and it
// registers a proxied attempt with netproxy; the caller supplies an
// Approver (netproxy's control API, a TTY prompt, or fail closed), the
// flags and the output (cmd/execwrap). Tests use any Attempt function.
// It must never run a forbidden command, run anything after a denied
// approval or a denied_by_user event, or retry without the sandbox where the
// approval policy does not allow it.
package orchestrator

import (
	"context"
	"errors"
	"fmt"
	"github.com/netproxy/netproxy/execcore"
	"github.com/netproxy/netproxy/execcore/approvalpolicy"

	"github.com/netproxy/netproxy/sandbox"
)

// wantsNoSandboxApproval is the reference's gate for an escalated retry:
// untrusted yes; granular its sandbox_approval flag; never and on-request no.
func wantsNoSandboxApproval(p approvalpolicy.Policy) bool {
	switch p.Kind {
	case approvalpolicy.Untrusted:
		return true
	case approvalpolicy.Granular:
		return p.SandboxApproval
	}
	return false
}

// Question is one approval request.
type Question struct {
	Reason string
	Retry  bool // a retry without the sandbox after a denial
}

// Answer is a decided approval.
type Answer struct {
	Approved bool
	Decision string // as the reviewer said it
	Reviewer string
	Message  string
}

// Approver answers approval questions; an error means no reviewer could be
// asked, which the orchestrator treats as a denial.
type Approver interface {
	Approve(ctx context.Context, q Question) (Answer, error)
}

// NetworkDenial is one blocked network request of an attempt (from the
// execution's event stream).
type NetworkDenial struct {
	Host     string `json:"host"`
	Port     uint16 `json:"port"`
	Protocol string `json:"protocol"`
	Reason   string `json:"reason"`
	Source   string `json:"source"`
	Decision string `json:"decision"`
}

// AttemptResult is what one attempt produced.
type AttemptResult struct {
	Result         sandbox.Result
	Stdout, Stderr []byte // captured (capped) output for the heuristics
	NetworkDenials []NetworkDenial
	DeniedByUser   bool // a denied_by_user event stopped the command
	ExecutionID    string
}

// AttemptFunc runs the command once, sandboxed or not.
type AttemptFunc func(ctx context.Context, sandboxed bool) (AttemptResult, error)

// Plan is one orchestrated run.
type Plan struct {
	Requirement        execcore.Requirement // execcore's verdict (SPEC §6.3)
	Policy             approvalpolicy.Policy
	SandboxPermissions string // use_default | require_escalated
	Confining          bool   // the sandbox kind builds a sandbox
	Approver           Approver
	Attempt            AttemptFunc
}

// AttemptRecord summarises one attempt for the result's `attempts`.
type AttemptRecord struct {
	Sandboxed   bool     `json:"sandboxed"`
	Tier        string   `json:"tier"`
	ExitCode    int      `json:"exit_code"`
	TimedOut    bool     `json:"timed_out"`
	Denied      bool     `json:"denied"`
	Evidence    []string `json:"evidence,omitempty"`
	ExecutionID string   `json:"execution_id,omitempty"`
}

// ApprovalRecord is one approval asked during the run.
type ApprovalRecord struct {
	Retry    bool   `json:"retry"`
	Reason   string `json:"reason"`
	Decision string `json:"decision"`
	Reviewer string `json:"reviewer,omitempty"`
}

// Outcome is the whole run.
type Outcome struct {
	// Rejected is set when nothing (more) ran because of the policy or a
	// reviewer; RejectedBy says which ("forbidden", "approval").
	Rejected   string
	RejectedBy string
	Final      *AttemptResult // the last attempt, nil when none ran
	Denied     bool           // the last sandboxed attempt looked denied
	Evidence   []string
	Attempts   []AttemptRecord
	Approvals  []ApprovalRecord
}

// RetryReason is the reference's constant question for an escalated retry.
const RetryReason = "command failed; retry without sandbox?"

// Run executes the plan.
func Run(ctx context.Context, p Plan) (Outcome, error) {
	var out Outcome
	if p.Attempt == nil || p.Approver == nil {
		return out, errors.New("orchestrator: plan needs an Attempt and an Approver")
	}
	req := p.Requirement
	alreadyApproved := false
	switch req.Kind {
	case execcore.Forbidden:
		out.Rejected, out.RejectedBy = req.Reason, "forbidden"
		return out, nil
	case execcore.NeedsApproval:
		ans := ask(ctx, p.Approver, Question{Reason: req.Reason}, &out)
		if !ans.Approved {
			out.Rejected, out.RejectedBy = rejectionText(ans), "approval"
			return out, nil
		}
		alreadyApproved = true
	case execcore.Skip:
	default:
		return out, fmt.Errorf("orchestrator: unknown requirement kind %q", req.Kind)
	}

	sandboxed := p.Confining
	if req.Kind == execcore.Skip && req.BypassSandbox {
		sandboxed = false
	}
	if p.SandboxPermissions == "require_escalated" && alreadyApproved {
		sandboxed = false
	}
	res, err := attempt(ctx, p, sandboxed, &out)
	if err != nil {
		return out, err
	}
	if res.DeniedByUser || res.Result.TimedOut || !sandboxed {
		return out, nil
	}
	d := detectDenial(res)
	out.Denied, out.Evidence = d.Denied, d.Evidence
	last := &out.Attempts[len(out.Attempts)-1]
	last.Denied, last.Evidence = d.Denied, d.Evidence
	if !d.Denied {
		return out, nil
	}
	// Network denials are decided by netproxy (and its approval service, per
	// host); running without the sandbox would not change its answer.
	if len(res.NetworkDenials) > 0 {
		return out, nil
	}
	if !wantsNoSandboxApproval(p.Policy) {
		return out, nil
	}
	if !alreadyApproved && p.Policy.Kind != approvalpolicy.Never {
		ans := ask(ctx, p.Approver, Question{Reason: RetryReason, Retry: true}, &out)
		if !ans.Approved {
			return out, nil
		}
	}
	if _, err := attempt(ctx, p, false, &out); err != nil {
		return out, err
	}
	return out, nil
}

func ask(ctx context.Context, a Approver, q Question, out *Outcome) Answer {
	ans, err := a.Approve(ctx, q)
	if err != nil {
		ans = Answer{Approved: false, Decision: "unavailable", Message: err.Error()}
	}
	out.Approvals = append(out.Approvals, ApprovalRecord{Retry: q.Retry, Reason: q.Reason, Decision: ans.Decision, Reviewer: ans.Reviewer})
	return ans
}

func rejectionText(a Answer) string {
	if a.Message != "" {
		return "rejected: " + a.Message
	}
	return "rejected by user"
}

func attempt(ctx context.Context, p Plan, sandboxed bool, out *Outcome) (AttemptResult, error) {
	res, err := p.Attempt(ctx, sandboxed)
	if err != nil {
		return res, err
	}
	out.Final = &res
	out.Attempts = append(out.Attempts, AttemptRecord{
		Sandboxed: sandboxed, Tier: string(res.Result.Tier), ExitCode: res.Result.ExitCode,
		TimedOut: res.Result.TimedOut, ExecutionID: res.ExecutionID,
	})
	return res, nil
}

// detectDenial: network denials from the event stream first (deterministic),
// then the reference's heuristics.
func detectDenial(r AttemptResult) sandbox.Denial {
	if r.Result.ExitCode != 0 && len(r.NetworkDenials) > 0 {
		var ev []string
		for _, n := range r.NetworkDenials {
			e := "network:" + n.Host
			if !contains(ev, e) {
				ev = append(ev, e)
			}
		}
		return sandbox.Denial{Denied: true, Evidence: ev}
	}
	return sandbox.ClassifyDenial(true, r.Result.ExitCode, r.Result.TimedOut, r.Stdout, r.Stderr)
}

func contains(xs []string, x string) bool {
	for _, y := range xs {
		if y == x {
			return true
		}
	}
	return false
}
