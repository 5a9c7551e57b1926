package orchestrator

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/netproxy/netproxy/attribution"
	"github.com/netproxy/netproxy/sandbox"
	"github.com/netproxy/netproxy/sandbox/netctl"
)

// netSession is a proxied attempt's execution at netproxy: registered
// before the sandbox starts, its event stream read while the command runs
// (denials, denied_by_user), unregistered at the end.
type netSession struct {
	a         *Attempter
	regCh     chan regOutcome // the registration, until the sandbox's resolver takes it
	consumed  bool            // the resolver took it
	reg       netctl.Registration
	collected chan struct{} // closed when the event stream ended

	mu      sync.Mutex
	denials []NetworkDenial
	byUser  bool
}

type regOutcome struct {
	reg    netctl.Registration
	events <-chan attribution.Event
	err    error
}

// startNetwork registers and subscribes before the sandbox starts: the
// credential placeholders and the CA bundle must be in the command's
// environment (docs/credentials.md), and the command starts only after
// ProxyResolve returned, so the event stream is live before any request
// can be made.
func (a *Attempter) startNetwork(ctx, evCtx context.Context, spec *sandbox.Spec) *netSession {
	n := &netSession{a: a, regCh: make(chan regOutcome, 1), collected: make(chan struct{})}
	close(n.collected)
	o := a.register(ctx, evCtx)
	n.regCh <- o
	applyCredentials(spec, o.reg)
	stop := make(chan struct{})
	spec.Stop = stop
	spec.ProxyResolve = func(rctx context.Context) (*sandbox.ProxyTarget, error) { return n.resolve(rctx, stop) }
	return n
}

func (n *netSession) resolve(ctx context.Context, stop chan struct{}) (*sandbox.ProxyTarget, error) {
	var o regOutcome
	select {
	case o = <-n.regCh:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	n.consumed = true
	if o.err != nil {
		return nil, fmt.Errorf("--network proxied: %w", o.err)
	}
	n.reg = o.reg
	n.collected = make(chan struct{})
	go n.collect(o.events, stop, n.collected)
	return &sandbox.ProxyTarget{
		HTTPAddr: n.reg.HTTPProxy, SOCKS5Addr: n.reg.SOCKS5Proxy, Token: n.reg.Token,
		WriteFrame: attribution.WriteFrame,
	}, nil
}

// collect reads the execution's events: a denied_by_user stops the
// command; every non-allow decision is a denial.
func (n *netSession) collect(events <-chan attribution.Event, stop, collected chan struct{}) {
	defer close(collected)
	var once sync.Once
	for ev := range events {
		n.mu.Lock()
		switch ev.Type {
		case attribution.EventDeniedByUser:
			n.byUser = true
			once.Do(func() { close(stop) })
		case attribution.EventNetworkDecision, attribution.EventDeniedByPolicy:
			if ev.Decision != "allow" && ev.Host != "" {
				n.denials = appendDenial(n.denials, NetworkDenial{Host: ev.Host, Port: ev.Port,
					Protocol: ev.Protocol, Reason: ev.Reason, Source: ev.Source, Decision: ev.Decision})
			}
		}
		n.mu.Unlock()
	}
}

// finish undoes the registration and returns the execution id ("" when
// none was made); wait gives the event stream a moment to end so late
// decisions count.
func (n *netSession) finish(wait bool) string {
	if !n.consumed {
		// The sandbox failed before it needed the proxy: finish and
		// undo the registration.
		if o := <-n.regCh; o.err == nil {
			n.reg = o.reg
		}
	}
	if n.reg.ExecutionID == "" {
		return ""
	}
	// Events of this execution end with execution_ended after the
	// DELETE.
	uctx, ucancel := context.WithTimeout(context.Background(), netctl.QuickTimeout)
	_ = n.a.Control.Unregister(uctx, n.reg.ExecutionID)
	ucancel()
	// The denials decide nothing after a success and are only printed
	// with --json: the caller skips the wait then.
	if wait {
		select {
		case <-n.collected:
		case <-time.After(2 * time.Second):
		}
	}
	return n.reg.ExecutionID
}

// outcome is what the event stream said (nothing without a session).
func (n *netSession) outcome() ([]NetworkDenial, bool) {
	if n == nil {
		return nil, false
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.denials, n.byUser
}

// register creates the execution and opens its event stream (on evCtx, so
// the stream ends with the attempt). A failure after registering
// unregisters again.
func (a *Attempter) register(ctx, evCtx context.Context) regOutcome {
	rctx, rcancel := context.WithTimeout(ctx, netctl.QuickTimeout)
	defer rcancel()
	reg, err := a.Control.Register(rctx, a.Execution)
	if err != nil {
		return regOutcome{err: err}
	}
	for _, n := range reg.NetworkNotes {
		fmt.Fprintf(a.Notes, "execwrap run: note: %s\n", n)
	}
	events, err := a.Control.Events(evCtx, reg.ExecutionID)
	if err != nil {
		uctx, ucancel := context.WithTimeout(context.Background(), netctl.QuickTimeout)
		_ = a.Control.Unregister(uctx, reg.ExecutionID)
		ucancel()
		return regOutcome{err: fmt.Errorf("event stream: %w", err)}
	}
	return regOutcome{reg: reg, events: events}
}

func appendDenial(ds []NetworkDenial, d NetworkDenial) []NetworkDenial {
	for _, x := range ds {
		if x == d {
			return ds
		}
	}
	return append(ds, d)
}
