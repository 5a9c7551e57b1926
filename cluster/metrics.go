package cluster

import "github.com/prometheus/client_golang/prometheus"

// clusterMetrics are the cluster's Prometheus series.
type clusterMetrics struct {
	up          prometheus.Gauge
	nodes       prometheus.Gauge
	errors      *prometheus.CounterVec
	commands    *prometheus.CounterVec
	unavailable prometheus.Counter
	rejected    *prometheus.CounterVec
}

func newMetrics(reg prometheus.Registerer) *clusterMetrics {
	m := &clusterMetrics{
		up: prometheus.NewGauge(prometheus.GaugeOpts{Name: "netproxy_cluster_up",
			Help: "1 while the cluster store (Redis) answers, 0 while it does not."}),
		nodes: prometheus.NewGauge(prometheus.GaugeOpts{Name: "netproxy_cluster_nodes",
			Help: "Replicas whose heartbeat is fresh, as this replica last saw them."}),
		errors: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "netproxy_cluster_errors_total",
			Help: "Failed cluster store operations by operation."}, []string{"op"}),
		commands: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "netproxy_cluster_commands_total",
			Help: "Cluster store round trips by operation (a cached decision makes none)."}, []string{"op"}),
		unavailable: prometheus.NewCounter(prometheus.CounterOpts{Name: "netproxy_approvals_unavailable_total",
			Help: "Requests denied with approvals_unavailable: a review was needed while the cluster store was unreachable."}),
		rejected: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "netproxy_cluster_rejected_total",
			Help: "Records read from the cluster store and ignored: forged (MAC fails under cluster.key_file), moved, or replayed (older than what this replica accepted)."}, []string{"kind"}),
	}
	for _, k := range []string{kindExecution, kindAmendment, kindCache, kindReview, kindPending, kindDecision, kindHeartbeat, kindChange, kindPlaceholder} {
		m.rejected.WithLabelValues(k)
	}
	for _, op := range []string{"begin", "decide", "open", "stream_read", "resync", "heartbeat", "exec_start", "exec_end", "parse"} {
		m.errors.WithLabelValues(op)
	}
	if reg != nil {
		reg.MustRegister(m.up, m.nodes, m.errors, m.commands, m.unavailable, m.rejected)
	}
	return m
}

func (m *clusterMetrics) setUp(up bool) {
	if up {
		m.up.Set(1)
	} else {
		m.up.Set(0)
	}
}

func (m *clusterMetrics) cmd(op string) { m.commands.WithLabelValues(op).Inc() }
