package main

import (
	"context"
	"time"

	"github.com/netproxy/netproxy/execcore"
	"github.com/netproxy/netproxy/execcore/execpolicy"
	"github.com/netproxy/netproxy/metrics/execreport"
	"github.com/netproxy/netproxy/sandbox"
)

// reportTimeout bounds the exec-decision report: telemetry must never hold
// up the command.
const reportTimeout = 2 * time.Second

// execSource names what decided the requirement for netproxy's
// netproxy_exec_decisions_total{source}: "prefix" when a rules-file prefix
// rule matched, else "heuristics".
func execSource(ev execcore.Evaluation) string {
	for _, m := range ev.MatchedRules {
		if m.Kind == execpolicy.KindPrefix {
			return string(execpolicy.KindPrefix)
		}
	}
	return string(execpolicy.KindHeuristics)
}

// reportExecDecision tells netproxy (POST /v1/exec-decisions on the control
// socket) about this run's exec-policy decision, when the command's network
// goes through netproxy. Best effort: a netproxy that is down or too old only
// loses the count; the command's own outcome never depends on it. The
// command line is not sent: netproxy would not record it anyway.
func (r *runner) reportExecDecision(ctx context.Context) {
	if r.opts.network != string(sandbox.NetworkProxied) || r.client == nil {
		return
	}
	ctx, cancel := context.WithTimeout(ctx, reportTimeout)
	defer cancel()
	_ = r.client.ReportExecDecision(ctx, execreport.Report{
		Requirement:   string(r.inv.Requirement.Kind),
		Source:        r.inv.ExecSource,
		Reason:        r.inv.Requirement.Reason,
		SessionID:     r.opts.session,
		EnvironmentID: r.opts.envID,
	})
}
