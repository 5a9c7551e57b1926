package hostpolicy

// Egress budgets (SPEC §3.12) are enforced on the data path (the proxy's
// admission stage, internal/proxy/budget.go); the decision they make is
// named here.

// ReasonBudgetExceeded: the request's execution has used up one of its
// budgets. Its source is SourceProxyState: the block is about what the
// execution has used, not about the target, and no reviewer may lift it.
const ReasonBudgetExceeded Reason = "budget_exceeded"

// The causes of a budget block: the limit that refused it.
const (
	CauseBudgetBytesOut Cause = "bytes_out"
	CauseBudgetBytesIn  Cause = "bytes_in"
	CauseBudgetRequests Cause = "requests"
	CauseBudgetHosts    Cause = "hosts"
)

// BudgetMessage is what a client is told when a budget refuses it.
const BudgetMessage = "Egress budget of this execution exceeded."
