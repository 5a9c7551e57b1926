package attribution

// Executions registered on another replica (cluster mode, docs/cluster.md).

// TokenKey returns the SHA-256 digest of an active execution's token (never
// the token: the registry does not keep it), for sharing with replicas.
func (r *Registry) TokenKey(id string) ([32]byte, bool) {
	r.mu.RLock()
	defer r.mu.RUnlock()
	en, ok := r.byID[id]
	if !ok {
		return [32]byte{}, false
	}
	return en.tokenKey, true
}

// Adopt adds an execution registered on another replica under its id and
// the digest of its token, so a framed connection carrying the token is
// attributed here too. Ending it goes through Revoke, like a local one. It
// reports false when the id or the token digest is already present (it then
// changes nothing). Change hooks run as for Register.
func (r *Registry) Adopt(e Execution, tokenKey [32]byte) bool {
	if e.ID == "" {
		return false
	}
	e.Command = append([]string(nil), e.Command...)
	// Usage is counted per replica: the adopted execution starts its own.
	r.attachBudget(&e, e.Budgets)
	r.mu.Lock()
	if _, dup := r.byID[e.ID]; dup {
		r.mu.Unlock()
		return false
	}
	if _, dup := r.byToken[tokenKey]; dup {
		r.mu.Unlock()
		return false
	}
	r.byID[e.ID] = &entry{exec: e, tokenKey: tokenKey, subs: make(map[int]chan Event)}
	r.byToken[tokenKey] = e.ID
	hooks := append([]func(string, Execution){}, r.hooks...)
	r.mu.Unlock()
	for _, h := range hooks {
		h(ExecutionStarted, e)
	}
	return true
}

// SetMissResolver installs the cluster's read-through (SPEC §7.7): ByToken
// asks fn about a token digest it does not hold; fn adopts the execution
// (through Adopt) when the cluster knows it and reports whether it did. fn
// bounds its own wait (ByToken has no context: it sits on the admission
// path, whose first-byte deadline bounds the connection anyway). Set once,
// before connections are served.
func (r *Registry) SetMissResolver(fn func(tokenKey [32]byte) bool) {
	r.mu.Lock()
	r.miss = fn
	r.mu.Unlock()
}
