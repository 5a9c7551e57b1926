package proxy

import (
	"errors"
	"io"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/netproxy/netproxy/hostpolicy"
	"github.com/netproxy/netproxy/internal/observe"
	"github.com/netproxy/netproxy/mitm"
)

// Access records (SPEC §7.5 connection_end): every allowed request or
// connection ends with one event to Core.Ends — a plain-HTTP exchange
// (one per request on a keep-alive connection), an intercepted inner
// request, and every tunnel (opaque CONNECT, SOCKS5, an upgraded HTTP
// connection, and an intercepted tunnel's own end). Bytes are counted where
// netproxy_bytes_total counts them; the event is handed over with one
// non-blocking call after the relay is done, never inside it.

// Close reasons of connection_end (docs/observability.md).
const (
	EndComplete       = "complete"        // the exchange's answer was relayed in full
	EndClientClosed   = "client_closed"   // the client ended first (or went away mid-answer)
	EndUpstreamClosed = "upstream_closed" // the upstream ended first (or broke off its answer)
	EndIdleTimeout    = "idle_timeout"    // no byte either way for limits.idle_timeout
	EndPolicyClosed   = "policy_closed"   // closed by a change (SPEC §3.9) or a TLS name not the tunnel's (§3.11)
	EndBudgetExceeded = "budget_exceeded" // the connection crossed its egress byte budget (§3.12)
	EndProxyShutdown  = "proxy_shutdown"  // still open when the shutdown's drain time ran out
	EndRefused        = "refused"         // allowed, then refused at the dial (a refused address)
	EndError          = "error"           // the upstream could not be reached, or another I/O error
)

// endCause is a close reason as an atomic-friendly code; 0: none yet.
type endCause uint32

const (
	causeNone endCause = iota
	causeComplete
	causeClient
	causeUpstream
	causeIdle
	causePolicy
	causeBudget
	causeShutdown
	causeRefused
	causeError
	// causeReset: a reset seen reading one side; the reader names the side
	// (tunnelAccess.readFailed). Never written as such.
	causeReset
)

var causeNames = [...]string{"", EndComplete, EndClientClosed, EndUpstreamClosed, EndIdleTimeout,
	EndPolicyClosed, EndBudgetExceeded, EndProxyShutdown, EndRefused, EndError}

// setCause records c as the reason a connection or tunnel ends, unless one
// was recorded first.
func setCause(a *atomic.Uint32, c endCause) { a.CompareAndSwap(uint32(causeNone), uint32(c)) }

// closeCause is the cause a closer from outside (closeFor) records on conn
// before closing it.
func closeCause(reason string) endCause {
	if reason == CloseBudgetExceeded {
		return causeBudget
	}
	return causePolicy
}

// accessRec is what a connection_end line says of its target, fixed when
// the request was allowed.
type accessRec struct {
	started time.Time
	proto   hostpolicy.Protocol
	host    string
	port    uint16
	method  string
}

func recFor(conn *Conn, d *hostpolicy.Decision, proto hostpolicy.Protocol, method string) accessRec {
	return accessRec{started: conn.arrived, proto: proto, host: d.Host, port: d.Port, method: method}
}

// ended hands one connection_end to the sink: a cause recorded on conn by
// a closer from outside (a change, the budget, the shutdown) wins over
// what the relay saw.
func (c *Core) ended(conn *Conn, r *accessRec, out, in int64, status int, cause endCause) {
	if c.Ends == nil {
		return
	}
	if cc := endCause(conn.endCause.Load()); cc != causeNone {
		cause = cc
	}
	if cause == causeNone || int(cause) >= len(causeNames) {
		cause = causeError
	}
	// The client and session as the request's decision line names them.
	req := c.request(conn, r.host, r.port, r.proto, r.method)
	ev := observe.ConnectionEndEvent{
		Time: time.Now(), Started: r.started, Protocol: r.proto, Host: r.host, Port: r.port, Method: r.method,
		Client: req.Client, ExecutionID: req.ExecutionID, SessionID: req.SessionID, EnvironmentID: req.EnvironmentID,
		BytesOut: out, BytesIn: in, Status: status, Close: causeNames[cause],
	}
	if ev.Started.IsZero() {
		ev.Started = ev.Time
	}
	c.Ends.ConnectionEnd(ev)
}

// exchangeEnd is what the forwarding stage learnt of one plain-HTTP
// exchange (plainConn.end); tunnel: the exchange became a tunnel (101),
// whose own end writes the line.
type exchangeEnd struct {
	status  int
	out, in int64
	cause   endCause
	tunnel  bool
}

// plainEnded writes the connection_end of a plain-HTTP request.
func (c *Core) plainEnded(conn *Conn, d *hostpolicy.Decision, method string, e *exchangeEnd) {
	if c.Ends == nil || e.tunnel {
		return
	}
	r := recFor(conn, d, hostpolicy.ProtoHTTP, method)
	c.ended(conn, &r, e.out, e.in, e.status, e.cause)
}

// answerCause is how a relayed answer ended.
func (w *respWriter) answerCause() endCause {
	switch {
	case errors.Is(w.err, errBudget):
		return causeBudget
	case w.err != nil && w.readErr:
		return causeUpstream
	case w.err != nil:
		return causeClient
	case w.remaining > 0:
		return causeUpstream // a short body: the upstream ended early
	}
	return causeComplete
}

// tunnelAccess counts a tunnel's bytes and the first reason it ended, and
// writes its connection_end when it finishes. nil (no sink): nothing.
//
// Every idle tunnel holds one, so it is kept small (one 96-byte object):
// strings are the decision's own (no copy), the start is unix nanos, the
// protocol and status are small codes.
type tunnelAccess struct {
	core    *Core
	conn    *Conn
	host    string
	method  string
	started int64           // unix nanos; 0: unknown
	bytes   [2]atomic.Int64 // dirUp, dirDown
	cause   atomic.Uint32
	port    uint16
	status  uint16 // an upgraded connection's 101; 0 for the others
	proto   protoCode
	once    sync.Once
}

// protoCode is a tunnel's protocol in one byte.
type protoCode uint8

// protoCodes are the protocols a tunnel can carry, by code.
var protoCodes = [...]hostpolicy.Protocol{hostpolicy.ProtoHTTP, hostpolicy.ProtoHTTPS, hostpolicy.ProtoSOCKS5}

func codeOf(p hostpolicy.Protocol) protoCode {
	for i, q := range protoCodes {
		if q == p {
			return protoCode(i)
		}
	}
	panic("proxy: a tunnel of unknown protocol " + string(p)) // every caller passes a constant
}

// newTunnelAccess is the access record of a tunnel of conn to d, started
// when conn's request arrived.
func (c *Core) newTunnelAccess(conn *Conn, d *hostpolicy.Decision, proto hostpolicy.Protocol, method string, status int) tunnelAccess {
	var started int64
	if !conn.arrived.IsZero() {
		started = conn.arrived.UnixNano()
	}
	return tunnelAccess{core: c, conn: conn, host: d.Host, method: method, started: started,
		port: d.Port, status: uint16(status), proto: codeOf(proto)}
}

// rec is what the tunnel's connection_end line says of its target.
func (a *tunnelAccess) rec() accessRec {
	r := accessRec{proto: protoCodes[a.proto], host: a.host, port: a.port, method: a.method}
	if a.started != 0 {
		r.started = time.Unix(0, a.started)
	}
	return r
}

// tunnelAccess returns the access record of a tunnel of conn to d (nil
// when nothing records connection ends).
func (c *Core) tunnelAccess(conn *Conn, d *hostpolicy.Decision, proto hostpolicy.Protocol, method string, status int) *tunnelAccess {
	if c.Ends == nil || conn == nil {
		return nil
	}
	a := c.newTunnelAccess(conn, d, proto, method, status)
	return &a
}

func (a *tunnelAccess) count(dir int, n int64) {
	if a != nil && n > 0 {
		a.bytes[dir].Add(n)
	}
}

// readFailed records how waiting to read direction dir's source ended: a
// reset is that side's close.
func (a *tunnelAccess) readFailed(dir int, err error) {
	c := errCause(err)
	if c == causeReset {
		c = eofCause[dir]
	}
	a.setCause(c)
}

func (a *tunnelAccess) setCause(c endCause) {
	if c == causeReset {
		c = causeError // a reset on a copy: which side is unknown
	}
	if a != nil {
		setCause(&a.cause, c)
	}
}

// done writes the tunnel's connection_end, once.
func (a *tunnelAccess) done() {
	if a == nil {
		return
	}
	a.once.Do(func() {
		cause := endCause(a.cause.Load())
		if cause == causeNone && a.core.Tracker != nil && a.core.Tracker.Draining() {
			cause = causeShutdown
		}
		r := a.rec()
		a.core.ended(a.conn, &r, a.bytes[dirUp].Load(), a.bytes[dirDown].Load(), int(a.status), cause)
	})
}

// eofCause is the cause of a direction's orderly end: the side it reads.
var eofCause = [2]endCause{causeClient, causeUpstream}

// errCause is the cause of a direction that ended with err.
func errCause(err error) endCause {
	switch {
	case errors.Is(err, syscall.ECONNRESET):
		return causeReset
	case errors.Is(err, os.ErrDeadlineExceeded):
		return causeIdle
	case errors.Is(err, errBudget):
		return causeBudget
	}
	return causeError
}

// mitmAccess is the access record of an intercepted tunnel: each inner
// exchange writes its own connection_end (mitm.Tunnel.Ended); the tunnel's
// own end is written when the interceptor closes the client connection,
// which it wraps.
type mitmAccess struct {
	tunnelAccess
	firstErr atomic.Pointer[error] // the client connection's first read error
	lastRead atomic.Int64          // unix nanos of its last read with data
	idle     time.Duration         // the interceptor's idle limit
}

// endConn is the intercepted client connection: it remembers how reading
// it ended and writes the tunnel's connection_end on Close.
type endConn struct {
	net.Conn
	a *mitmAccess
}

func (e *endConn) Read(p []byte) (int, error) {
	n, err := e.Conn.Read(p)
	if n > 0 {
		e.a.lastRead.Store(time.Now().UnixNano())
	}
	if err != nil {
		e.a.firstErr.CompareAndSwap(nil, &err)
	}
	return n, err
}

func (e *endConn) Close() error {
	err := e.Conn.Close()
	a := e.a
	cause := causeClient // the client ended the TLS session (close_notify)
	if p := a.firstErr.Load(); p != nil {
		switch rerr := *p; {
		case errors.Is(rerr, io.EOF), errors.Is(rerr, syscall.ECONNRESET):
			cause = causeClient
		case errors.Is(rerr, net.ErrClosed):
			// The interceptor closed the session itself: its HTTP/2
			// server after the idle limit, else after a final exchange.
			cause = causeComplete
			if quiet := time.Since(time.Unix(0, a.lastRead.Load())); a.idle > 0 && quiet >= a.idle-time.Second {
				cause = causeIdle
			}
		default:
			cause = errCause(rerr)
		}
	}
	a.setCause(cause)
	a.done()
	return err
}

// interceptAccess wraps client for the access records of an intercepted
// tunnel; ended (nil when nothing records) reports the inner exchanges.
func (c *Core) interceptAccess(conn *Conn, client net.Conn, d *hostpolicy.Decision, proto hostpolicy.Protocol) (net.Conn, *mitmAccess, func(mitm.Exchange)) {
	if c.Ends == nil || conn == nil {
		return client, nil, nil
	}
	method := ""
	if proto == hostpolicy.ProtoHTTPS {
		method = "CONNECT"
	}
	a := &mitmAccess{tunnelAccess: c.newTunnelAccess(conn, d, proto, method, 0)}
	a.lastRead.Store(time.Now().UnixNano())
	if c.MITM != nil {
		a.idle = c.MITM.Idle
		if a.idle <= 0 {
			a.idle = 5 * time.Minute // the interceptor's default
		}
	}
	host, port := d.Host, d.Port
	ended := func(x mitm.Exchange) {
		r := accessRec{started: x.Started, proto: hostpolicy.ProtoHTTPS, host: host, port: port, method: x.Method}
		cause := causeComplete
		switch {
		case x.Failed:
			cause = causeError
		case x.Err != nil:
			cause = causeClient
		}
		c.ended(conn, &r, x.Up, x.Down, x.Status, cause)
	}
	return &endConn{Conn: client, a: a}, a, ended
}

// count adds an inner exchange's bytes to the tunnel's (nil-safe).
func (a *mitmAccess) count(dir string, n int64) {
	if a == nil {
		return
	}
	if dir == "up" {
		a.tunnelAccess.count(dirUp, n)
	} else {
		a.tunnelAccess.count(dirDown, n)
	}
}
