package approvalsvc

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/netproxy/netproxy/attribution"
	"github.com/netproxy/netproxy/execcore/heuristics"
)

// ExecRequest is the body of POST /v1/approvals: execwrap asks whether a
// command may run (SPEC §6.4). Command is the approval identity of SPEC
// §6.2 C; with cwd, sandbox_permissions, additional_permissions and (for
// exec_command) tty it forms the session-cache key.
type ExecRequest struct {
	SessionID     string   `json:"session_id"`
	EnvironmentID string   `json:"environment_id"`
	ExecutionID   string   `json:"execution_id,omitempty"`
	Command       []string `json:"command"`
	// Shell is the shell and flag that run a script whose canonical
	// command dropped them (SPEC §6.3): part of the cache key.
	Shell                 []string        `json:"shell,omitempty"`
	Cwd                   string          `json:"cwd"`
	SandboxPermissions    string          `json:"sandbox_permissions,omitempty"`
	AdditionalPermissions json.RawMessage `json:"additional_permissions,omitempty"`
	TTY                   *bool           `json:"tty,omitempty"`
	Reason                string          `json:"reason,omitempty"`
	Justification         string          `json:"justification,omitempty"`
	ProposedAmendment     []string        `json:"proposed_amendment,omitempty"`
	// ApprovalPolicy and Reviewer may narrow the configured ones (never widen).
	ApprovalPolicy string `json:"approval_policy,omitempty"`
	Reviewer       string `json:"reviewer,omitempty"`
}

// ExecResponse is the answer to POST /v1/approvals.
type ExecResponse struct {
	ID string `json:"id,omitempty"`
	// Decision is allow_once, allow_session, allow_always, deny, deny_always,
	// abort, timeout or error; Approved is true exactly for the allow_*.
	Decision           string `json:"decision"`
	Approved           bool   `json:"approved"`
	Reviewer           string `json:"reviewer"` // cache | hook | guardian | user | policy
	Rationale          string `json:"rationale,omitempty"`
	Risk               string `json:"risk,omitempty"`
	AmendmentPersisted bool   `json:"amendment_persisted,omitempty"`
}

// maxExecArgs bounds an exec request's argv.
const maxExecArgs = 4096

// validate checks an exec request; errors name the field.
func (r *ExecRequest) validate() error {
	if len(r.Command) == 0 {
		return errors.New("command: required (the approval identity argv)")
	}
	if len(r.Command) > maxExecArgs {
		return fmt.Errorf("command: %d arguments exceed the limit of %d", len(r.Command), maxExecArgs)
	}
	if r.SandboxPermissions != "" {
		if _, err := heuristics.ParseSandboxPermissions(r.SandboxPermissions); err != nil {
			return fmt.Errorf("sandbox_permissions: %q is not use_default, require_escalated or with_additional_permissions", r.SandboxPermissions)
		}
	}
	if len(r.AdditionalPermissions) > 0 && !json.Valid(r.AdditionalPermissions) {
		return errors.New("additional_permissions: not valid JSON")
	}
	return nil
}

// execIdentity is the cache identity of SPEC §6.2 C, serialised in the
// reference's field order.
type execIdentity struct {
	Command               []string        `json:"command"`
	Shell                 []string        `json:"shell,omitempty"`
	Cwd                   string          `json:"cwd"`
	TTY                   *bool           `json:"tty,omitempty"`
	SandboxPermissions    string          `json:"sandbox_permissions"`
	AdditionalPermissions json.RawMessage `json:"additional_permissions"`
}

// DecideExec runs an exec approval through the same pipeline as network
// approvals (cache → one review per key → gates → hooks → Guardian or user)
// and blocks until it is decided or ctx ends.
func (s *Service) DecideExec(ctx context.Context, req ExecRequest) (ExecResponse, error) {
	if err := req.validate(); err != nil {
		return ExecResponse{}, err
	}
	owner, sess, env, err := s.requestSession(req.ExecutionID, req.SessionID, req.EnvironmentID)
	if err != nil {
		return ExecResponse{Decision: OutcomeDeny, Reviewer: byPolicy, Rationale: err.Error()}, nil
	}
	sandbox := req.SandboxPermissions
	if sandbox == "" {
		sandbox = "use_default"
	}
	addl := req.AdditionalPermissions
	if len(addl) == 0 {
		addl = json.RawMessage("null")
	}
	ident, _ := json.Marshal(execIdentity{Command: req.Command, Shell: req.Shell, Cwd: req.Cwd, TTY: req.TTY, SandboxPermissions: sandbox, AdditionalPermissions: addl})
	key := cacheKey{kind: KindExec, session: sess.id, env: env, ident: string(ident)}
	check := func() (result, bool) { return sess.cachedResult(key) }
	r, hit := check()
	if !hit {
		run := func(ctx context.Context, f *flight) result {
			return s.reviewExec(ctx, f, sess, owner, env, key, req, sandbox, newID())
		}
		if s.coord != nil {
			// Cluster mode: listed, decidable and answered on every
			// replica; its amendment reaches every rules file.
			run = func(ctx context.Context, f *flight) result {
				return s.clusterReview(ctx, f, clusterJob{key: key, sess: sess, what: "exec", amendment: req.ProposedAmendment,
					run: func(ctx context.Context, id string) result {
						return s.reviewExec(ctx, f, sess, owner, env, key, req, sandbox, id)
					}})
			}
		}
		r = s.await(ctx, key, ownerID(owner), check, run)
	}
	return ExecResponse{ID: r.approvalID, Decision: r.outcome, Approved: r.allow, Reviewer: r.reviewer, Rationale: r.rationale, Risk: r.risk, AmendmentPersisted: r.persisted}, nil
}

func (s *Service) reviewExec(ctx context.Context, f *flight, sess *session, owner *attribution.Execution, env string, key cacheKey, req ExecRequest, sandbox, id string) result {
	start := s.now()
	rk := key.review()
	a := Approval{
		rkey: &rk, ID: id, Kind: KindExec, Status: StatusPending, SessionID: sess.id, EnvironmentID: env, ExecutionID: req.ExecutionID,
		Command: append([]string(nil), req.Command...), Cwd: req.Cwd, Reason: req.Reason,
		SandboxPermissions: sandbox, Justification: req.Justification, ProposedAmendment: req.ProposedAmendment,
		created: start, CreatedAt: start.UTC().Format(time.RFC3339Nano), flight: f,
	}
	if a.Reason == "" {
		a.Reason = req.Justification
	}
	policy, reviewer := sess.effective(owner)
	policy, reviewer = Narrow(policy, req.ApprovalPolicy), NarrowReviewer(reviewer, req.Reviewer)
	r := s.review(ctx, a, policy, reviewer, "", sandbox)
	sess.remember(key, r.outcome)
	if r.outcome == OutcomeAllowAlways && len(req.ProposedAmendment) > 0 && s.rules != nil {
		s.persistMu.Lock()
		_, err := s.rules.AppendPrefixRule(req.ProposedAmendment)
		s.persistMu.Unlock()
		if err != nil {
			s.log.Error("persisting prefix rule failed", "approval_id", a.ID, "error", err)
		} else {
			r.persisted = true
		}
	}
	r.decided = s.finish(a, r, start, s.flightOwners(f), netReview{})
	return r
}
