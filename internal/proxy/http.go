package proxy

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/elazarl/goproxy"

	"github.com/netproxy/netproxy/hostpolicy"
)

// HTTPProxy is the HTTP listener's front end: absolute-form requests are
// checked and then forwarded by goproxy; CONNECT is checked and tunneled.
//
// The connection loop is ours rather than net/http's server because the
// server drops the Host header of absolute-form requests, and SPEC §3.7
// requires a Host that disagrees with the target to be refused. Everything
// after the check — header filtering, the upstream round trip, response
// copying — is goproxy's.
type HTTPProxy struct {
	core   *Core
	limits Limits
	gp     *goproxy.ProxyHttpServer
	tr     *http.Transport
	pool   *upstreamPool // nil with a parent proxy
	via    via
	wg     sync.WaitGroup
}

// NewHTTP builds the HTTP front end over core.
func NewHTTP(core *Core) *HTTPProxy {
	h := &HTTPProxy{core: core, limits: core.Limits.withDefaults(), via: newVia(core.Instance)}
	h.tr = &http.Transport{
		DialContext:            core.Dialer.DialContext,
		MaxIdleConns:           1024,
		MaxIdleConnsPerHost:    256,
		IdleConnTimeout:        90 * time.Second,
		DisableCompression:     true, // pass bodies through as the upstream sent them
		ForceAttemptHTTP2:      false,
		MaxResponseHeaderBytes: int64(h.limits.MaxHeaderBytes),
	}
	if core.Dialer.Parent != "" {
		parent := &url.URL{Scheme: "http", Host: core.Dialer.Parent}
		h.tr.Proxy = http.ProxyURL(parent)
	}
	gp := goproxy.NewProxyHttpServer()
	gp.Tr = h.tr
	gp.ConnectDial = nil
	gp.KeepAcceptEncoding = true
	gp.Logger = discardLogger{}
	gp.NonproxyHandler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Error(w, "missing host", http.StatusBadRequest)
	})
	if core.Dialer.Parent == "" {
		h.pool = newUpstreamPool(core.Dialer, h.tr)
		gp.OnRequest().DoFunc(func(r *http.Request, ctx *goproxy.ProxyCtx) (*http.Request, *http.Response) {
			ctx.RoundTripper = h.pool
			return r, nil
		})
	}
	gp.OnResponse().DoFunc(h.filterResponse)
	h.gp = gp
	return h
}

type discardLogger struct{}

func (discardLogger) Printf(string, ...any) {}

// filterResponse maps upstream failures to 502 and strips hop-by-hop headers.
func (h *HTTPProxy) filterResponse(resp *http.Response, ctx *goproxy.ProxyCtx) *http.Response {
	if resp == nil {
		if refusedAtDial(ctx.Error) {
			h.core.logger().Info("dial refused", "host", ctx.Req.Host, "error", scrubErr(ctx.Error))
			host, port, _ := splitHostPort(ctx.Req.Host, 80)
			d := hostpolicy.Decision{Verdict: hostpolicy.Deny, Reason: hostpolicy.ReasonNotAllowedLocal, Source: hostpolicy.SourceBaseline, Host: host, Port: port}
			return blockedResponse(ctx.Req, d, hostpolicy.ProtoHTTP)
		}
		if ctx.Error != nil {
			h.core.logger().Info("upstream failure", "host", ctx.Req.URL.Hostname(), "error", scrubErr(ctx.Error))
		}
		return textResponse(ctx.Req, http.StatusBadGateway, "upstream failure")
	}
	removeHopByHop(resp.Header)
	return resp
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

func textResponse(req *http.Request, status int, body string) *http.Response {
	r := goproxy.NewResponse(req, "text/plain; charset=utf-8", status, body+"\n")
	r.TransferEncoding = nil
	return r
}

// Serve accepts admitted connections from g until it is closed.
func (h *HTTPProxy) Serve(ctx context.Context, g *Gate) error {
	return serveAdmitted(ctx, g, &h.wg, h.ServeConn)
}

// Wait blocks until every connection handler returned.
func (h *HTTPProxy) Wait() { h.wg.Wait() }

// CloseIdle drops pooled upstream connections.
func (h *HTTPProxy) CloseIdle() {
	h.tr.CloseIdleConnections()
	if h.pool != nil {
		h.pool.closeIdle(false)
	}
}

var errHeaderTooLarge = errors.New("request header too large")

var (
	readerPool = sync.Pool{New: func() any { return bufio.NewReaderSize(nil, 4096) }}
	writerPool = sync.Pool{New: func() any { return bufio.NewWriterSize(nil, 4096) }}
)

// headLimiter bounds how many bytes a request head may take, and records
// the raw bytes read while a head is parsed: http.ReadRequest drops the Host
// header, which the absolute-form check needs.
type headLimiter struct {
	r   io.Reader
	n   int64
	tee bool
	raw []byte
}

func (l *headLimiter) Read(p []byte) (int, error) {
	if l.n <= 0 {
		return 0, errHeaderTooLarge
	}
	if int64(len(p)) > l.n {
		p = p[:l.n]
	}
	n, err := l.r.Read(p)
	l.n -= int64(n)
	if l.tee && n > 0 {
		l.raw = append(l.raw, p[:n]...)
	}
	return n, err
}

// rawHostHeader returns the Host header of the request head at the start
// of raw ("" when absent). The head was already validated by
// http.ReadRequest, which rejects repeated Host headers.
func rawHostHeader(raw []byte) string {
	first := true
	for len(raw) > 0 {
		i := bytes.IndexByte(raw, '\n')
		var line []byte
		if i < 0 {
			line, raw = raw, nil
		} else {
			line, raw = raw[:i], raw[i+1:]
		}
		line = bytes.TrimSuffix(line, []byte("\r"))
		if first {
			first = false
			continue
		}
		if len(line) == 0 {
			break
		}
		if len(line) >= 5 && bytes.EqualFold(line[:5], []byte("host:")) {
			return string(bytes.TrimSpace(line[5:]))
		}
	}
	return ""
}

// ServeConn runs the request loop of one client connection.
func (h *HTTPProxy) ServeConn(ctx context.Context, c *Conn) {
	closeConn := true
	defer func() {
		if closeConn {
			c.Close()
		}
	}()
	lim := &headLimiter{r: c}
	br := readerPool.Get().(*bufio.Reader)
	br.Reset(lim)
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
	// Per-request state that lives as long as the connection: its context
	// (cancelled when the client vanishes), the watch and the response
	// writer are reused by every request instead of allocated per request.
	cctx, cancel := context.WithCancel(ctx)
	defer cancel()
	pc := &plainConn{ctx: cctx, watch: newConnWatch(c, cancel)}
	defer pc.watch.timer.Stop()
	for first := true; ; first = false {
		if !first {
			// Keep-alive: wait for the next request's first byte.
			c.setIdle(true)
			if h.core.Tracker != nil && h.core.Tracker.Draining() {
				return
			}
			c.SetReadDeadline(time.Now().Add(h.limits.IdleTimeout))
			lim.n = math.MaxInt64
			if _, err := br.Peek(1); err != nil {
				return
			}
			c.setIdle(false)
		}
		c.SetReadDeadline(time.Now().Add(h.limits.HeaderTimeout))
		lim.n = int64(h.limits.MaxHeaderBytes) + int64(br.Buffered())
		pre, _ := br.Peek(br.Buffered())
		lim.raw = append(lim.raw[:0], pre...)
		lim.tee = true
		headDeadline := time.Now().Add(h.limits.HeaderTimeout)
		req, err := http.ReadRequest(br)
		lim.tee = false
		if err != nil {
			switch {
			case errors.Is(err, errHeaderTooLarge):
				writeSimple(bw, http.StatusRequestHeaderFieldsTooLarge, "request header too large")
			case errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF), isTimeout(err),
				errors.Is(err, net.ErrClosed), !time.Now().Before(headDeadline):
				// The client went away or was too slow: nobody to answer.
			default:
				writeSimple(bw, http.StatusBadRequest, "malformed request")
			}
			return
		}
		lim.n = math.MaxInt64
		// The head's read deadline stays set: the fast path reads nothing
		// more from the client for this request (saving a deadline change
		// per request); every other path clears it before reading on.
		if !h.core.stillAttributed(c) {
			return // the execution ended: its connections go with it
		}
		if req.Method == http.MethodConnect {
			c.SetReadDeadline(time.Time{})
			if h.serveConnect(ctx, c, br, bw, req) {
				closeConn = false // the tunnel owns the connection now
			}
			return
		}
		hostHdr := rawHostHeader(lim.raw)
		if cap(lim.raw) > 64<<10 {
			lim.raw = nil // do not keep a huge head's buffer on an idle connection
		}
		if !h.servePlain(ctx, pc, c, bw, req, hostHdr) || cctx.Err() != nil {
			return
		}
	}
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

// writeSimple writes a text/plain response that closes the connection.
func writeSimple(bw *bufio.Writer, status int, msg string) { writeSimpleFor(bw, "", status, msg) }

// writeSimpleFor is writeSimple answering a request of the given method:
// the answer to a HEAD has no body (RFC 9112 §6.3).
func writeSimpleFor(bw *bufio.Writer, method string, status int, msg string) {
	body := msg + "\n"
	fmt.Fprintf(bw, "HTTP/1.1 %d %s\r\nContent-Type: text/plain; charset=utf-8\r\nContent-Length: %d\r\nConnection: close\r\n\r\n",
		status, http.StatusText(status), len(body))
	if method != http.MethodHead {
		bw.WriteString(body)
	}
	bw.Flush()
}

// hasBody reports whether the request carries a body the client will send.
func hasBody(req *http.Request) bool {
	return req.ContentLength != 0 || len(req.TransferEncoding) > 0
}

// servePlain handles one absolute-form (or origin-form with Host) request
// and reports whether the connection may serve another one.
func (h *HTTPProxy) servePlain(ctx context.Context, pc *plainConn, c *Conn, bw *bufio.Writer, req *http.Request, hostHdr string) bool {
	if h.via.looped(req.Header) {
		// SPEC §3.5: the request already passed through this process
		// (before any other check: a parent may have rewritten its target).
		authority := req.URL.Host
		if authority == "" {
			authority = hostHdr
		}
		host, port, _ := splitHostPort(authority, 80)
		d := h.core.loopDecision(h.core.request(c, host, port, hostpolicy.ProtoHTTP, req.Method))
		writeBlockedJSON(bw, d, false, req.Method == http.MethodHead)
		return false
	}
	var authority string
	switch {
	case req.URL.IsAbs():
		if !strings.EqualFold(req.URL.Scheme, "http") {
			writeSimpleFor(bw, req.Method, http.StatusBadRequest, "unsupported scheme: use CONNECT for https")
			return false
		}
		authority = req.URL.Host
		if hostHdr != "" && !sameAuthority(hostHdr, authority, 80) {
			writeSimpleFor(bw, req.Method, http.StatusBadRequest, "Host header does not match request target")
			return false
		}
	default:
		// Origin-form: the Host header names the target.
		authority = hostHdr
	}
	host, port, ok := splitHostPort(authority, 80)
	if !ok || host == "" {
		writeSimpleFor(bw, req.Method, http.StatusBadRequest, "missing host")
		return false
	}
	// Body-less requests to direct upstreams (the common case) take the
	// fast path; requests with a body, and everything through a parent
	// proxy, are forwarded by goproxy over http.Transport.
	if h.pool != nil && bodyless(req) {
		return h.serveFast(pc, c, bw, req, authority, host, port)
	}
	c.SetReadDeadline(time.Time{}) // the body and the watch read the client
	// Watch the client through the decision and the upstream round trip:
	// if it leaves during a slow review or a slow upstream, both stop.
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stopWatch := watchVanish(c, cancel)
	defer stopWatch()
	hreq := h.core.request(c, host, port, hostpolicy.ProtoHTTP, req.Method)
	gen := c.generation()
	d := h.core.decide(ctx, hreq)
	if !d.Allowed() {
		keep := !hasBody(req) && !req.Close
		writeBlockedJSON(bw, d, keep, req.Method == http.MethodHead)
		return keep
	}
	if !h.core.bindPlain(c, &d, gen) {
		return false // a change since the decision closed the connection
	}
	if !h.credentialHook(c, bw, req, d) { // credential broker (docs/credentials.md)
		return false
	}

	// Forward through goproxy, dialing exactly the decision's addresses.
	req.URL.Scheme = "http"
	req.URL.Host = authority
	req.Host = authority
	removeHopByHop(req.Header)
	h.via.add(req.Header)
	target := TargetOf(d)
	if h.core.Dialer.Parent != "" {
		// The parent gets the pinned address, never the name (SPEC §3.5).
		var err error
		if target, err = h.core.Dialer.PinForParent(ctx, req, target, authority); err != nil {
			h.core.logger().Info("upstream failure", "host", d.Host, "error", err.Error())
			if refusedAtDial(err) {
				writeBlockedJSON(bw, refusedDecision(d), false, req.Method == http.MethodHead)
			} else {
				writeSimpleFor(bw, req.Method, http.StatusBadGateway, "upstream failure")
			}
			return false
		}
	}
	var body *trackedBody
	if req.Body != nil && req.Body != http.NoBody {
		body = &trackedBody{rc: req.Body}
		req.Body = body
	}
	rw := &respWriter{bw: bw, req: req, header: make(http.Header), closeAfter: req.Close}
	if body != nil && expectsContinue(req) {
		// Runs on the transport's goroutine; the gate keeps it from writing
		// once the final response has started.
		body.onFirstRead = rw.sendContinue
	}
	fctx := WithTarget(ctx, target)
	h.gp.ServeHTTP(rw, req.WithContext(fctx))
	rw.finish()
	h.core.Meter.Bytes("down", string(hostpolicy.ProtoHTTP), rw.written)
	if body != nil {
		h.core.Meter.Bytes("up", string(hostpolicy.ProtoHTTP), body.bytes())
	}
	if body != nil && !body.done() {
		// The upstream did not read the whole body: the stream is out of
		// step. Close the socket (unblocking a read the transport may still
		// run) and stop the body before its buffer is reused.
		c.TCPConn.Close()
		body.stop()
		return false
	}
	return !rw.closeAfter && rw.err == nil
}

// plainConn is the per-connection state of the fast path.
type plainConn struct {
	ctx   context.Context // the connection's; cancelled when the client vanishes
	watch *connWatch
	rw    respWriter
}

// serveFast forwards a body-less request to a direct upstream over the
// keep-alive pool, on this goroutine. It does what the goproxy path does —
// the same decision, the same hop-by-hop filtering both ways, the same
// pinned dial, the same framing — without goproxy's per-request context,
// header copy and log formatting.
func (h *HTTPProxy) serveFast(pc *plainConn, c *Conn, bw *bufio.Writer, req *http.Request, authority, host string, port uint16) bool {
	ctx := pc.ctx
	// Watch the client through the decision and the upstream round trip:
	// if it leaves during a slow review or a slow upstream, both stop.
	pc.watch.arm()
	watching := true
	defer func() {
		if watching {
			pc.watch.disarm()
		}
	}()
	gen := c.generation()
	d := h.core.decide(ctx, h.core.request(c, host, port, hostpolicy.ProtoHTTP, req.Method))
	if !d.Allowed() {
		keep := !req.Close
		writeBlockedJSON(bw, d, keep, req.Method == http.MethodHead)
		return keep
	}
	if !h.core.bindPlain(c, &d, gen) {
		return false // a change since the decision closed the connection
	}
	if !h.credentialHook(c, bw, req, d) { // credential broker (docs/credentials.md)
		return false
	}
	req.URL.Scheme = "http"
	req.URL.Host = authority
	req.Host = authority
	req.RequestURI = ""
	removeHopByHop(req.Header)
	h.via.add(req.Header)

	rw := &pc.rw
	*rw = respWriter{bw: bw, req: req, closeAfter: req.Close}
	t := TargetOf(d)
	resp, err := h.pool.roundTrip(ctx, req, &t, pc.watch)
	if err != nil && refusedAtDial(err) {
		h.core.logger().Info("dial refused", "host", d.Host, "error", scrubErr(err))
		rw.req = nil
		writeBlockedJSON(bw, refusedDecision(d), false, req.Method == http.MethodHead)
		return false
	} else if err != nil {
		h.core.logger().Info("upstream failure", "host", d.Host, "error", scrubErr(err))
		rw.header = http.Header{"Content-Type": {"text/plain; charset=utf-8"}}
		rw.WriteHeader(http.StatusBadGateway)
		rw.Write([]byte("upstream failure\n"))
	} else {
		rw.header = resp.Header
		rw.WriteHeader(resp.StatusCode)
		if streams(rw) {
			// Server-sent events and chunked answers reach the client as
			// they arrive (goproxy's flushWriter does the same).
			rw.copyFlushing(resp.Body)
		} else {
			rw.ReadFrom(resp.Body)
		}
		resp.Body.Close()
	}
	watching = false
	pc.watch.disarm()
	rw.finish()
	h.core.Meter.Bytes("down", string(hostpolicy.ProtoHTTP), rw.written)
	keep := !rw.closeAfter && rw.err == nil
	rw.req, rw.header = nil, nil // nothing of this request stays reachable
	return keep
}

// streams reports whether a response must be flushed as it arrives.
func streams(w *respWriter) bool {
	return w.chunked || strings.HasPrefix(w.header.Get("Content-Type"), "text/event-stream")
}

func expectsContinue(req *http.Request) bool {
	for _, v := range req.Header.Values("Expect") {
		if strings.EqualFold(strings.TrimSpace(v), "100-continue") {
			return req.ProtoAtLeast(1, 1)
		}
	}
	return false
}

// sameAuthority compares a Host header with the request target: the hosts
// must match and so must the ports, a missing port meaning the default.
func sameAuthority(hostHdr, target string, def uint16) bool {
	h1, p1, ok1 := splitHostPort(hostHdr, def)
	if ok1 && hostHdr == target {
		// The usual case, the same bytes twice: one normalisation will do.
		_, err := hostpolicy.Normalize(h1)
		return err == nil
	}
	h2, p2, ok2 := splitHostPort(target, def)
	return ok1 && ok2 && p1 == p2 && sameHost(h1, h2)
}

// hopByHop are the headers that belong to one connection (RFC 9110 §7.6.1),
// plus the proxy credentials, which must never travel on.
var hopByHop = []string{
	"Connection", "Keep-Alive", "Proxy-Connection", "Proxy-Authorization",
	"Proxy-Authenticate", "Te", "Trailer", "Transfer-Encoding", "Upgrade",
}

func removeHopByHop(h http.Header) {
	for _, v := range h.Values("Connection") {
		for _, name := range strings.Split(v, ",") {
			if name = strings.TrimSpace(name); name != "" {
				h.Del(name)
			}
		}
	}
	for _, name := range hopByHop {
		delete(h, name) // already canonical: no re-canonicalisation per call
	}
}

type blockedBody struct {
	Status   string `json:"status"`
	Host     string `json:"host"`
	Port     uint16 `json:"port"`
	Reason   string `json:"reason"`
	Decision string `json:"decision"`
	Source   string `json:"source"`
	Protocol string `json:"protocol"`
	Message  string `json:"message"`
}

// writeBlockedJSON writes the plain-HTTP block of SPEC §3.7. The answer to
// a HEAD carries the body's length but not the body: a keep-alive client
// would read those bytes as the start of its next response.
func writeBlockedJSON(bw *bufio.Writer, d hostpolicy.Decision, keep, head bool) {
	if d.Reason == hostpolicy.ReasonProxyDisabled {
		writeDisabled(bw, d, keep, head)
		return
	}
	verdict := string(d.Verdict)
	if verdict != string(hostpolicy.Ask) {
		verdict = string(hostpolicy.Deny)
	}
	body, _ := json.Marshal(blockedBody{
		Status: "blocked", Host: d.Host, Port: d.Port, Reason: string(d.Reason), Decision: verdict,
		Source: string(d.Source), Protocol: "http", Message: d.Message(),
	})
	conn := "keep-alive"
	if !keep {
		conn = "close"
	}
	status := "403 Forbidden"
	if d.Reason == ReasonProxyLoop {
		status = "508 Loop Detected"
	}
	fmt.Fprintf(bw, "HTTP/1.1 %s\r\nContent-Type: application/json\r\nX-Proxy-Error: %s\r\nContent-Length: %d\r\nConnection: %s\r\n\r\n",
		status, d.XProxyError(), len(body), conn)
	if !head {
		bw.Write(body)
	}
	bw.Flush()
}

// writeDisabled writes the 503 of SPEC §3.7 "when the proxy is disabled",
// for plain HTTP and CONNECT alike: text/plain, the reference's body, and
// x-proxy-error blocked-by-policy (SPEC's mapping for every other reason),
// so a client can tell the proxy's refusal from an upstream's own 503.
// The answer to a HEAD carries the body's length but not the body.
func writeDisabled(bw *bufio.Writer, d hostpolicy.Decision, keep, head bool) {
	body := d.Message()
	conn := "keep-alive"
	if !keep {
		conn = "close"
	}
	fmt.Fprintf(bw, "HTTP/1.1 503 Service Unavailable\r\nContent-Type: text/plain; charset=utf-8\r\nX-Proxy-Error: %s\r\nContent-Length: %d\r\nConnection: %s\r\n\r\n",
		d.XProxyError(), len(body), conn)
	if !head {
		bw.WriteString(body)
	}
	bw.Flush()
}

// writeBlockedText writes the CONNECT block of SPEC §3.7.
func writeBlockedText(bw *bufio.Writer, d hostpolicy.Decision) {
	if d.Reason == hostpolicy.ReasonProxyDisabled {
		writeDisabled(bw, d, false, false)
		return
	}
	body := d.Message()
	status := "403 Forbidden"
	if d.Reason == ReasonProxyLoop {
		status = "508 Loop Detected"
	}
	fmt.Fprintf(bw, "HTTP/1.1 %s\r\nContent-Type: text/plain; charset=utf-8\r\nX-Proxy-Error: %s\r\nContent-Length: %d\r\nConnection: close\r\n\r\n%s",
		status, d.XProxyError(), len(body), body)
	bw.Flush()
}

// serveConnect checks a CONNECT and, when allowed, turns the connection
// into a tunnel. It reports whether the tunnel took the connection over.
func (h *HTTPProxy) serveConnect(ctx context.Context, c *Conn, br *bufio.Reader, bw *bufio.Writer, req *http.Request) bool {
	authority := req.URL.Host
	if authority == "" {
		authority = req.Host
	}
	host, portStr, err := net.SplitHostPort(authority)
	if err != nil || host == "" {
		writeSimple(bw, http.StatusBadRequest, "missing authority")
		return false
	}
	port, ok := parsePort(portStr)
	if !ok {
		writeSimple(bw, http.StatusBadRequest, "invalid port")
		return false
	}
	hreq := h.core.request(c, host, port, hostpolicy.ProtoHTTPS, http.MethodConnect)
	if h.via.looped(req.Header) {
		// Our own CONNECT to a parent came back (SPEC §3.5).
		writeBlockedText(bw, h.core.loopDecision(hreq))
		return false
	}
	gen := c.generation()
	d := h.core.decideWatching(ctx, c, hreq)
	if !d.Allowed() {
		writeBlockedText(bw, d)
		return false
	}
	if intercepts(d) {
		var early []byte
		if n := br.Buffered(); n > 0 {
			early, _ = br.Peek(n)
			early = append([]byte(nil), early...)
		}
		if !h.core.bindTunnel(c, &d, hostpolicy.ProtoHTTPS, nil, gen) {
			return false
		}
		return h.serveMITM(ctx, c, bw, early, d)
	}
	up, err := h.core.Dialer.DialTarget(ctx, TargetOf(d))
	if err != nil {
		h.core.logger().Info("upstream failure", "protocol", "https", "host", d.Host, "port", d.Port, "error", err.Error())
		if refusedAtDial(err) {
			writeBlockedText(bw, refusedDecision(d))
		} else {
			writeSimple(bw, http.StatusBadGateway, "upstream failure")
		}
		return false
	}
	if !h.core.bindTunnel(c, &d, hostpolicy.ProtoHTTPS, up, gen) {
		up.Close()
		return false // a change since the decision closed the connection
	}
	if _, err := bw.WriteString("HTTP/1.1 200 Connection established\r\n\r\n"); err != nil || bw.Flush() != nil {
		up.Close()
		return false
	}
	var early []byte
	if n := br.Buffered(); n > 0 {
		early, _ = br.Peek(n)
		early = append([]byte(nil), early...)
	}
	t := &Tunnel{
		Client: c.TCPConn, Upstream: up, Early: early, Idle: h.limits.IdleTimeout,
		Protocol: hostpolicy.ProtoHTTPS, Meter: h.core.Meter, Owner: c,
	}
	// The handler goroutine (with its larger stack) ends here; the tunnel
	// runs on fresh goroutines.
	h.wg.Add(1)
	go func() {
		defer h.wg.Done()
		t.Run()
	}()
	return true
}

// trackedBody records whether the request body was read to the end and
// stops reads once the request is finished.
type trackedBody struct {
	mu          sync.Mutex
	rc          io.ReadCloser
	eof         bool
	stopped     bool
	n           int64
	started     bool
	onFirstRead func()
}

func (b *trackedBody) Read(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.eof {
		return 0, io.EOF
	}
	if b.stopped {
		return 0, net.ErrClosed
	}
	if !b.started {
		b.started = true
		if b.onFirstRead != nil {
			b.onFirstRead()
		}
	}
	n, err := b.rc.Read(p)
	b.n += int64(n)
	if err == io.EOF {
		b.eof = true
	}
	return n, err
}

func (b *trackedBody) Close() error { return nil }

// bytes is how much of the body was read (call after done or stop).
func (b *trackedBody) bytes() int64 {
	if !b.mu.TryLock() {
		return 0
	}
	defer b.mu.Unlock()
	return b.n
}

// stop waits for a running read to end and refuses later ones.
func (b *trackedBody) stop() {
	b.mu.Lock()
	b.stopped = true
	b.mu.Unlock()
}

func (b *trackedBody) done() bool {
	if !b.mu.TryLock() {
		return false // a read is still running on another goroutine
	}
	defer b.mu.Unlock()
	return b.eof
}

// respWriter is the http.ResponseWriter goproxy writes the upstream
// response into; it frames the body for the client (Content-Length,
// chunked, or close-delimited for HTTP/1.0).
type respWriter struct {
	headMu      sync.Mutex // orders a 100 Continue against the final head
	bw          *bufio.Writer
	req         *http.Request
	header      http.Header
	wroteHeader bool
	chunked     bool
	noBody      bool
	closeAfter  bool
	remaining   int64 // -1: unknown
	written     int64 // body bytes sent to the client
	err         error
}

func (w *respWriter) Header() http.Header { return w.header }

// sendContinue tells a client waiting on Expect: 100-continue to send its
// body, unless the final response has already begun.
func (w *respWriter) sendContinue() {
	w.headMu.Lock()
	defer w.headMu.Unlock()
	if !w.wroteHeader {
		w.bw.WriteString("HTTP/1.1 100 Continue\r\n\r\n")
		w.bw.Flush()
	}
}

func (w *respWriter) WriteHeader(code int) {
	if w.wroteHeader || code < 200 {
		return
	}
	w.headMu.Lock()
	defer w.headMu.Unlock()
	w.wroteHeader = true
	h := w.header
	removeHopByHop(h)
	w.remaining = -1
	w.noBody = w.req.Method == http.MethodHead || code == http.StatusNoContent || code == http.StatusNotModified
	switch cl := h.Get("Content-Length"); {
	case w.noBody:
	case cl != "":
		n, err := strconv.ParseInt(cl, 10, 64)
		if err != nil || n < 0 {
			h.Del("Content-Length")
			w.closeAfter = true
		} else {
			w.remaining = n
		}
	case w.req.ProtoAtLeast(1, 1):
		w.chunked = true
		h.Set("Transfer-Encoding", "chunked")
	default:
		w.closeAfter = true
	}
	if w.closeAfter {
		h.Set("Connection", "close")
	} else if !w.req.ProtoAtLeast(1, 1) {
		h.Set("Connection", "keep-alive")
	}
	text := http.StatusText(code)
	if text == "" {
		text = "status code " + strconv.Itoa(code)
	}
	// "HTTP/1.1 %03d %s\r\n" without fmt's per-call cost.
	var line [16]byte
	w.bw.Write(strconv.AppendInt(append(line[:0], "HTTP/1.1 "...), int64(code), 10))
	w.bw.WriteByte(' ')
	w.bw.WriteString(text)
	w.bw.WriteString("\r\n")
	h.Write(w.bw)
	w.bw.WriteString("\r\n")
}

func (w *respWriter) Write(p []byte) (int, error) {
	if !w.wroteHeader {
		w.WriteHeader(http.StatusOK)
	}
	if w.err != nil {
		return 0, w.err
	}
	if w.noBody || len(p) == 0 {
		return len(p), nil
	}
	if w.remaining >= 0 {
		if int64(len(p)) > w.remaining {
			w.err = http.ErrContentLength
			return 0, w.err
		}
		w.remaining -= int64(len(p))
	}
	if w.chunked {
		var size [20]byte
		w.bw.Write(append(strconv.AppendInt(size[:0], int64(len(p)), 16), '\r', '\n'))
	}
	n, err := w.bw.Write(p)
	w.written += int64(n)
	if w.chunked && err == nil {
		_, err = w.bw.WriteString("\r\n")
	}
	if err != nil {
		w.err = err
	}
	return n, err
}

// ReadFrom copies a response body without io.Copy's per-call 32 KiB
// buffer: fixed-length bodies are read straight into the connection's
// write buffer, chunked ones through a pooled buffer.
func (w *respWriter) ReadFrom(r io.Reader) (int64, error) {
	if !w.wroteHeader {
		w.WriteHeader(http.StatusOK)
	}
	if w.err != nil {
		return 0, w.err
	}
	if w.noBody {
		return io.Copy(io.Discard, r)
	}
	if !w.chunked {
		src := r
		if w.remaining >= 0 {
			src = io.LimitReader(r, w.remaining)
		}
		n, err := w.bw.ReadFrom(src)
		w.written += n
		if w.remaining >= 0 {
			w.remaining -= n
		}
		if err != nil {
			w.err = err
		}
		return n, err
	}
	bp := copyBufPool.Get().(*[]byte)
	defer copyBufPool.Put(bp)
	var total int64
	for {
		n, rerr := r.Read(*bp)
		if n > 0 {
			if _, err := w.Write((*bp)[:n]); err != nil {
				return total, err
			}
			total += int64(n)
		}
		if rerr == io.EOF {
			return total, nil
		}
		if rerr != nil {
			return total, rerr
		}
	}
}

// copyFlushing copies a streamed body, flushing after every read.
func (w *respWriter) copyFlushing(r io.Reader) {
	bp := copyBufPool.Get().(*[]byte)
	defer copyBufPool.Put(bp)
	for {
		n, rerr := r.Read(*bp)
		if n > 0 {
			if _, err := w.Write((*bp)[:n]); err != nil {
				return
			}
			if w.Flush(); w.err != nil {
				return
			}
		}
		if rerr != nil {
			if rerr != io.EOF && w.err == nil {
				w.err = rerr
			}
			return
		}
	}
}

var copyBufPool = sync.Pool{New: func() any { b := make([]byte, 16<<10); return &b }}

// Flush sends what is buffered (goproxy flushes streamed responses).
func (w *respWriter) Flush() {
	if !w.wroteHeader {
		w.WriteHeader(http.StatusOK)
	}
	if w.err == nil {
		w.err = w.bw.Flush()
	}
}

func (w *respWriter) finish() {
	if !w.wroteHeader {
		w.WriteHeader(http.StatusOK)
	}
	if w.chunked && w.err == nil {
		_, w.err = w.bw.WriteString("0\r\n\r\n")
	}
	if w.remaining > 0 {
		w.closeAfter = true // short body: the client must see the end
	}
	if err := w.bw.Flush(); err != nil && w.err == nil {
		w.err = err
	}
}
