package server

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/netproxy/netproxy/approvalsvc"
	"github.com/netproxy/netproxy/cluster"
	"github.com/netproxy/netproxy/internal/config"
	"github.com/netproxy/netproxy/internal/logging"
	"github.com/netproxy/netproxy/internal/observe"
	"github.com/netproxy/netproxy/metrics"
	"github.com/netproxy/netproxy/metrics/audit"
)

// ErrOpen marks an error opening something the configuration names (the
// audit file) rather than a bad configuration: `netproxy serve` exits 1
// for it, 2 for the others.
var ErrOpen = errors.New("cannot open")

type openError struct{ error }

func (e openError) Unwrap() error        { return e.error }
func (e openError) Is(target error) bool { return target == ErrOpen }

// Netproxy is the whole `netproxy serve` process: the Server (policy,
// pipeline, registry, proxy, admin, control socket) and the parts built on
// it — audit, cluster, approval service, web UI.
type Netproxy struct {
	*Server
	audit     *audit.Writer // nil without audit.path
	cluster   *cluster.Cluster
	approvals *approvalsvc.Service
}

// Assemble is the one place that builds netproxy, in this order, each part
// handed what it needs and nothing listening until Start:
//
//  1. the decision sinks: the one-line-per-block log and the audit writer;
//  2. the Server (New): policy, engine, registry, narrower policies,
//     shadow, dialer, proxy front ends, MITM, admin router;
//  3. execwrap's exec-decision reports on the control socket;
//  4. the cluster, when [cluster] is on (joined before the approval
//     service, which coordinates through it);
//  5. the approval service on the engine and the registry;
//  6. the cluster started with the service attached;
//  7. the web UI on the service.
//
// Two cycles are real and are the only late bindings: the engine calls
// the approval service (the decider) and the service amends the engine
// (allow_always / deny_always) — New builds the engine with an empty
// decider slot that step 5 fills (until then not_allowed fails closed);
// and the cluster relays reviews to the service that coordinates through
// it (Attach in step 6). On an error everything built so far is closed.
func Assemble(cfg *config.Config, logger *slog.Logger, meter *metrics.Metrics) (*Netproxy, error) {
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	n := &Netproxy{}
	if err := n.assemble(cfg, logger, meter); err != nil {
		n.close()
		return nil, err
	}
	return n, nil
}

func (n *Netproxy) assemble(cfg *config.Config, logger *slog.Logger, meter *metrics.Metrics) (err error) {
	// 1.
	sinks := observe.Fanout{logging.DecisionLog{Logger: logger}}
	var connSink observe.ConnectionSink   // connection_closed lines (SPEC §3.9)
	var endSink observe.ConnectionEndSink // connection_end lines (SPEC §7.5)
	if cfg.Audit.Path != "" {
		n.audit, err = audit.Open(cfg.Audit.Path, cfg.Audit.BufferSize, logger, audit.WithDropCounter(meter.AuditDropped))
		if err != nil {
			return fmt.Errorf("audit.path: %w", openError{err})
		}
		sinks = append(sinks, n.audit)
		connSink, endSink = n.audit, n.audit
	}
	// 2.
	if n.Server, err = New(cfg, Options{Logger: logger, Metrics: meter, Sinks: sinks, ConnectionSink: connSink, EndSink: endSink}); err != nil {
		return err
	}
	// 3.
	n.HandleControl(metrics.ExecDecisionPath, metrics.ExecDecisionHandler(meter, n.audit))
	// 4.
	if n.cluster, err = n.openCluster(); err != nil {
		return err
	}
	var coord approvalsvc.Coordinator
	if n.cluster != nil {
		coord = n.cluster
	}
	// 5.
	var auditor approvalsvc.Auditor
	if n.audit != nil { // a nil *audit.Writer must not become a non-nil interface
		auditor = n.audit
	}
	if n.approvals, err = n.setupApprovals(auditor, coord); err != nil {
		return err
	}
	// 6.
	if n.cluster != nil {
		n.cluster.Attach(n.approvals)
		if err := n.cluster.Start(context.Background()); err != nil {
			return err
		}
	}
	// 7.
	n.setupWebUI(n.approvals)
	return nil
}

// Hangup is SIGHUP: the policy is reloaded and the audit log reopened
// (log rotation).
func (n *Netproxy) Hangup() {
	n.Reload()
	if n.audit != nil {
		if err := n.audit.Reopen(); err != nil {
			n.logger.Error("audit reopen failed", "error", err.Error())
		}
	}
}

// StopReviews ends pending reviews so that their requests are denied at
// once instead of waiting out the drain (call before Shutdown).
func (n *Netproxy) StopReviews() {
	if n.approvals != nil {
		n.approvals.Close()
	}
}

// Shutdown ends pending reviews, drains the server until ctx is done, and
// closes the cluster and the audit log.
func (n *Netproxy) Shutdown(ctx context.Context) error {
	n.StopReviews()
	err := n.Server.Shutdown(ctx)
	n.close()
	if errors.Is(err, context.Canceled) {
		err = nil
	}
	return err
}

// close releases what Assemble opened besides the listeners.
func (n *Netproxy) close() {
	n.StopReviews()
	if n.cluster != nil {
		n.cluster.Close()
	}
	if n.audit != nil {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		n.audit.Close(ctx)
		cancel()
	}
}
