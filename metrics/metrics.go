// Package metrics owns netproxy's Prometheus metrics (SPEC §7.4): one
// dedicated registry (plus the Go and process collectors), every
// `netproxy_*` series, and the /metrics handler.
//
// Every method is safe on a nil *Metrics so the data path can call it before
// (or without) wiring. Label values are clamped to fixed sets so that no
// client-controlled string can create an unbounded number of series; the one
// label fed by request data (denied_hosts_total{host}) is bounded by an LRU.
//
// It must never block the data path, never record a token, a query string or
// a header value, and never use the global Prometheus registry.
package metrics

import (
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/netproxy/netproxy/internal/observe"
)

// DefaultMaxHostLabels is the default of `metrics.max_host_labels`.
const DefaultMaxHostLabels = 100

// OtherLabel is the value every label takes when the real value is outside
// its fixed set (and the host label when the host is not tracked).
const OtherLabel = "other"

// NoneLabel is the value of the reason label of allowed requests and of any
// label whose value is empty.
const NoneLabel = "none"

// Metrics holds every netproxy_* collector. Create it with New.
type Metrics struct {
	reg *prometheus.Registry

	requests    *prometheus.CounterVec
	requestsBy  requestCounters // requests' children, resolved once per tuple (requests.go)
	deniedHosts *prometheus.CounterVec
	// bytesBy holds the bytes counter of every known direction and
	// protocol, resolved once: the data path adds to it twice per request
	// without hashing label values. Written only by initSeries.
	bytesBy         map[bytesKey]prometheus.Counter
	decisionSeconds prometheus.Histogram

	approvals        *prometheus.CounterVec
	approvalsPending prometheus.Gauge
	approvalWait     prometheus.Histogram

	connsActive *prometheus.GaugeVec
	connsTotal  *prometheus.CounterVec
	connsClosed *prometheus.CounterVec

	attribution *prometheus.CounterVec

	upstreamDial   prometheus.Histogram
	upstreamErrors *prometheus.CounterVec

	bytes *prometheus.CounterVec

	policyReloads  *prometheus.CounterVec
	policyPatterns *prometheus.GaugeVec

	executionsActive prometheus.Gauge
	execDecisions    *prometheus.CounterVec

	auditDropped prometheus.Counter

	guardianPrescreen *prometheus.CounterVec

	shadowDecisions    *prometheus.CounterVec
	shadowPairs        map[[2]string]prometheus.Counter // every (live, shadow) pair, resolved once
	shadowConfigErrors prometheus.Counter
	shadowConfigLoaded prometheus.Gauge

	hosts *hostLabels

	budgetExceeded *prometheus.CounterVec // budget.go
	proxyAuth      *prometheus.CounterVec // proxyauth.go
}

// Fixed label value sets. A value outside its set is recorded as "other";
// an empty value as "none".
var (
	protocolValues    = set("http", "https", "socks5-tcp")
	decisionValues    = set("allow", "deny", "ask")
	reasonValues      = set("denied", "not_allowed", "not_allowed_local", "method_not_allowed", "mitm_required", "mitm_hook_denied", "proxy_disabled", "attribution_rejected", "policy_denied", "proxy_loop", "approvals_overloaded", "approvals_unavailable", "credential_misuse", "budget_exceeded", "sni_mismatch", "request_denied", "proxy_auth_required")
	sourceValues      = set("baseline_policy", "decider", "mode_guard", "proxy_state")
	approvalKinds     = set("network", "exec")
	reviewerValues    = set("user", "guardian", "hook", "cache", "policy")
	outcomeValues     = set("allow", "allow_once", "allow_session", "allow_always", "deny", "deny_always", "abort", "timeout", "error", "cancelled")
	listenerValues    = set("http", "socks5", "admin", "control")
	attributionValues = set("ok", "unattributed", "bad_magic", "bad_length", "bad_utf8", "timeout", "unknown_token", "env_mismatch", "required")
	upstreamErrKinds  = set("dial", "timeout", "refused", "parent_proxy")
	directionValues   = set("up", "down")
	reloadResults     = set("ok", "error")
	patternLists      = set("allow", "deny")
	requirementValues = set("skip", "needs_approval", "forbidden")
	closeReasons      = set("denied", "not_allowed_local", "proxy_disabled", "execution_ended", "policy_denied", "budget_exceeded")
	execSourceValues  = set("prefix", "heuristics", "rules", "user", "guardian", "hook", "policy", "cache")
	prescreenResults  = set("passed", "flagged")
)

// commonDecisions are the (decision, reason, source) triples of SPEC §3.4–3.8
// pre-created for every protocol.
var commonDecisions = [][3]string{
	{"allow", NoneLabel, "baseline_policy"},
	{"allow", NoneLabel, "decider"},
	{"deny", "denied", "baseline_policy"},
	{"deny", "not_allowed", "baseline_policy"},
	{"deny", "not_allowed_local", "baseline_policy"},
	{"deny", "not_allowed", "decider"},
	{"ask", "not_allowed", "decider"},
	// The kill switch (network.enabled = false): an alert on its rate must
	// see the first minute after the switch is thrown.
	{"deny", "proxy_disabled", "proxy_state"},
	// Bounded pending reviews (approvals.max_pending): a flood shows here.
	{"deny", "approvals_overloaded", "decider"},
}

// New builds the metrics on a fresh registry. maxHostLabels bounds the number
// of distinct host label values of netproxy_denied_hosts_total (≤ 0 means
// DefaultMaxHostLabels).
func New(maxHostLabels int) *Metrics {
	if maxHostLabels <= 0 {
		maxHostLabels = DefaultMaxHostLabels
	}
	reg := prometheus.NewRegistry()
	// Fast sub-millisecond policy decisions up to multi-minute human reviews.
	decisionBuckets := []float64{0.00005, 0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.05, 0.25, 1, 5, 30, 120, 300}
	waitBuckets := []float64{0.1, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600}
	dialBuckets := []float64{0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30}

	m := &Metrics{
		reg: reg,
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "netproxy_requests_total",
			Help: "Network decisions made, by protocol, decision (allow|deny|ask), block reason (none when allowed) and deciding source.",
		}, []string{"protocol", "decision", "reason", "source"}),
		deniedHosts: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "netproxy_denied_hosts_total",
			Help: "Blocked requests by normalised host; at most metrics.max_host_labels hosts get their own series, the rest are counted under host=\"other\".",
		}, []string{"host"}),
		decisionSeconds: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "netproxy_decision_seconds",
			Help:    "Time the decision chain took per request, including any approval wait.",
			Buckets: decisionBuckets,
		}),
		approvals: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "netproxy_approvals_total",
			Help: "Resolved approval requests by kind (network|exec), reviewer and outcome.",
		}, []string{"kind", "reviewer", "outcome"}),
		approvalsPending: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "netproxy_approvals_pending",
			Help: "Approval requests currently waiting for a reviewer.",
		}),
		approvalWait: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "netproxy_approval_wait_seconds",
			Help:    "Time from an approval request's creation to its resolution.",
			Buckets: waitBuckets,
		}),
		connsActive: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "netproxy_connections_active",
			Help: "Client connections currently open, by listener.",
		}, []string{"listener"}),
		connsTotal: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "netproxy_connections_total",
			Help: "Client connections accepted, by listener.",
		}, []string{"listener"}),
		connsClosed: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "netproxy_connections_closed_total",
			Help: "Open connections and tunnels closed by netproxy because a policy change, the kill switch or the end of their execution no longer allows them, by reason (denied|not_allowed_local|proxy_disabled|execution_ended).",
		}, []string{"reason"}),
		attribution: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "netproxy_attribution_total",
			Help: "Attribution frame outcomes per accepted connection (ok, unattributed, or the rejection cause).",
		}, []string{"result"}),
		upstreamDial: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "netproxy_upstream_dial_seconds",
			Help:    "Time to establish a connection to an upstream (or parent proxy).",
			Buckets: dialBuckets,
		}),
		upstreamErrors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "netproxy_upstream_errors_total",
			Help: "Upstream connection failures by kind (dial|timeout|refused|parent_proxy|other).",
		}, []string{"kind"}),
		bytes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "netproxy_bytes_total",
			Help: "Bytes relayed, by direction (up = client to upstream, down = upstream to client) and protocol.",
		}, []string{"direction", "protocol"}),
		policyReloads: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "netproxy_policy_reloads_total",
			Help: "Policy reload attempts by result (ok|error); a failed reload keeps the previous policy.",
		}, []string{"result"}),
		policyPatterns: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "netproxy_policy_patterns",
			Help: "Patterns in the active policy, by list (allow|deny).",
		}, []string{"list"}),
		executionsActive: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "netproxy_executions_active",
			Help: "Registered executions that have not ended.",
		}),
		execDecisions: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "netproxy_exec_decisions_total",
			Help: "Exec-policy decisions reported by execwrap, by requirement (skip|needs_approval|forbidden) and source.",
		}, []string{"requirement", "source"}),
		auditDropped: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "netproxy_audit_dropped_total",
			Help: "Audit records dropped because the audit buffer was full or the writer was closed.",
		}),
		guardianPrescreen: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "netproxy_guardian_prescreen_total",
			Help: "Guardian reviews by pre-screen result: flagged (reviewer-directed text in an agent-controlled field; denied without calling the backend) or passed (sent to the backend).",
		}, []string{"result"}),
		shadowDecisions: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "netproxy_shadow_decisions_total",
			Help: "Requests on which the [shadow] candidate policy disagrees with the live decision, by live and shadow decision (allow|deny|ask). The live decision is never changed.",
		}, []string{"live", "shadow"}),
		shadowConfigErrors: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "netproxy_shadow_config_errors_total",
			Help: "[shadow] candidate configurations that failed to load or compile (the live policy loads regardless).",
		}),
		shadowConfigLoaded: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "netproxy_shadow_config_loaded",
			Help: "1 when a [shadow] candidate policy is compiled and judged beside every decision, else 0.",
		}),
	}
	m.hosts = newHostLabels(maxHostLabels, m.deniedHosts, time.Now)
	m.requestsBy.vec = m.requests

	reg.MustRegister(
		collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
		m.requests, m.deniedHosts, m.decisionSeconds,
		m.approvals, m.approvalsPending, m.approvalWait,
		m.connsActive, m.connsTotal, m.connsClosed, m.attribution,
		m.upstreamDial, m.upstreamErrors, m.bytes,
		m.policyReloads, m.policyPatterns,
		m.executionsActive, m.execDecisions, m.auditDropped,
		m.guardianPrescreen,
		m.shadowDecisions, m.shadowConfigErrors, m.shadowConfigLoaded,
	)
	m.initSeries()
	m.initBudget()
	m.initProxyAuth()
	return m
}

// initSeries creates the zero-valued series dashboards and alerts rely on.
// A counter series that first appears with value N hides those N events from
// increase()/rate() (Prometheus cannot know it started at 0), so the label
// combinations a running proxy commonly produces exist from the first scrape.
func (m *Metrics) initSeries() {
	m.bytesBy = make(map[bytesKey]prometheus.Counter, len(protocolValues)*len(directionValues))
	for p := range protocolValues {
		for _, c := range commonDecisions {
			m.requests.WithLabelValues(p, c[0], c[1], c[2])
		}
		for d := range directionValues {
			m.bytesBy[bytesKey{d, p}] = m.bytes.WithLabelValues(d, p)
		}
	}
	for _, kind := range []string{"network", "exec"} {
		for _, reviewer := range []string{"user", "guardian"} {
			for _, outcome := range []string{"allow_once", "allow_session", "allow_always", "deny", "deny_always", "timeout"} {
				m.approvals.WithLabelValues(kind, reviewer, outcome)
			}
		}
	}
	for r := range requirementValues {
		for _, src := range []string{"prefix", "heuristics"} {
			m.execDecisions.WithLabelValues(r, src)
		}
	}
	for v := range listenerValues {
		m.connsActive.WithLabelValues(v)
		m.connsTotal.WithLabelValues(v)
	}
	for v := range attributionValues {
		m.attribution.WithLabelValues(v)
	}
	for v := range closeReasons {
		m.connsClosed.WithLabelValues(v)
	}
	for v := range reloadResults {
		m.policyReloads.WithLabelValues(v)
	}
	for v := range patternLists {
		m.policyPatterns.WithLabelValues(v)
	}
	for v := range upstreamErrKinds {
		m.upstreamErrors.WithLabelValues(v)
	}
	m.upstreamErrors.WithLabelValues(OtherLabel)
	for v := range prescreenResults {
		m.guardianPrescreen.WithLabelValues(v)
	}
	m.shadowPairs = map[[2]string]prometheus.Counter{}
	for l := range decisionValues {
		for sh := range decisionValues {
			if l != sh {
				m.shadowPairs[[2]string{l, sh}] = m.shadowDecisions.WithLabelValues(l, sh)
			}
		}
	}
}

// ShadowDecision counts one request on which the shadow policy's decision
// (allow|deny|ask) differs from the live one.
func (m *Metrics) ShadowDecision(live, shadow string) {
	if m == nil {
		return
	}
	if c, ok := m.shadowPairs[[2]string{live, shadow}]; ok {
		c.Inc()
		return
	}
	m.shadowDecisions.WithLabelValues(clamp(live, decisionValues), clamp(shadow, decisionValues)).Inc()
}

// ShadowConfig records a [shadow] load: ok sets the loaded gauge; a
// failure counts an error and clears it. loaded false with ok true means
// no [shadow] is configured.
func (m *Metrics) ShadowConfig(ok, loaded bool) {
	if m == nil {
		return
	}
	if !ok {
		m.shadowConfigErrors.Inc()
	}
	if ok && loaded {
		m.shadowConfigLoaded.Set(1)
	} else {
		m.shadowConfigLoaded.Set(0)
	}
}

// Registry returns the dedicated registry (nil on a nil receiver).
func (m *Metrics) Registry() *prometheus.Registry {
	if m == nil {
		return nil
	}
	return m.reg
}

// Handler serves the registry in the Prometheus exposition formats. On a nil
// receiver it answers 503 so a missing wiring is visible, not an empty page.
func (m *Metrics) Handler() http.Handler {
	if m == nil {
		return http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
			http.Error(w, "metrics are not configured", http.StatusServiceUnavailable)
		})
	}
	return promhttp.HandlerFor(m.reg, promhttp.HandlerOpts{
		Registry:          m.reg, // counts promhttp's own errors on our registry
		ErrorHandling:     promhttp.ContinueOnError,
		EnableOpenMetrics: true,
	})
}

// ObserveDecision counts one finished network decision: requests_total,
// decision_seconds and, for a blocked request, denied_hosts_total. It is an
// observe.DecisionSink.
func (m *Metrics) ObserveDecision(e observe.DecisionEvent) {
	if m == nil {
		return
	}
	d := &e.Decision
	m.requestsBy.counter(requestKey{string(e.Request.Protocol), string(d.Verdict), string(d.Reason), string(d.Source)}).Inc()
	if e.Elapsed >= 0 {
		m.decisionSeconds.Observe(e.Elapsed.Seconds())
	}
	// "allow" is in decisionValues: clamp keeps it, and nothing else
	// clamps to it.
	if d.Verdict != "allow" {
		m.hosts.inc(d.Host)
	}
}

// ConnOpened counts an accepted client connection on listener
// (http|socks5|admin|control).
func (m *Metrics) ConnOpened(listener string) {
	if m == nil {
		return
	}
	l := clamp(listener, listenerValues)
	m.connsTotal.WithLabelValues(l).Inc()
	m.connsActive.WithLabelValues(l).Inc()
}

// ConnClosed marks a connection counted by ConnOpened as closed.
func (m *Metrics) ConnClosed(listener string) {
	if m == nil {
		return
	}
	m.connsActive.WithLabelValues(clamp(listener, listenerValues)).Dec()
}

// ConnectionClosedByPolicy counts one open connection or tunnel that
// netproxy closed because it is no longer allowed (SPEC §3.9), by reason.
func (m *Metrics) ConnectionClosedByPolicy(reason string) {
	if m == nil {
		return
	}
	m.connsClosed.WithLabelValues(clamp(reason, closeReasons)).Inc()
}

// Attribution counts the attribution outcome of one accepted connection.
func (m *Metrics) Attribution(result string) {
	if m == nil {
		return
	}
	m.attribution.WithLabelValues(clamp(result, attributionValues)).Inc()
}

// UpstreamDial records the time a successful upstream dial took.
func (m *Metrics) UpstreamDial(d time.Duration) {
	if m == nil {
		return
	}
	m.upstreamDial.Observe(d.Seconds())
}

// UpstreamError counts a failed upstream dial or relay by kind.
func (m *Metrics) UpstreamError(kind string) {
	if m == nil {
		return
	}
	m.upstreamErrors.WithLabelValues(clamp(kind, upstreamErrKinds)).Inc()
}

// Bytes counts n relayed bytes in direction (up|down) for protocol.
func (m *Metrics) Bytes(direction, protocol string, n int64) {
	if m == nil || n <= 0 {
		return
	}
	if c, ok := m.bytesBy[bytesKey{direction, protocol}]; ok {
		c.Add(float64(n))
		return
	}
	m.bytes.WithLabelValues(clamp(direction, directionValues), clamp(protocol, protocolValues)).Add(float64(n))
}

type bytesKey struct{ direction, protocol string }

// PolicyReload counts one reload attempt.
func (m *Metrics) PolicyReload(ok bool) {
	if m == nil {
		return
	}
	result := "error"
	if ok {
		result = "ok"
	}
	m.policyReloads.WithLabelValues(result).Inc()
}

// PolicyPatterns sets the number of patterns in list (allow|deny).
func (m *Metrics) PolicyPatterns(list string, n int) {
	if m == nil {
		return
	}
	m.policyPatterns.WithLabelValues(clamp(list, patternLists)).Set(float64(n))
}

// ExecutionsActive sets the number of active executions.
func (m *Metrics) ExecutionsActive(n int) {
	if m == nil {
		return
	}
	m.executionsActive.Set(float64(n))
}

// ApprovalPending adds delta (+1 on creation, -1 on resolution) to the
// pending approvals gauge.
func (m *Metrics) ApprovalPending(delta int) {
	if m == nil {
		return
	}
	m.approvalsPending.Add(float64(delta))
}

// ApprovalResolved counts one resolved approval and its wait.
func (m *Metrics) ApprovalResolved(kind, reviewer, outcome string, wait time.Duration) {
	if m == nil {
		return
	}
	m.approvals.WithLabelValues(clamp(kind, approvalKinds), clamp(reviewer, reviewerValues), clamp(outcome, outcomeValues)).Inc()
	if wait >= 0 {
		m.approvalWait.Observe(wait.Seconds())
	}
}

// ExecDecision counts one exec-policy decision reported by execwrap.
func (m *Metrics) ExecDecision(requirement, source string) {
	if m == nil {
		return
	}
	m.execDecisions.WithLabelValues(clamp(requirement, requirementValues), clamp(source, execSourceValues)).Inc()
}

// GuardianPrescreen counts one Guardian pre-screen result (passed or
// flagged); it implements guardian.PrescreenCounter.
func (m *Metrics) GuardianPrescreen(result string) {
	if m == nil {
		return
	}
	m.guardianPrescreen.WithLabelValues(clamp(result, prescreenResults)).Inc()
}

// AuditDropped counts one audit record that could not be written; pass it
// to the audit writer as its drop callback.
func (m *Metrics) AuditDropped() {
	if m == nil {
		return
	}
	m.auditDropped.Inc()
}

func set(values ...string) map[string]struct{} {
	s := make(map[string]struct{}, len(values))
	for _, v := range values {
		s[v] = struct{}{}
	}
	return s
}

// clamp maps v onto its fixed set: empty → "none", unknown → "other".
func clamp(v string, allowed map[string]struct{}) string {
	if v == "" {
		return NoneLabel
	}
	if _, ok := allowed[v]; ok {
		return v
	}
	return OtherLabel
}
