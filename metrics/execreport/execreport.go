// Package execreport owns the wire format of the exec-decision report that
// execwrap sends to netproxy's control socket (POST /v1/exec-decisions), so
// that the client (execwrap) and the server (netproxy's metrics and audit)
// share one definition without the client linking the metrics stack.
//
// It must never carry a token; Command and Cwd are accepted for context but
// the server never records them (argv may hold secrets; SPEC §7.5 has no
// field for them).
package execreport

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
)

// Path is the control API route (method and path, http.ServeMux syntax).
const Path = "POST /v1/exec-decisions"

// URLPath is the route's path alone, for clients.
const URLPath = "/v1/exec-decisions"

// MaxBody bounds a report body; a command line fits easily.
const MaxBody = 64 << 10

// Requirement kinds (SPEC §6.3).
const (
	Skip          = "skip"
	NeedsApproval = "needs_approval"
	Forbidden     = "forbidden"
)

// Report is one exec-policy decision.
type Report struct {
	Requirement   string   `json:"requirement"` // skip | needs_approval | forbidden
	Source        string   `json:"source"`      // prefix (a rule matched) | heuristics | ...
	Reason        string   `json:"reason,omitempty"`
	ExecutionID   string   `json:"execution_id,omitempty"`
	SessionID     string   `json:"session_id,omitempty"`
	EnvironmentID string   `json:"environment_id,omitempty"`
	ApprovalID    string   `json:"approval_id,omitempty"`
	Reviewer      string   `json:"reviewer,omitempty"`
	Outcome       string   `json:"outcome,omitempty"`
	Command       []string `json:"command,omitempty"`
	Cwd           string   `json:"cwd,omitempty"`
}

// Decode parses and validates one report from untrusted bytes: unknown
// fields, trailing data, an unknown requirement and a missing source are
// errors naming the field.
func Decode(body io.Reader) (Report, error) {
	var r Report
	dec := json.NewDecoder(body)
	dec.DisallowUnknownFields()
	if err := dec.Decode(&r); err != nil {
		return r, fmt.Errorf("exec decision report: invalid JSON body: %w", err)
	}
	if dec.More() {
		return r, errors.New("exec decision report: trailing data after the JSON object")
	}
	if err := r.Validate(); err != nil {
		return r, err
	}
	return r, nil
}

// Validate checks the fields a report must have.
func (r Report) Validate() error {
	switch r.Requirement {
	case Skip, NeedsApproval, Forbidden:
	default:
		return fmt.Errorf("exec decision report: requirement: %q is not skip, needs_approval or forbidden", r.Requirement)
	}
	if strings.TrimSpace(r.Source) == "" {
		return errors.New("exec decision report: source: missing (e.g. \"prefix\" or \"heuristics\")")
	}
	return nil
}
