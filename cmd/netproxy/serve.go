package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/netproxy/netproxy/approvalsvc"
	"github.com/netproxy/netproxy/internal/config"
	"github.com/netproxy/netproxy/internal/logging"
	"github.com/netproxy/netproxy/internal/observe"
	"github.com/netproxy/netproxy/internal/server"
	"github.com/netproxy/netproxy/metrics"
	"github.com/netproxy/netproxy/metrics/audit"
)

// shutdownGrace bounds how long SIGTERM/SIGINT waits for requests and
// tunnels to finish before closing them.
const shutdownGrace = 15 * time.Second

// runServe is `netproxy serve [--config FILE]`.
func runServe(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("netproxy serve", flag.ContinueOnError)
	fs.SetOutput(stderr)
	cfgPath := fs.String("config", "", "configuration file (default: the embedded default)")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if fs.NArg() != 0 {
		fmt.Fprintf(stderr, "netproxy serve: unexpected argument %q\nusage: netproxy serve [--config FILE]\n", fs.Arg(0))
		return 2
	}
	cfg := config.Default()
	if *cfgPath != "" {
		var err error
		if cfg, err = config.Load(*cfgPath); err != nil {
			fmt.Fprintf(stderr, "netproxy serve: %v\n", err)
			return 2
		}
	}
	logger, err := logging.New(cfg.Log, stderr)
	if err != nil {
		fmt.Fprintf(stderr, "netproxy serve: %v\n", err)
		return 2
	}
	meter := metrics.New(cfg.Metrics.MaxHostLabels)

	// One log line per blocked request (allowed ones at debug level).
	sinks := observe.Fanout{logging.DecisionLog{Logger: logger}}
	var auditW *audit.Writer
	var connSink observe.ConnectionSink // connection_closed lines (SPEC §3.9)
	if cfg.Audit.Path != "" {
		auditW, err = audit.Open(cfg.Audit.Path, cfg.Audit.BufferSize, logger, audit.WithDropCounter(meter.AuditDropped))
		if err != nil {
			fmt.Fprintf(stderr, "netproxy serve: audit.path: %v\n", err)
			return 1
		}
		sinks = append(sinks, auditW)
		connSink = auditW
	}
	closeAudit := func() {
		if auditW != nil {
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			auditW.Close(ctx)
			cancel()
		}
	}
	defer closeAudit()

	// Close ends pending reviews at shutdown so their requests are denied at
	// once instead of waiting out the drain deadline.
	closeApprovals := func() {}
	defer func() { closeApprovals() }()
	// Explicit construction order: the server (registry, engine, admin
	// router), then the approval service on them, then the web UI on the
	// service — each handed what it needs; nothing listens until Start.
	srv, err := server.New(cfg, server.Options{
		Logger:  logger,
		Metrics: meter,
		Sinks:   sinks,
		// Connections closed by a change are audited too.
		ConnectionSink: connSink,
	})
	if err != nil {
		fmt.Fprintf(stderr, "netproxy serve: %v\n", err)
		return 2
	}
	// execwrap reports its exec-policy decisions here (metrics + audit).
	srv.HandleControl(metrics.ExecDecisionPath, metrics.ExecDecisionHandler(meter, auditW))
	var auditor approvalsvc.Auditor
	if auditW != nil { // a nil *audit.Writer must not become a non-nil interface
		auditor = auditW
	}
	// Cluster mode: joined before the approval service is built on it; an
	// unreachable or foreign Redis at start is a configuration error.
	clu, err := openCluster(srv, logger)
	if err != nil {
		fmt.Fprintf(stderr, "netproxy serve: %v\n", err)
		return 2
	}
	var coord approvalsvc.Coordinator
	if clu != nil {
		defer clu.Close()
		coord = clu
	}
	approvals, err := setupApprovals(srv, auditor, coord)
	if err != nil {
		fmt.Fprintf(stderr, "netproxy serve: %v\n", err)
		return 2
	}
	if clu != nil {
		clu.Attach(approvals)
		if err := clu.Start(context.Background()); err != nil {
			fmt.Fprintf(stderr, "netproxy serve: %v\n", err)
			closeApprovals = approvals.Close
			return 2
		}
	}
	closeApprovals = approvals.Close
	if err := setupWebUI(srv, approvals); err != nil {
		fmt.Fprintf(stderr, "netproxy serve: %v\n", err)
		return 2
	}
	ctx := context.Background()
	if err := srv.Start(ctx); err != nil {
		fmt.Fprintf(stderr, "netproxy serve: %v\n", err)
		return 1
	}
	a := srv.Addrs()
	fmt.Fprintf(stdout, "netproxy: HTTP proxy on %s\n", a.HTTP)
	fmt.Fprintf(stdout, "netproxy: SOCKS5 proxy on %s\n", a.SOCKS5)
	fmt.Fprintf(stdout, "netproxy: admin on http://%s (healthz, readyz, metrics, /api/*)\n", a.Admin)
	fmt.Fprintf(stdout, "netproxy: control socket %s\n", a.Control)
	if srv.AdminTokenGenerated() {
		// SPEC §7.3: a generated token is printed only to a terminal.
		if err := announceToken(stdout, isTerminal(stdout), config.HomeDir(), cfg.Admin.TokenEnv, a.Admin, srv.AdminToken()); err != nil {
			fmt.Fprintf(stderr, "netproxy serve: %v\n", err)
			closeApprovals()
			shutdown(srv, nil, logger)
			return 1
		}
	} else {
		fmt.Fprintf(stdout, "netproxy: approvals page %s\n", srv.ApprovalsURL())
	}
	fmt.Fprint(stdout, policySummary(srv.Engine().Snapshot(), cfg))
	logger.Info("netproxy serving", "http", a.HTTP, "socks5", a.SOCKS5, "admin", a.Admin, "control", a.Control)
	if !srv.Engine().Enabled() {
		// The listeners are bound so that a reload can turn egress back on.
		fmt.Fprintln(stdout, "netproxy: network.enabled = false: every request is refused (503, SOCKS5 0x02) until a reload sets it to true")
		logger.Warn("network.enabled = false: every request is refused with proxy_disabled")
	}

	sig := make(chan os.Signal, 4)
	signal.Notify(sig, syscall.SIGTERM, syscall.SIGINT, syscall.SIGHUP)
	defer signal.Stop(sig)
	for s := range sig {
		if s == syscall.SIGHUP {
			srv.Reload()
			if auditW != nil {
				if err := auditW.Reopen(); err != nil {
					logger.Error("audit reopen failed", "error", err.Error())
				}
			}
			continue
		}
		logger.Info("shutting down", "signal", s.String(), "grace", shutdownGrace.String())
		closeApprovals()
		return shutdown(srv, sig, logger)
	}
	return 0
}

// shutdown drains the server; a second signal cuts the grace period short.
func shutdown(srv *server.Server, sig <-chan os.Signal, logger *slog.Logger) int {
	ctx, cancel := context.WithTimeout(context.Background(), shutdownGrace)
	defer cancel()
	go func() {
		select {
		case <-sig:
			cancel()
		case <-ctx.Done():
		}
	}()
	if err := srv.Shutdown(ctx); err != nil && !errors.Is(err, context.Canceled) {
		logger.Warn("shutdown deadline passed; closed the remaining connections", "error", err.Error())
	}
	return 0
}
