package hostpolicy

import (
	"sync"
	"sync/atomic"
)

// Scopes holds the compiled narrower policies the pipeline's scopes stage
// applies: one per session (PUT /v1/sessions/{id}/network), one per
// active execution (the "network" object of its registration), and one
// per authenticated client ([[proxy_auth.clients]], keyed by the client's
// session id; SPEC §4.4). It is a ScopeSource. Safe for concurrent use.
type Scopes struct {
	// defaultSession is the session of an unattributed request.
	defaultSession string

	mu       sync.RWMutex
	sessions map[string]*Scope
	execs    map[string]*Scope
	// clients are the configured clients' policies by session id, kept
	// apart from sessions so that the control API's PUT/DELETE of a
	// session policy can add to a client's, never replace it.
	clients map[string]*Scope
	// n is len(sessions)+len(execs)+len(clients), read without the lock so that a
	// proxy with no narrower policy pays one atomic load per request.
	n atomic.Int64

	subs subscribers
}

// NewScopes returns an empty store; an unattributed request belongs to
// defaultSession.
func NewScopes(defaultSession string) *Scopes {
	return &Scopes{defaultSession: defaultSession, sessions: map[string]*Scope{}, execs: map[string]*Scope{}, clients: map[string]*Scope{}}
}

// SetExecution installs (sc non-nil) or drops (sc nil) execution id's
// policy. An execution's policy is set before its token is returned and
// dropped when it ends (its connections close then), so nobody is told.
func (s *Scopes) SetExecution(id string, sc *Scope) { s.set(s.execs, id, sc) }

// SetSession installs (sc non-nil) or removes (sc nil) session id's policy
// and tells the subscribers (open connections are re-checked).
func (s *Scopes) SetSession(id string, sc *Scope) {
	s.set(s.sessions, id, sc)
	s.subs.notify()
}

func (s *Scopes) set(m map[string]*Scope, id string, sc *Scope) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if sc == nil {
		delete(m, id)
	} else {
		m[id] = sc
	}
	s.n.Store(int64(len(s.sessions) + len(s.execs) + len(s.clients)))
}

// SetClients replaces every authenticated client's policy at once (a
// reload), keyed by the client's session id, and tells the subscribers
// (open connections are re-checked).
func (s *Scopes) SetClients(bySession map[string]*Scope) {
	s.mu.Lock()
	s.clients = make(map[string]*Scope, len(bySession))
	for id, sc := range bySession {
		if sc != nil {
			s.clients[id] = sc
		}
	}
	s.n.Store(int64(len(s.sessions) + len(s.execs) + len(s.clients)))
	s.mu.Unlock()
	s.subs.notify()
}

// Session returns session id's policy.
func (s *Scopes) Session(id string) (*Scope, bool) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	sc, ok := s.sessions[id]
	return sc, ok
}

// Subscribe registers fn, called after every session policy change; it
// must not block.
func (s *Scopes) Subscribe(fn func()) { s.subs.add(fn) }

// subscribers are the callbacks told of a change (Engine, Scopes); they
// run on the changing goroutine.
type subscribers struct {
	mu  sync.Mutex
	fns []func()
}

func (s *subscribers) add(fn func()) {
	if fn == nil {
		return
	}
	s.mu.Lock()
	s.fns = append(s.fns, fn)
	s.mu.Unlock()
}

func (s *subscribers) notify() {
	s.mu.Lock()
	fns := append([]func(){}, s.fns...)
	s.mu.Unlock()
	for _, fn := range fns {
		fn()
	}
}

// For returns the scopes a request of executionID / sessionID must pass:
// an authenticated client's (its session id), the session's, then the
// execution's. An unattributed request belongs to the default session. It
// returns nil (no allocation) when none applies.
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
	if cs := s.clients[sessionID]; cs != nil && executionID == "" {
		out := []*Scope{cs}
		if ss != nil {
			out = append(out, ss)
		}
		return out
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
