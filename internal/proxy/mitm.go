package proxy

import (
	"context"
	"net"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/netproxy/netproxy/hostpolicy"
	"github.com/netproxy/netproxy/internal/observe"
	"github.com/netproxy/netproxy/mitm"
)

// hostChecker is what inner-request re-checks need from the engine (a
// *hostpolicy.Engine): the host chain alone and the current mode.
type hostChecker interface {
	EvaluateHost(ctx context.Context, req hostpolicy.Request) hostpolicy.Decision
	Mode() string
}

// mitmPassDetail marks a limited-mode CONNECT that MITM lets through to
// interception; every inner request is then method-checked.
const mitmPassDetail = "limited: mitm"

// mitmAdmit turns a CONNECT's mitm_required into an allow when MITM is
// configured: the host chain already allowed it (mode_guard comes last).
func (c *Core) mitmAdmit(req hostpolicy.Request, d hostpolicy.Decision) hostpolicy.Decision {
	if c.MITM == nil || req.Protocol != hostpolicy.ProtoHTTPS || req.Method != http.MethodConnect ||
		d.Reason != hostpolicy.ReasonMITMRequired || d.Source != hostpolicy.SourceModeGuard {
		return d
	}
	if _, ok := c.Engine.(hostChecker); !ok {
		return d // no way to re-check inner requests: stay blocked
	}
	d.Verdict, d.Reason, d.Source = hostpolicy.Allow, hostpolicy.ReasonNone, hostpolicy.SourceBaseline
	if d.ApprovalID != "" {
		d.Source = hostpolicy.SourceDecider
	}
	if n := len(d.Steps); n > 0 && d.Steps[n-1].Step == "mode" {
		d.Steps = d.Steps[:n-1]
	}
	d.Steps = append(d.Steps, hostpolicy.Step{Step: "mode", Result: "pass", Detail: mitmPassDetail})
	return d
}

func intercepts(d hostpolicy.Decision) bool {
	n := len(d.Steps)
	return n > 0 && d.Steps[n-1].Step == "mode" && d.Steps[n-1].Detail == mitmPassDetail
}

// decideInner re-checks one intercepted request: the host chain (no
// decider: the CONNECT already consulted it), then the method under the
// mode guard. The decision goes to the sinks with protocol https.
func (c *Core) decideInner(ctx context.Context, req hostpolicy.Request) hostpolicy.Decision {
	hc, ok := c.Engine.(hostChecker)
	start := time.Now()
	var d hostpolicy.Decision
	if !ok {
		d = hostpolicy.Decision{Verdict: hostpolicy.Deny, Reason: hostpolicy.ReasonMITMRequired, Source: hostpolicy.SourceModeGuard}
	} else {
		d = hc.EvaluateHost(ctx, req)
		if d.Allowed() {
			mode := hc.Mode()
			if hostpolicy.MethodAllowed(mode, req.Method) {
				d.Steps = append(d.Steps, hostpolicy.Step{Step: "mode", Result: "pass", Detail: "limited: " + req.Method})
			} else {
				d.Verdict, d.Reason, d.Source = hostpolicy.Deny, hostpolicy.ReasonMethodNotAllowed, hostpolicy.SourceModeGuard
				d.Steps = append(d.Steps, hostpolicy.Step{Step: "mode", Result: "block", Detail: "limited: method_not_allowed"})
			}
		}
	}
	if d.Host == "" {
		d.Host = strings.ToLower(req.Host)
	}
	if d.Port == 0 {
		d.Port = req.Port
	}
	if c.Sink != nil {
		c.Sink.ObserveDecision(observe.DecisionEvent{Time: start, Request: req, Decision: d, Elapsed: time.Since(start)})
	}
	return d
}

// serveMITM answers an admitted limited-mode CONNECT with 200 and hands
// the connection to the interceptor. It reports whether it took the
// connection over.
func (h *HTTPProxy) serveMITM(ctx context.Context, c *Conn, bw interface {
	WriteString(string) (int, error)
	Flush() error
}, early []byte, d hostpolicy.Decision) bool {
	if _, err := bw.WriteString("HTTP/1.1 200 Connection established\r\n\r\n"); err != nil || bw.Flush() != nil {
		return false
	}
	c.SetReadDeadline(time.Time{}) // the interceptor keeps its own deadlines
	target := TargetOf(d)
	host, port := d.Host, d.Port
	t := &mitm.Tunnel{
		Client: &earlyConn{Conn: c.TCPConn, early: early},
		Host:   host, Port: port,
		Check: func(ictx context.Context, req *http.Request) *http.Response {
			ireq := h.core.request(c, host, port, hostpolicy.ProtoHTTPS, req.Method)
			id := h.core.decideInner(ictx, ireq)
			if id.Allowed() {
				return nil
			}
			return blockedJSONResponse(req, id)
		},
		Dial: func(dctx context.Context) (net.Conn, error) { return h.core.Dialer.DialTarget(dctx, target) },
		Bytes: func(dir string, n int64) {
			h.core.Meter.Bytes(dir, string(hostpolicy.ProtoHTTPS), n)
		},
	}
	h.wg.Add(1)
	go func() {
		defer h.wg.Done()
		defer c.Close()
		if err := h.core.MITM.Serve(ctx, t); err != nil {
			h.core.logger().Info("mitm tunnel ended", "host", host, "port", strconv.Itoa(int(port)), "error", err.Error())
		}
	}()
	return true
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
