package credentials

// Placeholders across cluster replicas (SPEC §7.7): a replica that finds a
// candidate body it does not hold asks the cluster store (one lookup for
// all the candidates of a request) before deciding; the store keeps only
// digests of bodies with their execution and credential, never a secret.
// When the store cannot answer, the request is blocked (fail closed): an
// unresolved candidate might be another replica's placeholder.

// Bound is the owner of a placeholder body held elsewhere.
type Bound struct {
	Exec string // execution id
	Cred string // credential name
	// Keep: the execution is held by this replica's registry (its end
	// reaches Forget), so the binding may be kept and the next request
	// decided without the store.
	Keep bool
}

// RemoteStore is the cluster's placeholder store.
type RemoteStore interface {
	// Publish stores an execution's new placeholders (body → credential).
	Publish(execID string, bodies map[string]string)
	// Lookup returns the owners of those of bodies that are live
	// placeholders; an error means the store could not answer.
	Lookup(bodies []string) (map[string]Bound, error)
}

// UnverifiedCredential is the credential name of a block because the
// store could not tell whether a candidate is a placeholder.
const UnverifiedCredential = "(unverified: cluster store unreachable)"

type remoteBox struct{ r RemoteStore }

// SetRemote installs the cluster's store (nil: single node). From then on
// the body lengths of the configured credentials are scanned even when this
// replica holds no placeholder.
func (b *Broker) SetRemote(r RemoteStore) {
	if r == nil {
		b.remote.Store(nil)
		return
	}
	b.remote.Store(&remoteBox{r})
}

func (b *Broker) remoteStore() RemoteStore {
	if x := b.remote.Load(); x != nil {
		return x.r
	}
	return nil
}

// publish hands freshly minted placeholders to the store.
func (b *Broker) publish(execID string, out []Placeholder, bodies []string) {
	r := b.remoteStore()
	if r == nil {
		return
	}
	m := make(map[string]string, len(bodies))
	for i, body := range bodies {
		m[body] = out[i].Credential
	}
	r.Publish(execID, m)
}

// setLens adds the body lengths of set's credentials to lens (each once).
func setLens(set *Set, lens []int) []int {
	for _, c := range set.creds {
		n := c.spec.PlaceholderLength - len(c.spec.PlaceholderPrefix)
		found := false
		for _, l := range lens {
			found = found || l == n
		}
		if !found && n > 0 {
			lens = append(lens, n)
		}
	}
	return lens
}

// resolveRemote decides the candidates not held locally with one store
// lookup: the owners found join own (or block the request); bindings of
// executions this replica holds are kept. It returns the bindings found
// (for the header rewrite) and, on a block, the credential's name.
func (b *Broker) resolveRemote(r RemoteStore, set *Set, execID, host string, misses []string, own *[]binding) (map[string]binding, string, bool) {
	found, err := r.Lookup(misses)
	if err != nil {
		return nil, UnverifiedCredential, false
	}
	out := map[string]binding{}
	for _, body := range misses {
		o, ok := found[body]
		if !ok {
			continue
		}
		c := set.byName[o.Cred]
		if c == nil {
			continue // a credential not configured here: dead
		}
		bd := binding{exec: o.Exec, cred: o.Cred}
		if bd.exec != execID || !c.matches(host) {
			return nil, bd.cred, false
		}
		out[body] = bd
		*own = append(*own, bd)
		if o.Keep {
			b.keep(body, bd)
		}
	}
	return out, "", true
}

// keep binds a body read from the store locally, as if minted here.
func (b *Broker) keep(body string, bd binding) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if _, ok := b.byBody[body]; ok {
		return
	}
	b.byBody[body] = bd
	b.index.add(body)
	b.byExec[bd.exec] = append(b.byExec[bd.exec], body)
	b.live.Add(1)
}
