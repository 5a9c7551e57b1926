package metrics

import (
	"encoding/json"
	"net/http"
	"time"

	"github.com/netproxy/netproxy/metrics/audit"
	"github.com/netproxy/netproxy/metrics/execreport"
)

// ExecDecisionPath is the control API route execwrap posts its exec-policy
// decisions to (served on the control unix socket).
const ExecDecisionPath = execreport.Path

// ExecAuditor receives exec decisions for the audit log (*audit.Writer).
type ExecAuditor interface {
	ExecDecision(audit.ExecEvent)
}

// ExecDecisionHandler serves POST /v1/exec-decisions: it counts the decision
// in netproxy_exec_decisions_total and writes an exec_decision audit line.
// It answers 204, or 400 naming the bad field. m and a may be nil.
func ExecDecisionHandler(m *Metrics, a ExecAuditor) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		rep, err := execreport.Decode(http.MaxBytesReader(w, r.Body, execreport.MaxBody))
		if err != nil {
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusBadRequest)
			_ = json.NewEncoder(w).Encode(map[string]string{"error": err.Error()})
			return
		}
		m.ExecDecision(rep.Requirement, rep.Source)
		if a != nil {
			a.ExecDecision(audit.ExecEvent{
				Time:          time.Now(),
				Requirement:   rep.Requirement,
				Reason:        rep.Reason,
				Source:        rep.Source,
				SessionID:     rep.SessionID,
				EnvironmentID: rep.EnvironmentID,
				ExecutionID:   rep.ExecutionID,
				ApprovalID:    rep.ApprovalID,
				Reviewer:      rep.Reviewer,
				Outcome:       rep.Outcome,
			})
		}
		w.WriteHeader(http.StatusNoContent)
	})
}
