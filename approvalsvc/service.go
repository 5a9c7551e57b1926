// Package approvalsvc owns the approval service of SPEC §5: the decider the
// decision chain consults for an allow-list miss (not_allowed) and for exec
// approval requests — owner resolution, per-session allow/deny caches, one
// review per key for concurrent requests, fail-closed gates, hooks, the
// Guardian and the human review queue, outcomes and amendments — plus the
// admin API for pending approvals and blocked requests.
//
// It must never turn any decision other than not_allowed into an allow (a
// deny-list hit or a local/private block is final), never allow on an error,
// a timeout or an unparsable answer, and never log or store a token, a query
// string or a header value.
package approvalsvc

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"sync"
	"time"

	lru "github.com/hashicorp/golang-lru/v2"

	"github.com/netproxy/netproxy/attribution"
	"github.com/netproxy/netproxy/execcore/execpolicy"
	"github.com/netproxy/netproxy/guardian"
	"github.com/netproxy/netproxy/hostpolicy"
	"github.com/netproxy/netproxy/internal/config"
	"github.com/netproxy/netproxy/metrics/audit"
)

// DefaultSession is where unattributed requests belong (SPEC §4.3).
const DefaultSession = attribution.DefaultSession

// DefaultReviewTimeout bounds a human review when the config gives none.
const DefaultReviewTimeout = 120 * time.Second

// Reviewer labels used in outcomes, metrics and the audit.
const (
	byUser     = "user"
	byGuardian = "guardian"
	byHook     = "hook"
	byCache    = "cache"
	byPolicy   = "policy"
)

// Options configures a Service. Only Config is required; every dependency
// may be nil (then its effect is skipped, and for reviewers the request is
// denied: fail closed).
type Options struct {
	Config config.Approvals
	// Guardian is the automated reviewer; nil makes guardian-routed reviews
	// deny ("no reviewer reachable").
	Guardian guardian.Reviewer
	// UserReviewer says a human can decide: the admin API is served with a
	// bearer token. False makes user-routed reviews deny at once.
	UserReviewer bool

	Owners    Owners
	Publisher Publisher
	Amender   Amender
	Rules     RulePersister
	Metrics   Metrics
	Audit     Auditor
	Logger    *slog.Logger

	// HookEnv is the environment hooks run with; nil means this process's
	// environment without the variables named in SecretEnv.
	HookEnv   []string
	SecretEnv []string

	// CacheSize bounds each session's allow and deny caches (default 4096);
	// MaxSessions bounds the sessions kept (default 1024, least recently
	// used dropped first).
	CacheSize   int
	MaxSessions int

	Now func() time.Time
}

// Service is the approval service. It implements hostpolicy.Decider and
// observe.DecisionSink. It is safe for concurrent use.
type Service struct {
	enabled  bool
	policy   ApprovalPolicy
	reviewer string
	timeout  time.Duration
	hooks    []Hook
	hookEnv  []string

	guardian     guardian.Reviewer
	userReviewer bool
	owners       Owners
	publisher    Publisher
	amender      Amender
	rules        RulePersister
	metrics      Metrics
	audit        Auditor
	log          *slog.Logger
	now          func() time.Time

	cacheSize int
	sessMu    sync.Mutex
	sessions  *lru.Cache[string, *session]

	flightMu sync.Mutex
	flights  map[cacheKey]*flight

	persistMu sync.Mutex // serialises amendments (live list + rules file)

	queue   *queue
	blocked *blockedRing
	bus     *bus

	ctx    context.Context // lifetime of reviews; cancelled by Close
	cancel context.CancelFunc
}

// New builds a Service from opts. Configuration errors name their key.
func New(opts Options) (*Service, error) {
	pol, err := ParsePolicy(opts.Config.Policy)
	if err != nil {
		return nil, fmt.Errorf("approvals.policy: %v", err)
	}
	rev, err := ParseReviewer(opts.Config.Reviewer)
	if err != nil {
		return nil, fmt.Errorf("approvals.reviewer: %v", err)
	}
	timeout := opts.Config.Timeout.Duration
	if timeout <= 0 {
		timeout = DefaultReviewTimeout
	}
	var hooks []Hook
	for i, h := range opts.Config.Hooks {
		if len(h.Command) == 0 || h.Command[0] == "" {
			return nil, fmt.Errorf("approvals.hooks[%d].command: must name a program", i)
		}
		hooks = append(hooks, Hook{Command: append([]string(nil), h.Command...), Timeout: h.Timeout.Duration})
	}
	if opts.CacheSize <= 0 {
		opts.CacheSize = 4096
	}
	if opts.MaxSessions <= 0 {
		opts.MaxSessions = 1024
	}
	sessions, err := lru.New[string, *session](opts.MaxSessions)
	if err != nil {
		return nil, err
	}
	log := opts.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	now := opts.Now
	if now == nil {
		now = time.Now
	}
	env := opts.HookEnv
	if env == nil {
		env = filterEnv(os.Environ(), opts.SecretEnv)
	}
	s := &Service{
		enabled: opts.Config.Enabled, policy: pol, reviewer: rev, timeout: timeout, hooks: hooks, hookEnv: env,
		guardian: opts.Guardian, userReviewer: opts.UserReviewer, owners: opts.Owners, publisher: opts.Publisher,
		amender: opts.Amender, rules: opts.Rules, metrics: opts.Metrics, audit: opts.Audit, log: log, now: now,
		cacheSize: opts.CacheSize, sessions: sessions, flights: map[cacheKey]*flight{},
		queue: newQueue(), blocked: newBlockedRing(BlockedCapacity), bus: newBus(),
	}
	if s.metrics == nil {
		s.metrics = noMetrics{}
	}
	s.ctx, s.cancel = context.WithCancel(context.Background())
	return s, nil
}

// Close aborts every review in flight (their waiters are denied).
func (s *Service) Close() { s.cancel() }

type noMetrics struct{}

func (noMetrics) ApprovalPending(int)                                    {}
func (noMetrics) ApprovalResolved(string, string, string, time.Duration) {}

// filterEnv drops the named variables (secrets hooks must not see).
func filterEnv(env, drop []string) []string {
	out := make([]string, 0, len(env))
next:
	for _, kv := range env {
		name, _, _ := strings.Cut(kv, "=")
		for _, d := range drop {
			if d != "" && name == d {
				continue next
			}
		}
		out = append(out, kv)
	}
	return out
}

// ---------------------------------------------------------------------------
// Sessions and caches

// cacheKey identifies what an approval covers within a session: for network
// requests (session, environment, host, protocol, port), for exec requests
// (session, environment, approval identity JSON). A struct key costs no
// allocation on the cache-hit path.
type cacheKey struct {
	kind, session, env string
	host               string
	proto              hostpolicy.Protocol
	port               uint16
	ident              string
}

// session holds one session's approvals. Caches are bounded; the deny cache
// is always consulted first.
type session struct {
	id         string
	defaultEnv string
	policy     ApprovalPolicy
	reviewer   string
	allow      *lru.Cache[cacheKey, struct{}]
	deny       *lru.Cache[cacheKey, struct{}]
}

// session returns the session id, creating it on first use with the
// configured policy and reviewer, narrowed by the execution creating it.
func (s *Service) session(id string, creator *attribution.Execution) *session {
	if sess, ok := s.sessions.Get(id); ok {
		return sess
	}
	s.sessMu.Lock()
	defer s.sessMu.Unlock()
	if sess, ok := s.sessions.Get(id); ok {
		return sess
	}
	sess := &session{id: id, defaultEnv: DefaultSession, policy: s.policy, reviewer: s.reviewer}
	if creator != nil {
		sess.defaultEnv = creator.EnvironmentID
		sess.policy = Narrow(sess.policy, creator.ApprovalPolicy)
		sess.reviewer = NarrowReviewer(sess.reviewer, creator.Reviewer)
	}
	sess.allow, _ = lru.New[cacheKey, struct{}](s.cacheSize)
	sess.deny, _ = lru.New[cacheKey, struct{}](s.cacheSize)
	s.sessions.Add(id, sess)
	return sess
}

// cached reports a cache hit: deny first, then allow.
func (sess *session) cached(key cacheKey) (hit, allow bool) {
	if sess.deny.Contains(key) {
		return true, false
	}
	if sess.allow.Contains(key) {
		return true, true
	}
	return false, false
}

// cachedResult is the result a cache hit stands for: an earlier session-wide
// decision for the same key, denials first.
func (sess *session) cachedResult(key cacheKey) (result, bool) {
	hit, allow := sess.cached(key)
	if !hit {
		return result{}, false
	}
	if allow {
		return result{allow: true, outcome: OutcomeAllowSession, reviewer: byCache}, true
	}
	return result{outcome: OutcomeDenyAlways, reviewer: byCache, rationale: "denied earlier in this session"}, true
}

// remember records a session-wide outcome for key: allow_session and
// allow_always allow it for the rest of the session, deny_always denies it.
// The other cache forgets the key, so the latest review wins.
func (sess *session) remember(key cacheKey, outcome string) {
	switch outcome {
	case OutcomeAllowSession, OutcomeAllowAlways:
		sess.deny.Remove(key)
		sess.allow.Add(key, struct{}{})
	case OutcomeDenyAlways:
		sess.allow.Remove(key)
		sess.deny.Add(key, struct{}{})
	}
}

// effective returns the policy and reviewer for a request of owner: the
// session's, narrowed by the owner's registration.
func (sess *session) effective(owner *attribution.Execution) (ApprovalPolicy, string) {
	p, r := sess.policy, sess.reviewer
	if owner != nil {
		p = Narrow(p, owner.ApprovalPolicy)
		r = NarrowReviewer(r, owner.Reviewer)
	}
	return p, r
}

// ---------------------------------------------------------------------------
// Owner resolution (SPEC §4.3)

// errAttribution is wrapped by owner-resolution failures (deny, no prompt).
var errAttribution = errors.New("attribution")

// requestSession resolves a request's owner (SPEC §4.3) and its session; an
// empty environment becomes the session's default one.
func (s *Service) requestSession(executionID, sessionID, environmentID string) (*attribution.Execution, *session, string, error) {
	owner, sessID, env, err := s.resolveOwner(executionID, sessionID, environmentID)
	if err != nil {
		return nil, nil, "", err
	}
	sess := s.session(sessID, owner)
	if env == "" {
		env = sess.defaultEnv
	}
	return owner, sess, env, nil
}

// ownerID is the execution id of owner, "" for none.
func ownerID(owner *attribution.Execution) string {
	if owner == nil {
		return ""
	}
	return owner.ID
}

// resolveOwner returns the owner execution (or nil), the session and the
// environment of req, exactly as SPEC §4.3 says.
func (s *Service) resolveOwner(executionID, sessionID, environmentID string) (*attribution.Execution, string, string, error) {
	switch {
	case executionID != "":
		if s.owners == nil {
			return nil, "", "", fmt.Errorf("%w: execution %s is not active", errAttribution, executionID)
		}
		e, ok := s.owners.Get(executionID)
		if !ok {
			return nil, "", "", fmt.Errorf("%w: execution %s is not active", errAttribution, executionID)
		}
		if environmentID != "" && environmentID != e.EnvironmentID {
			return nil, "", "", fmt.Errorf("%w: execution %s belongs to environment %q, not %q", errAttribution, executionID, e.EnvironmentID, environmentID)
		}
		if sessionID != "" && sessionID != e.SessionID {
			return nil, "", "", fmt.Errorf("%w: execution %s belongs to session %q, not %q", errAttribution, executionID, e.SessionID, sessionID)
		}
		return &e, e.SessionID, e.EnvironmentID, nil
	case environmentID != "":
		sess := sessionID
		if sess == "" {
			sess = DefaultSession
		}
		var owner *attribution.Execution
		if s.owners != nil {
			if list := s.owners.ActiveInEnvironment(environmentID); len(list) == 1 && (sessionID == "" || list[0].SessionID == sessionID) {
				owner = &list[0]
			}
		}
		return owner, sess, environmentID, nil
	default:
		sess := sessionID
		if sess == "" {
			sess = DefaultSession
		}
		if s.owners == nil {
			return nil, sess, "", nil
		}
		list := s.owners.ActiveInSession(sess)
		switch len(list) {
		case 0:
			return nil, sess, "", nil // the environment falls back to the session default
		case 1:
			return &list[0], sess, list[0].EnvironmentID, nil
		default:
			return nil, "", "", fmt.Errorf("%w: %d active executions in session %q and the request names none (ambiguous)", errAttribution, len(list), sess)
		}
	}
}

// ---------------------------------------------------------------------------
// Single flight

// result is a finished review as every waiter sees it.
type result struct {
	allow      bool
	outcome    string
	reviewer   string
	approvalID string
	rationale  string
	risk       string
	persisted  bool
}

type flight struct {
	done   chan struct{}
	res    result
	owners map[string]struct{} // execution ids of all waiters
	joined int                 // requests waiting on this review
}

// await joins the review in flight for key or starts one. check runs under
// the flight lock before a new review starts, so a request that races with
// the end of a review sees the cache that review filled. The review runs on
// the service's context: a waiter that gives up never aborts it for others.
func (s *Service) await(ctx context.Context, key cacheKey, ownerID string, check func() (result, bool), run func(ctx context.Context, f *flight) result) result {
	s.flightMu.Lock()
	f, ok := s.flights[key]
	if !ok {
		if r, hit := check(); hit {
			s.flightMu.Unlock()
			return r
		}
		f = &flight{done: make(chan struct{}), owners: map[string]struct{}{}}
		s.flights[key] = f
	}
	if ownerID != "" {
		f.owners[ownerID] = struct{}{}
	}
	f.joined++
	s.flightMu.Unlock()
	if !ok {
		go func() {
			r := run(s.ctx, f)
			s.flightMu.Lock()
			delete(s.flights, key)
			f.res = r
			s.flightMu.Unlock()
			close(f.done)
		}()
	}
	select {
	case <-f.done:
		return f.res
	case <-ctx.Done():
		return result{outcome: OutcomeCancelled, reviewer: byPolicy, rationale: "the request ended while its approval was pending"}
	}
}

// flightOwners returns the execution ids waiting on f.
func (s *Service) flightOwners(f *flight) []string {
	s.flightMu.Lock()
	defer s.flightMu.Unlock()
	out := make([]string, 0, len(f.owners))
	for id := range f.owners {
		out = append(out, id)
	}
	return out
}

// newID returns a random approval id.
func newID() string {
	var b [12]byte
	if _, err := rand.Read(b[:]); err != nil {
		// crypto/rand never fails on Linux; a fixed id would merge reviews.
		panic(err)
	}
	return "apv_" + hex.EncodeToString(b[:])
}

// ---------------------------------------------------------------------------
// Network decisions

// netTarget names a network request for reviewers and messages.
func netTarget(proto hostpolicy.Protocol, host string, port uint16) string {
	scheme := "http"
	switch proto {
	case hostpolicy.ProtoHTTPS:
		scheme = "https"
	case hostpolicy.ProtoSOCKS5:
		scheme = "socks5"
	}
	h := host
	if strings.Contains(h, ":") {
		h = "[" + h + "]"
	}
	return fmt.Sprintf("%s://%s:%d", scheme, h, port)
}

// ruleProtocol maps a request protocol to the network_rule spelling.
func ruleProtocol(p hostpolicy.Protocol) string {
	switch p {
	case hostpolicy.ProtoHTTPS:
		return "https"
	case hostpolicy.ProtoSOCKS5:
		return "socks5_tcp"
	}
	return "http"
}

// Decide implements hostpolicy.Decider for not_allowed decisions (SPEC §5).
// Anything else is returned unchanged: the service can never loosen a deny
// list hit or a local/private block.
func (s *Service) Decide(ctx context.Context, req hostpolicy.Request, base hostpolicy.Decision) hostpolicy.Decision {
	if base.Reason != hostpolicy.ReasonNotAllowed || base.Verdict == hostpolicy.Allow || base.Host == "" {
		return base
	}
	owner, sess, env, err := s.requestSession(req.ExecutionID, req.SessionID, req.EnvironmentID)
	if err != nil {
		return denyDecision(base, result{reviewer: byPolicy, outcome: OutcomeDeny, rationale: err.Error()})
	}
	port := base.Port
	if port == 0 {
		port = req.Port
	}
	key := cacheKey{kind: KindNetwork, session: sess.id, env: env, host: base.Host, proto: req.Protocol, port: port}
	check := func() (result, bool) { return sess.cachedResult(key) }
	if r, hit := check(); hit {
		return toDecision(base, r)
	}
	nr := netReview{sess: sess, owner: owner, env: env, host: base.Host, port: port, proto: req.Protocol, key: key}
	r := s.await(ctx, key, ownerID(owner), check, func(ctx context.Context, f *flight) result { return s.reviewNetwork(ctx, f, nr) })
	return toDecision(base, r)
}

func toDecision(base hostpolicy.Decision, r result) hostpolicy.Decision {
	if !r.allow {
		return denyDecision(base, r)
	}
	d := base
	d.Verdict, d.Reason, d.Source = hostpolicy.Allow, hostpolicy.ReasonNone, hostpolicy.SourceDecider
	d.ApprovalID, d.Override, d.Rationale = r.approvalID, overrideLabel(r), r.rationale
	return d
}

// denyDecision is how every reviewer denial looks to the client: reason
// not_allowed, decision deny, source decider.
func denyDecision(base hostpolicy.Decision, r result) hostpolicy.Decision {
	d := base
	d.Verdict, d.Reason, d.Source = hostpolicy.Deny, hostpolicy.ReasonNotAllowed, hostpolicy.SourceDecider
	d.ApprovalID, d.Override, d.Rationale = r.approvalID, overrideLabel(r), r.rationale
	return d
}

// overrideLabel says who decided, for the audit's override field.
func overrideLabel(r result) string {
	if r.reviewer == "" {
		return r.outcome
	}
	return r.reviewer + ":" + r.outcome
}

type netReview struct {
	sess  *session
	owner *attribution.Execution
	env   string
	host  string
	port  uint16
	proto hostpolicy.Protocol
	key   cacheKey
}

// reviewNetwork runs steps 4–7 of SPEC §5 for one key.
func (s *Service) reviewNetwork(ctx context.Context, f *flight, nr netReview) result {
	start := s.now()
	a := Approval{
		ID: newID(), Kind: KindNetwork, Status: StatusPending, SessionID: nr.sess.id, EnvironmentID: nr.env,
		Host: nr.host, Protocol: string(nr.proto), Port: nr.port,
		// The block's reason code (SPEC §3.6); the page explains it in words.
		Reason:  string(hostpolicy.ReasonNotAllowed),
		created: start, CreatedAt: start.UTC().Format(time.RFC3339Nano), Command: []string{},
	}
	if nr.owner != nil {
		a.ExecutionID, a.Command, a.Cwd = nr.owner.ID, append([]string(nil), nr.owner.Command...), nr.owner.Cwd
	}
	if a.Command == nil {
		a.Command = []string{}
	}
	policy, reviewer := nr.sess.effective(nr.owner)
	r := s.review(ctx, a, policy, reviewer, netTarget(nr.proto, nr.host, nr.port), "")
	r = s.applyNetworkOutcome(nr, r)
	s.finish(a, r, start, s.flightOwners(f), nr)
	return r
}

// review runs the gates, the hooks, then the routed reviewer, and returns
// the raw outcome (not yet applied).
func (s *Service) review(ctx context.Context, a Approval, policy ApprovalPolicy, reviewer, target, sandboxPerms string) result {
	base := result{approvalID: a.ID}
	deny := func(by, outcome, why string) result {
		r := base
		r.reviewer, r.outcome, r.rationale = by, outcome, why
		return r
	}
	// Step 4: fail-closed gates.
	if !s.enabled {
		return deny(byPolicy, OutcomeDeny, "approvals are disabled")
	}
	if policy.Kind == PolicyNever {
		return deny(byPolicy, OutcomeDeny, "the approval policy is never: nothing may be approved")
	}
	useGuardian := reviewer == ReviewerGuardian && (policy.Kind == PolicyOnRequest || policy.Kind == PolicyGranular)
	if useGuardian && s.guardian == nil {
		return deny(byPolicy, OutcomeDeny, "no reviewer reachable: the Guardian is not configured")
	}
	if !useGuardian && !s.userReviewer {
		return deny(byPolicy, OutcomeDeny, "no reviewer reachable: no admin token is configured for human review")
	}
	greq := guardian.ReviewRequest{
		ID: a.ID, Kind: a.Kind, SessionID: a.SessionID, EnvironmentID: a.EnvironmentID, ExecutionID: a.ExecutionID,
		Host: a.Host, Protocol: a.Protocol, Port: a.Port, Target: target, Command: a.Command, Cwd: a.Cwd,
		SandboxPermissions: sandboxPerms, Reason: a.Reason, Justification: a.Justification,
	}
	// Step 5: hooks; the first allow or deny is final (a hook allow is not cached).
	typ := "network_approval"
	if a.Kind == KindExec {
		typ = "exec_approval"
	}
	switch d, msg := runHooks(ctx, s.log, s.hooks, s.hookEnv, hookRequest{Type: typ, ReviewRequest: greq}); d {
	case "allow":
		r := base
		r.allow, r.reviewer, r.outcome, r.rationale = true, byHook, OutcomeAllowOnce, msg
		return r
	case "deny":
		if msg == "" {
			msg = "denied by an approval hook"
		}
		return deny(byHook, OutcomeDeny, msg)
	}
	if ctx.Err() != nil {
		return deny(byPolicy, OutcomeAbort, "the proxy is shutting down")
	}
	// Step 6: route.
	if useGuardian {
		v, err := s.guardian.Review(ctx, greq)
		if err != nil {
			outcome := OutcomeError
			if errors.Is(err, context.DeadlineExceeded) {
				outcome = OutcomeTimeout
			} else if ctx.Err() != nil {
				outcome = OutcomeAbort
			}
			s.log.Warn("guardian review failed; denying", "approval_id", a.ID, "error", err)
			return deny(byGuardian, outcome, "guardian: "+err.Error())
		}
		r := base
		r.reviewer, r.rationale, r.risk = byGuardian, v.Rationale, v.Risk
		if v.Allowed() {
			r.allow, r.outcome = true, OutcomeAllowOnce
			if v.Decision == guardian.DecisionAllowSession {
				r.outcome = OutcomeAllowSession
			}
		} else {
			r.outcome = OutcomeDeny
			if r.rationale == "" {
				r.rationale = "denied by the Guardian"
			}
		}
		return r
	}
	outcome := s.askUser(ctx, a)
	r := base
	r.reviewer, r.outcome = byUser, outcome
	switch outcome {
	case OutcomeAllowOnce, OutcomeAllowSession, OutcomeAllowAlways:
		r.allow = true
	case OutcomeTimeout:
		r.rationale = fmt.Sprintf("no decision within %v", s.timeout)
	case OutcomeAbort:
		r.rationale = "review aborted"
	default:
		r.rationale = "rejected by user"
	}
	return r
}

// applyNetworkOutcome updates caches, live lists and the rules file.
func (s *Service) applyNetworkOutcome(nr netReview, r result) result {
	nr.sess.remember(nr.key, r.outcome)
	switch r.outcome {
	case OutcomeAllowAlways:
		r.persisted = s.amendNetwork(nr, hostpolicy.Allow)
	case OutcomeDenyAlways:
		r.persisted = s.amendNetwork(nr, hostpolicy.Deny)
	}
	return r
}

// amendNetwork adds the host to the live list and persists a network_rule.
// A failed write is logged; the live list and session cache still hold, as
// the reference does (the approval was given).
func (s *Service) amendNetwork(nr netReview, v hostpolicy.Verdict) bool {
	s.persistMu.Lock()
	defer s.persistMu.Unlock()
	if s.amender != nil {
		s.amender.Amend(nr.host, v)
	}
	if s.rules == nil {
		return false
	}
	word := "Allow"
	if v == hostpolicy.Deny {
		word = "Deny"
	}
	proto := ruleProtocol(nr.proto)
	_, err := s.rules.AppendNetworkRule(execpolicy.NetworkRule{
		Host: nr.host, Protocol: proto, Decision: string(v),
		Justification: fmt.Sprintf("%s %s access to %s", word, proto, nr.host),
	})
	if err != nil {
		s.log.Error("persisting network rule failed; the live list keeps the amendment until restart", "host", nr.host, "decision", string(v), "error", err)
		return false
	}
	return true
}

// checkAmendmentHost refuses an amendment for another host than reviewed.
func checkAmendmentHost(amend string, a Approval) error {
	if a.Kind != KindNetwork {
		return fmt.Errorf("%w: exec approvals take no host amendment", ErrHostMismatch)
	}
	h, err := hostpolicy.Normalize(amend)
	if err != nil || h != a.Host {
		return fmt.Errorf("%w: network policy amendment host %q does not match approved host %q", ErrHostMismatch, amend, a.Host)
	}
	return nil
}

// finish records a finished review: owner events, metrics, audit, recent
// list and the approval_decided event.
func (s *Service) finish(a Approval, r result, start time.Time, owners []string, nr netReview) {
	now := s.now()
	a.Status, a.Decision, a.Reviewer, a.Rationale = StatusDecided, r.outcome, r.reviewer, r.rationale
	a.DecidedAt = now.UTC().Format(time.RFC3339Nano)
	s.queue.record(a)
	s.bus.publish(EventApprovalDecided, a)
	s.metrics.ApprovalResolved(a.Kind, r.reviewer, r.outcome, now.Sub(start))
	decision := "deny"
	if r.allow {
		decision = "allow"
	}
	if s.audit != nil {
		ev := audit.ApprovalEvent{
			Time: now, ApprovalID: a.ID, Kind: a.Kind, Decision: decision, Host: a.Host, Port: a.Port, Protocol: a.Protocol,
			SessionID: a.SessionID, EnvironmentID: a.EnvironmentID, ExecutionID: a.ExecutionID,
			Reviewer: r.reviewer, Outcome: r.outcome, Rationale: r.rationale,
		}
		if a.Kind == KindNetwork {
			ev.Reason = string(hostpolicy.ReasonNotAllowed)
		}
		s.audit.ApprovalResolved(ev)
	}
	s.log.Info("approval resolved", "approval_id", a.ID, "kind", a.Kind, "host", a.Host, "port", a.Port, "reviewer", r.reviewer, "outcome", r.outcome)
	if r.allow || s.publisher == nil || a.Kind != KindNetwork {
		return
	}
	typ := attribution.EventDeniedByPolicy
	if r.reviewer == byUser && r.outcome != OutcomeTimeout {
		typ = attribution.EventDeniedByUser
	}
	for _, id := range owners {
		s.publisher.Publish(id, attribution.Event{
			Type: typ, Time: now, Host: nr.host, Port: nr.port, Protocol: string(nr.proto),
			Decision: "deny", Reason: string(hostpolicy.ReasonNotAllowed), Source: string(hostpolicy.SourceDecider), ApprovalID: a.ID,
		})
	}
}
