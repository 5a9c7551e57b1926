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

	"github.com/netproxy/netproxy/internal/config"
	"github.com/netproxy/netproxy/internal/logging"
	"github.com/netproxy/netproxy/internal/server"
	"github.com/netproxy/netproxy/metrics"
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

	// Everything is built in one place, in a stated order (server.Assemble);
	// nothing listens until Start.
	srv, err := server.Assemble(cfg, logger, meter)
	if err != nil {
		fmt.Fprintf(stderr, "netproxy serve: %v\n", err)
		if errors.Is(err, server.ErrOpen) {
			return 1
		}
		return 2
	}
	ctx := context.Background()
	if err := srv.Start(ctx); err != nil {
		fmt.Fprintf(stderr, "netproxy serve: %v\n", err)
		shutdown(srv, nil, logger) // closes the reviews, cluster and audit log
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
			srv.Hangup()
			continue
		}
		logger.Info("shutting down", "signal", s.String(), "grace", shutdownGrace.String())
		return shutdown(srv, sig, logger)
	}
	return 0
}

// shutdown drains the server; a second signal cuts the grace period short.
func shutdown(srv *server.Netproxy, sig <-chan os.Signal, logger *slog.Logger) int {
	ctx, cancel := context.WithTimeout(context.Background(), shutdownGrace)
	defer cancel()
	go func() {
		select {
		case <-sig:
			cancel()
		case <-ctx.Done():
		}
	}()
	if err := srv.Shutdown(ctx); err != nil {
		logger.Warn("shutdown deadline passed; closed the remaining connections", "error", err.Error())
	}
	return 0
}
