package sandbox

import (
	"context"
	"errors"
	"io"
	"net"
	"strconv"
	"sync"
	"sync/atomic"
	"time"
)

// bridge relays connections accepted on in-sandbox (or, in the landlock
// tier, per-execution host) listeners to netproxy, writing the attribution
// frame before any byte of the client.
type bridge struct {
	wg sync.WaitGroup
	mu sync.Mutex
	// closers are the sockets served for the run (listeners, capture's
	// resolver); close closes them, which ends their serve loops.
	closers []io.Closer
	conns   map[net.Conn]struct{}
	// rejected counts connections refused by an admission check.
	rejected atomic.Int64
}

func newBridge() *bridge {
	return &bridge{conns: map[net.Conn]struct{}{}}
}

// serve accepts on l until it is closed and relays each connection to
// upstream (a netproxy listener address) with target's token and dialer.
func (b *bridge) serve(ctx context.Context, l net.Listener, upstream string, target *ProxyTarget) {
	b.serveFiltered(ctx, l, upstream, target, nil)
}

// serveFiltered is serve with an admission check: a connection for which
// admit returns false is closed before anything is dialled or framed.
func (b *bridge) serveFiltered(ctx context.Context, l net.Listener, upstream string, target *ProxyTarget, admit func(net.Conn) bool) {
	b.acceptLoop(l, func(c net.Conn) {
		if admit != nil && !admit(c) {
			b.rejected.Add(1)
			c.Close()
			return
		}
		b.relay(ctx, c, upstream, target)
	})
}

// serveSocket runs serve in a goroutine close waits for; close closes c,
// which ends serve.
func (b *bridge) serveSocket(c io.Closer, serve func()) {
	b.mu.Lock()
	b.closers = append(b.closers, c)
	b.mu.Unlock()
	b.wg.Add(1)
	go func() {
		defer b.wg.Done()
		serve()
	}()
}

// acceptLoop accepts on l until it is closed and runs handle for each
// connection in a goroutine of its own; close waits for them.
func (b *bridge) acceptLoop(l net.Listener, handle func(net.Conn)) {
	b.serveSocket(l, func() {
		for {
			c, err := l.Accept()
			if err != nil {
				if errors.Is(err, net.ErrClosed) {
					return
				}
				var ne net.Error
				if errors.As(err, &ne) && ne.Timeout() {
					continue
				}
				time.Sleep(5 * time.Millisecond) // e.g. EMFILE: back off, keep serving
				continue
			}
			b.wg.Add(1)
			go func() {
				defer b.wg.Done()
				handle(c)
			}()
		}
	})
}

func (b *bridge) track(c net.Conn, on bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if on {
		b.conns[c] = struct{}{}
	} else {
		delete(b.conns, c)
	}
}

func (b *bridge) relay(ctx context.Context, client net.Conn, upstream string, target *ProxyTarget) {
	defer client.Close()
	b.track(client, true)
	defer b.track(client, false)
	dial := target.Dial
	if dial == nil {
		var d net.Dialer
		dial = d.DialContext
	}
	dctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	up, err := dial(dctx, "tcp", upstream)
	cancel()
	if err != nil {
		return
	}
	defer up.Close()
	b.track(up, true)
	defer b.track(up, false)
	// Never forward unattributed bytes: the frame goes first or nothing does.
	_ = up.SetWriteDeadline(time.Now().Add(5 * time.Second))
	if target.WriteFrame == nil || target.WriteFrame(up, target.Token) != nil {
		return
	}
	_ = up.SetWriteDeadline(time.Time{})
	splice(client, up)
}

// splice copies both ways until each side has ended, half-closing as it
// goes.
func splice(client, up net.Conn) {
	done := make(chan struct{}, 2)
	pipe := func(dst, src net.Conn) {
		_, _ = io.Copy(dst, src)
		if cw, ok := dst.(interface{ CloseWrite() error }); ok {
			_ = cw.CloseWrite()
		} else {
			_ = dst.Close()
		}
		done <- struct{}{}
	}
	go pipe(up, client)
	go pipe(client, up)
	<-done
	<-done
}

// refusedSignal reports connections refused by the admission check
// (bridge_refused_peers:N), nil when there were none or no bridge.
func (b *bridge) refusedSignal() []string {
	if b == nil {
		return nil
	}
	if n := b.rejected.Load(); n > 0 {
		return []string{"bridge_refused_peers:" + strconv.FormatInt(n, 10)}
	}
	return nil
}

// close stops accepting, tears down live relays and waits for them.
func (b *bridge) close() {
	b.mu.Lock()
	for _, c := range b.closers {
		_ = c.Close()
	}
	for c := range b.conns {
		_ = c.Close()
	}
	b.mu.Unlock()
	b.wg.Wait()
}
