package proxy

import (
	"bufio"
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"time"

	"github.com/netproxy/netproxy/hostpolicy"
)

// HTTPProxy is the HTTP listener's front end. A client connection goes
// through stages, one file each:
//
//   - conn.go (here): the connection loop — read a bounded request head,
//     check it (target, Host, loop) and decide;
//   - forward.go: the one forwarding path of every allowed plain-HTTP
//     request (bodies, 1xx, trailers, Upgrade) over upstream.go's pool;
//   - connect.go: CONNECT tunnels (and hand-over to MITM, mitm.go);
//   - block.go: every answer of the proxy's own.
//
// The connection loop is ours rather than net/http's server because the
// server drops the Host header of absolute-form requests, and SPEC §3.7
// requires a Host that disagrees with the target to be refused.
type HTTPProxy struct {
	core   *Core
	limits Limits
	pool   *upstreamPool
	via    via
	wg     sync.WaitGroup
}

// NewHTTP builds the HTTP front end over core.
func NewHTTP(core *Core) *HTTPProxy {
	h := &HTTPProxy{core: core, limits: core.Limits.withDefaults(), via: newVia(core.Instance)}
	h.pool = newUpstreamPool(core.Dialer, h.limits.MaxHeaderBytes)
	return h
}

// scrubErr renders a transport error without the URL (its query string
// must never reach a log).
func scrubErr(err error) string {
	var ue *url.Error
	if errors.As(err, &ue) {
		return ue.Err.Error()
	}
	return err.Error()
}

// Serve accepts admitted connections from g until it is closed.
func (h *HTTPProxy) Serve(ctx context.Context, g *Gate) error {
	return serveAdmitted(ctx, g, &h.wg, h.ServeConn)
}

// Wait blocks until every connection handler returned.
func (h *HTTPProxy) Wait() { h.wg.Wait() }

// CloseIdle drops pooled upstream connections.
func (h *HTTPProxy) CloseIdle() { h.pool.closeIdle(false) }

var (
	readerPool = sync.Pool{New: func() any { return bufio.NewReaderSize(nil, 4096) }}
	writerPool = sync.Pool{New: func() any { return bufio.NewWriterSize(nil, 4096) }}
)

// ServeConn runs the request loop of one client connection.
func (h *HTTPProxy) ServeConn(ctx context.Context, c *Conn) { h.serveConnFrom(ctx, c, nil, "") }

// serveConnFrom is ServeConn for a connection whose first bytes pre were
// already read, bound to authority when it is a captured connection's
// (capturehttp.go; "" for the listener's own).
func (h *HTTPProxy) serveConnFrom(ctx context.Context, c *Conn, pre []byte, bound string) {
	closeConn := true
	defer func() {
		if closeConn {
			c.Close()
		}
	}()
	var r io.Reader = c
	if len(pre) > 0 {
		r = &earlyConn{Conn: c, early: pre}
	}
	sc := &headScanner{r: r, maxBytes: h.limits.MaxHeaderBytes, maxLines: h.limits.MaxHeaders}
	br := readerPool.Get().(*bufio.Reader)
	br.Reset(sc)
	bw := writerPool.Get().(*bufio.Writer)
	bw.Reset(c)
	defer func() {
		// Idle tunnels and keep-alive connections should not pin 8 KiB of
		// buffers each: hand them back once this loop is done with them.
		br.Reset(nil)
		readerPool.Put(br)
		bw.Reset(nil)
		writerPool.Put(bw)
	}()
	closeConn = h.serveRequests(ctx, c, sc, br, bw, bound)
}

// serveRequests is the request loop over a connection's head scanner and
// buffers; bound is "" or a captured connection's authority, which every
// request must target (capturehttp.go). It reports whether the caller
// must close c (false: a tunnel or an upgrade owns it now).
func (h *HTTPProxy) serveRequests(ctx context.Context, c *Conn, sc *headScanner, br *bufio.Reader, bw *bufio.Writer, bound string) bool {
	// Per-request state that lives as long as the connection: its context
	// (cancelled when the client vanishes), the watch and the response
	// writer are reused by every request instead of allocated per request.
	cctx, cancel := context.WithCancel(ctx)
	defer cancel()
	pc := newPlainConn(cctx, c, br, bw, cancel)
	defer pc.watch.timer.Stop()
	for first := true; ; first = false {
		if !first {
			// Keep-alive: wait for the next request's first byte.
			c.setIdle(true)
			if h.core.Tracker != nil && h.core.Tracker.Draining() {
				return true
			}
			c.SetReadDeadline(time.Now().Add(h.limits.IdleTimeout))
			if _, err := br.Peek(1); err != nil {
				return true
			}
			c.setIdle(false)
		}
		var err error
		headDeadline := time.Now().Add(h.limits.HeaderTimeout)
		if first {
			// The first bytes, read before the scanner starts (as a
			// keep-alive request's are): a head that arrived whole is
			// then parsed in place (reqhead.go).
			c.SetReadDeadline(headDeadline)
			_, err = br.Peek(1)
		}
		var req *http.Request
		if err == nil {
			pre, _ := br.Peek(br.Buffered())
			err = sc.begin(pre)
		}
		if err == nil && !first && sc.active {
			// The rest of the head must come within header_timeout. A
			// head already whole reads nothing more (nor does a body-less
			// request): the idle deadline may stay, saving a change.
			c.SetReadDeadline(headDeadline)
		}
		if err == nil {
			req, err = readRequestHead(br, sc)
		}
		err = sc.end(err)
		if err != nil {
			switch {
			case errors.Is(err, errHeaderTooLarge):
				writeSimple(bw, http.StatusRequestHeaderFieldsTooLarge, "request header too large")
				lingerFor(c, lingerHeadTime, lingerHeadBytes)
			case errors.Is(err, errTooManyHeaders):
				writeSimple(bw, http.StatusRequestHeaderFieldsTooLarge, "too many request header fields")
				lingerFor(c, lingerHeadTime, lingerHeadBytes)
			case errors.Is(err, errBadFieldName):
				writeSimple(bw, http.StatusBadRequest, "malformed header field name")
			case errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF), isTimeout(err),
				errors.Is(err, net.ErrClosed), !time.Now().Before(headDeadline):
				// The client went away or was too slow: nobody to answer.
			default:
				writeSimple(bw, http.StatusBadRequest, "malformed request")
			}
			return true
		}
		// The head's read deadline stays set: a body-less request reads
		// nothing more from the client (saving a deadline change per
		// request); every other path clears it before reading on.
		if !h.core.stillAttributed(c) {
			return true // the execution ended: its connections go with it
		}
		hostHdr := sc.hostValueLike(req.Host)
		if bound != "" {
			var ok bool
			if hostHdr, ok = boundTarget(bw, req, hostHdr, bound); !ok {
				return true
			}
		}
		if req.Method == http.MethodConnect {
			c.SetReadDeadline(time.Time{})
			// true: the tunnel owns the connection now
			return !h.serveConnect(ctx, c, sc, br, bw, req)
		}
		switch h.servePlain(pc, req, hostHdr) {
		case connKeep:
			if cctx.Err() != nil {
				return true
			}
		case connTaken:
			return false
		default:
			return true
		}
	}
}

// connNext is what a served request leaves of its connection.
type connNext int

const (
	connClose connNext = iota // close it
	connKeep                  // read the next request
	connTaken                 // an upgraded connection owns it now
)

func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

// Lingering close: after an answer the client may still be sending (an
// upload the upstream refused, a head beyond the limits). Closing a socket
// with unread input makes the kernel send a reset, which can destroy the
// answer before the client read it; so the write side is shut first and
// the input drained for a bounded time and size (as net/http's server does).
// An upload is drained for longer than a flood of header bytes.
const (
	lingerTime      = 2 * time.Second
	lingerBytes     = 64 << 20
	lingerHeadTime  = 500 * time.Millisecond
	lingerHeadBytes = 256 << 10
)

func lingerClose(c *Conn) { lingerFor(c, lingerTime, lingerBytes) }

func lingerFor(c *Conn, d time.Duration, n int64) {
	c.TCPConn.CloseWrite()
	c.SetReadDeadline(time.Now().Add(d))
	io.CopyN(io.Discard, c.TCPConn, n)
}

// hasBody reports whether the request carries a body the client will send.
func hasBody(req *http.Request) bool {
	return req.ContentLength != 0 || len(req.TransferEncoding) > 0
}

// plainConn is the per-connection state of plain-HTTP requests.
type plainConn struct {
	ctx   context.Context // the connection's; cancelled when the client vanishes
	c     *Conn
	br    *bufio.Reader
	bw    *bufio.Writer
	watch *connWatch
	rw    respWriter
	// Made once per connection, used by every request: stop a body read
	// in progress, and relay a 1xx answer.
	cutBody        func()
	on1xx          func(code int, h http.Header)
	clientContinue bool // the current request sent Expect: 100-continue
	// end is what forward learnt of the current exchange, for its access
	// record (access.go).
	end exchangeEnd
	// noUA is the empty User-Agent value forward gives a request without
	// one (made once per connection).
	noUA []string
	// trailers guards the current chunked request's trailers
	// (credentials_trailer.go); nil when unguarded.
	trailers *trailerGuard
}

func newPlainConn(ctx context.Context, c *Conn, br *bufio.Reader, bw *bufio.Writer, cancel context.CancelFunc) *plainConn {
	pc := &plainConn{ctx: ctx, c: c, br: br, bw: bw, watch: newConnWatch(c, cancel)}
	pc.cutBody = func() { c.SetReadDeadline(time.Now()) }
	pc.on1xx = func(code int, h http.Header) {
		if code == http.StatusContinue && !pc.clientContinue {
			return
		}
		pc.rw.writeInformational(code, h)
	}
	return pc
}

// servePlain checks one absolute-form (or origin-form with Host) request,
// decides it and forwards it when allowed.
func (h *HTTPProxy) servePlain(pc *plainConn, req *http.Request, hostHdr string) connNext {
	c, bw := pc.c, pc.bw
	head := req.Method == http.MethodHead
	// Identity is per request (proxyauth.go): this request's own header.
	authCause := h.core.identify(c, req.Header)
	if h.via.looped(req.Header) {
		// SPEC §3.5: the request already passed through this process
		// (before any other check: a parent may have rewritten its target).
		authority := req.URL.Host
		if authority == "" {
			authority = hostHdr
		}
		host, port, _ := splitHostPort(authority, 80)
		d := h.core.loopDecision(h.core.request(c, host, port, hostpolicy.ProtoHTTP, req.Method))
		writeBlockedJSON(bw, d, false, head)
		return connClose
	}
	var authority string
	switch {
	case req.URL.IsAbs():
		if !strings.EqualFold(req.URL.Scheme, "http") {
			writeSimpleFor(bw, req.Method, http.StatusBadRequest, "unsupported scheme: use CONNECT for https")
			return connClose
		}
		authority = req.URL.Host
		if hostHdr != "" && !sameAuthority(hostHdr, authority, 80) {
			writeSimpleFor(bw, req.Method, http.StatusBadRequest, "Host header does not match request target")
			return connClose
		}
	default:
		// Origin-form: the Host header names the target.
		authority = hostHdr
	}
	host, port, ok := splitHostPort(authority, 80)
	if !ok || host == "" {
		writeSimpleFor(bw, req.Method, http.StatusBadRequest, "missing host")
		return connClose
	}
	body := hasBody(req)
	if body {
		c.SetReadDeadline(time.Time{}) // the body is read from the client
	} else {
		// Watch the client through the decision and the upstream round
		// trip: if it leaves during a slow review or a slow upstream, both
		// stop. (A request with a body reads the client itself: a vanished
		// client ends its body.)
		pc.watch.arm()
	}
	gen := c.generation()
	hreq := h.core.request(c, host, port, hostpolicy.ProtoHTTP, req.Method)
	hreq.Path = requestPath(req)
	hreq.Upgrade = carriesUpgrade(req.Header)
	if !withApprovalWait(bw, req.Method, req.Header, &hreq) {
		if !body {
			pc.watch.disarm()
		} else {
			lingerClose(c)
		}
		return connClose
	}
	d := h.core.decideIdentified(func() hostpolicy.Decision { return h.core.decide(pc.ctx, c, hreq) }, hreq, authCause)
	if !d.Allowed() {
		if !body {
			pc.watch.disarm()
		}
		keep := !body && !req.Close
		writeBlockedJSON(bw, d, keep, head)
		if keep {
			return connKeep
		}
		if body {
			lingerClose(c)
		}
		return connClose
	}
	if !h.core.bindPlain(c, &d, gen) {
		if !body {
			pc.watch.disarm()
		}
		h.core.plainEnded(c, &d, req.Method, &exchangeEnd{cause: causePolicy})
		return connClose // a change since the decision closed the connection
	}
	if !h.credentialHook(c, bw, req, d) { // credential broker (docs/credentials.md)
		if !body {
			pc.watch.disarm()
		} else {
			lingerClose(c)
		}
		return connClose
	}
	pc.end = exchangeEnd{}
	h.guardTrailers(pc, req, d)
	next := h.forward(pc, req, authority, d, gen, body)
	h.core.plainEnded(c, &d, req.Method, &pc.end)
	return next
}
