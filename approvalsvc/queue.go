package approvalsvc

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"sync"
	"time"
)

// Approval statuses.
const (
	StatusPending = "pending"
	StatusDecided = "decided"
)

// Outcomes of a review (SPEC §5 step 7). The first five are what a human
// reviewer may choose; abort too.
const (
	OutcomeAllowOnce    = "allow_once"
	OutcomeAllowSession = "allow_session"
	OutcomeAllowAlways  = "allow_always"
	OutcomeDeny         = "deny"
	OutcomeDenyAlways   = "deny_always"
	OutcomeAbort        = "abort"
	OutcomeTimeout      = "timeout"
	OutcomeError        = "error"
	OutcomeCancelled    = "cancelled"
)

// Kinds of approvals.
const (
	KindNetwork = "network"
	KindExec    = "exec"
)

// recentCapacity bounds the decided approvals kept for GET /api/approvals.
const recentCapacity = 200

// Approval is the one wire type of an approval (SPEC §7.3): the service
// serialises it for GET /api/approvals, the approval_created and
// approval_decided SSE events and so the page's data, and the CLI client
// (internal/webui) decodes it back into this same type.
type Approval struct {
	ID            string   `json:"id"`
	Kind          string   `json:"kind"`
	Status        string   `json:"status"`
	SessionID     string   `json:"session_id"`
	EnvironmentID string   `json:"environment_id"`
	ExecutionID   string   `json:"execution_id"`
	Command       []string `json:"command"`
	Cwd           string   `json:"cwd"`
	Host          string   `json:"host"`
	Protocol      string   `json:"protocol"`
	Port          uint16   `json:"port"`
	Reason        string   `json:"reason"`
	// Method, Path and Rule: a review an ask request rule opened (SPEC
	// §3.10) shows the request's method and path and the rule's index.
	Method    string `json:"method,omitempty"`
	Path      string `json:"path,omitempty"`
	Rule      *int   `json:"rule,omitempty"`
	CreatedAt string `json:"created_at"`
	DecidedAt string `json:"decided_at"`
	Decision  string `json:"decision"`
	Reviewer  string `json:"reviewer"`
	// Waiting is how many requests wait on a pending review now; 0 when
	// every requester left (it stays decidable; SPEC §5) and once decided.
	Waiting int `json:"waiting"`

	Rationale          string   `json:"rationale,omitempty"`
	SandboxPermissions string   `json:"sandbox_permissions,omitempty"`
	Justification      string   `json:"justification,omitempty"`
	ProposedAmendment  []string `json:"proposed_amendment,omitempty"`

	created time.Time
	// rkey is an exec review's cluster key (cluster mode; see reviewKey).
	rkey *ReviewKey
	// flight is the review's single flight while pending (for Waiting).
	flight *flight
}

// current is a with Waiting as of now.
func (a Approval) current() Approval {
	if a.flight != nil {
		a.Waiting = int(a.flight.waiting.Load())
	}
	return a
}

// userDecision is what a reviewer posted.
type userDecision struct {
	Outcome string
}

type pendingEntry struct {
	a      Approval
	answer chan userDecision // cap 1; written once, by the one who removes the entry
}

// queue is the user-review queue plus the recent-decisions list.
type queue struct {
	mu      sync.Mutex
	pending map[string]*pendingEntry
	recent  ring[Approval] // decided approvals
}

func newQueue() *queue {
	return &queue{pending: map[string]*pendingEntry{}, recent: newRing[Approval](recentCapacity)}
}

func (q *queue) add(a Approval) *pendingEntry {
	e := &pendingEntry{a: a, answer: make(chan userDecision, 1)}
	q.mu.Lock()
	q.pending[a.ID] = e
	q.mu.Unlock()
	return e
}

// take removes id from the pending set; ok is false when it was not there
// (already decided or timed out).
func (q *queue) take(id string) (*pendingEntry, bool) {
	q.mu.Lock()
	defer q.mu.Unlock()
	e, ok := q.pending[id]
	if ok {
		delete(q.pending, id)
	}
	return e, ok
}

func (q *queue) get(id string) (Approval, bool) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if e, ok := q.pending[id]; ok {
		return e.a.current(), true
	}
	return Approval{}, false
}

func (q *queue) record(a Approval) {
	q.mu.Lock()
	q.recent.push(a)
	q.mu.Unlock()
}

// recordOnce records a decided approval unless one with its id is among
// the recent ones; it reports whether it did.
func (q *queue) recordOnce(a Approval) bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	for _, r := range q.recent.appendNewestFirst(nil) {
		if r.ID == a.ID {
			return false
		}
	}
	q.recent.push(a)
	return true
}

// list returns pending (oldest first) and/or decided (newest first) approvals.
func (q *queue) list(status string) []Approval {
	q.mu.Lock()
	defer q.mu.Unlock()
	out := []Approval{}
	if status == "" || status == StatusPending {
		for _, e := range q.pending {
			out = append(out, e.a.current())
		}
		sort.Slice(out, func(i, j int) bool {
			if !out[i].created.Equal(out[j].created) {
				return out[i].created.Before(out[j].created)
			}
			return out[i].ID < out[j].ID
		})
	}
	if status == "" || status == StatusDecided {
		out = q.recent.appendNewestFirst(out)
	}
	return out
}

// Errors of DecideApproval, mapped to HTTP statuses by the API.
var (
	ErrNotFound        = errors.New("no pending approval with this id")
	ErrInvalidDecision = errors.New("invalid decision")
	ErrHostMismatch    = errors.New("amendment host does not match the reviewed host")
)

// validUserOutcome reports whether a human may choose d for an approval of kind.
func validUserOutcome(d string) bool {
	switch d {
	case OutcomeAllowOnce, OutcomeAllowSession, OutcomeAllowAlways, OutcomeDeny, OutcomeDenyAlways, OutcomeAbort:
		return true
	}
	return false
}

// DecideApproval applies a reviewer's decision to a pending approval and
// releases its waiters. amendHost, when not empty, is the host the reviewer
// wants allow_always/deny_always to write; it must normalise to the reviewed
// host, else the decision is refused and the approval stays pending.
func (s *Service) DecideApproval(id, decision, amendHost string) error {
	if !validUserOutcome(decision) {
		return fmt.Errorf("%w %q: want one of allow_once, allow_session, allow_always, deny, deny_always, abort", ErrInvalidDecision, decision)
	}
	if s.coord != nil {
		return s.clusterDecide(id, decision, amendHost)
	}
	return s.localDecide(id, decision, amendHost)
}

// localDecide decides a review pending on this replica.
func (s *Service) localDecide(id, decision, amendHost string) error {
	a, ok := s.queue.get(id)
	if !ok {
		return fmt.Errorf("%w: %q", ErrNotFound, id)
	}
	if amendHost != "" {
		if err := checkAmendmentHost(amendHost, a); err != nil {
			return err
		}
	}
	e, ok := s.queue.take(id)
	if !ok {
		return fmt.Errorf("%w: %q (decided meanwhile)", ErrNotFound, id)
	}
	e.answer <- userDecision{Outcome: decision}
	// Return once the decision has taken effect (cache, amendment, the
	// result a late retry gets): a client that polls right after the
	// reviewer's click must not find the review still open. Bounded, so
	// a slow hook or disk never holds the reviewer's request for long.
	if f := a.flight; f != nil {
		t := time.NewTimer(decisionSettle)
		defer t.Stop()
		select {
		case <-f.done:
		case <-t.C:
		}
	}
	return nil
}

// decisionSettle bounds how long DecideApproval waits for a decision to
// take effect before it answers the reviewer.
const decisionSettle = 5 * time.Second

// askUser queues a for a human and waits for a decision, the review timeout,
// or the service shutting down.
func (s *Service) askUser(ctx context.Context, a Approval) string {
	e := s.queue.add(a)
	// Listed and decidable: the requesters' waits start now (SPEC §3.7).
	s.openFlight(a.flight, a.ID)
	s.metrics.ApprovalPending(1)
	defer s.metrics.ApprovalPending(-1)
	s.bus.publish(EventApprovalCreated, a.current())
	if s.coord != nil {
		octx, cancel := context.WithTimeout(ctx, coordTimeout)
		err := s.coord.Open(octx, a, a.reviewKey())
		cancel()
		if err != nil {
			s.log.Warn("listing the review in the cluster failed; only this replica can decide it", "approval_id", a.ID, "error", err)
		}
	}
	s.log.Info("approval pending", "approval_id", a.ID, "kind", a.Kind, "host", a.Host, "port", a.Port, "protocol", a.Protocol, "session_id", a.SessionID)

	timer := time.NewTimer(s.timeout)
	defer timer.Stop()
	select {
	case d := <-e.answer:
		return d.Outcome
	case <-timer.C:
	case <-ctx.Done():
	}
	if _, ok := s.queue.take(a.ID); ok {
		outcome := OutcomeTimeout
		if ctx.Err() != nil {
			outcome = OutcomeAbort
		}
		if s.coord != nil && ctx.Err() == nil {
			// Another replica may have decided first: its decision holds.
			// (At shutdown nothing is recorded: the review stays pending
			// and decidable on the other replicas.)
			dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), coordTimeout)
			held, _, err := s.coord.Decide(dctx, ClusterDecision{ID: a.ID, Key: a.reviewKey(), Outcome: outcome, Reviewer: byUser}, true)
			cancel()
			if err == nil && held.Outcome != "" {
				return held.Outcome
			}
		}
		return outcome
	}
	// A decision won the race with the timer: honour it.
	return (<-e.answer).Outcome
}
