package proxy

import (
	"bufio"
	"context"
	"io"
	"net/http"
	"time"

	"github.com/netproxy/netproxy/hostpolicy"
)

// Captured connections (SPEC §6.6; docs/proxy.md "Captured connections").
// execwrap sends each connection it captured in the sandbox as a framed
// CONNECT name:port carrying CaptureHeader. netproxy decides the CONNECT
// (the host first, as everywhere) and then lets the stream's first client
// bytes say what it is:
//
//   - an HTTP/1.x request line: the connection is served as plain proxied
//     HTTP bound to the tunnel's authority — each request through the
//     listener's own per-request path (mode guard, request rules,
//     credentials, budgets, audit, connection_end), as the same client's
//     explicit plain-HTTP request would be;
//   - anything else (a TLS ClientHello, SSH, …): the CONNECT's own
//     outcome — a tunnel with the SNI check, interception, or its refusal.
//
// A limited-mode refusal of the CONNECT (mitm_required) is held, unreported,
// until the first bytes: plain HTTP goes on request by request, anything
// else gets the refusal then. The header can only add checks: what it
// opens is exactly what the plain listener already serves the same client.

// CaptureHeader marks a CONNECT execwrap sent for a captured connection
// (value "1"; sandbox/capture_linux.go writes it).
const CaptureHeader = "X-Netproxy-Capture"

// captureConnect is one captured CONNECT being served.
type captureConnect struct {
	h         *HTTPProxy
	ctx       context.Context
	c         *Conn
	req       hostpolicy.Request
	authority string // the CONNECT's target: every inner request's
	// The connection loop's reader and writer; nil once a tunnel took the
	// connection (ServeConn has given them back).
	sc *headScanner
	br *bufio.Reader
	bw *bufio.Writer

	decided time.Time // when the CONNECT was decided
	isHeld  bool      // a limited-mode refusal held for the first bytes
	checked bool      // the tunnel checked its first client bytes
	pre     []byte    // the tunnel's first client bytes, for the request loop
}

// capturedConnect returns the capture state of a CONNECT carrying
// CaptureHeader, nil for any other.
func (h *HTTPProxy) capturedConnect(ctx context.Context, c *Conn, sc *headScanner, br *bufio.Reader, bw *bufio.Writer,
	req *http.Request, hreq hostpolicy.Request, authority string) *captureConnect {
	if req.Header.Get(CaptureHeader) != "1" {
		return nil
	}
	return &captureConnect{h: h, ctx: ctx, c: c, req: hreq, authority: authority, sc: sc, br: br, bw: bw}
}

// decide is decideWatching, reporting the decision unless it is a
// limited-mode refusal of the CONNECT itself (mitm_required): that one is
// held until the stream shows it is not plain HTTP.
func (cp *captureConnect) decide() hostpolicy.Decision {
	core, conn := cp.h.core, cp.c
	ctx, cancel := context.WithCancel(cp.ctx)
	defer cancel()
	stop := watchVanish(conn, cancel)
	conn.arrived = time.Now()
	d := core.runUnreported(ctx, cp.req, hostpolicy.RunOptions{Admit: core.admitter(conn)})
	stop()
	cp.decided = time.Now()
	if !d.Allowed() && d.Reason == hostpolicy.ReasonMITMRequired {
		cp.isHeld = true
		return d
	}
	core.report(cp.req, d, conn.arrived, cp.decided)
	return d
}

func (cp *captureConnect) held() bool { return cp != nil && cp.isHeld }

// servePending serves a CONNECT whose limited-mode refusal d is held: no
// upstream is dialed; plain HTTP goes on request by request, anything
// else gets d now. It reports whether the connection was taken over.
func (cp *captureConnect) servePending(d hostpolicy.Decision) bool {
	if !cp.answer() {
		return false
	}
	if cp.sniff() {
		return !cp.h.serveRequests(cp.ctx, cp.c, cp.sc, cp.br, cp.bw, cp.authority)
	}
	cp.h.core.report(cp.req, d, cp.c.arrived, cp.decided)
	_ = cp.c.TCPConn.SetLinger(0) // a reset, as a refused capture is
	return false
}

// serveIntercepted serves an allowed CONNECT marked for interception
// (limited mode, request rules, a credential's host): plain HTTP goes on
// request by request, anything else to the interceptor as today.
func (cp *captureConnect) serveIntercepted(d hostpolicy.Decision, gen uint64) bool {
	if !cp.answer() {
		return false
	}
	if cp.sniff() {
		return !cp.h.serveRequests(cp.ctx, cp.c, cp.sc, cp.br, cp.bw, cp.authority)
	}
	var early []byte
	if n := cp.br.Buffered(); n > 0 {
		early, _ = cp.br.Peek(n)
		early = append([]byte(nil), early...)
	}
	if !cp.h.core.bindTunnel(cp.c, &d, hostpolicy.ProtoHTTPS, nil, gen) {
		return false
	}
	return cp.h.serveMITM(cp.ctx, cp.c, answered{}, early, d)
}

// answer sends the CONNECT's 200.
func (cp *captureConnect) answer() bool {
	_, err := cp.bw.WriteString("HTTP/1.1 200 Connection established\r\n\r\n")
	return err == nil && cp.bw.Flush() == nil
}

// sniff waits (at most the head timeout, as for any request) for the
// client's first bytes and reports whether they start plain HTTP.
func (cp *captureConnect) sniff() bool {
	cp.c.SetReadDeadline(time.Now().Add(cp.h.limits.HeaderTimeout))
	ok := sniffBuffered(cp.br, cp.h.limits.MaxHeaderBytes)
	cp.c.SetReadDeadline(time.Time{})
	return ok
}

// answered stands for a CONNECT answer already sent (serveMITM's writer).
type answered struct{}

func (answered) WriteString(s string) (int, error) { return len(s), nil }
func (answered) Flush() error                      { return nil }

// tunnel is cp for the opaque tunnel of an allowed CONNECT (nil-safe):
// the connection loop's buffers are no longer its.
func (cp *captureConnect) tunnel() *captureConnect {
	if cp != nil {
		cp.sc, cp.br, cp.bw = nil, nil, nil
	}
	return cp
}

// takeOver is called by tunnel t's client→upstream direction with the
// client's first bytes (not a ClientHello). When they start plain HTTP and
// the upstream has neither spoken nor ended (its direction is still
// parked, and is taken here), the tunnel ends without its client, which
// serveHandedOver then serves request by request. Otherwise it returns the
// bytes read, to be forwarded as today.
func (cp *captureConnect) takeOver(t *Tunnel, buf []byte) ([]byte, bool) {
	buf, isHTTP := sniffConn(t.Client, buf, cp.h.limits.MaxHeaderBytes)
	p := t.Parker
	if !isHTTP || p == nil || !p.take(t.parkID|uint64(dirDown)) {
		return buf, false
	}
	p.forget(t.Upstream)
	t.flags.Or(stateHandedOver) // abort and finish leave the client alone now
	if t.Owner != nil {
		t.Owner.tunnel.CompareAndSwap(t, nil)
	}
	t.acc.setCause(causeComplete) // the CONNECT's line; each request writes its own
	cp.pre = buf
	cp.h.wg.Add(1) // before the tunnel's own count is released
	t.Upstream.Close()
	t.dirEnded() // the upstream's direction, taken above
	return nil, true
}

// serveHandedOver runs the request loop on a tunnel's client connection,
// bound to the CONNECT's authority.
func (cp *captureConnect) serveHandedOver() {
	defer cp.h.wg.Done()
	cp.c.SetReadDeadline(time.Time{})
	cp.h.serveConnFrom(cp.ctx, cp.c, cp.pre, cp.authority)
}

// boundTarget checks a request on a captured connection against the
// connection's authority: no CONNECT inside, an absolute-form target and
// a Host header (when present) naming that authority — a Host without a
// port names the connection's — which becomes the request's target.
// False: answered, the connection must close.
func boundTarget(bw *bufio.Writer, req *http.Request, hostHdr, bound string) (string, bool) {
	_, port, _ := splitHostPort(bound, 80)
	msg := ""
	switch {
	case req.Method == http.MethodConnect:
		msg = "CONNECT inside a captured connection"
	case req.URL.IsAbs() && !sameAuthority(req.URL.Host, bound, 80):
		msg = "request target is not the captured connection's destination"
	case hostHdr != "" && !sameAuthority(hostHdr, bound, port):
		msg = "Host header does not match the captured connection's destination"
	}
	if msg != "" {
		writeSimpleFor(bw, req.Method, http.StatusBadRequest, msg)
		return "", false
	}
	return bound, true
}

// maxMethodLen bounds the method of a request line being recognised.
const maxMethodLen = 20

// classifyFirst says whether a stream's first bytes b start an HTTP/1.x
// request line (METHOD SP target SP HTTP/1.x CRLF), or that more bytes are
// needed to tell. A line still plausible at limit bytes counts as HTTP:
// the request loop answers it (431).
func classifyFirst(b []byte, limit int) (isHTTP, more bool) {
	i := 0
	for i < len(b) && i < maxMethodLen && (b[i] >= 'A' && b[i] <= 'Z' || b[i] == '-' || b[i] == '_') {
		i++
	}
	if i == len(b) {
		return false, i < maxMethodLen
	}
	if i == 0 || b[i] != ' ' {
		return false, false
	}
	i++
	start := i
	for i < len(b) && b[i] > ' ' && b[i] != 0x7f {
		i++
	}
	if i == len(b) {
		return len(b) >= limit, len(b) < limit
	}
	if i == start || b[i] != ' ' {
		return false, false
	}
	rest := b[i+1:]
	const ver = "HTTP/1."
	if n := min(len(rest), len(ver)); string(rest[:n]) != ver[:n] {
		return false, false
	}
	if len(rest) <= len(ver) {
		return false, true
	}
	if v := rest[len(ver)]; v != '0' && v != '1' {
		return false, false
	}
	switch rest = rest[len(ver)+1:]; {
	case len(rest) == 0:
		return false, true
	case rest[0] == '\n':
		return true, false
	case rest[0] != '\r':
		return false, false
	case len(rest) == 1:
		return false, true
	}
	return rest[1] == '\n', false
}

// sniffConn reads r onto buf until classifyFirst decides; a read error
// (the client's end, the deadline) means not HTTP. It returns every byte
// read.
func sniffConn(r io.Reader, buf []byte, limit int) ([]byte, bool) {
	for {
		isHTTP, more := classifyFirst(buf, limit)
		if !more {
			return buf, isHTTP
		}
		if len(buf) == cap(buf) {
			buf = append(buf, make([]byte, max(512, len(buf)))...)[:len(buf)]
		}
		n, err := r.Read(buf[len(buf):cap(buf)])
		buf = buf[:len(buf)+n]
		if err != nil && n == 0 {
			return buf, false
		}
	}
}

// sniffBuffered is sniffConn over the connection loop's reader, consuming
// nothing.
func sniffBuffered(br *bufio.Reader, limit int) bool {
	for n := 1; ; {
		_, err := br.Peek(n)           // waits for the n-th byte
		b, _ := br.Peek(br.Buffered()) // everything there is
		isHTTP, more := classifyFirst(b, limit)
		switch {
		case !more:
			return isHTTP
		case err != nil:
			return false
		case len(b) >= br.Size():
			return true // a line longer than the buffer: the loop answers it
		}
		n = len(b) + 1
	}
}
