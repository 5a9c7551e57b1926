package proxy

import (
	"bufio"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/netproxy/netproxy/hostpolicy"
)

// The forwarding stage: every allowed plain-HTTP request — with or without
// a body, direct or through the parent proxy — goes upstream here, and
// nowhere else. It does what net/http/httputil.ReverseProxy does for a
// client, point by point:
//
//   - hop-by-hop headers are removed both ways (RFC 9110 §7.6.1), except
//     that an Upgrade request keeps "Connection: Upgrade" and its Upgrade
//     value, and "Te: trailers" is kept;
//   - 1xx answers are relayed as they arrive (103 Early Hints; 100 Continue
//     to a client that sent Expect: 100-continue), as Got1xxResponse does;
//   - the response head is sent at once and body bytes as they arrive
//     (FlushInterval -1), without a flush per read when more bytes are
//     already buffered;
//   - trailers are announced in a Trailer header and sent after the body;
//   - a 101 for the protocol asked for splices the two sockets; the spliced
//     connection stays in the open-connection registry (closed by a change
//     that no longer allows it) and is metered;
//   - retries follow net/http's rule (upstream.go).
//
// An upstream that answers before it has read the whole request body (a
// 413 part-way through an upload) has its answer forwarded; the client
// connection then closes with a lingering close so the client reads it.

// forward sends an allowed request upstream and relays the answer.
func (h *HTTPProxy) forward(pc *plainConn, req *http.Request, authority string, d hostpolicy.Decision, gen uint64, body bool) connNext {
	c, bw := pc.c, pc.bw
	head := req.Method == http.MethodHead
	watching := !body
	defer func() {
		if watching {
			pc.watch.disarm()
		}
		pc.trailers = nil // nothing of this request stays reachable
	}()
	upType := upgradeType(req.Header)
	wantTrailers := headerHasToken(req.Header, "Te", "trailers")
	pc.clientContinue = expectsContinue(req)
	req.URL.Scheme = "http"
	req.URL.Host = authority
	req.Host = authority
	req.RequestURI = ""
	removeHopByHop(req.Header)
	// The client's Connection: close is about its own connection: a
	// request without a body goes over a pooled upstream connection that
	// stays open (as with httputil.ReverseProxy). One with a body keeps it:
	// an upstream may stream its answer while it reads the body only on a
	// connection that closes after (net/http's server discards an unread
	// body of a keep-alive request once it answers). A request without a
	// User-Agent reaches the upstream without one.
	clientClose := req.Close
	if !body {
		req.Close = false
	}
	if _, ok := req.Header["User-Agent"]; !ok {
		// Empty: http.Request.Write (and writeRequestHead) then add none.
		// One slice per connection: nothing writes into it.
		if pc.noUA == nil {
			pc.noUA = []string{""}
		}
		req.Header["User-Agent"] = pc.noUA
	}
	if upType != "" {
		req.Header["Connection"] = []string{"Upgrade"}
		req.Header["Upgrade"] = []string{upType}
	}
	if wantTrailers {
		req.Header["Te"] = []string{"trailers"}
	}
	h.via.add(req.Header)
	t := TargetOf(d)
	if h.core.Dialer.Parent != "" {
		// The parent gets the pinned address, never the name (SPEC §3.5).
		var err error
		if t, err = h.core.Dialer.PinForParent(pc.ctx, req, t, authority); err != nil {
			h.core.logger().Info("upstream failure", "host", d.Host, "error", err.Error())
			pc.end.cause = causeError
			if refusedAtDial(err) {
				pc.end.cause = causeRefused
				writeBlockedJSON(bw, refusedDecision(d), false, head)
			} else {
				writeSimpleFor(bw, req.Method, http.StatusBadGateway, "upstream failure")
			}
			return h.closeAfterAnswer(c, body)
		}
	}
	var sent *countingBody
	if body {
		sent = &countingBody{rc: h.core.budgetReader(c, req.Body, true)}
		req.Body = sent
	}
	rw := &pc.rw
	*rw = respWriter{bw: bw, req: req, closeAfter: clientClose}
	o := exchangeOpts{upgrade: upType, cutBody: pc.cutBody}
	if watching {
		o.intr = pc.watch
	}
	if req.ProtoAtLeast(1, 1) {
		o.on1xx = pc.on1xx
	}
	resp, err := h.pool.roundTrip(pc.ctx, req, t, o)
	if sent != nil {
		defer func() {
			h.core.Meter.Bytes("up", string(hostpolicy.ProtoHTTP), sent.n)
			pc.end.out = sent.n
		}()
	}
	switch {
	case err != nil && pc.trailerBlock() != nil:
		// The trailers were refused at the body's end (audited then): the
		// upstream connection was closed before the last chunk.
		writeBlockedJSON(bw, *pc.trailerBlock(), false, head)
		return h.closeAfterAnswer(c, body)
	case err != nil && refusedAtDial(err):
		pc.end.cause = causeRefused
		h.core.logger().Info("dial refused", "host", d.Host, "error", scrubErr(err))
		writeBlockedJSON(bw, refusedDecision(d), false, head)
		return h.closeAfterAnswer(c, body)
	case err != nil:
		pc.end.cause = causeError
		if pc.ctx.Err() != nil {
			pc.end.cause = causeClient // the client left during the round trip
		}
		h.core.logger().Info("upstream failure", "host", d.Host, "error", scrubErr(err))
		// (A relayed 1xx may have gone out: a final answer may follow it.)
		writeSimpleFor(bw, req.Method, http.StatusBadGateway, "upstream failure")
		return h.closeAfterAnswer(c, body)
	case resp.StatusCode == http.StatusSwitchingProtocols:
		if watching {
			watching = false
			pc.watch.disarm()
		}
		return h.splice(pc, resp, d, gen)
	}
	rw.header = resp.Header
	rw.trailer = resp.Trailer
	pb, _ := resp.Body.(*pooledBody)
	if body && pb != nil && pb.body != nil && !pb.body.poll(bodySettle) {
		// The upstream answers while the request body is still going up
		// (or before it was read): the connection cannot carry another
		// request in step, so the answer says it closes, as net/http's
		// server does for a handler that left its body unread.
		rw.closeAfter = true
	}
	if pb != nil && pb.rawHead != nil {
		rw.writeRawHead(resp.StatusCode, resp.ContentLength, pb.rawHead)
	} else {
		rw.WriteHeader(resp.StatusCode)
	}
	rw.copyBody(h.core.budgetReader(c, resp.Body, false), pb)
	resp.Body.Close()
	if watching {
		watching = false
		pc.watch.disarm()
	}
	rw.trailer = resp.Trailer // filled (or made) at the body's end
	rw.finish()
	h.core.Meter.Bytes("down", string(hostpolicy.ProtoHTTP), rw.written)
	pc.end.status, pc.end.in, pc.end.cause = resp.StatusCode, rw.written, rw.answerCause()
	keep := !rw.closeAfter && rw.err == nil
	rw.req, rw.header, rw.trailer = nil, nil, nil // nothing of this request stays reachable
	if body && (pb == nil || pb.body == nil || !pb.body.sent) {
		// The upstream answered before the whole body arrived: the
		// stream is out of step. Let the client read the answer.
		lingerClose(c)
		return connClose
	}
	if keep {
		return connKeep
	}
	return connClose
}

// closeAfterAnswer ends a connection after an answer of the proxy's own:
// with a lingering close when the client may still be sending a body.
func (h *HTTPProxy) closeAfterAnswer(c *Conn, body bool) connNext {
	if body {
		lingerClose(c)
	}
	return connClose
}

// splice relays a 101 and joins the client and upstream sockets. The
// connection is registered as a tunnel (a change that no longer allows the
// target closes both sides) and metered as http.
func (h *HTTPProxy) splice(pc *plainConn, resp *http.Response, d hostpolicy.Decision, gen uint64) connNext {
	c, bw, br := pc.c, pc.bw, pc.br
	pc.end.status, pc.end.cause = resp.StatusCode, causeError
	method := pc.rw.req.Method
	uc := resp.Body.(*upgradedConn).uc
	up, ok := uc.c.(*net.TCPConn)
	if !ok {
		uc.c.Close()
		return connClose
	}
	if !h.core.bindTunnel(c, &d, hostpolicy.ProtoHTTP, up, gen) {
		up.Close()
		pc.end.cause = causePolicy
		return connClose // a change since the decision closed the connection
	}
	hdr := resp.Header
	proto := hdr.Get("Upgrade")
	removeHopByHop(hdr)
	hdr["Connection"] = []string{"Upgrade"}
	hdr["Upgrade"] = []string{proto}
	bw.WriteString("HTTP/1.1 101 Switching Protocols\r\n")
	hdr.Write(bw)
	bw.WriteString("\r\n")
	// Bytes the upstream sent right after its 101 go first.
	var down int64
	if n := uc.br.Buffered(); n > 0 {
		b, _ := uc.br.Peek(n)
		bw.Write(b)
		down = int64(n)
	}
	if err := bw.Flush(); err != nil {
		up.Close()
		return connClose
	}
	h.core.Meter.Bytes("down", string(hostpolicy.ProtoHTTP), down)
	c.SetReadDeadline(time.Time{})
	var early []byte
	if n := br.Buffered(); n > 0 {
		early, _ = br.Peek(n)
		early = append([]byte(nil), early...)
	}
	tn := &Tunnel{
		Client: c.TCPConn, Upstream: up, Early: early, Idle: h.limits.IdleTimeout,
		Protocol: hostpolicy.ProtoHTTP, Meter: h.core.Meter, Owner: c, Parker: h.core.Parker,
		HalfCloseGrace: upgradeGrace, budget: h.core.tunnelBudget(c),
		acc: h.core.tunnelAccess(c, &d, hostpolicy.ProtoHTTP, method, resp.StatusCode),
	}
	tn.acc.count(dirDown, down) // the bytes after the 101, relayed above
	pc.end.tunnel = true        // the tunnel's end writes the line
	pc.rw = respWriter{}
	// The handler goroutine (with its larger stack) ends here; the tunnel
	// runs on fresh goroutines.
	tn.Start(&h.wg)
	return connTaken
}

// bodySettle is how long an answer waits for the request body's writer to
// report before it is sent with Connection: close.
const bodySettle = 50 * time.Millisecond

// upgradeGrace is how long an upgraded connection stays open after one
// side ended it: a client that left must not hold its slot for as long as
// the upstream likes.
const upgradeGrace = 5 * time.Second

// countingBody counts the request body bytes read.
type countingBody struct {
	rc io.ReadCloser
	n  int64
}

func (b *countingBody) Read(p []byte) (int, error) {
	n, err := b.rc.Read(p)
	b.n += int64(n)
	return n, err
}

func (b *countingBody) Close() error { return nil }

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
	approvalWaitHeader, // SPEC §3.7: ours, never forwarded
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

// respWriter frames an upstream response for the client (Content-Length,
// chunked with trailers, or close-delimited for HTTP/1.0).
type respWriter struct {
	bw          *bufio.Writer
	req         *http.Request
	header      http.Header
	trailer     http.Header
	wroteHeader bool
	chunked     bool
	noBody      bool
	closeAfter  bool
	remaining   int64 // -1: unknown
	written     int64 // body bytes sent to the client
	err         error
	readErr     bool // err came from reading the upstream's body
}

// writeInformational relays a 1xx answer at once.
func (w *respWriter) writeInformational(code int, h http.Header) {
	if w.wroteHeader || w.err != nil {
		return
	}
	removeHopByHop(h)
	w.bw.WriteString("HTTP/1.1 ")
	w.bw.WriteString(strconv.Itoa(code))
	w.bw.WriteByte(' ')
	w.bw.WriteString(http.StatusText(code))
	w.bw.WriteString("\r\n")
	h.Write(w.bw)
	w.bw.WriteString("\r\n")
	w.err = w.bw.Flush()
}

// WriteHeader writes the final response head (buffered).
func (w *respWriter) WriteHeader(code int) {
	if w.wroteHeader || code < 200 {
		return
	}
	w.wroteHeader = true
	h := w.header
	removeHopByHop(h)
	w.remaining = -1
	w.noBody = w.req.Method == http.MethodHead || code == http.StatusNoContent || code == http.StatusNotModified
	switch cl := h.Get("Content-Length"); {
	case w.noBody:
	case cl != "" && len(w.trailer) == 0:
		n, err := strconv.ParseInt(cl, 10, 64)
		if err != nil || n < 0 {
			h.Del("Content-Length")
			w.closeAfter = true
		} else {
			w.remaining = n
		}
	case w.req.ProtoAtLeast(1, 1):
		h.Del("Content-Length")
		w.chunked = true
		h["Transfer-Encoding"] = []string{"chunked"}
		if len(w.trailer) > 0 {
			keys := make([]string, 0, len(w.trailer))
			for k := range w.trailer {
				keys = append(keys, k)
			}
			h["Trailer"] = []string{strings.Join(keys, ", ")}
		}
	default:
		w.closeAfter = true
	}
	if w.closeAfter {
		h["Connection"] = []string{"close"}
	} else if !w.req.ProtoAtLeast(1, 1) {
		h["Connection"] = []string{"keep-alive"}
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

// copyBody relays a response body as it arrives: before every read that
// would wait for the upstream, what was written so far is flushed (the
// head at once, each part of a slow body when it comes), and a body that
// is already buffered goes out in one write.
func (w *respWriter) copyBody(r io.Reader, pb *pooledBody) {
	bp := copyBufPool.Get().(*[]byte)
	defer copyBufPool.Put(bp)
	for {
		if pb == nil || pb.uc.br.Buffered() == 0 {
			if w.Flush(); w.err != nil {
				return
			}
		}
		n, rerr := r.Read(*bp)
		if n > 0 {
			if _, err := w.Write((*bp)[:n]); err != nil {
				return
			}
		}
		if rerr != nil {
			if rerr != io.EOF && w.err == nil {
				w.err, w.readErr = rerr, true
			}
			return
		}
	}
}

var copyBufPool = sync.Pool{New: func() any { b := make([]byte, 16<<10); return &b }}

// Flush sends what is buffered.
func (w *respWriter) Flush() {
	if !w.wroteHeader {
		w.WriteHeader(http.StatusOK)
	}
	if w.err == nil && w.bw.Buffered() > 0 {
		w.err = w.bw.Flush()
	}
}

func (w *respWriter) finish() {
	if !w.wroteHeader {
		w.WriteHeader(http.StatusOK)
	}
	if w.chunked && w.err == nil {
		_, w.err = w.bw.WriteString("0\r\n")
		if w.err == nil && len(w.trailer) > 0 {
			w.err = w.trailer.Write(w.bw)
		}
		if w.err == nil {
			_, w.err = w.bw.WriteString("\r\n")
		}
	}
	if w.remaining > 0 {
		w.closeAfter = true // short body: the client must see the end
	}
	if err := w.bw.Flush(); err != nil && w.err == nil {
		w.err = err
	}
}
