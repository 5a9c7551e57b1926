package proxy

import (
	"bufio"
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"net/textproto"
	"strings"
	"sync"
	"time"

	"github.com/elazarl/goproxy"
	"golang.org/x/net/http/httpguts"
)

// upstreamPool is goproxy's round tripper for body-less requests to direct
// upstreams: it writes the request and reads the response on the calling
// goroutine over pooled keep-alive connections. http.Transport hands every
// request to two per-connection goroutines, which costs more than the rest
// of the proxy on a busy machine. Requests with a body, and everything when
// a parent proxy is configured, still go through http.Transport (it writes
// bodies concurrently with reading an early response).
type upstreamPool struct {
	dial       func(ctx context.Context, network, addr string) (net.Conn, error)
	dialTarget func(ctx context.Context, t Target) (*net.TCPConn, error)
	fallback   http.RoundTripper
	maxIdle    int           // per host:port
	idleFor    time.Duration // an idle connection older than this is closed

	mu        sync.Mutex
	idle      map[string][]*upConn
	total     int
	maxTotal  int
	closed    bool
	sweepOn   bool
	sweepTick time.Duration
}

type upConn struct {
	c        net.Conn
	br       *bufio.Reader
	bw       *bufio.Writer
	key      string
	since    time.Time
	deadline bool // a deadline was set since the connection was pooled
}

func newUpstreamPool(d *Dialer, fallback http.RoundTripper) *upstreamPool {
	return &upstreamPool{dial: d.DialContext, dialTarget: d.DialTarget, fallback: fallback, maxIdle: 64, maxTotal: 1024, idleFor: 90 * time.Second,
		sweepTick: 30 * time.Second, idle: make(map[string][]*upConn)}
}

func (p *upstreamPool) RoundTrip(req *http.Request, ctx *goproxy.ProxyCtx) (*http.Response, error) {
	if req.URL.Scheme != "http" || !bodyless(req) {
		return p.fallback.RoundTrip(req)
	}
	return p.roundTrip(req.Context(), req, nil, nil)
}

// bodyless reports whether req carries no body at all.
func bodyless(req *http.Request) bool {
	return req.ContentLength == 0 && len(req.TransferEncoding) == 0 && (req.Body == nil || req.Body == http.NoBody)
}

// interrupter cuts a running upstream read when the client goes away (the
// fast path's connWatch); without one, the request's context does.
type interrupter interface {
	// watchUpstream makes c's reads fail once the client has vanished
	// (at once if it already has).
	watchUpstream(c net.Conn)
	// releaseUpstream ends the watch; false when c was cut.
	releaseUpstream() bool
}

// roundTrip sends a body-less request over a pooled connection to
// req.URL.Host and reads the response head. A new connection is dialed to
// t when given, else with p.dial (ctx must then carry the target). When ctx
// is done — or intr reports the client gone — a running read stops.
func (p *upstreamPool) roundTrip(ctx context.Context, req *http.Request, t *Target, intr interrupter) (*http.Response, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	key := req.URL.Host
	for attempt := 0; ; attempt++ {
		uc, reused := p.get(key)
		if uc == nil {
			var c net.Conn
			var err error
			if t != nil {
				c, err = p.dialTarget(ctx, *t)
			} else {
				c, err = p.dial(ctx, "tcp", key)
			}
			if err != nil {
				return nil, err
			}
			uc = &upConn{c: c, br: bufio.NewReaderSize(c, 4096), bw: bufio.NewWriterSize(c, 4096), key: key}
		}
		resp, err := p.exchange(ctx, uc, req, intr)
		if err == nil {
			return resp, nil
		}
		uc.c.Close()
		// A pooled connection the upstream closed while idle fails before
		// any response byte: retry once on a fresh one (body-less requests
		// are safe to resend).
		if !reused || attempt > 0 || ctx.Err() != nil {
			return nil, err
		}
	}
}

func (p *upstreamPool) exchange(ctx context.Context, uc *upConn, req *http.Request, intr interrupter) (*http.Response, error) {
	// Pooled connections carry no deadline (put clears it); only a
	// request with a deadline sets one.
	if dl, ok := ctx.Deadline(); ok {
		uc.c.SetDeadline(dl)
		uc.deadline = true
	}
	if err := writeRequestHead(uc.bw, req); err != nil {
		return nil, err
	}
	if err := uc.bw.Flush(); err != nil {
		return nil, err
	}
	// The client may give up while the upstream thinks: unblock the read.
	var stop func() bool
	if intr != nil {
		intr.watchUpstream(uc.c)
		stop = intr.releaseUpstream
	} else {
		stop = context.AfterFunc(ctx, func() { uc.c.SetReadDeadline(time.Now()) })
	}
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

// reqHeadExclude are the headers writeRequestHead writes itself (or never):
// the same set http.Request.Write excludes.
var reqHeadExclude = map[string]bool{"Host": true, "User-Agent": true, "Content-Length": true, "Transfer-Encoding": true, "Trailer": true}

// writeRequestHead writes the head of a body-less request in origin-form,
// byte for byte what http.Request.Write sends for it, without its
// per-request formatting and allocations. Anything unusual (a host that
// needs IDNA or is not a valid Host value, a zone, a control byte in the
// target) is left to http.Request.Write, which handles or refuses it.
func writeRequestHead(bw *bufio.Writer, req *http.Request) error {
	host := req.Host
	if host == "" {
		host = req.URL.Host
	}
	ruri := req.URL.RequestURI()
	if !plainASCII(host) || !httpguts.ValidHostHeader(host) || strings.Contains(host, "%") || hasCTL(ruri) || req.Method == "" {
		return req.Write(bw)
	}
	bw.WriteString(req.Method)
	bw.WriteByte(' ')
	bw.WriteString(ruri)
	bw.WriteString(" HTTP/1.1\r\nHost: ")
	bw.WriteString(host)
	bw.WriteString("\r\n")
	ua := "Go-http-client/1.1" // http.Request.Write's default
	if _, ok := req.Header["User-Agent"]; ok {
		ua = req.Header.Get("User-Agent")
		if strings.ContainsAny(ua, "\r\n") {
			return req.Write(bw)
		}
		ua = textproto.TrimString(ua)
	}
	if ua != "" {
		bw.WriteString("User-Agent: ")
		bw.WriteString(ua)
		bw.WriteString("\r\n")
	}
	if req.Close && !headerHasToken(req.Header, "Connection", "close") {
		bw.WriteString("Connection: close\r\n")
	}
	switch req.Method {
	case "POST", "PUT", "PATCH":
		bw.WriteString("Content-Length: 0\r\n") // http.Request.Write does the same
	}
	if err := req.Header.WriteSubset(bw, reqHeadExclude); err != nil {
		return err
	}
	_, err := bw.WriteString("\r\n")
	return err
}

func plainASCII(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] >= 0x80 {
			return false
		}
	}
	return true
}

func hasCTL(s string) bool {
	for i := 0; i < len(s); i++ {
		if b := s[i]; b < ' ' || b == 0x7f {
			return true
		}
	}
	return false
}

func headerHasToken(h http.Header, name, token string) bool {
	for _, v := range h[name] {
		for _, t := range strings.Split(v, ",") {
			if strings.EqualFold(strings.TrimSpace(t), token) {
				return true
			}
		}
	}
	return false
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
	if uc.deadline {
		uc.c.SetDeadline(time.Time{})
		uc.deadline = false
	}
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
