package proxy

import (
	"bufio"
	"context"
	"net/http"
	"time"

	"github.com/netproxy/netproxy/credentials"
	"github.com/netproxy/netproxy/hostpolicy"
	"github.com/netproxy/netproxy/internal/observe"
)

// credentialCheck runs the broker on one request about to be forwarded to
// host: the placeholder in the credential's header becomes the secret, or
// the request is blocked. A block is reported to the sinks (audit with the
// credential's name in the rationale, metrics) and returned; nil means
// forward the request (possibly rewritten).
func (c *Core) credentialCheck(conn *Conn, host string, port uint16, proto hostpolicy.Protocol, req *http.Request) *hostpolicy.Decision {
	if c.Credentials == nil {
		return nil
	}
	execID := ""
	if conn.Attributed {
		execID = conn.Exec.ID
	}
	uri := req.RequestURI
	if uri == "" && req.URL != nil {
		uri = req.URL.String()
	}
	line := req.Method + " " + uri + " " + req.Host
	act, name := c.Credentials.Rewrite(execID, host, req.Header, line)
	if act != credentials.Block {
		return nil
	}
	return c.credentialMisuse(conn, host, port, proto, req.Method, name)
}

// credentialMisuse reports a credential block (audit with the credential's
// name in the rationale, metrics, log) and returns its decision.
func (c *Core) credentialMisuse(conn *Conn, host string, port uint16, proto hostpolicy.Protocol, method, name string) *hostpolicy.Decision {
	d := hostpolicy.Decision{
		Verdict: hostpolicy.Deny, Reason: credentials.ReasonMisuse, Source: hostpolicy.SourceBaseline,
		Host: host, Port: port,
		Rationale: "credential " + name + ": a placeholder was sent toward a host it does not belong to, or from another execution",
	}
	ireq := c.request(conn, host, port, proto, method)
	if c.Sink != nil {
		c.Sink.ObserveDecision(observe.DecisionEvent{Time: time.Now(), Request: ireq, Decision: d})
	}
	c.logger().Warn("credential placeholder misuse blocked", "credential", name, "host", host, "port", int(port), "execution_id", ireq.ExecutionID)
	return &d
}

// credentialHook is the plain-HTTP data path's one call into the broker,
// made just before a request is forwarded. On a block it answers 403
// credential_misuse and reports false (the connection then closes).
func (h *HTTPProxy) credentialHook(c *Conn, bw *bufio.Writer, req *http.Request, d hostpolicy.Decision) bool {
	bd := h.core.credentialCheck(c, d.Host, d.Port, hostpolicy.ProtoHTTP, req)
	if bd == nil {
		return true
	}
	writeBlockedJSON(bw, *bd, false, req.Method == http.MethodHead)
	return false
}

// intercept answers an admitted SOCKS5 CONNECT to a credential's host on
// port 443 with success and runs the TLS interception on the connection
// (the upstream is dialed per inner connection by the interceptor).
func (s *SOCKSProxy) intercept(ctx context.Context, sc *socksConn, d hostpolicy.Decision, gen uint64) error {
	c := sc.Conn
	if !s.core.bindTunnel(c, &d, hostpolicy.ProtoSOCKS5, nil, gen) {
		sc.muted.Store(true)
		return errTunnelDone
	}
	s.core.MITM.Prepare(d.Host) // the leaf is minted while the reply travels
	err := s.reply(sc, socksSucceeded, nil)
	sc.muted.Store(true)
	if err != nil {
		return err
	}
	c.SetDeadline(time.Time{})
	s.core.serveTunnel(ctx, s.core.mitmTunnel(c, c.TCPConn, d, hostpolicy.ProtoSOCKS5))
	return errTunnelDone
}
