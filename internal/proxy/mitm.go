package proxy

import (
	"context"
	"net"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/netproxy/netproxy/hostpolicy"
	"github.com/netproxy/netproxy/mitm"
)

// decideInner re-checks one intercepted request: the pipeline's inner
// preset (the host chain and the narrower policies, no decider: the
// CONNECT already consulted it; then the method under the mode guard). The
// decision goes to the sinks with protocol https.
func (c *Core) decideInner(ctx context.Context, conn *Conn, req hostpolicy.Request, granted bool) hostpolicy.Decision {
	o := c.innerOptions(conn)
	o.Granted = granted
	return c.run(ctx, req, o)
}

// requestPath is the request target's path as the client sent it (the
// request rules decode and normalise it themselves; the query is dropped
// there): the origin-form target, or an absolute-form URL's escaped path.
func requestPath(req *http.Request) string {
	if u := req.RequestURI; strings.HasPrefix(u, "/") {
		return u
	}
	if req.URL == nil {
		return ""
	}
	if req.URL.Opaque != "" {
		return req.URL.Opaque
	}
	if p := req.URL.EscapedPath(); p != "" {
		return p
	}
	return "/"
}

// serveMITM answers an admitted limited-mode CONNECT with 200 and hands
// the connection to the interceptor. It reports whether it took the
// connection over.
func (h *HTTPProxy) serveMITM(ctx context.Context, c *Conn, bw interface {
	WriteString(string) (int, error)
	Flush() error
}, early []byte, d hostpolicy.Decision) bool {
	h.core.MITM.Prepare(d.Host) // the leaf is minted while the 200 travels
	if _, err := bw.WriteString("HTTP/1.1 200 Connection established\r\n\r\n"); err != nil || bw.Flush() != nil {
		return false
	}
	c.SetReadDeadline(time.Time{}) // the interceptor keeps its own deadlines
	t := h.core.mitmTunnel(c, &earlyConn{Conn: c.TCPConn, early: early}, d, hostpolicy.ProtoHTTPS)
	h.wg.Add(1)
	go func() {
		defer h.wg.Done()
		defer c.Close()
		h.core.serveTunnel(ctx, t)
	}()
	return true
}

// mitmTunnel describes the interception of one admitted tunnel: each inner
// request is re-checked (limited mode: host chain and method; a tunnel
// intercepted only for a credential skips that, the CONNECT decided it),
// then passed to the credential broker, which may inject or block.
func (c *Core) mitmTunnel(conn *Conn, client net.Conn, d hostpolicy.Decision, proto hostpolicy.Protocol) *mitm.Tunnel {
	target := TargetOf(d)
	host, port := d.Host, d.Port
	credOnly := d.Cause == hostpolicy.CauseCredential
	// A tunnel a reviewer allowed: its inner requests stand on that review
	// (the request rules still refine them).
	granted := d.Source == hostpolicy.SourceDecider
	client, acc, ended := c.interceptAccess(conn, client, &d, proto)
	return &mitm.Tunnel{
		Client: client,
		Ended:  ended,
		Host:   host, Port: port,
		Check: func(ictx context.Context, req *http.Request) *http.Response {
			// Ours, hop-by-hop (SPEC §3.7): read here, never forwarded.
			wait, hasWait, bad := approvalWait(req.Header)
			delete(req.Header, approvalWaitHeader)
			if bad != nil {
				return answerResponse(req, *bad)
			}
			if !credOnly {
				ireq := c.request(conn, host, port, hostpolicy.ProtoHTTPS, req.Method)
				ireq.Path = requestPath(req)
				ireq.Upgrade = carriesUpgrade(req.Header)
				ireq.ApprovalWait, ireq.HasApprovalWait = wait, hasWait
				if id := c.decideInner(ictx, conn, ireq, granted); !id.Allowed() {
					return blockedJSONResponse(req, id)
				}
			} else if conn.budget != nil {
				// Asked only with a budget: its decision is built on the heap.
				if bd := c.budgetBlock(conn.budget, host, port); bd != nil {
					return blockedJSONResponse(req, *bd)
				}
			}
			if bd := c.credentialCheck(conn, host, port, hostpolicy.ProtoHTTPS, req); bd != nil {
				return blockedJSONResponse(req, *bd)
			}
			return nil
		},
		CheckTrailer: c.mitmTrailerCheck(conn, host, port),
		Dial:         func(dctx context.Context) (net.Conn, error) { return c.Dialer.DialTarget(dctx, target) },
		Bytes: func(dir string, n int64) {
			c.Meter.Bytes(dir, string(proto), n)
			acc.count(dir, n)
			if conn.budget != nil {
				// Counted per inner exchange (as the metric is): the
				// tunnel that crossed a byte limit is closed after it.
				c.countBytes(conn, dir == "up", n)
			}
		},
	}
}

// serveTunnel runs an interception to its end.
func (c *Core) serveTunnel(ctx context.Context, t *mitm.Tunnel) {
	if err := c.MITM.Serve(ctx, t); err != nil {
		c.logger().Info("mitm tunnel ended", "host", t.Host, "port", strconv.Itoa(int(t.Port)), "error", err.Error())
	}
}

// earlyConn replays client bytes read past the CONNECT head (e.g. a
// ClientHello sent with it) before reading the socket.
type earlyConn struct {
	net.Conn
	early []byte
}

func (e *earlyConn) Read(p []byte) (int, error) {
	if len(e.early) > 0 {
		n := copy(p, e.early)
		e.early = e.early[n:]
		return n, nil
	}
	return e.Conn.Read(p)
}
