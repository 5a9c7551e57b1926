package metrics

import "github.com/prometheus/client_golang/prometheus"

// proxyAuthResults are the result label's values of proxy authentication
// (SPEC §4.4): never a client name (a name a client sends is unbounded).
var proxyAuthResults = set("ok", "failed", "missing")

// initProxyAuth registers netproxy_proxy_auth_total with every result's
// series at zero (an alert on failures sees the first one).
func (m *Metrics) initProxyAuth() {
	m.proxyAuth = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "netproxy_proxy_auth_total",
		Help: "Proxy authentication attempts of unframed clients by result: ok, failed (a wrong secret, an unknown name, a malformed header) or missing (none while proxy_auth.required).",
	}, []string{"result"})
	m.reg.MustRegister(m.proxyAuth)
	for v := range proxyAuthResults {
		m.proxyAuth.WithLabelValues(v)
	}
}

// ProxyAuth counts one proxy authentication by result.
func (m *Metrics) ProxyAuth(result string) {
	if m == nil {
		return
	}
	m.proxyAuth.WithLabelValues(clamp(result, proxyAuthResults)).Inc()
}
