// Package logging owns netproxy's structured logs: the log/slog logger built
// from the config's [log] level/format, and the sink that writes one line per
// blocked request.
//
// It must never log a token, a query string or a header value: the blocked
// line carries only the normalised host, port, protocol, method, reason,
// decision, source, client address and execution id.
package logging

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"strings"

	"github.com/netproxy/netproxy/internal/config"
	"github.com/netproxy/netproxy/internal/observe"
)

// New returns a logger writing to w in the format ("text" default, or
// "json") and at the level ("info" default; debug|info|warn|error) of cfg.
// An unknown value is an error naming its key.
func New(cfg config.Log, w io.Writer) (*slog.Logger, error) {
	level, err := ParseLevel(cfg.Level)
	if err != nil {
		return nil, err
	}
	opts := &slog.HandlerOptions{Level: level}
	switch strings.ToLower(strings.TrimSpace(cfg.Format)) {
	case "", "text":
		return slog.New(slog.NewTextHandler(w, opts)), nil
	case "json":
		return slog.New(slog.NewJSONHandler(w, opts)), nil
	default:
		return nil, fmt.Errorf("log.format: %q is not a log format (use \"text\" or \"json\")", cfg.Format)
	}
}

// ParseLevel parses the value of log.level.
func ParseLevel(s string) (slog.Level, error) {
	switch strings.ToLower(strings.TrimSpace(s)) {
	case "", "info":
		return slog.LevelInfo, nil
	case "debug":
		return slog.LevelDebug, nil
	case "warn", "warning":
		return slog.LevelWarn, nil
	case "error":
		return slog.LevelError, nil
	default:
		return 0, fmt.Errorf("log.level: %q is not a log level (use debug, info, warn or error)", s)
	}
}

// DecisionLog is the observe.DecisionSink that logs one line per blocked
// request at info level (allowed requests at debug level).
type DecisionLog struct {
	Logger *slog.Logger
}

var _ observe.DecisionSink = DecisionLog{}

// ObserveDecision logs the decision. Only fields that cannot hold a secret
// are written (see the package comment).
func (s DecisionLog) ObserveDecision(e observe.DecisionEvent) {
	if s.Logger == nil {
		return
	}
	d, r := e.Decision, e.Request
	msg, level := "request blocked", slog.LevelInfo
	if d.Allowed() {
		msg, level = "request allowed", slog.LevelDebug
	}
	// Enabled first: building the attributes costs more than the check.
	ctx := context.Background()
	if !s.Logger.Enabled(ctx, level) {
		return
	}
	host := d.Host
	if host == "" {
		host = "(unnormalisable)"
	}
	s.Logger.LogAttrs(ctx, level, msg,
		slog.String("host", host),
		slog.Int("port", int(d.Port)),
		slog.String("protocol", string(r.Protocol)),
		slog.String("method", safeMethod(r.Method)),
		slog.String("decision", string(d.Verdict)),
		slog.String("reason", string(d.Reason)),
		slog.String("source", string(d.Source)),
		slog.String("client", r.Client),
		slog.String("execution_id", r.ExecutionID),
		slog.Duration("elapsed", e.Elapsed),
	)
}

// safeMethod keeps only a bare method token; anything else is not logged.
func safeMethod(m string) string {
	if len(m) > 16 {
		return "(invalid)"
	}
	for i := 0; i < len(m); i++ {
		if c := m[i]; (c < 'A' || c > 'Z') && c != '-' && c != '_' {
			return "(invalid)"
		}
	}
	return m
}
