// Package rollout owns the safe-rollout layer around the live decision
// engine (issue 15): the shadow (candidate) policy judged beside every live
// decision, and the narrower per-execution and per-session network
// policies that every request of that execution or session must also pass.
//
// It must never change a live decision because of the shadow policy, never
// let a narrower policy widen the host-wide chain, never resolve a name or
// call a reviewer for the shadow policy, and never record a token, a query
// string or a header value.
package rollout

import (
	"sync"
	"sync/atomic"

	"github.com/netproxy/netproxy/attribution"
	"github.com/netproxy/netproxy/hostpolicy"
)

// Scopes holds the compiled narrower policies: one per session (PUT
// /v1/sessions/{id}/network) and one per active execution (the "network"
// object of its registration). Safe for concurrent use.
type Scopes struct {
	mu       sync.RWMutex
	sessions map[string]*hostpolicy.Scope
	execs    map[string]*hostpolicy.Scope
	// n is len(sessions)+len(execs), read without the lock so that a
	// proxy with no narrower policy pays one atomic load per request.
	n atomic.Int64

	subsMu sync.Mutex
	subs   []func()
}

// NewScopes returns an empty store.
func NewScopes() *Scopes {
	return &Scopes{sessions: map[string]*hostpolicy.Scope{}, execs: map[string]*hostpolicy.Scope{}}
}

// SpecOf maps the control API's policy onto hostpolicy's.
func SpecOf(p attribution.NetworkPolicy) hostpolicy.ScopeSpec {
	return hostpolicy.ScopeSpec{Allow: p.Allow, Deny: p.Deny, Mode: p.Mode}
}

// denyAll is a scope that blocks everything: what an execution whose
// policy cannot be compiled gets (fail closed).
func denyAll(level string) *hostpolicy.Scope {
	sc, err := hostpolicy.BuildScope(level, hostpolicy.ScopeSpec{Allow: []string{"invalid.invalid"}})
	if err != nil {
		panic("rollout: deny-all scope: " + err.Error())
	}
	return sc
}

// ExecutionChanged is the registry hook: a started execution's policy is
// compiled, an ended one's dropped.
func (s *Scopes) ExecutionChanged(kind string, e attribution.Execution) {
	switch kind {
	case attribution.ExecutionStarted:
		if e.Network == nil {
			return
		}
		sc, err := hostpolicy.BuildScope(hostpolicy.LevelExecution, SpecOf(*e.Network))
		if err != nil {
			// Validated at registration; if it still fails, fail closed.
			sc = denyAll(hostpolicy.LevelExecution)
		}
		s.mu.Lock()
		s.execs[e.ID] = sc
		s.count()
		s.mu.Unlock()
	case attribution.ExecutionEnded:
		s.mu.Lock()
		delete(s.execs, e.ID)
		s.count()
		s.mu.Unlock()
	}
}

// SetSession installs (sc non-nil) or removes (sc nil) session id's policy
// and tells the subscribers (open connections are re-checked).
func (s *Scopes) SetSession(id string, sc *hostpolicy.Scope) {
	s.mu.Lock()
	if sc == nil {
		delete(s.sessions, id)
	} else {
		s.sessions[id] = sc
	}
	s.count()
	s.mu.Unlock()
	s.notify()
}

// count refreshes n; the caller holds mu.
func (s *Scopes) count() { s.n.Store(int64(len(s.sessions) + len(s.execs))) }

// Session returns session id's policy.
func (s *Scopes) Session(id string) (*hostpolicy.Scope, bool) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	sc, ok := s.sessions[id]
	return sc, ok
}

// Subscribe registers fn, called after every session policy change; it
// must not block.
func (s *Scopes) Subscribe(fn func()) {
	s.subsMu.Lock()
	s.subs = append(s.subs, fn)
	s.subsMu.Unlock()
}

func (s *Scopes) notify() {
	s.subsMu.Lock()
	subs := append([]func(){}, s.subs...)
	s.subsMu.Unlock()
	for _, fn := range subs {
		fn()
	}
}

// For returns the scopes a request of executionID / sessionID must pass:
// the session's, then the execution's. An unattributed request belongs to
// the default session. It returns nil (no allocation) when none applies.
func (s *Scopes) For(executionID, sessionID string) []*hostpolicy.Scope {
	if s.n.Load() == 0 {
		return nil
	}
	if sessionID == "" && executionID == "" {
		sessionID = attribution.DefaultSession
	}
	s.mu.RLock()
	defer s.mu.RUnlock()
	ss := s.sessions[sessionID]
	var es *hostpolicy.Scope
	if executionID != "" {
		es = s.execs[executionID]
	}
	switch {
	case ss == nil && es == nil:
		return nil
	case ss == nil:
		return []*hostpolicy.Scope{es}
	case es == nil:
		return []*hostpolicy.Scope{ss}
	}
	return []*hostpolicy.Scope{ss, es}
}
