// Package execcore turns one command request (a plain argv or a model's
// shell_command/exec_command tool call) into its three projections and its
// approval requirement (SPEC §6.1–6.3):
//
//   - A, the execution envelope: handler argv, effective cwd, environment,
//     shell, budgets, requested and effective permissions;
//   - B, the exec-policy projection (commands_for_exec_policy);
//   - C, the approval identity (canonical command and cache key);
//
// then evaluates the exec-policy rules with the heuristics fallback under
// the approval policy and sandbox, and maps the result to
// skip | needs_approval | forbidden with the reference's (profile R2)
// reason strings and proposed amendments.
//
// It decides only. It must never run a command, prompt anyone, or write a
// rules file; `execwrap run` does those with the Result.
package execcore

import (
	"encoding/json"
	"errors"
	"fmt"
	"path/filepath"
	"strings"

	"github.com/netproxy/netproxy/execcore/envpolicy"
	"github.com/netproxy/netproxy/execcore/execpolicy"
	"github.com/netproxy/netproxy/execcore/heuristics"
	"github.com/netproxy/netproxy/execcore/shellparse"
	"github.com/netproxy/netproxy/execcore/shlex"
	"github.com/netproxy/netproxy/execcore/toolcall"
)

// Re-exported so callers need one import for the common types.
type (
	ApprovalPolicy     = heuristics.ApprovalPolicy
	SandboxMode        = heuristics.SandboxMode
	SandboxPermissions = heuristics.SandboxPermissions
)

// Input is one request to evaluate.
type Input struct {
	// Argv is a plain command, taken as is. Exactly one of Argv and Tool
	// must be set.
	Argv []string
	// Tool is "shell_command" or "exec_command"; Args its arguments (a
	// JSON object or a JSON string holding one).
	Tool string
	Args []byte
	// AllowLoginShell is the login-shell config switch for tool calls.
	AllowLoginShell bool
	// Shell is the user's shell for tool calls (the `shell` field of an
	// exec_command overrides it).
	Shell string
	// BaseCwd is the turn cwd; a tool call's workdir resolves against it.
	BaseCwd string

	ApprovalPolicy ApprovalPolicy
	Sandbox        SandboxMode
	// SandboxPermissions for a plain argv (a tool call carries its own).
	SandboxPermissions SandboxPermissions
	// PrefixRule is a requested amendment for a plain argv (a tool call
	// carries its own).
	PrefixRule []string

	// Policy holds the loaded rules; nil means no rules.
	Policy *execpolicy.Policy

	// WritableRoots are the extra absolute folders the sandbox makes
	// writable (--writable-root). With the base cwd and the effective cwd
	// they decide which system paths are still trusted (SPEC §6.2).
	WritableRoots []string

	// Environment (projection A).
	EnvPolicy envpolicy.Policy
	ParentEnv []string
	ExtraEnv  map[string]string

	// Session identity, part of the approval cache key.
	SessionID     string
	EnvironmentID string
}

// Envelope is projection A.
type Envelope struct {
	Tool                  string                          `json:"tool,omitempty"`
	Argv                  []string                        `json:"argv"`
	Cwd                   string                          `json:"cwd"`
	Shell                 string                          `json:"shell"`
	ShellType             shellparse.ShellType            `json:"shell_type"`
	Env                   []string                        `json:"-"` // never serialised: values may be secrets
	TTY                   bool                            `json:"tty"`
	TimeoutMS             uint64                          `json:"timeout_ms,omitempty"`
	YieldTimeMS           uint64                          `json:"yield_time_ms,omitempty"`
	MaxOutputTokens       uint64                          `json:"max_output_tokens,omitempty"`
	RequestedPermissions  SandboxPermissions              `json:"requested_permissions"`
	EffectivePermissions  SandboxPermissions              `json:"effective_permissions"`
	AdditionalPermissions *toolcall.AdditionalPermissions `json:"additional_permissions"`
	Justification         string                          `json:"justification,omitempty"`
	Sandbox               SandboxMode                     `json:"sandbox"`
}

// ApprovalIdentity is projection C: the session approval cache key. Field
// order is the serialisation order.
type ApprovalIdentity struct {
	Command []string `json:"command"`
	// Shell is the shell that runs a script and its flag (SPEC §6.3): the
	// canonical command drops them, yet they change what runs.
	Shell                 []string                        `json:"shell,omitempty"`
	Cwd                   string                          `json:"cwd"`
	TTY                   *bool                           `json:"tty,omitempty"`
	SandboxPermissions    SandboxPermissions              `json:"sandbox_permissions"`
	AdditionalPermissions *toolcall.AdditionalPermissions `json:"additional_permissions"`
	SessionID             string                          `json:"session_id,omitempty"`
	EnvironmentID         string                          `json:"environment_id,omitempty"`
}

// Key is the deterministic JSON of the identity (the cache key).
func (a ApprovalIdentity) Key() string {
	b, _ := json.Marshal(a) // plain strings and bools cannot fail
	return string(b)
}

// RuleMatch is one entry of the evaluation.
type RuleMatch struct {
	execpolicy.RuleMatch
	// Danger is the heuristics' dangerous-command class (heuristics only).
	Danger heuristics.Danger
	// Safe reports a known-safe read-only command (heuristics only).
	Safe bool
	// Inner marks an entry of a command run inside a wrapper or a script
	// (see evaluator.wrapped; stricter than R2).
	Inner bool
}

// Evaluation is the strictest decision and every match in command order.
type Evaluation struct {
	Decision     execpolicy.Decision
	MatchedRules []RuleMatch
}

// RequirementKind is the outcome.
type RequirementKind string

const (
	Skip          RequirementKind = "skip"
	NeedsApproval RequirementKind = "needs_approval"
	Forbidden     RequirementKind = "forbidden"
)

// Requirement is the approval requirement of the command.
type Requirement struct {
	Kind              RequirementKind
	BypassSandbox     bool
	Reason            string
	ProposedAmendment []string
	// Source is "rules" when an explicit rule decided, "heuristics" when
	// the fallback did, "handler" for an up-front tool-call rejection.
	Source string
}

// Result is everything Evaluate derives.
type Result struct {
	Envelope    Envelope
	Policy      shellparse.Projection
	Identity    ApprovalIdentity
	Evaluation  Evaluation
	Requirement Requirement
	// Call is the decoded tool call (nil for a plain argv).
	Call *toolcall.Call
	// Trust is what decided which program words are the system's own
	// (the writable roots of this request); `execwrap run` resolves a
	// bare shell name with it.
	Trust shellparse.Trust
}

// InputError is a problem with the request itself (bad tool arguments,
// empty argv); the CLI exits 2 for it.
type InputError struct{ Err error }

func (e *InputError) Error() string { return e.Err.Error() }
func (e *InputError) Unwrap() error { return e.Err }

// Reason strings of profile R2.
const (
	ReasonNeverRejects       = "approval required by policy, but AskForApproval is set to Never"
	ReasonGranularRules      = "approval required by policy rule, but AskForApproval::Granular.rules is false"
	ReasonGranularSandbox    = "approval required by policy, but AskForApproval::Granular.sandbox_approval is false"
	ReasonForcedRm           = "rm -f style commands are not permitted. Use a safer approach"
	ReasonBlockedByPolicy    = "blocked by policy"
	ReasonAdditionalRequests = "you cannot request additional permissions unless the approval policy is OnRequest"
)

// Evaluate computes the three projections and the approval requirement.
func Evaluate(in Input) (Result, error) {
	var res Result
	pol := in.Policy
	if pol == nil {
		pol = execpolicy.Empty()
	}
	if in.ApprovalPolicy.Kind == "" {
		in.ApprovalPolicy = ApprovalPolicy{Kind: heuristics.OnRequest}
	}
	if in.Sandbox == "" {
		in.Sandbox = heuristics.WorkspaceWrite
	}
	if in.SandboxPermissions == "" {
		in.SandboxPermissions = heuristics.UseDefault
	}
	base := in.BaseCwd
	if base == "" {
		return res, &InputError{errors.New("base cwd is empty")}
	}
	if !filepath.IsAbs(base) {
		abs, err := filepath.Abs(base)
		if err != nil {
			return res, &InputError{fmt.Errorf("resolve cwd %q: %w", base, err)}
		}
		base = abs
	}

	env := Envelope{Sandbox: in.Sandbox}
	prefixRule := in.PrefixRule
	var handlerReject string
	switch {
	case in.Tool != "" && in.Argv != nil:
		return res, &InputError{errors.New("give either a tool call or an argv, not both")}
	case in.Tool != "":
		call, err := toolcall.Decode(in.Tool, in.Args, toolcall.Options{AllowLoginShell: in.AllowLoginShell})
		if err != nil {
			return res, &InputError{err}
		}
		if in.Shell == "" && call.Shell == "" {
			return res, &InputError{errors.New("no shell to run the tool call with; pass --shell")}
		}
		if !call.SandboxPermissionsSet && in.SandboxPermissions != heuristics.UseDefault {
			call.SandboxPermissions = in.SandboxPermissions
		} else if call.SandboxPermissionsSet && in.SandboxPermissions != heuristics.UseDefault && call.SandboxPermissions != in.SandboxPermissions {
			return res, &InputError{fmt.Errorf("sandbox permissions %s conflict with the tool call's sandbox_permissions %s", in.SandboxPermissions, call.SandboxPermissions)}
		}
		if call.AdditionalPermissions != nil && call.SandboxPermissions != heuristics.WithAdditionalPermissions {
			return res, &InputError{errors.New("`additional_permissions` requires `sandbox_permissions` set to `with_additional_permissions`")}
		}
		res.Call = &call
		argv, shell, st := call.HandlerArgv(in.Shell)
		env.Tool, env.Argv, env.Shell, env.ShellType = call.Tool, argv, shell, st
		env.Cwd = call.ResolveWorkdir(base)
		env.TTY = call.TTY
		env.TimeoutMS, env.YieldTimeMS, env.MaxOutputTokens = call.TimeoutMS, call.YieldTimeMS, call.MaxOutputTokens
		env.RequestedPermissions = call.SandboxPermissions
		env.AdditionalPermissions = call.AdditionalPermissions
		env.Justification = call.Justification
		prefixRule = call.PrefixRule
		handlerReject = handlerRejection(call, in.ApprovalPolicy)
	default:
		if len(in.Argv) == 0 {
			return res, &InputError{errors.New("no command given: pass -- ARGV... or --tool/--args")}
		}
		for _, a := range in.Argv {
			if strings.IndexByte(a, 0) >= 0 {
				return res, &InputError{errors.New("argv contains a NUL byte")}
			}
		}
		env.Argv = append([]string(nil), in.Argv...)
		env.Cwd = filepath.Clean(base)
		if w, ok := shellparse.ExtractAnyWrapper(in.Argv); ok {
			env.Shell, env.ShellType = w.Shell, w.Type
		} else if t := shellparse.DetectShellType(in.Argv[0]); t != shellparse.Other {
			env.Shell, env.ShellType = in.Argv[0], t
		}
		env.RequestedPermissions = in.SandboxPermissions
	}
	env.EffectivePermissions = env.RequestedPermissions
	extra := map[string]string{}
	if env.Tool == toolcall.ExecCommand {
		for k, v := range envpolicy.UnifiedExecOverrides() {
			extra[k] = v
		}
	}
	for k, v := range in.ExtraEnv {
		extra[k] = v
	}
	env.Env = envpolicy.WithGitSafety(envpolicy.Build(in.EnvPolicy, in.ParentEnv, extra))
	res.Envelope = env

	trust, err := trustFor(base, env.Cwd, in.WritableRoots)
	if err != nil {
		return res, &InputError{err}
	}
	res.Trust = trust
	// B and C are computed independently from the same handler argv.
	res.Policy = shellparse.CommandsForExecPolicy(env.Argv, trust)
	res.Identity = ApprovalIdentity{
		Command:               shellparse.CanonicalizeForApproval(env.Argv, trust),
		Shell:                 shellparse.ApprovalShell(env.Argv, trust),
		Cwd:                   env.Cwd,
		SandboxPermissions:    env.RequestedPermissions,
		AdditionalPermissions: env.AdditionalPermissions,
		SessionID:             in.SessionID,
		EnvironmentID:         in.EnvironmentID,
	}
	if env.Tool == toolcall.ExecCommand {
		tty := env.TTY
		res.Identity.TTY = &tty
	}

	hctx := heuristics.Context{
		Policy:             in.ApprovalPolicy,
		Sandbox:            in.Sandbox.Kind(),
		Permissions:        env.RequestedPermissions,
		UsedComplexParsing: res.Policy.UsedComplexParsing,
		Safe: heuristics.SafeOptions{
			Trust: trust,
			// The workspace root is the base cwd: a workdir elsewhere
			// may hold a repository the command itself planted.
			GitElsewhere: env.Cwd != filepath.Clean(base),
		},
	}
	ev := evaluator{pol: pol, hctx: hctx, opts: execpolicy.MatchOptions{ResolveHostExecutables: true, TrustedPath: trust.SystemPath}}
	res.Evaluation = ev.evaluate(res.Policy.Commands)
	res.Requirement = ev.requirement(res, prefixRule)
	if handlerReject != "" {
		res.Requirement = Requirement{Kind: Forbidden, Reason: handlerReject, Source: "handler"}
	}
	return res, nil
}

// handlerRejection is the tool handlers' up-front refusal of an override
// request when the approval policy is not on-request.
func handlerRejection(call toolcall.Call, p ApprovalPolicy) string {
	if p.Kind == heuristics.OnRequest || !call.SandboxPermissions.RequestsOverride() {
		return ""
	}
	if call.SandboxPermissions == heuristics.WithAdditionalPermissions {
		return ReasonAdditionalRequests
	}
	dbg := p.Debug()
	verb := "should not"
	if call.Tool == toolcall.ExecCommand {
		verb = "cannot"
	}
	return fmt.Sprintf("approval policy is `%s`; reject command — you %s ask for escalated permissions if the approval policy is `%s`", dbg, verb, dbg)
}

// trustFor builds the trust of program words: the base cwd, the effective
// cwd and every extra writable root are places a command may write.
func trustFor(base, cwd string, extra []string) (shellparse.Trust, error) {
	roots := []string{filepath.Clean(base), filepath.Clean(cwd)}
	for _, r := range extra {
		if !filepath.IsAbs(r) {
			return shellparse.Trust{}, fmt.Errorf("writable root %q is not absolute", r)
		}
		roots = append(roots, filepath.Clean(r))
	}
	return shellparse.Trust{WritableRoots: roots}, nil
}

// evaluator holds what every evaluation of one request shares: the rules,
// the match options (with the trust of program paths) and the heuristics
// context.
type evaluator struct {
	pol  *execpolicy.Policy
	opts execpolicy.MatchOptions
	hctx heuristics.Context
}

// evaluate is check_multiple with the heuristics fallback, plus the inner
// restrictive matches of scripts the lowering left whole. A `cd` in the
// lowered script moves every later git away from the workspace root.
func (e evaluator) evaluate(cmds [][]string) Evaluation {
	var ev Evaluation
	pol, hctx, matchOpts := e.pol, e.hctx, e.opts
	for _, cmd := range cmds {
		ms := pol.Matches(cmd, matchOpts)
		if len(ms) == 0 {
			u := heuristics.DecideUnmatched(cmd, hctx)
			ev.MatchedRules = append(ev.MatchedRules, RuleMatch{
				RuleMatch: execpolicy.RuleMatch{Kind: execpolicy.KindHeuristics, Command: append([]string(nil), cmd...), Decision: u.Decision},
				Danger:    u.Danger,
				Safe:      u.Safe,
			})
		} else {
			for _, m := range ms {
				ev.MatchedRules = append(ev.MatchedRules, RuleMatch{RuleMatch: m})
			}
		}
		ev.MatchedRules = append(ev.MatchedRules, e.wrapped(cmd, ms, hctx)...)
		if heuristics.ChangesDirectory(cmd) {
			hctx.Safe.GitElsewhere = true
		}
	}
	for _, m := range ev.MatchedRules {
		if m.Decision > ev.Decision {
			ev.Decision = m.Decision
		}
	}
	return ev
}

func (e evaluator) requirement(res Result, prefixRule []string) Requirement {
	hctx := e.hctx
	ev := res.Evaluation
	cmdText := "`" + shlex.JoinLossy(res.Envelope.Argv) + "`"
	autoAllowed := !res.Policy.UsedComplexParsing
	anyExplicit, promptRule := false, false
	for _, m := range ev.MatchedRules {
		if m.Kind == execpolicy.KindPrefix {
			anyExplicit = true
			if m.Decision == execpolicy.Prompt {
				promptRule = true
			}
		}
	}
	source := "heuristics"
	if anyExplicit {
		source = "rules"
	}
	switch ev.Decision {
	case execpolicy.Forbidden:
		return Requirement{Kind: Forbidden, Reason: forbiddenReason(ev, cmdText), Source: source}
	case execpolicy.Prompt:
		if rej := promptRejection(hctx.Policy, promptRule); rej != "" {
			if promptRule {
				return Requirement{Kind: Forbidden, Reason: rej, Source: "rules"}
			}
			if h := firstHeuristic(ev, execpolicy.Prompt, false); h != nil && h.Danger == heuristics.DangerForcedRm {
				rej = ReasonForcedRm
			}
			return Requirement{Kind: Forbidden, Reason: rej, Source: source}
		}
		r := Requirement{Kind: NeedsApproval, Reason: promptReason(ev, cmdText), Source: source}
		if promptRule {
			r.Source = "rules"
		}
		if req := e.requestedAmendment(res, prefixRule, autoAllowed, anyExplicit); req != nil {
			r.ProposedAmendment = req
		} else if autoAllowed && !promptRule {
			if h := firstHeuristic(ev, execpolicy.Prompt, true); h != nil {
				r.ProposedAmendment = append([]string(nil), h.Command...)
			}
		}
		return r
	default:
		r := Requirement{Kind: Skip, BypassSandbox: e.bypassSandbox(res.Policy.Commands), Source: source}
		if autoAllowed && !anyExplicit {
			if h := firstHeuristic(ev, execpolicy.Allow, true); h != nil {
				r.ProposedAmendment = append([]string(nil), h.Command...)
			}
		}
		return r
	}
}

// isGit reports a git command by base name, wherever it lives (the strict
// direction: any git counts).
func isGit(cmd []string) bool {
	return len(cmd) > 0 && filepath.Base(cmd[0]) == "git"
}

// firstHeuristic returns the first heuristics entry of decision d in
// command order; with outerOnly, entries of commands run inside a wrapper
// are skipped (they are never offered as an amendment: the wrapper's argv
// is what runs).
func firstHeuristic(ev Evaluation, d execpolicy.Decision, outerOnly bool) *RuleMatch {
	for i := range ev.MatchedRules {
		m := &ev.MatchedRules[i]
		if m.Kind == execpolicy.KindHeuristics && m.Decision == d && !(outerOnly && m.Inner) {
			return m
		}
	}
	return nil
}

// longestRule picks the explicit match of decision d with the longest
// matched prefix; ties go to the last one.
func longestRule(ev Evaluation, d execpolicy.Decision) *RuleMatch {
	var best *RuleMatch
	for i := range ev.MatchedRules {
		m := &ev.MatchedRules[i]
		if m.Kind != execpolicy.KindPrefix || m.Decision != d {
			continue
		}
		if best == nil || len(m.MatchedPrefix) >= len(best.MatchedPrefix) {
			best = m
		}
	}
	return best
}

func forbiddenReason(ev Evaluation, cmdText string) string {
	if m := longestRule(ev, execpolicy.Forbidden); m != nil {
		if m.Justification != "" {
			return cmdText + " rejected: " + m.Justification
		}
		return cmdText + " rejected: policy forbids commands starting with `" + shlex.JoinLossy(m.MatchedPrefix) + "`"
	}
	if h := firstHeuristic(ev, execpolicy.Forbidden, false); h != nil && h.Danger == heuristics.DangerForcedRm {
		return cmdText + " rejected: " + ReasonForcedRm
	}
	return cmdText + " rejected: " + ReasonBlockedByPolicy
}

func promptReason(ev Evaluation, cmdText string) string {
	m := longestRule(ev, execpolicy.Prompt)
	if m == nil {
		return ""
	}
	if m.Justification != "" {
		return cmdText + " requires approval: " + m.Justification
	}
	return cmdText + " requires approval by policy"
}

func promptRejection(p ApprovalPolicy, promptIsRule bool) string {
	switch p.Kind {
	case heuristics.Never:
		return ReasonNeverRejects
	case heuristics.Granular:
		if promptIsRule {
			if !p.Rules {
				return ReasonGranularRules
			}
			return ""
		}
		if !p.SandboxApproval {
			return ReasonGranularSandbox
		}
	}
	return ""
}

// bypassSandbox: every lowered command has an explicit Allow match.
// Stricter than R2: every program word must be fixed (Trust.FixedProgram),
// and a git that runs away from the workspace root (a
// workdir elsewhere, a `cd` before it, `-C`/`--git-dir`/`--work-tree`)
// never bypasses, since the repository it reads may be one the command
// planted, and git runs programs its configuration names.
func (e evaluator) bypassSandbox(cmds [][]string) bool {
	if len(cmds) == 0 {
		return false
	}
	elsewhere := e.hctx.Safe.GitElsewhere
	for _, cmd := range cmds {
		// SPEC §6.2: a program the command may have written itself
		// (`./bash`, `/proc/self/cwd/sh`, a workspace file) is never a
		// sandbox bypass, whatever rule allows it.
		if len(cmd) == 0 || !e.hctx.Safe.Trust.FixedProgram(cmd[0]) {
			return false
		}
		if isGit(cmd) && (elsewhere || heuristics.GitMovesWorkdir(cmd)) {
			return false
		}
		if heuristics.ChangesDirectory(cmd) {
			elsewhere = true
		}
		if !e.explicitlyAllowed(cmd) || !e.innerAllowed(cmd) {
			return false
		}
	}
	return true
}

// requestedAmendment offers the model's prefix_rule when it is allowed, not
// banned, no rule matched, and adding it makes every command Allow.
func (e evaluator) requestedAmendment(res Result, prefix []string, autoAllowed, anyExplicit bool) []string {
	pol := e.pol
	if !autoAllowed || len(prefix) == 0 || anyExplicit || IsBannedPrefixSuggestion(prefix) {
		return nil
	}
	rest := make([]execpolicy.PatternToken, 0, len(prefix)-1)
	for _, t := range prefix[1:] {
		rest = append(rest, execpolicy.PatternToken{Alternatives: []string{t}})
	}
	amended := pol.WithPrefixRule(execpolicy.PrefixRule{Program: prefix[0], Rest: rest, Decision: execpolicy.Allow})
	e.pol = amended
	if e.evaluate(res.Policy.Commands).Decision != execpolicy.Allow {
		return nil
	}
	return append([]string(nil), prefix...)
}

// bannedPrefixSuggestions is the R2 list (88 entries): prefixes too broad
// to offer as a persistent allow rule.
var bannedPrefixSuggestions = func() map[string]bool {
	list := [][]string{
		{"/bin/bash"}, {"/bin/bash", "-c"}, {"/bin/bash", "-lc"},
		{"/bin/sh"}, {"/bin/sh", "-c"}, {"/bin/sh", "-lc"},
		{"/bin/zsh"}, {"/bin/zsh", "-c"}, {"/bin/zsh", "-lc"},
		{"Rscript"},
		{"bash"}, {"bash", "-c"}, {"bash", "-lc"},
		{"bun"}, {"bun", "-e"}, {"bun", "run"},
		{"cmd"}, {"cmd", "/c"}, {"cmd", "/k"},
		{"cmd.exe"}, {"cmd.exe", "/c"}, {"cmd.exe", "/k"},
		{"dash"}, {"dash", "-c"},
		{"deno"}, {"deno", "eval"},
		{"env"},
		{"fish"}, {"fish", "-c"},
		{"git"},
		{"julia"}, {"julia", "-e"},
		{"ksh"}, {"ksh", "-c"},
		{"lua"}, {"lua", "-e"},
		{"node"}, {"node", "-e"},
		{"nodejs"}, {"nodejs", "-e"},
		{"npm", "run"},
		{"osascript"},
		{"perl"}, {"perl", "-e"},
		{"php"}, {"php", "-r"},
		{"pnpm", "run"},
		{"powershell"}, {"powershell", "-Command"}, {"powershell", "-EncodedCommand"}, {"powershell", "-File"}, {"powershell", "-c"},
		{"powershell.exe"}, {"powershell.exe", "-Command"}, {"powershell.exe", "-EncodedCommand"}, {"powershell.exe", "-File"}, {"powershell.exe", "-c"},
		{"pwsh"}, {"pwsh", "-Command"}, {"pwsh", "-EncodedCommand"}, {"pwsh", "-File"}, {"pwsh", "-c"}, {"pwsh", "-e"}, {"pwsh", "-ec"}, {"pwsh", "-f"},
		{"py"}, {"py", "-3"},
		{"pypy"}, {"pypy3"},
		{"python"}, {"python", "-"}, {"python", "-c"},
		{"python3"}, {"python3", "-"}, {"python3", "-c"},
		{"pythonw"}, {"pyw"},
		{"rm"},
		{"ruby"}, {"ruby", "-e"},
		{"sh"}, {"sh", "-c"}, {"sh", "-lc"},
		{"sudo"},
		{"yarn", "run"},
		{"zsh"}, {"zsh", "-c"}, {"zsh", "-lc"},
	}
	m := make(map[string]bool, len(list))
	for _, p := range list {
		m[strings.Join(p, "\x00")] = true
	}
	return m
}()

// IsBannedPrefixSuggestion reports a prefix never offered as an
// amendment: an exact match with the banned list, or the same in any
// spelling (see bannedSpelling).
func IsBannedPrefixSuggestion(prefix []string) bool {
	return bannedPrefixSuggestions[strings.Join(prefix, "\x00")] || bannedSpelling(prefix, 0)
}

// BannedPrefixSuggestionCount is the size of the banned list.
func BannedPrefixSuggestionCount() int { return len(bannedPrefixSuggestions) }
