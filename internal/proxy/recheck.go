package proxy

import (
	"context"
	"net"
	"net/netip"
	"slices"
	"time"

	"github.com/netproxy/netproxy/hostpolicy"
	"github.com/netproxy/netproxy/internal/observe"
)

// Open connections and policy changes (SPEC §3.9, §4.2).
//
// Every admitted *Conn is already in the Tracker (one lock per connection,
// taken at admission and at close, never per request). What a connection
// carries traffic to — its flow: target host, port, pinned addresses, and
// the upstream socket of a tunnel — is published on the Conn with one
// atomic store when a request is allowed (none at all when a keep-alive
// client asks for the same target again). A change to the policy, the kill
// switch or the execution registry walks the Tracker's set, re-judges each
// flow, and closes what the new state no longer allows.
//
// A request decided under the old state but not yet bound when the walk
// passes would escape it; the Tracker's generation closes that gap: a
// request reads it before deciding and compares after binding, and re-checks
// itself when a walk began in between.

// Close reasons of connection_closed (SPEC §3.9) and
// netproxy_connections_closed_total.
const (
	CloseDenied         = string(hostpolicy.ReasonDenied)
	CloseNotAllowedLoc  = string(hostpolicy.ReasonNotAllowedLocal)
	CloseProxyDisabled  = string(hostpolicy.ReasonProxyDisabled)
	CloseExecutionEnded = "execution_ended"
	ClosePolicyDenied   = string(hostpolicy.ReasonPolicyDenied)
)

// flow is what an open connection carries traffic to. Immutable once
// published.
type flow struct {
	host     string
	port     uint16
	proto    protoCode    // one byte (access.go): every idle tunnel holds a flow
	addrs    []netip.Addr // the pinned (or dialed) addresses
	upstream net.Conn     // a tunnel's upstream socket; nil for plain HTTP and MITM
}

func (f *flow) sameTarget(d *hostpolicy.Decision, proto hostpolicy.Protocol) bool {
	return f.host == d.Host && f.port == d.Port && f.proto == codeOf(proto) && f.upstream == nil && slices.Equal(f.addrs, d.Addrs)
}

// generation is read by a request before it is decided (see bind).
func (c *Conn) generation() uint64 {
	if c.tracker == nil {
		return 0
	}
	return c.tracker.gen.Load()
}

// bindPlain publishes a plain-HTTP request's allowed target on c (no
// allocation when the target is the connection's last one) and reports
// false when a change since gen no longer allows it; c is then closed.
func (core *Core) bindPlain(c *Conn, d *hostpolicy.Decision, gen uint64) bool {
	if f := c.flow.Load(); f == nil || !f.sameTarget(d, hostpolicy.ProtoHTTP) {
		c.flow.Store(&flow{host: d.Host, port: d.Port, addrs: d.Addrs, proto: codeOf(hostpolicy.ProtoHTTP)})
	}
	return core.settle(c, gen)
}

// bindTunnel publishes a tunnel's target and upstream socket on c; false
// means a change since gen no longer allows it and both sockets are closed.
func (core *Core) bindTunnel(c *Conn, d *hostpolicy.Decision, proto hostpolicy.Protocol, up net.Conn, gen uint64) bool {
	addrs := d.Addrs
	if len(addrs) == 0 && up != nil && core.Dialer != nil && core.Dialer.Parent == "" {
		// allow_local_binding skipped the guard: the address dialed is
		// the one that counts.
		if ta, ok := up.RemoteAddr().(*net.TCPAddr); ok {
			addrs = []netip.Addr{ta.AddrPort().Addr().Unmap()}
		}
	}
	c.flow.Store(&flow{host: d.Host, port: d.Port, addrs: addrs, proto: codeOf(proto), upstream: up})
	return core.settle(c, gen)
}

func (core *Core) settle(c *Conn, gen uint64) bool {
	if c.tracker == nil || c.tracker.gen.Load() == gen {
		return true
	}
	// A re-check walk began after this request was decided: judge it here.
	if reason, bad := core.judge(c); bad {
		core.closeFor(c, reason)
		return false
	}
	return true
}

// judge reports whether c must be closed under the current state, and why.
func (core *Core) judge(c *Conn) (string, bool) {
	if c.Attributed && !core.stillAttributed(c) {
		return CloseExecutionEnded, true
	}
	f := c.flow.Load()
	if f == nil || core.Pipeline == nil {
		return "", false
	}
	// The pipeline's re-check preset: the flow's pinned addresses, no DNS
	// query, no decider; the execution's and session's narrower policies.
	req := hostpolicy.Request{Host: f.host, Port: f.port}
	if c.Attributed {
		req.ExecutionID, req.SessionID = c.Exec.ID, c.Exec.SessionID
	} else if _, session := c.identity(); session != "" {
		req.SessionID = session // an authenticated client's narrower policy
	}
	d := core.Pipeline.Run(context.Background(), req, hostpolicy.RunOptions{Resolve: hostpolicy.ResolvePinned, Pinned: f.addrs})
	switch d.Reason {
	case hostpolicy.ReasonDenied, hostpolicy.ReasonNotAllowedLocal, hostpolicy.ReasonProxyDisabled, hostpolicy.ReasonPolicyDenied:
		return string(d.Reason), true
	}
	return "", false
}

// closeFor closes c (and its tunnel's upstream) for reason, once; the
// close is counted, audited and logged.
func (core *Core) closeFor(c *Conn, reason string) bool {
	if !c.revoked.CompareAndSwap(false, true) {
		return false
	}
	f := c.flow.Load()
	setCause(&c.endCause, closeCause(reason)) // before the close: the relay's end reads it
	if f != nil && f.upstream != nil {
		f.upstream.Close() // no byte more reaches the upstream
	}
	c.Close()
	core.Meter.ConnectionClosedByPolicy(reason)
	ev := observe.ConnectionClosedEvent{Time: time.Now(), Reason: reason, Client: c.clientAddr()}
	if f != nil {
		ev.Protocol, ev.Host, ev.Port = protoCodes[f.proto], f.host, f.port
	}
	if c.Attributed {
		ev.ExecutionID, ev.SessionID, ev.EnvironmentID = c.Exec.ID, c.Exec.SessionID, c.Exec.EnvironmentID
	} else if name, session := c.identity(); name != "" {
		ev.Client, ev.SessionID = name, session
	}
	if core.Closed != nil {
		core.Closed.ConnectionClosed(ev)
	}
	core.logger().Info("connection closed by a change", "reason", reason, "listener", c.Listener,
		"host", ev.Host, "port", int(ev.Port), "execution_id", ev.ExecutionID)
	return true
}

// Recheck re-judges every open connection against the current policy and
// execution registry and closes those no longer allowed (SPEC §3.9). It
// returns how many it closed.
func (core *Core) RecheckOpen() int {
	conns := core.Tracker.begin()
	n := 0
	for _, c := range conns {
		if reason, bad := core.judge(c); bad && core.closeFor(c, reason) {
			n++
		}
	}
	return n
}

// CloseExecution closes every open connection attributed to execution id
// (its end revokes them at once, SPEC §4.2) and returns how many.
func (core *Core) CloseExecution(id string) int {
	conns := core.Tracker.begin()
	n := 0
	for _, c := range conns {
		if c.Attributed && c.Exec.ID == id && core.closeFor(c, CloseExecutionEnded) {
			n++
		}
	}
	return n
}

// CloseAllFor closes every open connection (the kill switch) and returns
// how many.
func (core *Core) CloseAllFor(reason string) int {
	conns := core.Tracker.begin()
	n := 0
	for _, c := range conns {
		if core.closeFor(c, reason) {
			n++
		}
	}
	return n
}

// Rechecks runs RecheckOpen after every change it is kicked for, on its
// own goroutine, coalescing kicks that arrive while a walk runs.
type Rechecks struct {
	core *Core
	kick chan struct{}
	// Before runs at the start of each walk (e.g. dropping pooled upstream
	// connections, which were dialed under the old policy).
	Before func()
}

// NewRechecks returns the re-check loop over core (start it with Run).
func NewRechecks(core *Core) *Rechecks {
	return &Rechecks{core: core, kick: make(chan struct{}, 1)}
}

// Kick asks for a walk; it never blocks (safe from Engine.Subscribe).
func (r *Rechecks) Kick() {
	if core := r.core; core.Tracker != nil {
		// Requests deciding now re-check themselves once they bind.
		core.Tracker.gen.Add(1)
	}
	select {
	case r.kick <- struct{}{}:
	default:
	}
}

// Run walks the open connections after each kick until ctx is done.
func (r *Rechecks) Run(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-r.kick:
			if r.Before != nil {
				r.Before()
			}
			r.core.RecheckOpen()
		}
	}
}
