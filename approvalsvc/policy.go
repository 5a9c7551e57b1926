package approvalsvc

import (
	"fmt"
	"strings"

	"github.com/netproxy/netproxy/execcore/approvalpolicy"
)

// ApprovalPolicy is the approval policy of SPEC §6.3, owned (type, parser,
// narrowing order) by package approvalpolicy; the names below keep this
// package's vocabulary.
type ApprovalPolicy = approvalpolicy.Policy

// Approval policies (SPEC §6.3).
const (
	PolicyNever     = approvalpolicy.Never
	PolicyOnRequest = approvalpolicy.OnRequest
	PolicyUntrusted = approvalpolicy.Untrusted
	PolicyGranular  = approvalpolicy.Granular
)

// Reviewers (SPEC §7.2).
const (
	ReviewerUser     = "user"
	ReviewerGuardian = "guardian"
)

// ParsePolicy parses a configured policy with approvalpolicy.Parse; ""
// means on-request, the embedded default.
func ParsePolicy(s string) (ApprovalPolicy, error) {
	if strings.TrimSpace(s) == "" {
		return ApprovalPolicy{Kind: PolicyOnRequest}, nil
	}
	return approvalpolicy.Parse(s)
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

// Narrow applies a registration's requested policy to base with
// approvalpolicy.Narrow: it may narrow, never widen. An empty or unparsable
// request keeps base.
func Narrow(base ApprovalPolicy, requested string) ApprovalPolicy {
	if strings.TrimSpace(requested) == "" {
		return base
	}
	r, err := approvalpolicy.Parse(requested)
	if err != nil {
		return base
	}
	return approvalpolicy.Narrow(base, r)
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
