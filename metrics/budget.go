package metrics

import "github.com/prometheus/client_golang/prometheus"

// budgetLimits are the limit label's values (SPEC §3.12).
var budgetLimits = set("bytes_out", "bytes_in", "requests", "hosts")

// initBudget registers netproxy_budget_exceeded_total with every limit's
// series at zero (an alert on its rate sees the first block).
func (m *Metrics) initBudget() {
	m.budgetExceeded = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "netproxy_budget_exceeded_total",
		Help: "Requests and connections refused, and open connections closed, because an execution used up an egress budget, by limit (bytes_out|bytes_in|requests|hosts).",
	}, []string{"limit"})
	m.reg.MustRegister(m.budgetExceeded)
	for v := range budgetLimits {
		m.budgetExceeded.WithLabelValues(v)
	}
}

// BudgetExceeded counts one block or close by an egress budget.
func (m *Metrics) BudgetExceeded(limit string) {
	if m == nil {
		return
	}
	m.budgetExceeded.WithLabelValues(clamp(limit, budgetLimits)).Inc()
}
