package main

import (
	"strings"

	"github.com/netproxy/netproxy/execcore"
	"github.com/netproxy/netproxy/execcore/execpolicy"
	"github.com/netproxy/netproxy/execcore/shlex"
)

// approvalReason is the reason an exec approval carries to the reviewer
// (POST /v1/approvals). The requirement's own sentence comes from a prompt
// rule; a command that only the heuristics flagged has none (the
// reference's R2 reason is empty), so the reviewer gets what `execwrap
// check` prints for it ("rm -rf build: no rule matched; dangerous:
// forced_rm"), and never an empty reason.
func approvalReason(req execcore.Requirement, ev execcore.Evaluation, policy, sandboxPermissions string) string {
	if req.Reason != "" {
		return req.Reason
	}
	var parts []string
	for _, m := range ev.MatchedRules {
		if m.Kind == execpolicy.KindHeuristics && m.Decision == execpolicy.Prompt {
			parts = append(parts, shlex.JoinLossy(m.Command)+": "+heuristicWhy(m))
		}
	}
	if sandboxPermissions == "require_escalated" {
		// Why a known-safe command still asks.
		parts = append(parts, "asks to run outside the sandbox (sandbox_permissions require_escalated)")
	}
	if len(parts) > 0 {
		return strings.Join(parts, " · ")
	}
	return "the exec policy requires approval for this command (approval policy " + policy + ")"
}
