package approvalsvc

import (
	"time"

	"github.com/netproxy/netproxy/attribution"
	"github.com/netproxy/netproxy/execcore/execpolicy"
	"github.com/netproxy/netproxy/hostpolicy"
	"github.com/netproxy/netproxy/metrics/audit"
)

// Owners is what the service reads from the execution registry to resolve
// a request's owner (SPEC §4.3). *attribution.Registry implements it.
type Owners interface {
	Get(id string) (attribution.Execution, bool)
	ActiveInEnvironment(env string) []attribution.Execution
	ActiveInSession(session string) []attribution.Execution
}

// Publisher delivers an outcome (denied_by_user / denied_by_policy) to an
// execution's event stream. *attribution.Registry implements it.
type Publisher interface {
	Publish(executionID string, ev attribution.Event)
}

// Amender updates the live allow/deny lists (allow_always / deny_always).
// *hostpolicy.Engine implements it; the server builds the engine before the
// service, so it is handed in at construction like every other dependency.
type Amender interface {
	Amend(host string, d hostpolicy.Verdict)
}

// RulePersister appends rules to the persistent rules file.
type RulePersister interface {
	AppendNetworkRule(r execpolicy.NetworkRule) (added bool, err error)
	AppendPrefixRule(tokens []string) (added bool, err error)
}

// RulesFile persists rules to one rules file (normally
// $NETPROXY_HOME/rules/default.rules) through the shared rules package, which
// writes atomically and never duplicates a line.
type RulesFile struct{ Path string }

func (f RulesFile) AppendNetworkRule(r execpolicy.NetworkRule) (bool, error) {
	return execpolicy.AppendNetworkRule(f.Path, r)
}

func (f RulesFile) AppendPrefixRule(tokens []string) (bool, error) {
	return execpolicy.AppendPrefixRule(f.Path, tokens)
}

// Metrics receives the approval gauges and counters. *metrics.Metrics
// implements it (nil-safe).
type Metrics interface {
	ApprovalPending(delta int)
	ApprovalResolved(kind, reviewer, outcome string, wait time.Duration)
}

// Auditor records each resolved approval. *audit.Writer implements it.
type Auditor interface {
	ApprovalResolved(a audit.ApprovalEvent)
}
