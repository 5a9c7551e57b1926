package main

import (
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"runtime/debug"
	"strings"

	"github.com/netproxy/netproxy/execcore"
	"github.com/netproxy/netproxy/execcore/execpolicy"
	"github.com/netproxy/netproxy/execcore/shlex"
)

// Exit codes of `execwrap check` (SPEC §7.6).
const (
	checkExitSkip          = 0
	checkExitError         = 2
	checkExitForbidden     = 10
	checkExitNeedsApproval = 11
)

// runCheck implements `execwrap check`: it evaluates the command offline
// and prints the SPEC 7.6 JSON (--json) or a readable explanation.
func runCheck(args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	// A short-lived process: collecting garbage while loading the rules
	// costs more than it saves. The memory limit keeps a huge rules file
	// bounded (the collector runs again above it).
	defer debug.SetGCPercent(debug.SetGCPercent(-1))
	defer debug.SetMemoryLimit(debug.SetMemoryLimit(256 << 20))
	f, err := parseCheckFlags("execwrap check", args, stderr)
	if err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return checkExitSkip
		}
		return checkExitError
	}
	res, err := f.evaluate(stdin)
	if err != nil {
		// Rules errors name file:line; nothing is evaluated under a
		// partial policy.
		fmt.Fprintf(stderr, "execwrap check: %v\n", err)
		return checkExitError
	}
	if f.JSON {
		enc := json.NewEncoder(stdout)
		enc.SetEscapeHTML(false)
		if err := enc.Encode(checkJSON(res)); err != nil {
			fmt.Fprintf(stderr, "execwrap check: write result: %v\n", err)
			return checkExitError
		}
	} else {
		writeExplanation(stdout, res)
	}
	return checkExitCode(res.Requirement.Kind)
}

func checkExitCode(k execcore.RequirementKind) int {
	switch k {
	case execcore.Forbidden:
		return checkExitForbidden
	case execcore.NeedsApproval:
		return checkExitNeedsApproval
	}
	return checkExitSkip
}

// checkOutput is the SPEC 7.6 JSON object.
type checkOutput struct {
	HandlerArgv      []string                  `json:"handler_argv"`
	Cwd              string                    `json:"cwd"`
	Shell            string                    `json:"shell"`
	Policy           policyJSON                `json:"policy"`
	ApprovalIdentity execcore.ApprovalIdentity `json:"approval_identity"`
	Evaluation       evaluationJSON            `json:"evaluation"`
	Requirement      requirementJSON           `json:"requirement"`
}

type policyJSON struct {
	Commands           [][]string `json:"commands"`
	Origin             string     `json:"origin"`
	UsedComplexParsing bool       `json:"used_complex_parsing"`
}

type evaluationJSON struct {
	Decision     string      `json:"decision"`
	MatchedRules []matchJSON `json:"matched_rules"`
}

type matchJSON struct {
	Kind            string   `json:"kind"`
	MatchedPrefix   []string `json:"matched_prefix,omitempty"`
	Command         []string `json:"command,omitempty"`
	Decision        string   `json:"decision"`
	Justification   *string  `json:"justification"`
	ResolvedProgram string   `json:"resolved_program,omitempty"`
}

// requirementJSON is shared with `execwrap run --json`.
type requirementJSON struct {
	Kind              string   `json:"kind"`
	BypassSandbox     bool     `json:"bypass_sandbox"`
	Reason            *string  `json:"reason"`
	ProposedAmendment []string `json:"proposed_amendment"`
}

func toRequirementJSON(r execcore.Requirement) requirementJSON {
	out := requirementJSON{Kind: string(r.Kind), BypassSandbox: r.BypassSandbox, ProposedAmendment: r.ProposedAmendment}
	if r.Reason != "" {
		reason := r.Reason
		out.Reason = &reason
	}
	return out
}

func checkJSON(res execcore.Result) checkOutput {
	cmds := res.Policy.Commands
	if cmds == nil {
		cmds = [][]string{}
	}
	out := checkOutput{
		HandlerArgv:      res.Envelope.Argv,
		Cwd:              res.Envelope.Cwd,
		Shell:            res.Envelope.Shell,
		Policy:           policyJSON{Commands: cmds, Origin: string(res.Policy.Origin), UsedComplexParsing: res.Policy.UsedComplexParsing},
		ApprovalIdentity: res.Identity,
		Evaluation:       evaluationJSON{Decision: res.Evaluation.Decision.String(), MatchedRules: []matchJSON{}},
		Requirement:      toRequirementJSON(res.Requirement),
	}
	for _, m := range res.Evaluation.MatchedRules {
		mj := matchJSON{Kind: string(m.Kind), Decision: m.Decision.String(), ResolvedProgram: m.ResolvedProgram}
		if m.Kind == execpolicy.KindPrefix {
			mj.MatchedPrefix = m.MatchedPrefix
		} else {
			mj.Command = m.Command
		}
		if m.Justification != "" {
			j := m.Justification
			mj.Justification = &j
		}
		out.Evaluation.MatchedRules = append(out.Evaluation.MatchedRules, mj)
	}
	return out
}

// writeExplanation prints the evaluation step by step for a human.
func writeExplanation(w io.Writer, res execcore.Result) {
	fmt.Fprintf(w, "command:      %s\n", shlex.JoinLossy(res.Envelope.Argv))
	fmt.Fprintf(w, "cwd:          %s\n", res.Envelope.Cwd)
	if res.Envelope.Shell != "" {
		fmt.Fprintf(w, "shell:        %s (%s)\n", res.Envelope.Shell, res.Envelope.ShellType)
	}
	how := "as is"
	switch {
	case res.Policy.UsedComplexParsing:
		how = "heredoc single-command prefix (no amendments offered)"
	case len(res.Policy.Commands) == 1 && equalArgv(res.Policy.Commands[0], res.Envelope.Argv):
		how = "not reduced: evaluated as one command"
	default:
		how = "plain words: one command per segment"
	}
	fmt.Fprintf(w, "lowered:      %s\n", how)
	for i, c := range res.Policy.Commands {
		fmt.Fprintf(w, "  [%d] %s\n", i+1, shlex.JoinLossy(c))
	}
	fmt.Fprintf(w, "approval key: %s\n", shlex.JoinLossy(res.Identity.Command))
	fmt.Fprintln(w, "matches:")
	for _, m := range res.Evaluation.MatchedRules {
		switch m.Kind {
		case execpolicy.KindPrefix:
			where := ""
			if m.File != "" {
				where = fmt.Sprintf(" (%s:%d)", m.File, m.Line)
			}
			inner := ""
			if m.Inner {
				inner = " inside the script"
			}
			fmt.Fprintf(w, "  rule %s%s: prefix %s%s", m.Decision, where, shlex.JoinLossy(m.MatchedPrefix), inner)
			if m.ResolvedProgram != "" {
				fmt.Fprintf(w, " via %s", m.ResolvedProgram)
			}
			if m.Justification != "" {
				fmt.Fprintf(w, " — %s", m.Justification)
			}
			fmt.Fprintln(w)
		default:
			why := heuristicWhy(m)
			fmt.Fprintf(w, "  heuristics %s: %s (%s)\n", m.Decision, shlex.JoinLossy(m.Command), why)
		}
	}
	fmt.Fprintf(w, "decision:     %s\n", res.Evaluation.Decision)
	r := res.Requirement
	fmt.Fprintf(w, "requirement:  %s", r.Kind)
	if r.Kind == execcore.Skip {
		if r.BypassSandbox {
			fmt.Fprint(w, " (every command allowed by a rule: runs without the sandbox)")
		} else {
			fmt.Fprint(w, " (runs in the sandbox)")
		}
	}
	fmt.Fprintln(w)
	if r.Reason != "" {
		fmt.Fprintf(w, "reason:       %s\n", r.Reason)
	}
	if len(r.ProposedAmendment) > 0 {
		fmt.Fprintf(w, "amendment:    %s\n", execpolicy.FormatPrefixRule(r.ProposedAmendment))
	}
}

func heuristicWhy(m execcore.RuleMatch) string {
	parts := []string{"no rule matched"}
	if m.Danger.String() != "none" {
		parts = append(parts, "dangerous: "+m.Danger.String())
	}
	if m.Safe {
		parts = append(parts, "known safe read-only command")
	}
	return strings.Join(parts, "; ")
}

func equalArgv(a, b []string) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}
