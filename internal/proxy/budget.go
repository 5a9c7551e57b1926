package proxy

import (
	"errors"
	"io"
	"net"

	"github.com/netproxy/netproxy/attribution"
	"github.com/netproxy/netproxy/hostpolicy"
)

// Egress budgets (SPEC §3.12, docs/policy.md "Budgets"). A budgeted
// execution's *attribution.Budget is put on each of its connections at
// attribution (accept.go); an unbudgeted connection carries nil and pays a
// nil check. Every admitted decision (a plain request, a CONNECT, a SOCKS5
// CONNECT, each request inside an intercepted tunnel) is counted by the
// pipeline's admission stage, after the others: a request refused for
// another reason costs no budget. Relayed bytes are counted where
// netproxy_bytes_total counts them; a direction with a byte limit copies at
// most what remains before it looks again, so the connection that crosses
// the limit is closed within one copy (connection_closed, reason
// budget_exceeded). All counting is atomics on the Budget: no lock.

// CloseBudgetExceeded is the connection_closed reason of a connection
// closed because it crossed a byte budget.
const CloseBudgetExceeded = string(hostpolicy.ReasonBudgetExceeded)

// budgetSlice bounds one budgeted copy, so that the usage other
// connections of the execution see is at most this far behind.
const budgetSlice = 256 << 10

// errBudget ends a relay whose connection a byte budget closed.
var errBudget = errors.New("egress budget exceeded")

// budgetCause maps a limit to the decision's cause.
var budgetCause = map[string]hostpolicy.Cause{
	attribution.LimitBytesOut: hostpolicy.CauseBudgetBytesOut,
	attribution.LimitBytesIn:  hostpolicy.CauseBudgetBytesIn,
	attribution.LimitRequests: hostpolicy.CauseBudgetRequests,
	attribution.LimitHosts:    hostpolicy.CauseBudgetHosts,
}

// admitter is the admission stage for conn's outer decisions: the
// proxy's own (admission.go), then the budget when conn has one.
func (c *Core) admitter(conn *Conn) hostpolicy.Admitter {
	if conn == nil || conn.budget == nil {
		return c
	}
	return c.budgetAdmitter(conn)
}

// budgetAdmitter returns conn's admitter, made once per connection (its
// decisions then allocate nothing for it). An outer decision always comes
// before the inner ones of its tunnel, on the connection's goroutine.
func (c *Core) budgetAdmitter(conn *Conn) *budgetAdmit {
	if conn.budgetAdm == nil {
		conn.budgetAdm = &budgetAdmit{core: c, conn: conn}
	}
	return conn.budgetAdm
}

// innerOptions are the run options of a request inside conn's intercepted
// tunnel: the inner preset, with the budget as its admission when conn
// has one.
func (c *Core) innerOptions(conn *Conn) hostpolicy.RunOptions {
	o := hostpolicy.RunOptions{Inner: true}
	if conn != nil && conn.budget != nil {
		o.Admit = (*innerBudgetAdmit)(c.budgetAdmitter(conn))
	}
	return o
}

// budgetAdmit is a budgeted connection's admission stage.
type budgetAdmit struct {
	core *Core
	conn *Conn
	// in and out are the connection's body counters, reused by each
	// request (one request's bodies are done before the next is read).
	in, out budgetedBody
}

// Admit runs the proxy's admission stages, then counts the request.
func (a *budgetAdmit) Admit(req hostpolicy.Request, d hostpolicy.Decision) hostpolicy.Decision {
	d = a.core.Admit(req, d)
	if d.Allowed() {
		a.core.admitBudget(a.conn.budget, &d)
	}
	return d
}

// innerBudgetAdmit counts a request inside an intercepted tunnel (the
// proxy's own admission stages are for outer requests only).
type innerBudgetAdmit budgetAdmit

func (a *innerBudgetAdmit) Admit(_ hostpolicy.Request, d hostpolicy.Decision) hostpolicy.Decision {
	a.core.admitBudget(a.conn.budget, &d)
	return d
}

// admitBudget counts an allowed decision against b, or blocks it with
// budget_exceeded naming the limit.
func (c *Core) admitBudget(b *attribution.Budget, d *hostpolicy.Decision) {
	limit := b.Admit(d.Host)
	if limit == "" {
		return
	}
	c.Meter.BudgetExceeded(limit)
	d.Verdict, d.Reason, d.Source, d.Intercept = hostpolicy.Deny, hostpolicy.ReasonBudgetExceeded, hostpolicy.SourceProxyState, false
	d.Cause = budgetCause[limit]
	d.Steps = append(d.Steps, hostpolicy.Step{Step: hostpolicy.StepMode, Result: hostpolicy.ResultBlock, Detail: "budget " + limit + " used up"})
}

// budgetBlock is the decision of a request a budget refused outside the
// pipeline (inside a tunnel intercepted only for a credential, whose inner
// requests are not re-decided); nil when b admits it.
func (c *Core) budgetBlock(b *attribution.Budget, host string, port uint16) *hostpolicy.Decision {
	d := hostpolicy.Decision{Verdict: hostpolicy.Allow, Host: host, Port: port}
	c.admitBudget(b, &d)
	if d.Allowed() {
		return nil
	}
	return &d
}

// budgetExceeded closes conn because it crossed a byte limit: counted,
// audited (connection_closed) and logged.
func (c *Core) budgetExceeded(conn *Conn, limit string) {
	if conn == nil {
		return
	}
	if c.closeFor(conn, CloseBudgetExceeded) {
		c.Meter.BudgetExceeded(limit)
	}
}

// countBytes adds n bytes relayed in a direction to conn's budget and
// closes conn when that crossed the limit; it reports whether it did.
func (c *Core) countBytes(conn *Conn, up bool, n int64) bool {
	b := conn.budget
	if up && b.AddOut(n) {
		c.budgetExceeded(conn, attribution.LimitBytesOut)
		return true
	}
	if !up && b.AddIn(n) {
		c.budgetExceeded(conn, attribution.LimitBytesIn)
		return true
	}
	return false
}

// budgetReader counts a plain-HTTP body against conn's budget (up: the
// request body, else the response body): it reads at most what remains
// (and one byte past it, to tell the end of the body from more), and
// closes the connection when the limit is crossed. Unbudgeted: r itself.
func (c *Core) budgetReader(conn *Conn, r io.ReadCloser, up bool) io.ReadCloser {
	if conn.budget == nil {
		return r
	}
	a := c.budgetAdmitter(conn)
	bb := &a.in
	if up {
		bb = &a.out
	}
	*bb = budgetedBody{core: c, conn: conn, r: r, up: up}
	return bb
}

type budgetedBody struct {
	core *Core
	conn *Conn
	r    io.ReadCloser
	up   bool
	done bool
}

func (b *budgetedBody) Read(p []byte) (int, error) {
	if b.done {
		return 0, errBudget
	}
	if rem, limited := b.conn.budget.Remaining(b.up); limited && int64(len(p)) > rem+1 {
		p = p[:rem+1]
	}
	n, err := b.r.Read(p)
	if n > 0 && b.core.countBytes(b.conn, b.up, int64(n)) {
		b.done = true
		return 0, errBudget // nothing of what crossed the limit is relayed
	}
	return n, err
}

func (b *budgetedBody) Close() error { return b.r.Close() }

// tunnelBudget is a tunnel's budget: the connection it belongs to.
type tunnelBudget struct {
	core *Core
	conn *Conn
}

// tunnelBudget returns the budget of a tunnel made of conn (nil: none).
func (c *Core) tunnelBudget(conn *Conn) *tunnelBudget {
	if conn == nil || conn.budget == nil {
		return nil
	}
	return &tunnelBudget{core: c, conn: conn}
}

// count adds bytes moved outside a copy (the early bytes).
func (tb *tunnelBudget) count(dir int, n int64) {
	if tb != nil && n > 0 {
		tb.core.countBytes(tb.conn, dir == dirUp, n)
	}
}

// copyDir is one copy of a tunnel's burst: unbudgeted, io.Copy (splice);
// budgeted, slices of at most what remains (still spliced: the kernel
// path takes an *io.LimitedReader), each counted, until the source is
// drained, quiet or the limit crossed (errBudget: the connection is
// closed).
func (t *Tunnel) copyDir(dst, src *net.TCPConn, dir int) (int64, error) {
	tb := t.budget
	if tb == nil {
		return io.Copy(dst, src)
	}
	up := dir == dirUp
	var total int64
	for {
		slice := int64(budgetSlice)
		if rem, limited := tb.conn.budget.Remaining(up); limited {
			// One byte past what remains tells more data from the end.
			slice = min(slice, rem+1)
		}
		lr := io.LimitedReader{R: src, N: slice}
		n, err := io.Copy(dst, &lr)
		total += n
		if n > 0 && tb.core.countBytes(tb.conn, up, n) {
			return total, errBudget
		}
		if err != nil || lr.N > 0 {
			return total, err // an error, a deadline, or the source's end
		}
	}
}
