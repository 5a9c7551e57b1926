package proxy

import (
	"bufio"
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httputil"
	"net/textproto"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/net/http/httpguts"
	"golang.org/x/sys/unix"

	"github.com/netproxy/netproxy/internal/httphead"
)

// upstreamPool carries every forwarded plain-HTTP request (forward.go) over
// pooled keep-alive connections, on the calling goroutine: the request head
// and the response are handled where the request is, and a request body is
// written by one goroutine of its own while the response is read (so an
// upstream may answer before it has read the body). It follows
// net/http.Transport where a proxy's behaviour is visible:
//
//   - an idle connection with bytes (or an EOF) queued is never handed out:
//     get peeks at it without blocking, as the Transport's background read
//     of idle connections would have noticed (an unsolicited response must
//     not become the next client's answer);
//   - a request is retried on a fresh connection only when a reused one
//     failed before any response byte and the request is idempotent (GET,
//     HEAD, OPTIONS, TRACE, or Idempotency-Key / X-Idempotency-Key set)
//     and has no body — the Transport's rule;
//   - 1xx answers other than 101 are handed to the caller as they come;
//     a 101 is returned with the connection for the caller to splice, and
//     only for a request that asked for an upgrade;
//   - response trailers arrive in resp.Trailer (http.ReadResponse).
//
// The pool never decides anything: the caller passes the allowed target,
// which is the only thing dialed (directly, or through the parent proxy).
type upstreamPool struct {
	dialTarget func(ctx context.Context, t Target) (*net.TCPConn, error)
	dialParent func(ctx context.Context, t Target) (net.Conn, error) // nil without a parent
	parent     string
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
	// The idle check's parts, made once per connection.
	head  []byte // the last forwarded response head (resphead.go), reused
	raw   syscall.RawConn
	peek  func(fd uintptr) bool
	dirty bool
}

// idleDirty reports whether an idle upstream connection has bytes or an
// end queued (checked without blocking). Either makes it unusable: an
// unsolicited response would otherwise become the next request's answer.
func (uc *upConn) idleDirty() bool {
	if uc.raw == nil {
		sc, ok := uc.c.(syscall.Conn)
		if !ok {
			return false
		}
		raw, err := sc.SyscallConn()
		if err != nil {
			return true
		}
		uc.raw = raw
		uc.peek = func(fd uintptr) bool {
			n, e := peekOne(int(fd))
			uc.dirty = !(e == unix.EAGAIN || e == unix.EINTR) || n > 0
			return true
		}
	}
	uc.dirty = false
	err := uc.raw.Read(uc.peek)
	return uc.dirty || err != nil
}

func newUpstreamPool(d *Dialer, _ int) *upstreamPool {
	p := &upstreamPool{dialTarget: d.DialTarget, maxIdle: 64, maxTotal: 1024, idleFor: 90 * time.Second,
		sweepTick: 30 * time.Second, idle: make(map[string][]*upConn)}
	if d.Parent != "" {
		p.parent = d.Parent
		p.dialParent = func(ctx context.Context, t Target) (net.Conn, error) {
			return d.DialContext(WithTarget(ctx, t), "tcp", d.Parent)
		}
	}
	return p
}

// bodyless reports whether req carries no body at all.
func bodyless(req *http.Request) bool {
	return req.ContentLength == 0 && len(req.TransferEncoding) == 0 && (req.Body == nil || req.Body == http.NoBody)
}

// interrupter cuts a running upstream read when the client goes away (the
// connection's connWatch); without one, the request's context does.
type interrupter interface {
	// watchUpstream makes c's reads fail once the client has vanished
	// (at once if it already has).
	watchUpstream(c net.Conn)
	// releaseUpstream ends the watch; false when c was cut.
	releaseUpstream() bool
}

// readGuard is what unblocks a running upstream read while the answer is
// read: the client's watch, or else the request context's AfterFunc.
type readGuard struct {
	intr      interrupter
	afterFunc func() bool
}

// release ends the guard; false when the read was already cut.
func (g readGuard) release() bool {
	if g.intr != nil {
		return g.intr.releaseUpstream()
	}
	return g.afterFunc()
}

// exchangeOpts are the caller's parts of one exchange.
type exchangeOpts struct {
	intr interrupter
	// on1xx receives every informational answer but 101 (may be nil).
	on1xx func(code int, h http.Header)
	// upgrade is the protocol the request asks to switch to ("" none).
	upgrade string
	// cutBody unblocks a read of the request body in progress (the client
	// socket's); called when the body must stop before its end.
	cutBody func()
}

// replayable reports whether net/http's Transport would resend req after a
// reused connection failed: idempotent, or marked so, and no body.
func replayable(req *http.Request) bool {
	if !bodyless(req) {
		return false
	}
	switch req.Method {
	case "GET", "HEAD", "OPTIONS", "TRACE":
		return true
	}
	_, a := req.Header["Idempotency-Key"]
	_, b := req.Header["X-Idempotency-Key"]
	return a || b
}

// errNoResponseByte marks an exchange that failed before any byte of a
// response arrived (the only failures a retry may follow).
type errNoResponseByte struct{ err error }

func (e errNoResponseByte) Error() string { return e.err.Error() }
func (e errNoResponseByte) Unwrap() error { return e.err }

// roundTrip sends req over a pooled (or new) connection for t and reads
// the response head. When ctx is done — or o.intr reports the client gone
// — a running read stops.
func (p *upstreamPool) roundTrip(ctx context.Context, req *http.Request, t Target, o exchangeOpts) (*http.Response, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	key := req.URL.Host
	if p.parent != "" {
		key = p.parent
	}
	for attempt := 0; ; attempt++ {
		uc, reused := p.get(key)
		if uc == nil {
			var c net.Conn
			var err error
			if p.dialParent != nil {
				c, err = p.dialParent(ctx, t)
			} else {
				c, err = p.dialTarget(ctx, t)
			}
			if err != nil {
				return nil, err
			}
			uc = &upConn{c: c, br: bufio.NewReaderSize(c, 4096), bw: bufio.NewWriterSize(c, 4096), key: key}
		}
		resp, err := p.exchange(ctx, uc, req, o)
		if err == nil {
			return resp, nil
		}
		uc.c.Close()
		// A pooled connection the upstream closed while idle fails before
		// any response byte: retry once on a fresh one, but only what
		// net/http would retry.
		var nb errNoResponseByte
		if !reused || attempt > 0 || ctx.Err() != nil || !errors.As(err, &nb) || !replayable(req) {
			return nil, err
		}
	}
}

func (p *upstreamPool) exchange(ctx context.Context, uc *upConn, req *http.Request, o exchangeOpts) (*http.Response, error) {
	// Pooled connections carry no deadline (put clears it); only a
	// request with a deadline sets one.
	if dl, ok := ctx.Deadline(); ok {
		uc.c.SetDeadline(dl)
		uc.deadline = true
	}
	withBody := !bodyless(req)
	if err := writeRequestHead(uc.bw, req); err != nil {
		return nil, errNoResponseByte{err}
	}
	if err := uc.bw.Flush(); err != nil {
		return nil, errNoResponseByte{err}
	}
	var wrote chan error
	if withBody {
		// The body goes up while the response is read: an upstream may
		// answer (100 Continue, or a 413) before it has read the body.
		wrote = make(chan error, 1)
		go func() {
			err := writeBody(uc.bw, req)
			if errors.Is(err, errTrailerBlocked) {
				// The request must not complete: the upstream sees it cut
				// before its last chunk (and the response read ends).
				uc.c.Close()
			}
			wrote <- err
		}()
	}
	// The client may give up while the upstream thinks: unblock the read.
	var stop readGuard
	if o.intr != nil {
		o.intr.watchUpstream(uc.c)
		stop.intr = o.intr
	} else {
		stop.afterFunc = context.AfterFunc(ctx, func() { uc.c.SetReadDeadline(time.Now()) })
	}
	fail := func(err error) (*http.Response, error) {
		stop.release()
		if wrote != nil {
			uc.c.Close() // unblocks the body's write
			if o.cutBody != nil {
				o.cutBody()
			}
			<-wrote
		}
		return nil, err
	}
	var resp *http.Response
	var err error
	for {
		if _, perr := uc.br.Peek(1); perr != nil {
			return fail(errNoResponseByte{perr})
		}
		buf, _ := uc.br.Peek(uc.br.Buffered())
		if rh, n, head, ok := scanResponseHead(buf, req.Method, uc.head[:0]); ok {
			// The head as bytes (resphead.go): no header map.
			uc.head = head
			uc.br.Discard(n)
			body := &clBody{r: uc.br, n: max(rh.contentLength, 0)}
			resp = &http.Response{StatusCode: rh.code, ProtoMajor: 1, ProtoMinor: 1, ContentLength: rh.contentLength, Close: rh.close, Body: body}
			pb := &pooledBody{rc: body, uc: uc, pool: p, reuse: !rh.close && !req.Close, stop: stop, rawHead: head}
			if wrote != nil {
				pb.body = &bodyWriter{wrote: wrote, cutBody: o.cutBody}
			}
			resp.Body = pb
			return resp, nil
		}
		resp, err = http.ReadResponse(uc.br, req)
		if err != nil {
			return fail(err)
		}
		if resp.StatusCode == http.StatusSwitchingProtocols {
			if o.upgrade == "" || !strings.EqualFold(upgradeType(resp.Header), o.upgrade) {
				return fail(errors.New("upstream switched protocols without a matching upgrade request"))
			}
			stop.release()
			if wrote != nil {
				// An upgrade request with a body: the body must be over
				// before the connection changes hands.
				if err := <-wrote; err != nil {
					uc.c.Close()
					return nil, err
				}
			}
			if uc.deadline {
				uc.c.SetDeadline(time.Time{})
			}
			resp.Body = &upgradedConn{uc: uc}
			return resp, nil
		}
		if resp.StatusCode >= 100 && resp.StatusCode < 200 {
			if o.on1xx != nil {
				o.on1xx(resp.StatusCode, resp.Header)
			}
			continue // informational (100, 103): the final answer follows
		}
		break
	}
	pb := &pooledBody{rc: resp.Body, uc: uc, pool: p, reuse: !resp.Close && !req.Close, stop: stop}
	if wrote != nil {
		pb.body = &bodyWriter{wrote: wrote, cutBody: o.cutBody}
	}
	resp.Body = pb
	return resp, nil
}

// writeBody sends req's body after its head (Content-Length bytes as they
// are, or chunked with the request's trailers) and flushes.
func writeBody(bw *bufio.Writer, req *http.Request) error {
	if req.ContentLength > 0 && len(req.TransferEncoding) == 0 {
		n, err := io.Copy(bw, io.LimitReader(req.Body, req.ContentLength))
		if err == nil && n < req.ContentLength {
			err = io.ErrUnexpectedEOF
		}
		if err != nil {
			return err
		}
		return bw.Flush()
	}
	cw := httputil.NewChunkedWriter(bw)
	bp := copyBufPool.Get().(*[]byte)
	defer copyBufPool.Put(bp)
	for {
		n, rerr := req.Body.Read(*bp)
		if n > 0 {
			if _, err := cw.Write((*bp)[:n]); err != nil {
				return err
			}
			if err := bw.Flush(); err != nil { // stream as the client sends
				return err
			}
		}
		if rerr == io.EOF {
			break
		}
		if rerr != nil {
			return rerr
		}
	}
	if err := cw.Close(); err != nil {
		return err
	}
	if len(req.Trailer) > 0 {
		if err := req.Trailer.Write(bw); err != nil {
			return err
		}
	}
	if _, err := bw.WriteString("\r\n"); err != nil {
		return err
	}
	return bw.Flush()
}

// upgradedConn is a 101 response's body: the upstream connection, with
// bytes the upstream sent after the 101 still in its read buffer.
type upgradedConn struct{ uc *upConn }

func (u *upgradedConn) Read(p []byte) (int, error)  { return u.uc.br.Read(p) }
func (u *upgradedConn) Write(p []byte) (int, error) { return u.uc.c.Write(p) }
func (u *upgradedConn) Close() error                { return u.uc.c.Close() }

// upgradeType is the protocol a head asks to switch to, "" when none
// (Connection: upgrade and an Upgrade value).
func upgradeType(h http.Header) string {
	if !headerHasToken(h, "Connection", "upgrade") {
		return ""
	}
	return h.Get("Upgrade")
}

// carriesUpgrade: the head has an Upgrade field at all (the mode guard's
// hostpolicy.Request.Upgrade). Broader than upgradeType on purpose: limited
// mode refuses any request that asks to switch protocols, however spelled.
func carriesUpgrade(h http.Header) bool {
	_, ok := h["Upgrade"]
	return ok
}

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
		if !bodyless(req) {
			return errors.New("request target needs rewriting; not forwarded with a body")
		}
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
			return errors.New("invalid User-Agent")
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
	switch {
	case req.ContentLength > 0 && len(req.TransferEncoding) == 0:
		bw.WriteString("Content-Length: ")
		bw.WriteString(strconv.FormatInt(req.ContentLength, 10))
		bw.WriteString("\r\n")
	case !bodyless(req):
		bw.WriteString("Transfer-Encoding: chunked\r\n")
	case req.Method == "POST" || req.Method == "PUT" || req.Method == "PATCH":
		bw.WriteString("Content-Length: 0\r\n") // http.Request.Write does the same
	}
	if err := httphead.WriteRequestFields(bw, req.Header); err != nil {
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
	stop  readGuard
	// The request body's writer (nil: no body).
	body *bodyWriter
	// rawHead: the response head to forward as it is (resphead.go); nil
	// when it was parsed into resp.Header.
	rawHead []byte
}

// bodyWriter is a request body's writer goroutine and how to stop it.
type bodyWriter struct {
	wrote   chan error
	cutBody func()
	// finished and err: the writer's result, once received from wrote.
	finished bool
	err      error
	// sent is set by Close: the whole request body went upstream.
	sent bool
}

// poll reports whether the writer has finished, waiting up to d.
func (w *bodyWriter) poll(d time.Duration) bool {
	if w.finished {
		return true
	}
	select {
	case w.err = <-w.wrote:
		w.finished = true
		return true
	default:
	}
	if d <= 0 {
		return false
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case w.err = <-w.wrote:
		w.finished = true
		return true
	case <-t.C:
		return false
	}
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
	if b.body != nil {
		b.body.sent = b.waitBody()
		if !b.body.sent {
			b.reuse = false
		}
	}
	if !b.stop.release() {
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

// bodyGrace is how long a finished response waits for the request body's
// writer to finish on its own before the body is cut.
const bodyGrace = time.Second

// waitBody waits for the request body's writer and reports whether the
// whole body was sent. A writer still running after bodyGrace (the client
// is still sending, or the upstream stopped reading) is cut.
func (b *pooledBody) waitBody() bool {
	w := b.body
	if w.poll(bodyGrace) {
		return w.err == nil
	}
	b.uc.c.Close()
	if w.cutBody != nil {
		w.cutBody()
	}
	w.err = <-w.wrote
	w.finished = true
	return false
}

func (p *upstreamPool) get(key string) (*upConn, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	list := p.idle[key]
	for len(list) > 0 {
		uc := list[len(list)-1]
		list = list[:len(list)-1]
		p.total--
		if time.Since(uc.since) < p.idleFor && !uc.idleDirty() {
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
