// Package heuristics decides commands that no exec-policy rule matched:
// the dangerous-command detector (forced rm through wrappers and nested
// shells, reference profile R2 with a depth limit of 8, plus stricter
// extensions), the known-safe read-only list, and the unmatched-command
// table under an approval policy and a sandbox kind.
//
// It holds pure functions of an argv and the approval context. It must
// never run a command, consult the file system, or look at rules.
package heuristics

import (
	"fmt"
	"strings"

	"github.com/netproxy/netproxy/execcore/execpolicy"
)

// ApprovalKind is the family of an approval policy.
type ApprovalKind string

const (
	Never         ApprovalKind = "never"
	OnRequest     ApprovalKind = "on-request"
	UnlessTrusted ApprovalKind = "untrusted"
	Granular      ApprovalKind = "granular"
)

// ApprovalPolicy is `never`, `on-request`, `untrusted` or
// `granular{sandbox_approval, rules}`.
type ApprovalPolicy struct {
	Kind ApprovalKind
	// Granular flags (false unless Kind is Granular and the flag is listed).
	SandboxApproval bool
	Rules           bool
}

// ParseApprovalPolicy reads the command-line/config spelling: never,
// on-request, untrusted, granular or granular:FLAG[,FLAG] where FLAG is
// sandbox_approval or rules (listed flags are true, the others false).
func ParseApprovalPolicy(s string) (ApprovalPolicy, error) {
	switch s {
	case "never":
		return ApprovalPolicy{Kind: Never}, nil
	case "on-request":
		return ApprovalPolicy{Kind: OnRequest}, nil
	case "untrusted", "unless-trusted":
		return ApprovalPolicy{Kind: UnlessTrusted}, nil
	case "on-failure":
		return ApprovalPolicy{}, fmt.Errorf("approval policy %q was removed; use on-request or untrusted", s)
	}
	if s == "granular" || strings.HasPrefix(s, "granular:") {
		p := ApprovalPolicy{Kind: Granular}
		rest := strings.TrimPrefix(strings.TrimPrefix(s, "granular"), ":")
		if rest == "" {
			return p, nil
		}
		for _, f := range strings.Split(rest, ",") {
			switch strings.TrimSpace(f) {
			case "sandbox_approval":
				p.SandboxApproval = true
			case "rules":
				p.Rules = true
			case "skill_approval", "request_permissions", "mcp_elicitations":
				// Accepted for compatibility; they do not affect shell gating.
			default:
				return ApprovalPolicy{}, fmt.Errorf("unknown granular approval flag %q in %q (want sandbox_approval and/or rules)", f, s)
			}
		}
		return p, nil
	}
	return ApprovalPolicy{}, fmt.Errorf("invalid approval policy %q (want never, on-request, untrusted or granular:sandbox_approval,rules)", s)
}

// String returns the command-line spelling.
func (p ApprovalPolicy) String() string {
	if p.Kind != Granular {
		return string(p.Kind)
	}
	var flags []string
	if p.SandboxApproval {
		flags = append(flags, "sandbox_approval")
	}
	if p.Rules {
		flags = append(flags, "rules")
	}
	if len(flags) == 0 {
		return "granular"
	}
	return "granular:" + strings.Join(flags, ",")
}

// Debug renders the policy the way the reference's messages print it.
func (p ApprovalPolicy) Debug() string {
	switch p.Kind {
	case Never:
		return "Never"
	case OnRequest:
		return "OnRequest"
	case UnlessTrusted:
		return "UnlessTrusted"
	}
	return fmt.Sprintf("Granular(GranularApprovalConfig { sandbox_approval: %t, rules: %t, skill_approval: false, request_permissions: false, mcp_elicitations: false })",
		p.SandboxApproval, p.Rules)
}

// SandboxMode is the --sandbox value.
type SandboxMode string

const (
	ReadOnly         SandboxMode = "read-only"
	WorkspaceWrite   SandboxMode = "workspace-write"
	DangerFullAccess SandboxMode = "danger-full-access"
	External         SandboxMode = "external"
)

// ParseSandboxMode accepts the four --sandbox values.
func ParseSandboxMode(s string) (SandboxMode, error) {
	switch m := SandboxMode(s); m {
	case ReadOnly, WorkspaceWrite, DangerFullAccess, External:
		return m, nil
	}
	return "", fmt.Errorf("invalid sandbox %q (want read-only, workspace-write, danger-full-access or external)", s)
}

// SandboxKind is the filesystem restriction class derived from the mode.
type SandboxKind string

const (
	Restricted      SandboxKind = "restricted"
	Unrestricted    SandboxKind = "unrestricted"
	ExternalSandbox SandboxKind = "external"
)

// Kind maps read-only/workspace-write to Restricted, danger-full-access to
// Unrestricted and external to ExternalSandbox.
func (m SandboxMode) Kind() SandboxKind {
	switch m {
	case DangerFullAccess:
		return Unrestricted
	case External:
		return ExternalSandbox
	}
	return Restricted
}

// SandboxPermissions is what a command asks for.
type SandboxPermissions string

const (
	UseDefault                SandboxPermissions = "use_default"
	RequireEscalated          SandboxPermissions = "require_escalated"
	WithAdditionalPermissions SandboxPermissions = "with_additional_permissions"
)

// ParseSandboxPermissions accepts the three snake_case values.
func ParseSandboxPermissions(s string) (SandboxPermissions, error) {
	switch p := SandboxPermissions(s); p {
	case UseDefault, RequireEscalated, WithAdditionalPermissions:
		return p, nil
	}
	return "", fmt.Errorf("invalid sandbox_permissions %q (want use_default, require_escalated or with_additional_permissions)", s)
}

// RequestsOverride reports a request for more than the default sandbox.
func (p SandboxPermissions) RequestsOverride() bool { return p != "" && p != UseDefault }

// Context is everything the unmatched-command decision depends on.
type Context struct {
	Policy             ApprovalPolicy
	Sandbox            SandboxKind
	Permissions        SandboxPermissions
	UsedComplexParsing bool
}

// Unmatched is the heuristics verdict for one command, with its reasons.
type Unmatched struct {
	Decision execpolicy.Decision
	Danger   Danger
	Safe     bool
}

// DecideUnmatched is render_decision_for_unmatched_command (profile R2):
//  1. known-safe, not complex, under untrusted → allow;
//  2. dangerous → forbidden under never, else prompt;
//  3. never → allow; untrusted → prompt; on-request/granular → prompt only
//     for a restricted sandbox with an override request, else allow.
func DecideUnmatched(cmd []string, c Context) Unmatched {
	danger := DangerousCommand(cmd)
	safe := IsKnownSafe(cmd)
	u := Unmatched{Danger: danger, Safe: safe}
	switch {
	case safe && !c.UsedComplexParsing && c.Policy.Kind == UnlessTrusted:
		u.Decision = execpolicy.Allow
	case danger != DangerNone:
		if c.Policy.Kind == Never {
			u.Decision = execpolicy.Forbidden
		} else {
			u.Decision = execpolicy.Prompt
		}
	case c.Policy.Kind == Never:
		u.Decision = execpolicy.Allow
	case c.Policy.Kind == UnlessTrusted:
		u.Decision = execpolicy.Prompt
	default:
		if c.Sandbox == Restricted && c.Permissions.RequestsOverride() {
			u.Decision = execpolicy.Prompt
		} else {
			u.Decision = execpolicy.Allow
		}
	}
	return u
}
