package proxy

// Accepting connections: the Gate admits each accepted connection (the
// connection limit of the Tracker, the attribution frame) before a front
// end sees it; the Tracker holds every admitted *Conn.

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/netproxy/netproxy/attribution"
	"github.com/netproxy/netproxy/metrics"
)

// Conn is an admitted client connection. It embeds the raw *net.TCPConn so
// tunnels can splice between sockets, and carries the connection's
// attribution.
type Conn struct {
	*net.TCPConn
	// Listener is "http" or "socks5" (the metrics label).
	Listener string
	// Exec names the attributed execution; zero when unattributed.
	Exec       ExecIDs
	Attributed bool

	tracker *Tracker
	idle    atomic.Bool
	closed  atomic.Bool
	client  string // RemoteAddr().String(), rendered once per connection
	// flow is what the connection carries traffic to now (recheck.go);
	// revoked is set once a change closed it.
	flow    atomic.Pointer[flow]
	revoked atomic.Bool
	// arrived is when the request being served arrived (set by decide);
	// endCause the reason a closer from outside ended the connection
	// (access.go: connection_end).
	arrived  time.Time
	endCause atomic.Uint32
	// tunnel is the tunnel the connection became, if any: closing the
	// connection from outside ends it, parked directions included.
	tunnel atomic.Pointer[Tunnel]
	// budget is the execution's egress budget (nil: none; budget.go);
	// budgetAdm its admission stage, made at the first decision.
	budget    *attribution.Budget
	budgetAdm *budgetAdmit
	// ident is the authenticated client of the current request (SPEC
	// §4.4, proxyauth.go); nil: anonymous or framed.
	ident atomic.Pointer[attribution.Client]
}

// ExecIDs are what a connection keeps of its execution: the rest of the
// registry's record stays in the registry (every open connection, idle
// tunnels included, carries these, so they are kept small).
type ExecIDs struct {
	ID, SessionID, EnvironmentID string
}

// clientAddr is the client's address as decisions report it.
func (c *Conn) clientAddr() string {
	if c.client == "" {
		return c.RemoteAddr().String()
	}
	return c.client
}

// Close closes the socket once and releases its slot.
func (c *Conn) Close() error {
	if !c.closed.CompareAndSwap(false, true) {
		return nil
	}
	err := c.TCPConn.Close()
	c.tracker.release(c)
	if t := c.tunnel.Load(); t != nil {
		t.abort()
	}
	return err
}

// setIdle marks the connection as waiting between requests: a shutdown may
// close it at once.
func (c *Conn) setIdle(v bool) { c.idle.Store(v) }

// Tracker enforces limits.max_connections across every listener and tracks
// the open connections for a graceful shutdown.
type Tracker struct {
	max     int64
	meter   *metrics.Metrics
	mu      sync.Mutex
	conns   map[*Conn]struct{}
	pending int64 // admitted slots, including connections still in admission
	drain   atomic.Bool
	empty   chan struct{} // closed when draining and no connection is left
	// gen counts re-check walks (recheck.go): a request that saw another
	// value before it was decided re-checks itself once bound.
	gen atomic.Uint64
}

// begin starts a re-check walk: it bumps the generation, then returns the
// connections open now.
func (t *Tracker) begin() []*Conn {
	if t == nil {
		return nil
	}
	t.gen.Add(1)
	t.mu.Lock()
	all := make([]*Conn, 0, len(t.conns))
	for c := range t.conns {
		all = append(all, c)
	}
	t.mu.Unlock()
	return all
}

// NewTracker returns a tracker allowing max simultaneous connections
// (max <= 0: unlimited).
func NewTracker(max int, meter *metrics.Metrics) *Tracker {
	return &Tracker{max: int64(max), meter: meter, conns: make(map[*Conn]struct{}), empty: make(chan struct{})}
}

// acquire reserves a slot for a freshly accepted socket; false when the
// limit is reached or the proxy is draining.
func (t *Tracker) acquire() bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.drain.Load() || (t.max > 0 && t.pending >= t.max) {
		return false
	}
	t.pending++
	return true
}

// abandon frees a slot whose connection never got admitted.
func (t *Tracker) abandon() {
	t.mu.Lock()
	t.pending--
	t.checkEmptyLocked()
	t.mu.Unlock()
}

func (t *Tracker) add(c *Conn) {
	t.mu.Lock()
	t.conns[c] = struct{}{}
	t.mu.Unlock()
	t.meter.ConnOpened(c.Listener)
}

func (t *Tracker) release(c *Conn) {
	t.mu.Lock()
	if _, ok := t.conns[c]; ok {
		delete(t.conns, c)
		t.pending--
	}
	t.checkEmptyLocked()
	t.mu.Unlock()
	t.meter.ConnClosed(c.Listener)
}

func (t *Tracker) checkEmptyLocked() {
	if t.drain.Load() && t.pending == 0 {
		select {
		case <-t.empty:
		default:
			close(t.empty)
		}
	}
}

// Draining reports whether a shutdown has begun.
func (t *Tracker) Draining() bool { return t.drain.Load() }

// Open returns the number of open (admitted or in admission) connections.
func (t *Tracker) Open() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return int(t.pending)
}

// CloseAll closes every admitted connection — keep-alive, busy and
// tunnelled alike — and returns how many it closed; the listeners keep
// accepting. The kill switch (network.enabled = false) uses it to end the
// egress already under way: every new request is refused by the chain, but
// an open tunnel never asks the chain again.
func (t *Tracker) CloseAll() int {
	t.mu.Lock()
	all := make([]*Conn, 0, len(t.conns))
	for c := range t.conns {
		all = append(all, c)
	}
	t.mu.Unlock()
	for _, c := range all {
		c.Close()
	}
	return len(all)
}

// Shutdown refuses new connections, closes idle ones, waits for busy ones
// until ctx is done and then closes whatever is left.
func (t *Tracker) Shutdown(ctx context.Context) error {
	t.mu.Lock()
	t.drain.Store(true)
	t.checkEmptyLocked()
	var idle []*Conn
	for c := range t.conns {
		if c.idle.Load() {
			idle = append(idle, c)
		}
	}
	t.mu.Unlock()
	for _, c := range idle {
		c.Close()
	}
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case <-t.empty:
			return nil
		case <-tick.C:
			// Connections that became idle after the first sweep.
			t.mu.Lock()
			idle = idle[:0]
			for c := range t.conns {
				if c.idle.Load() {
					idle = append(idle, c)
				}
			}
			t.mu.Unlock()
			for _, c := range idle {
				c.Close()
			}
		case <-ctx.Done():
			t.mu.Lock()
			var all []*Conn
			for c := range t.conns {
				all = append(all, c)
			}
			t.mu.Unlock()
			for _, c := range all {
				setCause(&c.endCause, causeShutdown)
				c.Close()
			}
			return ctx.Err()
		}
	}
}

// Registry is what admission needs from the execution registry.
type Registry interface {
	ByToken(token string) (attribution.Execution, bool)
}

// GateConfig configures one listener's admission.
type GateConfig struct {
	Name     string // "http" | "socks5"
	Tracker  *Tracker
	Registry Registry
	// Required reports attribution.required now (it may change on reload).
	Required func() bool
	// FirstByte bounds the wait for a new connection's first byte.
	FirstByte time.Duration
	// FrameTimeout bounds the rest of an attribution frame (SPEC: 3 s).
	FrameTimeout time.Duration
	Meter        *metrics.Metrics
	Logger       *slog.Logger
}

// Gate wraps a TCP listener: Accept returns only admitted *Conn values.
// Admission (peek, frame, token) runs per connection in its own goroutine,
// so a slow client never holds up the accept loop.
type Gate struct {
	ln     net.Listener
	cfg    GateConfig
	ready  chan *Conn
	closed chan struct{}
	once   sync.Once
	wg     sync.WaitGroup
	err    atomic.Pointer[error]

	admMu     sync.Mutex
	admitting map[*net.TCPConn]struct{} // sockets still in admission, closed by Close
}

// NewGate starts admitting connections from ln.
func NewGate(ln net.Listener, cfg GateConfig) *Gate {
	if cfg.FrameTimeout <= 0 {
		cfg.FrameTimeout = attribution.FrameTimeout
	}
	if cfg.FirstByte <= 0 {
		cfg.FirstByte = 10 * time.Second
	}
	if cfg.Required == nil {
		cfg.Required = func() bool { return false }
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	g := &Gate{ln: ln, cfg: cfg, ready: make(chan *Conn), closed: make(chan struct{}), admitting: make(map[*net.TCPConn]struct{})}
	g.wg.Add(1)
	go g.acceptLoop()
	return g
}

func (g *Gate) acceptLoop() {
	defer g.wg.Done()
	var backoff time.Duration
	for {
		raw, err := g.ln.Accept()
		if err != nil {
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() || isTemporary(err) {
				// e.g. EMFILE: back off like net/http does instead of spinning.
				if backoff == 0 {
					backoff = 5 * time.Millisecond
				} else if backoff *= 2; backoff > time.Second {
					backoff = time.Second
				}
				select {
				case <-time.After(backoff):
					continue
				case <-g.closed:
					return
				}
			}
			g.err.Store(&err)
			g.Close()
			return
		}
		backoff = 0
		tcp, ok := raw.(*net.TCPConn)
		if !ok || !g.cfg.Tracker.acquire() {
			// Over the limit (or draining): refuse at once, never queue.
			raw.Close()
			continue
		}
		g.wg.Add(1)
		go g.admit(tcp)
	}
}

func isTemporary(err error) bool {
	var t interface{ Temporary() bool }
	return errors.As(err, &t) && t.Temporary()
}

// admit runs the attribution check; on any failure the socket is closed
// without a byte written.
func (g *Gate) admit(tcp *net.TCPConn) {
	defer g.wg.Done()
	g.admMu.Lock()
	select {
	case <-g.closed:
		g.admMu.Unlock()
		tcp.Close()
		g.cfg.Tracker.abandon()
		return
	default:
	}
	g.admitting[tcp] = struct{}{}
	g.admMu.Unlock()
	defer func() {
		g.admMu.Lock()
		delete(g.admitting, tcp)
		g.admMu.Unlock()
	}()
	m := g.cfg.Meter
	fail := func(result string) {
		m.Attribution(result)
		tcp.Close()
		g.cfg.Tracker.abandon()
	}
	tcp.SetReadDeadline(time.Now().Add(g.cfg.FirstByte))
	token, framed, err := attribution.ReadFrame(tcp, g.cfg.FrameTimeout)
	if err != nil {
		if !framed {
			// The client never sent a byte (or went away): not an attribution failure.
			tcp.Close()
			g.cfg.Tracker.abandon()
			return
		}
		g.cfg.Logger.Debug("attribution frame rejected", "listener", g.cfg.Name, "client", tcp.RemoteAddr().String(), "error", err.Error())
		fail(attribution.Result(err))
		return
	}
	c := &Conn{TCPConn: tcp, Listener: g.cfg.Name, tracker: g.cfg.Tracker, client: tcp.RemoteAddr().String()}
	switch {
	case framed:
		exec, ok := g.cfg.Registry.ByToken(token)
		if !ok {
			g.cfg.Logger.Info("attribution token rejected", "listener", g.cfg.Name, "client", tcp.RemoteAddr().String(), "reason", "unknown_token")
			fail("unknown_token")
			return
		}
		c.Exec, c.Attributed = ExecIDs{ID: exec.ID, SessionID: exec.SessionID, EnvironmentID: exec.EnvironmentID}, true
		// The execution's egress budget (SPEC §3.12); an authenticated
		// client's is attached per request (proxyauth.go).
		c.budget = exec.Budget
		m.Attribution("ok")
	case g.cfg.Required():
		g.cfg.Logger.Info("unattributed connection closed", "listener", g.cfg.Name, "client", tcp.RemoteAddr().String(), "reason", "attribution.required")
		fail("required")
		return
	default:
		m.Attribution("unattributed")
	}
	g.cfg.Tracker.add(c)
	select {
	case g.ready <- c:
	case <-g.closed:
		c.Close()
	}
}

// Accept returns the next admitted connection.
func (g *Gate) Accept() (net.Conn, error) {
	select {
	case c := <-g.ready:
		return c, nil
	case <-g.closed:
		if p := g.err.Load(); p != nil {
			return nil, *p
		}
		return nil, net.ErrClosed
	}
}

// AcceptConn is Accept with the concrete type.
func (g *Gate) AcceptConn() (*Conn, error) {
	c, err := g.Accept()
	if err != nil {
		return nil, err
	}
	return c.(*Conn), nil
}

// Close stops accepting; connections in admission are closed.
func (g *Gate) Close() error {
	var err error
	g.once.Do(func() {
		g.admMu.Lock()
		close(g.closed)
		for c := range g.admitting {
			c.Close() // a client still silent or mid-frame gets no more time
		}
		g.admMu.Unlock()
		err = g.ln.Close()
	})
	return err
}

// Wait blocks until the accept loop and every admission goroutine ended.
func (g *Gate) Wait() { g.wg.Wait() }

// Addr is the listener's address.
func (g *Gate) Addr() net.Addr { return g.ln.Addr() }

// serveAdmitted hands each connection g admits to serve on its own
// goroutine, tracked by wg, until g is closed (then it returns nil).
func serveAdmitted(ctx context.Context, g *Gate, wg *sync.WaitGroup, serve func(context.Context, *Conn)) error {
	for {
		c, err := g.AcceptConn()
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return nil
			}
			return err
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			serve(ctx, c)
		}()
	}
}
