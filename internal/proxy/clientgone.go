package proxy

import (
	"context"
	"net"
	"sync"
	"time"

	"github.com/netproxy/netproxy/attribution"
	"github.com/netproxy/netproxy/hostpolicy"
)

// watchDelay is how long a decision may take before the proxy starts
// watching for the client to go away (fast decisions pay nothing).
const watchDelay = 100 * time.Millisecond

// watchVanish cancels cancel when the client closes its connection while a
// slow decision (a pending review) is running, so the decider can stop
// waiting for someone who left. The returned stop must be called before the
// connection is read again; it restores a cleared read deadline.
func watchVanish(conn *Conn, cancel context.CancelFunc) (stop func()) {
	var (
		mu      sync.Mutex
		stopped bool
		done    chan struct{}
	)
	timer := time.AfterFunc(watchDelay, func() {
		mu.Lock()
		defer mu.Unlock()
		if stopped {
			return
		}
		done = make(chan struct{})
		go func() {
			defer close(done)
			// A peek sees EOF or a reset without consuming anything; bytes
			// the client sends (a body, a pipelined request) end the watch.
			if _, err := attribution.PeekByte(conn.TCPConn); err != nil && !isTimeout(err) && err != attribution.ErrTimeout {
				cancel()
			}
		}()
	})
	return func() {
		timer.Stop()
		mu.Lock()
		stopped = true
		d := done
		mu.Unlock()
		if d != nil {
			conn.SetReadDeadline(time.Now())
			<-d
			conn.SetReadDeadline(time.Time{})
		}
	}
}

// decideWatching is decide with the client watched while it runs.
func (c *Core) decideWatching(ctx context.Context, conn *Conn, req hostpolicy.Request) hostpolicy.Decision {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stop := watchVanish(conn, cancel)
	d := c.decide(ctx, conn, req)
	stop()
	return d
}

// connWatch is watchVanish for a keep-alive connection: one timer per
// connection, re-armed for each request, so a request that is decided and
// answered quickly costs a timer reset and stop instead of a context, a
// timer, a closure and a mutex. When the client goes away it cancels the
// connection's context (a client that left sends no later request either)
// and cuts the upstream read in progress (interrupter).
type connWatch struct {
	conn   *Conn
	cancel context.CancelFunc
	timer  *time.Timer

	mu       sync.Mutex
	armed    bool
	done     chan struct{} // set while a peek is running
	vanished bool          // the client went away
	up       net.Conn      // the upstream being read for this client
	cut      bool          // up's read was cut
}

func newConnWatch(conn *Conn, cancel context.CancelFunc) *connWatch {
	w := &connWatch{conn: conn, cancel: cancel}
	w.timer = time.AfterFunc(time.Hour, w.fire)
	w.timer.Stop()
	return w
}

// arm starts watching after watchDelay.
func (w *connWatch) arm() {
	w.mu.Lock()
	w.armed = true
	w.mu.Unlock()
	w.timer.Reset(watchDelay)
}

func (w *connWatch) fire() {
	w.mu.Lock()
	defer w.mu.Unlock()
	if !w.armed || w.done != nil {
		return // disarmed meanwhile (a late callback of an earlier request)
	}
	// The request head's deadline may still be set; the peek waits for as
	// long as the request runs. Cleared under mu, so disarm's deadline
	// (set after it took mu) always wins.
	w.conn.SetReadDeadline(time.Time{})
	done := make(chan struct{})
	w.done = done
	go func() {
		defer close(done)
		if _, err := attribution.PeekByte(w.conn.TCPConn); err != nil && !isTimeout(err) && err != attribution.ErrTimeout {
			w.cancel()
			w.mu.Lock()
			w.vanished = true
			if w.up != nil {
				w.up.SetReadDeadline(time.Now())
				w.cut = true
			}
			w.mu.Unlock()
		}
	}()
}

// disarm stops the watch; it must be called before the connection is read
// again.
func (w *connWatch) disarm() {
	w.timer.Stop()
	w.mu.Lock()
	w.armed = false
	d := w.done
	w.done = nil
	w.mu.Unlock()
	if d != nil {
		w.conn.SetReadDeadline(time.Now())
		<-d
	}
}

func (w *connWatch) watchUpstream(c net.Conn) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.up, w.cut = c, false
	if w.vanished {
		c.SetReadDeadline(time.Now())
		w.cut = true
	}
}

func (w *connWatch) releaseUpstream() bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	cut := w.cut
	w.up, w.cut = nil, false
	return !cut
}
