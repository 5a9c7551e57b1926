package proxy

import (
	"bufio"
	"context"
	"net"
	"net/http"

	"github.com/netproxy/netproxy/hostpolicy"
)

// The CONNECT stage: a CONNECT is checked and decided like any request;
// when allowed the connection becomes a byte tunnel (tunnel.go) or, in
// limited mode with MITM configured, an intercepted TLS session (mitm.go).

func (h *HTTPProxy) serveConnect(ctx context.Context, c *Conn, sc *headScanner, br *bufio.Reader, bw *bufio.Writer, req *http.Request) bool {
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
	authCause := h.core.identify(c, req.Header) // the tunnel's identity
	hreq := h.core.request(c, host, port, hostpolicy.ProtoHTTPS, http.MethodConnect)
	if h.via.looped(req.Header) {
		// Our own CONNECT to a parent came back (SPEC §3.5).
		writeBlockedText(bw, h.core.loopDecision(hreq))
		return false
	}
	if !withApprovalWait(bw, http.MethodConnect, req.Header, &hreq) {
		return false
	}
	gen := c.generation()
	// A captured connection's CONNECT (capturehttp.go) may hold a
	// limited-mode refusal until its stream shows what it carries.
	cp := h.capturedConnect(ctx, c, sc, br, bw, req, hreq, authority)
	d := h.core.decideIdentified(func() hostpolicy.Decision {
		if cp != nil {
			return cp.decide()
		}
		return h.core.decideWatching(ctx, c, hreq)
	}, hreq, authCause)
	if cp.held() {
		return cp.servePending(d)
	}
	if !d.Allowed() {
		writeBlockedText(bw, d)
		return false
	}
	if d.Intercept {
		var early []byte
		if n := br.Buffered(); n > 0 {
			early, _ = br.Peek(n)
			early = append([]byte(nil), early...)
		}
		if cp != nil {
			return cp.serveIntercepted(d, gen)
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
		Protocol: hostpolicy.ProtoHTTPS, Meter: h.core.Meter, Owner: c, Parker: h.core.Parker,
		budget: h.core.tunnelBudget(c),
	}
	t.TLSName, t.sni = h.core.tlsNameCheck(&d)
	t.acc = h.core.tunnelAccess(c, &d, hostpolicy.ProtoHTTPS, http.MethodConnect, 0)
	t.capture = cp.tunnel() // its first client bytes may be plain HTTP
	// The handler goroutine (with its larger stack) ends here; the tunnel
	// runs on fresh goroutines.
	t.Start(&h.wg)
	return true
}
