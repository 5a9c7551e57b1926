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

	"github.com/netproxy/netproxy/execcore/approvalpolicy"
	"github.com/netproxy/netproxy/execcore/execpolicy"
)

// The approval policy is owned by package approvalpolicy (one parser for
// execwrap, the config and the approval service); these aliases keep the
// names the unmatched-command table is written in.
type (
	ApprovalKind   = approvalpolicy.Kind
	ApprovalPolicy = approvalpolicy.Policy
)

const (
	Never         = approvalpolicy.Never
	OnRequest     = approvalpolicy.OnRequest
	UnlessTrusted = approvalpolicy.Untrusted
	Granular      = approvalpolicy.Granular
)

// ParseApprovalPolicy is approvalpolicy.Parse: never, on-request, untrusted,
// granular or granular:FLAG[,FLAG] with FLAG sandbox_approval or rules.
func ParseApprovalPolicy(s string) (ApprovalPolicy, error) { return approvalpolicy.Parse(s) }

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
	// Safe is the context of the known-safe test (trusted program words,
	// git outside the workspace root).
	Safe SafeOptions
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
	safe := IsKnownSafe(cmd, c.Safe)
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
