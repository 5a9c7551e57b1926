package approvalsvc

// Sessions and caches: one session's allow and deny caches (SPEC §5 step 2).

import (
	lru "github.com/hashicorp/golang-lru/v2"

	"github.com/netproxy/netproxy/attribution"
	"github.com/netproxy/netproxy/hostpolicy"
)

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
	// rule is an ask request rule's index + 1 (0: a host review): the key
	// of SPEC §5 gains the rule (§3.10).
	rule int
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
