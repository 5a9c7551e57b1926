package hostpolicy

import (
	"context"
	"errors"
	"net/netip"
	"sync"
)

// This file gives the data path what it needs to re-check connections that
// are already open (SPEC §3.9): Recheck judges a pinned target against the
// current snapshot without any lookup, and Subscribe tells the caller after
// every policy change (Swap, Amend) so it can re-check.

// Recheck judges an open connection's target — host, port and the
// addresses actually pinned for it — against the policy current now. It
// never resolves: the addresses given are the answers. The caller closes
// the connection when the reason is denied, not_allowed_local or
// proxy_disabled; not_allowed is no reason to close (a reviewer's
// allowance stands until its scope ends). A name with no pinned address
// is judged not_allowed_local while the local guard is on (fail closed:
// nothing proves where it went).
func (e *Engine) Recheck(host string, port int, addrs []netip.Addr) Decision {
	p := e.state.Load().policy
	req := Request{Host: host}
	if port > 0 && port <= 65535 {
		req.Port = uint16(port)
	}
	if !p.enabled {
		return disabledDecision(req)
	}
	pinned := &Engine{resolver: pinnedResolver(addrs)}
	pinned.amends.Store(e.amends.Load())
	d := pinned.hostDecision(context.Background(), p, req)
	if d.Verdict == Allow && len(addrs) > 0 {
		d.Addrs = addrs
	}
	return d
}

// pinnedResolver answers every name with the addresses already pinned.
type pinnedResolver []netip.Addr

var errNoPinned = errors.New("no pinned address")

func (r pinnedResolver) LookupNetIP(context.Context, string) ([]netip.Addr, error) {
	if len(r) == 0 {
		return nil, errNoPinned
	}
	return r, nil
}

// subscribers are the callbacks of Subscribe.
type subscribers struct {
	mu  sync.Mutex
	fns []func()
}

// Subscribe registers fn to be called after every policy change (Swap,
// Amend). fn runs on the changer's goroutine and must not block.
func (e *Engine) Subscribe(fn func()) {
	e.subs.mu.Lock()
	e.subs.fns = append(e.subs.fns, fn)
	e.subs.mu.Unlock()
}

func (e *Engine) notify() {
	e.subs.mu.Lock()
	fns := append([]func(){}, e.subs.fns...)
	e.subs.mu.Unlock()
	for _, fn := range fns {
		fn()
	}
}
