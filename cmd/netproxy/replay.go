package main

import (
	"errors"
	"flag"
	"fmt"
	"io"

	"github.com/netproxy/netproxy/internal/config"
	"github.com/netproxy/netproxy/internal/server"
	"github.com/netproxy/netproxy/rollout/replay"
)

const replayUsage = "usage: netproxy replay --config CANDIDATE [--against LIVE] [--json] [--strict] AUDIT.jsonl..."

// runReplay is `netproxy replay`: what would the candidate policy change
// for the traffic an audit log recorded? Offline: no DNS, no reviewer.
func runReplay(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("netproxy replay", flag.ContinueOnError)
	fs.SetOutput(stderr)
	cand := fs.String("config", "", "candidate configuration file (required)")
	against := fs.String("against", "", "live configuration to re-judge the lines with (default: the decisions the audit recorded)")
	asJSON := fs.Bool("json", false, "print the report as JSON")
	strict := fs.Bool("strict", false, "stop at the first malformed audit line (exit 2)")
	fs.Usage = func() {
		fmt.Fprintln(stderr, replayUsage)
		fs.PrintDefaults()
	}
	if err := fs.Parse(reorderFlags(args, map[string]bool{"config": true, "against": true})); err != nil {
		return replay.ExitError
	}
	if *cand == "" {
		fmt.Fprintln(stderr, "netproxy replay: --config CANDIDATE is required")
		fs.Usage()
		return replay.ExitError
	}
	if fs.NArg() == 0 {
		fmt.Fprintln(stderr, "netproxy replay: give at least one audit file")
		fs.Usage()
		return replay.ExitError
	}
	candPolicy, err := replayPolicy(*cand)
	if err != nil {
		printErrors(stderr, "netproxy replay: candidate "+*cand, err)
		return replay.ExitError
	}
	opts := replay.Options{Candidate: candPolicy, Strict: *strict}
	if *against != "" {
		live, err := replayPolicy(*against)
		if err != nil {
			printErrors(stderr, "netproxy replay: --against "+*against, err)
			return replay.ExitError
		}
		opts.Against = &live
	}
	opts.OnMalformed = func(le replay.LineError) {
		fmt.Fprintf(stderr, "netproxy replay: %s: malformed audit line: %s\n", fmt.Sprintf("%s:%d", le.File, le.Line), le.Err)
	}
	r, err := replay.New(opts)
	if err != nil {
		fmt.Fprintf(stderr, "netproxy replay: %v\n", err)
		return replay.ExitError
	}
	for _, path := range fs.Args() {
		if err := r.File(path); err != nil {
			var le replay.LineError
			if errors.As(err, &le) {
				fmt.Fprintf(stderr, "netproxy replay: --strict: stopped at %s\n", le.Error())
			} else {
				fmt.Fprintf(stderr, "netproxy replay: %v\n", err)
			}
			return replay.ExitError
		}
	}
	rep := r.Report()
	if *asJSON {
		if err := rep.WriteJSON(stdout); err != nil {
			fmt.Fprintf(stderr, "netproxy replay: %v\n", err)
			return replay.ExitError
		}
	} else {
		rep.WriteText(stdout)
	}
	return rep.ExitCode()
}

// replayPolicy compiles a configuration exactly as serve does (lists,
// domain files, [dns] static answers, mode, kill switch, the persisted
// rules); no DNS server is ever asked.
func replayPolicy(path string) (replay.Policy, error) {
	cfg, err := config.Load(path)
	if err != nil {
		return replay.Policy{}, err
	}
	snap, err := server.LoadPolicy(cfg)
	if err != nil {
		return replay.Policy{}, err
	}
	return replay.Policy{Snapshot: snap, Approvals: cfg.Approvals.Enabled}, nil
}
