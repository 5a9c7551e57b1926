package proxy

import (
	"context"
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
	d := c.decide(ctx, req)
	stop()
	return d
}
