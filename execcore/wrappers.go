package execcore

import (
	"github.com/netproxy/netproxy/execcore/execpolicy"
	"github.com/netproxy/netproxy/execcore/heuristics"
	"github.com/netproxy/netproxy/execcore/unwrap"
)

// wrapped returns what the commands cmd runs add to its evaluation (SPEC
// §6.3, second set of 2026-12-01). cmd is walked with package unwrap, the
// implementation the dangerous-command detector uses too, through
// wrappers (env, nice, timeout, xargs, find -exec, sudo, ...) and the
// literal commands of scripts (sh -c, eval, su -c, watch, ...):
//
//   - a prompt or forbidden rule on a command run inside applies exactly as
//     to the bare command;
//   - a wrapper it cannot parse (an unknown option, a missing operand) or a
//     chain deeper than unwrap.MaxDepth needs approval (fail closed: what
//     runs is not known);
//   - when cmd itself is allowed by rules only, an allow rule on the
//     wrapper does not allow what it runs: an inner command no rule
//     matches gets the heuristics' decision (a flat-scan candidate only
//     the dangerous-command check), so the strictest of wrapper and inner
//     wins.
//
// ms are cmd's own explicit matches.
func (e evaluator) wrapped(cmd []string, ms []execpolicy.RuleMatch, hctx heuristics.Context) []RuleMatch {
	allowed := len(ms) > 0
	for _, m := range ms {
		if m.Decision != execpolicy.Allow {
			allowed = false
		}
	}
	var out []RuleMatch
	heuristic := func(argv []string, d execpolicy.Decision, danger heuristics.Danger, safe bool) {
		out = append(out, RuleMatch{
			RuleMatch: execpolicy.RuleMatch{Kind: execpolicy.KindHeuristics, Command: append([]string(nil), argv...), Decision: d},
			Danger:    danger, Safe: safe, Inner: true,
		})
	}
	unwrap.Walk(cmd, false, func(n unwrap.Node) bool {
		if n.Overflow || n.Step.Failed {
			heuristic(n.Argv, execpolicy.Prompt, heuristics.DangerOther, false)
		}
		if n.Overflow || n.Depth == 0 {
			return true
		}
		inner := e.pol.Matches(n.Argv, e.opts)
		for _, m := range inner {
			if m.Decision != execpolicy.Allow {
				out = append(out, RuleMatch{RuleMatch: m, Inner: true})
			}
		}
		if !allowed || len(inner) > 0 {
			return true
		}
		if !n.Approx {
			u := heuristics.DecideUnmatched(n.Argv, hctx)
			heuristic(n.Argv, u.Decision, u.Danger, u.Safe)
		} else if d := heuristics.DangerousCommand(n.Argv); d != heuristics.DangerNone {
			dec := execpolicy.Prompt
			if hctx.Policy.Kind == heuristics.Never {
				dec = execpolicy.Forbidden
			}
			heuristic(n.Argv, dec, d, false)
		}
		return true
	})
	return out
}

// innerAllowed reports whether everything cmd runs through wrappers and
// scripts is exactly known, a fixed program, and allowed by an explicit
// rule: only then may an allowed wrapper run outside the sandbox.
func (e evaluator) innerAllowed(cmd []string) bool {
	ok := true
	unwrap.Walk(cmd, true, func(n unwrap.Node) bool {
		if n.Overflow || n.Step.Unparsed || n.Approx {
			ok = false
		} else if n.Depth > 0 {
			ok = e.hctx.Safe.Trust.FixedProgram(n.Argv[0]) && e.explicitlyAllowed(n.Argv)
		}
		return ok
	})
	return ok
}

// explicitlyAllowed reports an explicit allow rule for cmd.
func (e evaluator) explicitlyAllowed(cmd []string) bool {
	for _, m := range e.pol.Matches(cmd, e.opts) {
		if m.Decision == execpolicy.Allow {
			return true
		}
	}
	return false
}
