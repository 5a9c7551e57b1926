package approvalsvc

// Network decisions: the decider of SPEC §5 for not_allowed, the review pipeline and its outcomes.

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/netproxy/netproxy/attribution"
	"github.com/netproxy/netproxy/execcore/execpolicy"
	"github.com/netproxy/netproxy/guardian"
	"github.com/netproxy/netproxy/hostpolicy"
	"github.com/netproxy/netproxy/metrics/audit"
)

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
	ruleAsk := base.Reason == hostpolicy.ReasonRequestDenied && base.Verdict == hostpolicy.Ask && base.Rule > 0
	if (base.Reason != hostpolicy.ReasonNotAllowed && !ruleAsk) || base.Verdict == hostpolicy.Allow || base.Host == "" {
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
	key := cacheKey{kind: KindNetwork, session: sess.id, env: env, host: base.Host, proto: req.Protocol, port: port, rule: base.Rule}
	check := func() (result, bool) { return sess.cachedResult(key) }
	if r, hit := check(); hit {
		return toDecision(base, r)
	}
	nr := netReview{sess: sess, owner: owner, env: env, host: base.Host, port: port, proto: req.Protocol, key: key}
	if ruleAsk {
		nr.method, nr.path, nr.rule = req.Method, pathForReview(req.Path), base.Rule
	}
	run := s.reviewNetwork
	if s.coord != nil && !ruleAsk {
		// The cluster's shared reviews are keyed by host; a rule's review
		// stays on this instance.
		run = s.clusterRun
	}
	r := s.awaitFor(ctx, key, ownerID(owner), s.clientWait(req), check, func(ctx context.Context, f *flight) result { return run(ctx, f, nr) })
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

// ReasonOverloaded is the reason of a request denied because no more
// reviews may be opened (SPEC §5: approvals.max_pending and
// approvals.max_pending_per_session).
const ReasonOverloaded hostpolicy.Reason = "approvals_overloaded"

// denyDecision is how every reviewer denial looks to the client: reason
// not_allowed (approvals_overloaded when no review could be opened),
// decision deny, source decider — or decision ask for a requester told
// its review is still pending (SPEC §3.7) — with the client outcome.
func denyDecision(base hostpolicy.Decision, r result) hostpolicy.Decision {
	d := base
	reason := hostpolicy.ReasonNotAllowed
	if base.Reason == hostpolicy.ReasonRequestDenied {
		reason = base.Reason // an ask rule's review
	}
	d.Verdict, d.Reason, d.Source = hostpolicy.Deny, reason, hostpolicy.SourceDecider
	if r.overloaded {
		d.Reason = ReasonOverloaded
	}
	if r.unavailable {
		d.Reason = ReasonUnavailable
	}
	if r.pending {
		d.Verdict = hostpolicy.Ask
	}
	d.ApprovalID, d.Override, d.Rationale = r.approvalID, overrideLabel(r), r.rationale
	d.ApprovalOutcome = clientOutcome(r)
	return d
}

// decidedBy is the reviewer who decided r, as the page, CLI, API and audit
// show it: nobody ("") when a human review timed out (SPEC §5: a timeout is
// never shown as a reviewer's decision).
func decidedBy(r result) string {
	if r.outcome == OutcomeTimeout && r.reviewer == byUser {
		return ""
	}
	return r.reviewer
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
	id    string // approval id given by the cluster ("" for a new one)
	// method, path and rule (index + 1): an ask request rule's review.
	method, path string
	rule         int
}

// pathForReview is the path a reviewer sees: without its query (SPEC §7.5:
// never a query string), bounded.
func pathForReview(p string) string {
	if i := strings.IndexAny(p, "?#"); i >= 0 {
		p = p[:i]
	}
	if len(p) > 512 {
		p = p[:512] + "…"
	}
	return p
}

// reviewNetwork runs steps 4–7 of SPEC §5 for one key.
func (s *Service) reviewNetwork(ctx context.Context, f *flight, nr netReview) result {
	start := s.now()
	id := nr.id
	if id == "" {
		id = newID()
	}
	a := Approval{
		ID: id, Kind: KindNetwork, Status: StatusPending, SessionID: nr.sess.id, EnvironmentID: nr.env,
		Host: nr.host, Protocol: string(nr.proto), Port: nr.port,
		// The block's reason code (SPEC §3.6); the page explains it in words.
		Reason:  string(hostpolicy.ReasonNotAllowed),
		created: start, CreatedAt: start.UTC().Format(time.RFC3339Nano), Command: []string{},
	}
	if nr.rule > 0 {
		i := nr.rule - 1
		a.Reason, a.Method, a.Path, a.Rule = string(hostpolicy.ReasonRequestDenied), nr.method, nr.path, &i
	}
	if nr.owner != nil {
		a.ExecutionID, a.Command, a.Cwd = nr.owner.ID, append([]string(nil), nr.owner.Command...), nr.owner.Cwd
	}
	if a.Command == nil {
		a.Command = []string{}
	}
	a.flight = f
	policy, reviewer := nr.sess.effective(nr.owner)
	r := s.review(ctx, a, policy, reviewer, netTarget(nr.proto, nr.host, nr.port), "")
	r = s.applyNetworkOutcome(nr, r)
	r.decided = s.finish(a, r, start, s.flightOwners(f), nr)
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
	useGuardian := RoutesToGuardian(policy, reviewer)
	if useGuardian && s.guardian == nil {
		return deny(byPolicy, OutcomeDeny, "no reviewer reachable: the Guardian is not configured")
	}
	if !useGuardian && !s.userReviewer {
		return deny(byPolicy, OutcomeDeny, "no reviewer reachable: no admin token is configured for human review")
	}
	greq := guardian.ReviewRequest{
		ID: a.ID, Kind: a.Kind, SessionID: a.SessionID, EnvironmentID: a.EnvironmentID, ExecutionID: a.ExecutionID,
		Host: a.Host, Protocol: a.Protocol, Port: a.Port, Target: target, Method: a.Method, Path: a.Path, Command: a.Command, Cwd: a.Cwd,
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
		s.openFlight(a.flight, a.ID) // the requesters' waits start now
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
	if nr.rule > 0 {
		// A rule's review amends no host list: the host is allowed already
		// and a deny_always would fence all of it. It holds for the session.
		return r
	}
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
func (s *Service) finish(a Approval, r result, start time.Time, owners []string, nr netReview) Approval {
	now := s.now()
	a.Status, a.Decision, a.Reviewer, a.Rationale = StatusDecided, r.outcome, decidedBy(r), r.rationale
	a.DecidedAt, a.Waiting, a.flight = now.UTC().Format(time.RFC3339Nano), 0, nil
	s.queue.record(a)
	s.bus.publish(EventApprovalDecided, a)
	s.metrics.ApprovalResolved(a.Kind, r.reviewer, r.outcome, now.Sub(start))
	decision := "deny"
	if r.allow {
		decision = "allow"
	}
	if s.audit != nil {
		ev := audit.ApprovalEvent{
			Time: now, Started: start, ApprovalID: a.ID, Kind: a.Kind, Decision: decision, Host: a.Host, Port: a.Port, Protocol: a.Protocol,
			SessionID: a.SessionID, EnvironmentID: a.EnvironmentID, ExecutionID: a.ExecutionID,
			Reviewer: decidedBy(r), Outcome: r.outcome, Rationale: r.rationale,
		}
		if a.Kind == KindNetwork {
			ev.Reason = string(hostpolicy.ReasonNotAllowed)
			if a.Rule != nil {
				ev.Reason, ev.Method, ev.Rule = a.Reason, a.Method, a.Rule
			}
		}
		s.audit.ApprovalResolved(ev)
	}
	s.log.Info("approval resolved", "approval_id", a.ID, "kind", a.Kind, "host", a.Host, "port", a.Port, "reviewer", r.reviewer, "outcome", r.outcome)
	if r.allow || s.publisher == nil || a.Kind != KindNetwork {
		return a
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
	return a
}
