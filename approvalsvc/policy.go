package approvalsvc

import (
	"fmt"
	"strings"
)

// Approval policies (SPEC §6.3).
const (
	PolicyNever     = "never"
	PolicyOnRequest = "on-request"
	PolicyUntrusted = "untrusted"
	PolicyGranular  = "granular"
)

// Reviewers (SPEC §7.2).
const (
	ReviewerUser     = "user"
	ReviewerGuardian = "guardian"
)

// ApprovalPolicy is a parsed approval policy. Granular carries its flags.
type ApprovalPolicy struct {
	Kind            string // never | on-request | untrusted | granular
	SandboxApproval bool   // granular only
	Rules           bool   // granular only
}

// String renders the policy as written in config ("granular:sandbox_approval,rules").
func (p ApprovalPolicy) String() string {
	if p.Kind != PolicyGranular {
		return p.Kind
	}
	var flags []string
	if p.SandboxApproval {
		flags = append(flags, "sandbox_approval")
	}
	if p.Rules {
		flags = append(flags, "rules")
	}
	if len(flags) == 0 {
		return PolicyGranular
	}
	return PolicyGranular + ":" + strings.Join(flags, ",")
}

// ParsePolicy parses "never", "on-request", "untrusted", "granular" or
// "granular:FLAG,..." (flags sandbox_approval and rules; listed flags are
// true). "" means on-request, the embedded default.
func ParsePolicy(s string) (ApprovalPolicy, error) {
	s = strings.TrimSpace(s)
	switch s {
	case "":
		return ApprovalPolicy{Kind: PolicyOnRequest}, nil
	case PolicyNever, PolicyOnRequest, PolicyUntrusted, PolicyGranular:
		return ApprovalPolicy{Kind: s}, nil
	}
	rest, ok := strings.CutPrefix(s, PolicyGranular+":")
	if !ok {
		return ApprovalPolicy{}, fmt.Errorf("approval policy %q: want never, on-request, untrusted or granular[:sandbox_approval,rules]", s)
	}
	p := ApprovalPolicy{Kind: PolicyGranular}
	for _, f := range strings.Split(rest, ",") {
		switch strings.TrimSpace(f) {
		case "sandbox_approval":
			p.SandboxApproval = true
		case "rules":
			p.Rules = true
		case "":
		default:
			return ApprovalPolicy{}, fmt.Errorf("approval policy %q: unknown granular flag %q (want sandbox_approval, rules)", s, f)
		}
	}
	return p, nil
}

// ParseReviewer parses "user" or "guardian"; "" means user.
func ParseReviewer(s string) (string, error) {
	switch strings.TrimSpace(s) {
	case "", ReviewerUser:
		return ReviewerUser, nil
	case ReviewerGuardian:
		return ReviewerGuardian, nil
	}
	return "", fmt.Errorf("reviewer %q: want user or guardian", s)
}

// breadth orders policies from narrowest (never: nothing may be approved)
// to widest (on-request: the agent may ask for anything). untrusted is
// narrower than granular because it always routes to a human.
func (p ApprovalPolicy) breadth() int {
	switch p.Kind {
	case PolicyNever:
		return 0
	case PolicyUntrusted:
		return 1
	case PolicyGranular:
		return 2
	case PolicyOnRequest:
		return 3
	}
	return 0
}

// Narrow returns the narrower of base and requested: a registration may
// narrow the configured policy, never widen it. An unparsable or wider
// request keeps base. Between two granular policies the flags are
// intersected.
func Narrow(base ApprovalPolicy, requested string) ApprovalPolicy {
	if strings.TrimSpace(requested) == "" {
		return base
	}
	r, err := ParsePolicy(requested)
	if err != nil {
		return base
	}
	if r.Kind == PolicyGranular && base.Kind == PolicyGranular {
		return ApprovalPolicy{Kind: PolicyGranular, SandboxApproval: base.SandboxApproval && r.SandboxApproval, Rules: base.Rules && r.Rules}
	}
	if r.breadth() < base.breadth() {
		return r
	}
	return base
}

// NarrowReviewer returns the narrower reviewer: a human (user) is narrower
// than the automated Guardian, so a registration may ask for user review
// when the config says guardian, never the reverse.
func NarrowReviewer(base, requested string) string {
	if strings.TrimSpace(requested) == ReviewerUser {
		return ReviewerUser
	}
	return base
}
