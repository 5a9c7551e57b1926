// Package approvalpolicy owns the approval policy of SPEC §6.3 and §7.2 —
// `never | on-request | untrusted | granular:sandbox_approval,rules` — as one
// type, its one parser, its canonical spelling, and the narrowing order a
// registration uses to ask for a stricter policy than the configured one.
//
// It is a leaf package (standard library only) shared by the config
// validator, netproxy's approval service and execwrap's exec gating, so all
// of them accept exactly the same spellings. It must never decide an
// approval and never apply a default: an empty string is an error here, and
// each caller chooses (and documents) its own default.
package approvalpolicy

import (
	"fmt"
	"strings"
)

// Kind is the family of an approval policy.
type Kind string

const (
	Never     Kind = "never"
	OnRequest Kind = "on-request"
	Untrusted Kind = "untrusted"
	Granular  Kind = "granular"
)

// Policy is `never`, `on-request`, `untrusted` or
// `granular{sandbox_approval, rules}`.
type Policy struct {
	Kind Kind
	// Granular flags (false unless Kind is Granular and the flag is listed).
	SandboxApproval bool
	Rules           bool
}

// Parse reads the command-line and config spelling: never, on-request,
// untrusted, granular or granular:FLAG[,FLAG] where FLAG is
// sandbox_approval or rules (listed flags are true, the others false).
// Surrounding white space is ignored. For compatibility with the reference
// it also accepts unless-trusted (= untrusted) and the granular flags
// skill_approval, request_permissions and mcp_elicitations, which do not
// affect shell or network gating. Errors quote the value and say what is
// accepted; callers prefix the flag or key they read it from.
func Parse(s string) (Policy, error) {
	s = strings.TrimSpace(s)
	switch s {
	case string(Never), string(OnRequest), string(Untrusted), string(Granular):
		return Policy{Kind: Kind(s)}, nil
	case "unless-trusted":
		return Policy{Kind: Untrusted}, nil
	case "on-failure":
		return Policy{}, fmt.Errorf("%q was removed; use on-request or untrusted", s)
	}
	rest, ok := strings.CutPrefix(s, string(Granular)+":")
	if !ok {
		return Policy{}, fmt.Errorf("%q is not never, on-request, untrusted or granular[:sandbox_approval,rules]", s)
	}
	p := Policy{Kind: Granular}
	for _, f := range strings.Split(rest, ",") {
		switch f = strings.TrimSpace(f); f {
		case "sandbox_approval":
			p.SandboxApproval = true
		case "rules":
			p.Rules = true
		case "", "skill_approval", "request_permissions", "mcp_elicitations":
		default:
			return Policy{}, fmt.Errorf("granular flag %q is unknown; the flags are sandbox_approval and rules", f)
		}
	}
	return p, nil
}

// String returns the canonical spelling ("granular:sandbox_approval,rules").
func (p Policy) String() string {
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
		return string(Granular)
	}
	return string(Granular) + ":" + strings.Join(flags, ",")
}

// Debug renders the policy the way the reference's messages print it.
func (p Policy) Debug() string {
	switch p.Kind {
	case Never:
		return "Never"
	case OnRequest:
		return "OnRequest"
	case Untrusted:
		return "UnlessTrusted"
	}
	return fmt.Sprintf("Granular(GranularApprovalConfig { sandbox_approval: %t, rules: %t, skill_approval: false, request_permissions: false, mcp_elicitations: false })",
		p.SandboxApproval, p.Rules)
}

// breadth orders policies from narrowest (never: nothing may be approved)
// to widest (on-request: the agent may ask for anything). untrusted is
// narrower than granular because it always routes to a human. An unknown
// kind counts as never, so it can only narrow.
func (p Policy) breadth() int {
	switch p.Kind {
	case Untrusted:
		return 1
	case Granular:
		return 2
	case OnRequest:
		return 3
	}
	return 0
}

// Narrow returns the narrower of base and requested: a registration may
// narrow the configured policy, never widen it. Between two granular
// policies the flags are intersected.
func Narrow(base, requested Policy) Policy {
	if requested.Kind == Granular && base.Kind == Granular {
		return Policy{Kind: Granular, SandboxApproval: base.SandboxApproval && requested.SandboxApproval, Rules: base.Rules && requested.Rules}
	}
	if requested.breadth() < base.breadth() {
		return requested
	}
	return base
}
