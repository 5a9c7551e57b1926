package proxy

import (
	"context"
	"log/slog"
	"strings"
	"time"

	"github.com/netproxy/netproxy/attribution"
	"github.com/netproxy/netproxy/credentials"
	"github.com/netproxy/netproxy/hostpolicy"
	"github.com/netproxy/netproxy/internal/observe"
	"github.com/netproxy/netproxy/metrics"
	"github.com/netproxy/netproxy/mitm"
)

// Pipeline is the one decision pipeline (hostpolicy/pipeline.go): serve
// wires a *rollout.Evaluator (the engine with the request's narrower
// policies and the shadow candidate); a *hostpolicy.Engine serves too.
// Every decision of the data path is one call: an outer request with the
// proxy's admission stage (admission.go), an inner request of an
// intercepted tunnel, and the re-check of an open connection (recheck.go).
type Pipeline interface {
	Run(ctx context.Context, req hostpolicy.Request, o hostpolicy.RunOptions) hostpolicy.Decision
}

// Executions is what the data path needs from the execution registry.
type Executions interface {
	ByToken(token string) (attribution.Execution, bool)
	Get(id string) (attribution.Execution, bool)
}

// Limits are the per-connection limits of [limits].
type Limits struct {
	HeaderTimeout  time.Duration // request head (and SOCKS5 handshake) deadline
	IdleTimeout    time.Duration // keep-alive wait between requests; tunnel inactivity
	MaxHeaderBytes int           // request line + header lines of one head (SPEC §7.2)
	MaxHeaders     int           // header fields of one head (SPEC §7.2)
}

func (l Limits) withDefaults() Limits {
	if l.HeaderTimeout <= 0 {
		l.HeaderTimeout = 10 * time.Second
	}
	if l.IdleTimeout <= 0 {
		l.IdleTimeout = 5 * time.Minute
	}
	if l.MaxHeaderBytes <= 0 {
		l.MaxHeaderBytes = 64 << 10
	}
	if l.MaxHeaders <= 0 {
		l.MaxHeaders = 100
	}
	return l
}

// Core is what both front ends share: the pipeline, the dialer, the sinks.
type Core struct {
	// Pipeline decides every request and re-checks open connections
	// after a change (SPEC §3.9); nil: every request is refused.
	Pipeline   Pipeline
	Dialer     *Dialer
	Executions Executions
	Sink       observe.DecisionSink
	Meter      *metrics.Metrics
	Logger     *slog.Logger
	Tracker    *Tracker
	Limits     Limits
	// MITM, when set, intercepts limited-mode CONNECTs whose host is
	// allowed (SPEC §3.8) instead of answering mitm_required.
	MITM *mitm.Interceptor
	// Credentials, when set, is the credential broker: HTTPS toward a
	// credential's hosts is intercepted (with MITM), and every forwarded
	// request's placeholders are replaced or blocked (docs/credentials.md).
	Credentials *credentials.Broker
	// Clients, when set, are the [[proxy_auth.clients]] (SPEC §4.4,
	// proxyauth.go); nil or none configured: no proxy authentication.
	Clients *attribution.Clients
	// Closed receives every connection closed by a change (the audit).
	Closed observe.ConnectionSink
	// Ends receives the end of every allowed request and connection
	// (access records, access.go); nil: none are recorded.
	Ends observe.ConnectionEndSink
	// Parker, when set, takes the quiet directions of every tunnel off
	// their goroutines (tunnelpark.go); nil: they keep them.
	Parker *Parker
	// Instance is this process's random id: forwarded plain-HTTP requests
	// carry "Via: 1.1 netproxy-<Instance>", and a request that arrives
	// with it is a loop (508 proxy_loop). Empty: no Via, no detection.
	Instance string
}

func (c *Core) logger() *slog.Logger {
	if c.Logger == nil {
		return slog.New(slog.DiscardHandler)
	}
	return c.Logger
}

// request builds the chain's request for a connection.
func (c *Core) request(conn *Conn, host string, port uint16, proto hostpolicy.Protocol, method string) hostpolicy.Request {
	r := hostpolicy.Request{Host: host, Port: port, Protocol: proto, Method: method, Client: conn.clientAddr()}
	if conn.Attributed {
		r.ExecutionID = conn.Exec.ID
		r.SessionID = conn.Exec.SessionID
		r.EnvironmentID = conn.Exec.EnvironmentID
	} else if name, session := conn.identity(); name != "" {
		// An authenticated client is its own session; the audit's client
		// is its name (SPEC §4.4).
		r.Client, r.SessionID = name, session
	}
	return r
}

// stillAttributed reports whether an attributed connection's execution is
// still active; ending an execution revokes its connections at once.
func (c *Core) stillAttributed(conn *Conn) bool {
	if !conn.Attributed || c.Executions == nil {
		return true
	}
	_, ok := c.Executions.Get(conn.Exec.ID)
	return ok
}

// decide runs the pipeline for an outer request, with this proxy's
// admission as its last stage, and reports the decision to the sinks.
// The request's arrival is kept on conn for its access record.
func (c *Core) decide(ctx context.Context, conn *Conn, req hostpolicy.Request) hostpolicy.Decision {
	conn.arrived = time.Now()
	return c.runFrom(ctx, req, hostpolicy.RunOptions{Admit: c.admitter(conn)}, conn.arrived)
}

// run runs the pipeline and reports the finished decision to the sinks.
func (c *Core) run(ctx context.Context, req hostpolicy.Request, o hostpolicy.RunOptions) hostpolicy.Decision {
	return c.runFrom(ctx, req, o, time.Now())
}

// runFrom is run for a request that arrived at start: the sinks get the
// decision's time (after any review) and the arrival (SPEC §7.5 ts and
// started).
func (c *Core) runFrom(ctx context.Context, req hostpolicy.Request, o hostpolicy.RunOptions, start time.Time) hostpolicy.Decision {
	// No pipeline wired: nothing may pass.
	d := hostpolicy.Decision{Verdict: hostpolicy.Deny, Reason: hostpolicy.ReasonProxyDisabled, Source: hostpolicy.SourceProxyState}
	if c.Pipeline != nil {
		d = c.Pipeline.Run(ctx, req, o)
	}
	if d.Host == "" {
		// Normalisation failed: report what the client asked for.
		d.Host = strings.ToLower(req.Host)
	}
	if d.Port == 0 {
		d.Port = req.Port
	}
	now := time.Now()
	elapsed := now.Sub(start)
	if c.Sink != nil {
		c.Sink.ObserveDecision(observe.DecisionEvent{Time: now, Started: start, Request: req, Decision: d, Elapsed: elapsed})
	}
	// Logging the decision is a sink's job too (logging.DecisionLog).
	return d
}
