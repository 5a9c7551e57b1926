package hostpolicy

import (
	"sync"
	"sync/atomic"
)

// Scopes holds the compiled narrower policies the pipeline's scopes stage
// applies: one per session (PUT /v1/sessions/{id}/network) and one per
// active execution (the "network" object of its registration). It is a
// ScopeSource. Safe for concurrent use.
type Scopes struct {
	// defaultSession is the session of an unattributed request.
	defaultSession string

	mu       sync.RWMutex
	sessions map[string]*Scope
	execs    map[string]*Scope
	// n is len(sessions)+len(execs), read without the lock so that a
	// proxy with no narrower policy pays one atomic load per request.
	n atomic.Int64

	subsMu sync.Mutex
	subs   []func()
}

// NewScopes returns an empty store; an unattributed request belongs to
// defaultSession.
func NewScopes(defaultSession string) *Scopes {
	return &Scopes{defaultSession: defaultSession, sessions: map[string]*Scope{}, execs: map[string]*Scope{}}
}

// SetExecution installs (sc non-nil) or drops (sc nil) execution id's
// policy. An execution's policy is set before its token is returned and
// dropped when it ends (its connections close then), so nobody is told.
func (s *Scopes) SetExecution(id string, sc *Scope) {
	s.mu.Lock()
	if sc == nil {
		delete(s.execs, id)
	} else {
		s.execs[id] = sc
	}
	s.count()
	s.mu.Unlock()
}

// SetSession installs (sc non-nil) or removes (sc nil) session id's policy
// and tells the subscribers (open connections are re-checked).
func (s *Scopes) SetSession(id string, sc *Scope) {
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
func (s *Scopes) Session(id string) (*Scope, bool) {
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
func (s *Scopes) For(executionID, sessionID string) []*Scope {
	if s.n.Load() == 0 {
		return nil
	}
	if sessionID == "" && executionID == "" {
		sessionID = s.defaultSession
	}
	s.mu.RLock()
	defer s.mu.RUnlock()
	ss := s.sessions[sessionID]
	var es *Scope
	if executionID != "" {
		es = s.execs[executionID]
	}
	switch {
	case ss == nil && es == nil:
		return nil
	case ss == nil:
		return []*Scope{es}
	case es == nil:
		return []*Scope{ss}
	}
	return []*Scope{ss, es}
}
