package approvalsvc

// Cluster mode (docs/cluster.md): with a Coordinator, network reviews,
// their pending list and the session caches are shared by every replica.
// The data path never waits on the coordinator for a decision already in the
// local session cache; a miss asks it once (Begin) before any review starts.

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/netproxy/netproxy/attribution"
	"github.com/netproxy/netproxy/hostpolicy"
)

// ReasonUnavailable is the reason of a request that needed a new review
// while the cluster store is unreachable: it is denied at once.
const ReasonUnavailable hostpolicy.Reason = "approvals_unavailable"

// ErrUnavailable is returned by a Coordinator whose store is unreachable.
var ErrUnavailable = errors.New("approvals_unavailable: the cluster store is unreachable")

// ReviewKey is what one review covers, cluster-wide: for a network review
// (session, environment, host, protocol, port), for an exec review
// (session, environment, approval identity).
type ReviewKey struct {
	Session  string `json:"session"`
	Env      string `json:"env"`
	Host     string `json:"host"`
	Protocol string `json:"protocol"`
	Port     uint16 `json:"port"`
	// Ident is an exec review's approval identity (SPEC §6.2 C, JSON);
	// empty for a network review (whose stored keys it leaves unchanged).
	Ident string `json:"ident,omitempty"`
}

// Exec reports whether k is an exec review's key.
func (k ReviewKey) Exec() bool { return k.Ident != "" }

func (k cacheKey) review() ReviewKey {
	if k.kind == KindExec {
		return ReviewKey{Session: k.session, Env: k.env, Ident: k.ident}
	}
	return ReviewKey{Session: k.session, Env: k.env, Host: k.host, Protocol: string(k.proto), Port: k.port}
}

func (k ReviewKey) cacheKey() cacheKey {
	if k.Exec() {
		return cacheKey{kind: KindExec, session: k.Session, env: k.Env, ident: k.Ident}
	}
	return cacheKey{kind: KindNetwork, session: k.Session, env: k.Env, host: k.Host, proto: hostpolicy.Protocol(k.Protocol), port: k.Port}
}

// reviewKey is the cluster key of a pending approval: an exec review's
// carries its identity, a network review's is built from its fields.
func (a Approval) reviewKey() ReviewKey {
	if a.rkey != nil {
		return *a.rkey
	}
	return ReviewKey{Session: a.SessionID, Env: a.EnvironmentID, Host: a.Host, Protocol: a.Protocol, Port: a.Port}
}

// BeginKind says what Coordinator.Begin found.
type BeginKind int

const (
	// BeginLead: no review is open for the key; the caller runs it under
	// the returned id and must end it with Decide.
	BeginLead BeginKind = iota
	// BeginJoin: a review is open (on any replica); Await its decision.
	BeginJoin
	// BeginCached: a session-wide outcome (allow_session, allow_always,
	// deny_always) is already stored for the key.
	BeginCached
	// BeginOverloaded: no review is open for the key and the cluster holds
	// approvals.max_pending reviews (or max_pending_per_session in the
	// session): none is opened (SPEC §5, approvals_overloaded).
	BeginOverloaded
)

// Begin is the answer of Coordinator.Begin.
type Begin struct {
	Kind     BeginKind
	ID       string    // the review's approval id (lead, join)
	Outcome  string    // the stored outcome (cached)
	Deadline time.Time // when the review times out (join)
	Why      string    // which bound was reached (overloaded)
}

// ClusterDecision is a finished review as every replica sees it.
type ClusterDecision struct {
	ID        string    `json:"id"`
	Key       ReviewKey `json:"key"`
	Outcome   string    `json:"outcome"`
	Reviewer  string    `json:"reviewer"`
	Rationale string    `json:"rationale,omitempty"`
	// Approval is the decided approval (for the page and SSE of every replica).
	Approval Approval `json:"approval"`
	// Amendment is the prefix rule an exec review's allow_always adds
	// (its proposed amendment): every replica appends it to its rules file.
	Amendment []string `json:"amendment,omitempty"`
}

// Coordinator shares reviews between replicas. *cluster.Cluster implements
// it. Every method is bounded by its context; an unreachable store yields
// ErrUnavailable (or wraps it).
type Coordinator interface {
	// Begin atomically finds a stored session-wide outcome for k, joins the
	// review open for k, or opens one under id lasting until deadline.
	Begin(ctx context.Context, k ReviewKey, id string, deadline time.Time) (Begin, error)
	// Open lists a pending human review cluster-wide.
	Open(ctx context.Context, a Approval, k ReviewKey) error
	// Decide records d unless the review is decided already; it returns
	// the decision that holds. With force false it records nothing when no
	// pending review has the id (ok false); with force true (the replica
	// that ran the review) it records d anyway.
	Decide(ctx context.Context, d ClusterDecision, force bool) (held ClusterDecision, ok bool, err error)
	// Await blocks until review id is decided or ctx ends.
	Await(ctx context.Context, id string) (ClusterDecision, error)
	// Pending lists the pending reviews of every replica; PendingGet one.
	Pending(ctx context.Context) ([]Approval, error)
	PendingGet(ctx context.Context, id string) (Approval, ReviewKey, bool, error)
}

// coordTimeout bounds one coordinator call made on behalf of a request.
const coordTimeout = 2 * time.Second

// clusterJob is one review in cluster mode, network or exec.
type clusterJob struct {
	key  cacheKey
	sess *session
	what string // what is reviewed, for the log (a host, a command)
	// run runs the review under the cluster's approval id (this replica
	// leads it).
	run func(ctx context.Context, id string) result
	// amendment is the prefix rule an exec review's allow_always adds.
	amendment []string
	// told tells the flight's owners of a denial another replica decided
	// (network reviews; nil: nobody to tell).
	told func(f *flight, id string, d ClusterDecision)
}

// clusterRun is the network review of nr in cluster mode.
func (s *Service) clusterRun(ctx context.Context, f *flight, nr netReview) result {
	return s.clusterReview(ctx, f, clusterJob{key: nr.key, sess: nr.sess, what: nr.host,
		run: func(ctx context.Context, id string) result {
			nr.id = id
			return s.reviewNetwork(ctx, f, nr)
		},
		told: func(f *flight, id string, d ClusterDecision) {
			if s.publisher == nil {
				return
			}
			typ := attribution.EventDeniedByPolicy
			if d.Reviewer == byUser && d.Outcome != OutcomeTimeout {
				typ = attribution.EventDeniedByUser
			}
			for _, owner := range s.flightOwners(f) {
				s.publisher.Publish(owner, attribution.Event{Type: typ, Time: s.now(), Host: nr.host, Port: nr.port, Protocol: string(nr.proto),
					Decision: "deny", Reason: string(hostpolicy.ReasonNotAllowed), Source: string(hostpolicy.SourceDecider), ApprovalID: id})
			}
		}})
}

// clusterReview runs inside the local single flight (one per key per
// replica) and makes it one per key in the cluster, within the cluster's
// pending bounds.
func (s *Service) clusterReview(ctx context.Context, f *flight, j clusterJob) result {
	deadline := s.now().Add(s.timeout)
	bctx, cancel := context.WithTimeout(ctx, coordTimeout)
	b, err := s.coord.Begin(bctx, j.key.review(), newID(), deadline)
	cancel()
	if err != nil {
		s.log.Warn("cluster store unreachable; denying the new review", "target", j.what, "error", err)
		return result{outcome: OutcomeDeny, reviewer: byPolicy, unavailable: true,
			rationale: "approvals_unavailable: the cluster store is unreachable, no review can be opened"}
	}
	switch b.Kind {
	case BeginCached:
		j.sess.remember(j.key, b.Outcome)
		if r, hit := j.sess.cachedResult(j.key); hit {
			return r
		}
		return result{outcome: OutcomeDeny, reviewer: byCache, rationale: "denied earlier in this session"}
	case BeginJoin:
		return s.clusterFollow(ctx, f, j, b)
	case BeginOverloaded:
		return result{outcome: OutcomeDeny, reviewer: byPolicy, overloaded: true, rationale: "approvals_overloaded: " + b.Why}
	}
	r := j.run(ctx, b.ID)
	if ctx.Err() != nil {
		// This replica is shutting down: the review is not decided. It
		// stays listed and decidable on the others, as if it had died.
		return r
	}
	d := ClusterDecision{ID: b.ID, Key: j.key.review(), Outcome: r.outcome, Reviewer: r.reviewer, Rationale: r.rationale, Approval: r.decided}
	if r.outcome == OutcomeAllowAlways {
		d.Amendment = j.amendment
	}
	dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), coordTimeout)
	defer cancel()
	if _, _, err := s.coord.Decide(dctx, d, true); err != nil {
		s.log.Warn("publishing a decision to the cluster failed; waiters on other replicas time out", "approval_id", b.ID, "error", err)
	}
	return r
}

// clusterFollow waits for the decision of a review another replica (or this
// one, before a restart) opened; at its deadline it records a timeout.
func (s *Service) clusterFollow(ctx context.Context, f *flight, j clusterJob, b Begin) result {
	s.openFlight(f, b.ID) // the requesters' waits start (SPEC §3.7)
	wctx, cancel := context.WithDeadline(ctx, b.Deadline.Add(time.Second))
	d, err := s.coord.Await(wctx, b.ID)
	cancel()
	if err != nil {
		if ctx.Err() != nil {
			return result{approvalID: b.ID, outcome: OutcomeAbort, reviewer: byPolicy, rationale: "the proxy is shutting down"}
		}
		dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), coordTimeout)
		held, ok, derr := s.coord.Decide(dctx, ClusterDecision{ID: b.ID, Key: j.key.review(), Outcome: OutcomeTimeout, Reviewer: byUser,
			Rationale: fmt.Sprintf("no decision within %v", s.timeout)}, false)
		cancel()
		switch {
		case derr != nil && errors.Is(err, context.DeadlineExceeded):
			return result{approvalID: b.ID, outcome: OutcomeDeny, reviewer: byPolicy, unavailable: true,
				rationale: "approvals_unavailable: the cluster store is unreachable"}
		case ok || held.ID != "":
			d = held
		default:
			d = ClusterDecision{ID: b.ID, Outcome: OutcomeTimeout, Reviewer: byPolicy, Rationale: "the review ended without a decision"}
		}
	}
	r := result{approvalID: b.ID, outcome: d.Outcome, reviewer: d.Reviewer, rationale: d.Rationale}
	switch d.Outcome {
	case OutcomeAllowOnce, OutcomeAllowSession, OutcomeAllowAlways:
		r.allow = true
	}
	j.sess.remember(j.key, d.Outcome)
	if !r.allow && j.told != nil {
		j.told(f, b.ID, d)
	}
	return r
}

// PendingBounds are approvals.max_pending and max_pending_per_session: the
// cluster applies them to the reviews open on every replica.
func (s *Service) PendingBounds() (total, perSession int) { return s.maxPending, s.maxPerSession }

// ApplyClusterCache records a session-wide outcome decided on any replica
// (the coordinator calls it for each change it reads).
func (s *Service) ApplyClusterCache(k ReviewKey, outcome string) {
	s.session(k.Session, nil).remember(k.cacheKey(), outcome)
}

// ApplyClusterCreated shows a review opened on another replica on this
// replica's event stream (SSE).
func (s *Service) ApplyClusterCreated(a Approval) {
	if _, local := s.queue.get(a.ID); local {
		return
	}
	s.bus.publish(EventApprovalCreated, a)
}

// ApplyClusterDecision hands a decision taken on any replica to the review
// waiting here (when this replica runs it) and to the event stream.
func (s *Service) ApplyClusterDecision(d ClusterDecision) {
	if e, ok := s.queue.take(d.ID); ok {
		e.answer <- userDecision{Outcome: d.Outcome}
		return // the review's own finish publishes approval_decided
	}
	if d.Approval.ID != "" && s.queue.recordOnce(d.Approval) {
		s.bus.publish(EventApprovalDecided, d.Approval)
	}
}

// clusterDecide is DecideApproval in cluster mode: the review may be pending
// on any replica. The first decision recorded wins everywhere.
func (s *Service) clusterDecide(id, decision, amendHost string) error {
	ctx, cancel := context.WithTimeout(context.Background(), coordTimeout)
	defer cancel()
	a, local := s.queue.get(id)
	var key ReviewKey
	if !local {
		var ok bool
		var err error
		a, key, ok, err = s.coord.PendingGet(ctx, id)
		if err != nil {
			return fmt.Errorf("cluster store: %w", err)
		}
		if !ok {
			return fmt.Errorf("%w: %q", ErrNotFound, id)
		}
	} else {
		key = a.reviewKey()
	}
	if amendHost != "" {
		if err := checkAmendmentHost(amendHost, a); err != nil {
			return err
		}
	}
	decided := a
	decided.Status, decided.Decision, decided.Reviewer = StatusDecided, decision, byUser
	decided.DecidedAt = s.now().UTC().Format(time.RFC3339Nano)
	// A review this replica runs is recorded even if listing it failed
	// (force); one of another replica only while it is listed.
	d := ClusterDecision{ID: id, Key: key, Outcome: decision, Reviewer: byUser, Approval: decided}
	if decision == OutcomeAllowAlways && a.Kind == KindExec {
		d.Amendment = a.ProposedAmendment
	}
	_, ok, err := s.coord.Decide(ctx, d, local)
	if err != nil {
		return fmt.Errorf("cluster store: %w", err)
	}
	if !ok {
		return fmt.Errorf("%w: %q (decided meanwhile)", ErrNotFound, id)
	}
	if e, ok := s.queue.take(id); ok {
		e.answer <- userDecision{Outcome: decision}
	} else if s.queue.recordOnce(decided) {
		// A review another replica runs: this page hears of it here.
		s.bus.publish(EventApprovalDecided, decided)
	}
	return nil
}

// clusterPending merges the cluster's pending reviews into the local list.
func (s *Service) clusterPending(local []Approval) []Approval {
	ctx, cancel := context.WithTimeout(context.Background(), coordTimeout)
	defer cancel()
	remote, err := s.coord.Pending(ctx)
	if err != nil {
		return local
	}
	seen := make(map[string]bool, len(local))
	for _, a := range local {
		seen[a.ID] = true
	}
	out := append([]Approval(nil), local...)
	for _, a := range remote {
		if !seen[a.ID] && a.Status == StatusPending {
			out = append(out, a)
		}
	}
	return out
}
