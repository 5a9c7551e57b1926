// Package settings owns the approval service's settings (SPEC §5 and the
// [approvals] table of SPEC §7.2): their defaults and the one validator that
// both approvalsvc.New and the config loader call, so each rule is written
// once.
//
// It is a leaf package (it imports only the approval-policy parser) so that
// internal/config can map its TOML onto Settings without an import cycle. It
// must never read files, the environment or the network.
package settings

import (
	"fmt"
	"strings"
	"time"

	"github.com/netproxy/netproxy/execcore/approvalpolicy"
)

// Defaults used when a field is left at its zero value by a program (the
// config file always sets them through its embedded default).
const (
	DefaultReviewTimeout        = 120 * time.Second
	DefaultClientWait           = 25 * time.Second
	DefaultMaxPending           = 1000
	DefaultMaxPendingPerSession = 100
)

// Reviewers (SPEC §7.2).
const (
	ReviewerUser     = "user"
	ReviewerGuardian = "guardian"
)

// Settings configures the approval service.
type Settings struct {
	Enabled  bool
	Reviewer string // "user" | "guardian"
	Policy   string // never | on-request | untrusted | granular[:flags]
	// Timeout bounds a human review; past it the review is denied.
	Timeout time.Duration
	// ClientWait bounds how long one request waits for its review (SPEC
	// §3.7, below a browser's 30 s CONNECT limit); past it the request is
	// told "pending" and the review stays open until decided or Timeout.
	ClientWait time.Duration
	Hooks      []Hook
	// MaxPending bounds the reviews in progress in all, MaxPendingPerSession
	// those of one session (SPEC §5): a request that would open one more is
	// denied at once with reason approvals_overloaded.
	MaxPending           int
	MaxPendingPerSession int
}

// Hook is one external command consulted before any reviewer.
type Hook struct {
	Command []string
	Timeout time.Duration // 0: the hook default
}

// FieldError is one invalid setting. Key is relative to [approvals], e.g.
// "policy" or "hooks[0].command".
type FieldError struct {
	Key string
	Msg string
}

func (e *FieldError) Error() string { return e.Key + ": " + e.Msg }

// WithDefaults returns s with every zero-valued field a program may leave
// out filled with its default (an empty reviewer is user, an empty policy
// on-request, a zero timeout or bound the constants above).
func (s Settings) WithDefaults() Settings {
	if strings.TrimSpace(s.Reviewer) == "" {
		s.Reviewer = ReviewerUser
	}
	if strings.TrimSpace(s.Policy) == "" {
		s.Policy = string(approvalpolicy.OnRequest)
	}
	if s.Timeout == 0 {
		s.Timeout = DefaultReviewTimeout
	}
	if s.ClientWait == 0 {
		s.ClientWait = DefaultClientWait
	}
	if s.MaxPending == 0 {
		s.MaxPending = DefaultMaxPending
	}
	if s.MaxPendingPerSession == 0 {
		s.MaxPendingPerSession = DefaultMaxPendingPerSession
	}
	return s
}

// Validate returns every invalid field of s (nil when s is valid). It does
// not fill defaults: a zero timeout or bound is an error here, so a config
// file that writes "0s" or 0 is told so.
func (s Settings) Validate() []*FieldError {
	var errs []*FieldError
	bad := func(key, format string, a ...any) {
		errs = append(errs, &FieldError{Key: key, Msg: fmt.Sprintf(format, a...)})
	}
	switch strings.TrimSpace(s.Reviewer) {
	case ReviewerUser, ReviewerGuardian:
	default:
		bad("reviewer", `%q is not "user" or "guardian"`, s.Reviewer)
	}
	if _, err := approvalpolicy.Parse(s.Policy); err != nil {
		bad("policy", "%v", err)
	}
	if s.Timeout <= 0 {
		bad("timeout", `must be a positive duration such as "120s"`)
	}
	if s.ClientWait <= 0 {
		bad("client_wait", `must be a positive duration such as "25s" (a client that prefers to poll sends x-proxy-approval-wait: 0)`)
	}
	for i, h := range s.Hooks {
		key := fmt.Sprintf("hooks[%d]", i)
		if len(h.Command) == 0 || h.Command[0] == "" {
			bad(key+".command", `missing; give the argv of the hook, e.g. ["/usr/local/bin/hook"]`)
		}
		if h.Timeout < 0 {
			bad(key+".timeout", "must not be negative")
		}
	}
	if s.MaxPending <= 0 {
		bad("max_pending", "must be a positive number of reviews (default 1000)")
	}
	if s.MaxPendingPerSession <= 0 {
		bad("max_pending_per_session", "must be a positive number of reviews (default 100)")
	} else if s.MaxPending > 0 && s.MaxPendingPerSession > s.MaxPending {
		bad("max_pending_per_session", "%d exceeds max_pending (%d)", s.MaxPendingPerSession, s.MaxPending)
	}
	return errs
}
