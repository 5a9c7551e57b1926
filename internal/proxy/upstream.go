package proxy

import (
	"bufio"
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"sync"
	"time"

	"github.com/elazarl/goproxy"
)

// upstreamPool is goproxy's round tripper for body-less requests to direct
// upstreams: it writes the request and reads the response on the calling
// goroutine over pooled keep-alive connections. http.Transport hands every
// request to two per-connection goroutines, which costs more than the rest
// of the proxy on a busy machine. Requests with a body, and everything when
// a parent proxy is configured, still go through http.Transport (it writes
// bodies concurrently with reading an early response).
type upstreamPool struct {
	dial     func(ctx context.Context, network, addr string) (net.Conn, error)
	fallback http.RoundTripper
	maxIdle  int           // per host:port
	idleFor  time.Duration // an idle connection older than this is closed

	mu        sync.Mutex
	idle      map[string][]*upConn
	total     int
	maxTotal  int
	closed    bool
	sweepOn   bool
	sweepTick time.Duration
}

type upConn struct {
	c     net.Conn
	br    *bufio.Reader
	bw    *bufio.Writer
	key   string
	since time.Time
}

func newUpstreamPool(dial func(ctx context.Context, network, addr string) (net.Conn, error), fallback http.RoundTripper) *upstreamPool {
	return &upstreamPool{dial: dial, fallback: fallback, maxIdle: 64, maxTotal: 1024, idleFor: 90 * time.Second,
		sweepTick: 30 * time.Second, idle: make(map[string][]*upConn)}
}

func (p *upstreamPool) RoundTrip(req *http.Request, ctx *goproxy.ProxyCtx) (*http.Response, error) {
	if req.URL.Scheme != "http" || req.ContentLength != 0 || len(req.TransferEncoding) > 0 || (req.Body != nil && req.Body != http.NoBody) {
		return p.fallback.RoundTrip(req)
	}
	key := req.URL.Host
	for attempt := 0; ; attempt++ {
		uc, reused := p.get(key)
		if uc == nil {
			c, err := p.dial(req.Context(), "tcp", key)
			if err != nil {
				return nil, err
			}
			uc = &upConn{c: c, br: bufio.NewReaderSize(c, 4096), bw: bufio.NewWriterSize(c, 4096), key: key}
		}
		resp, err := p.exchange(uc, req)
		if err == nil {
			return resp, nil
		}
		uc.c.Close()
		// A pooled connection the upstream closed while idle fails before
		// any response byte: retry once on a fresh one (body-less requests
		// are safe to resend).
		if !reused || attempt > 0 || req.Context().Err() != nil {
			return nil, err
		}
	}
}

func (p *upstreamPool) exchange(uc *upConn, req *http.Request) (*http.Response, error) {
	if dl, ok := req.Context().Deadline(); ok {
		uc.c.SetDeadline(dl)
	} else {
		uc.c.SetDeadline(time.Time{})
	}
	if err := req.Write(uc.bw); err != nil {
		return nil, err
	}
	if err := uc.bw.Flush(); err != nil {
		return nil, err
	}
	// The client may give up while the upstream thinks: unblock the read.
	stop := context.AfterFunc(req.Context(), func() { uc.c.SetReadDeadline(time.Now()) })
	var resp *http.Response
	var err error
	for {
		resp, err = http.ReadResponse(uc.br, req)
		if err != nil {
			stop()
			return nil, err
		}
		if resp.StatusCode >= 100 && resp.StatusCode < 200 {
			if resp.StatusCode == http.StatusSwitchingProtocols {
				stop()
				return nil, errors.New("upstream switched protocols without an upgrade request")
			}
			continue // informational (e.g. 103): the final answer follows
		}
		break
	}
	resp.Body = &pooledBody{rc: resp.Body, uc: uc, pool: p, reuse: !resp.Close && !req.Close, stop: stop}
	return resp, nil
}

// pooledBody returns its connection to the pool once the body was read to
// the end, and closes it otherwise.
type pooledBody struct {
	rc    io.ReadCloser
	uc    *upConn
	pool  *upstreamPool
	reuse bool
	eof   bool
	done  bool
	stop  func() bool
}

func (b *pooledBody) Read(p []byte) (int, error) {
	n, err := b.rc.Read(p)
	if err == io.EOF {
		b.eof = true
	}
	return n, err
}

func (b *pooledBody) Close() error {
	if b.done {
		return nil
	}
	b.done = true
	b.rc.Close()
	if !b.stop() {
		// The request's context already fired: the connection's deadline
		// was cut; do not reuse it.
		b.reuse = false
	}
	if b.reuse && b.eof {
		b.pool.put(b.uc)
	} else {
		b.uc.c.Close()
	}
	return nil
}

func (p *upstreamPool) get(key string) (*upConn, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	list := p.idle[key]
	for len(list) > 0 {
		uc := list[len(list)-1]
		list = list[:len(list)-1]
		p.total--
		if time.Since(uc.since) < p.idleFor {
			p.idle[key] = list
			return uc, true
		}
		uc.c.Close()
	}
	delete(p.idle, key)
	return nil, false
}

func (p *upstreamPool) put(uc *upConn) {
	uc.since = time.Now()
	uc.c.SetDeadline(time.Time{})
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed || len(p.idle[uc.key]) >= p.maxIdle || p.total >= p.maxTotal || uc.br.Buffered() > 0 {
		uc.c.Close()
		return
	}
	p.idle[uc.key] = append(p.idle[uc.key], uc)
	p.total++
	if !p.sweepOn {
		p.sweepOn = true
		time.AfterFunc(p.sweepTick, p.sweep)
	}
}

// sweep closes connections idle for longer than idleFor; it reschedules
// itself while any connection is pooled.
func (p *upstreamPool) sweep() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for k, list := range p.idle {
		keep := list[:0]
		for _, uc := range list {
			if time.Since(uc.since) < p.idleFor {
				keep = append(keep, uc)
			} else {
				uc.c.Close()
				p.total--
			}
		}
		if len(keep) == 0 {
			delete(p.idle, k)
		} else {
			p.idle[k] = keep
		}
	}
	if p.total > 0 && !p.closed {
		time.AfterFunc(p.sweepTick, p.sweep)
	} else {
		p.sweepOn = false
	}
}

// closeIdle closes every pooled connection; with final the pool keeps none
// from now on.
func (p *upstreamPool) closeIdle(final bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for k, list := range p.idle {
		for _, uc := range list {
			uc.c.Close()
		}
		delete(p.idle, k)
	}
	p.total = 0
	if final {
		p.closed = true
	}
}
