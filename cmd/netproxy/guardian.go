package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"

	"github.com/netproxy/netproxy/guardian"
	"github.com/netproxy/netproxy/guardian/eval"
	"github.com/netproxy/netproxy/internal/config"
)

const guardianUsage = `usage: netproxy guardian eval --corpus DIR [--config FILE] [--backend starlark|webhook|openai]
                             [--url URL] [--model M] [--script FILE] [--api-key-env VAR] [--timeout D]
                             [--no-prescreen] [--json]`

// Exit codes of `netproxy guardian eval`.
const exitFalseAllow = 1

// runGuardian implements `netproxy guardian eval`: the labelled corpus in
// --corpus goes through the Guardian of --config's [guardian] table (flags
// override its keys), behind the pre-screen unless --no-prescreen. It
// prints the confusion table (or --json) and exits 1 when any deny-labelled
// case was allowed, 2 on a usage, config or corpus error.
func runGuardian(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 || args[0] != "eval" {
		fmt.Fprintln(stderr, guardianUsage)
		return exitUsage
	}
	fs := flag.NewFlagSet("netproxy guardian eval", flag.ContinueOnError)
	fs.SetOutput(stderr)
	corpus := fs.String("corpus", "", "folder of *.jsonl corpus files (required)")
	cfgPath := fs.String("config", "", "netproxy config whose [guardian] table names the backend")
	backend := fs.String("backend", "", "override guardian.backend: starlark | webhook | openai")
	url := fs.String("url", "", "override guardian.url")
	model := fs.String("model", "", "override guardian.model")
	script := fs.String("script", "", "override guardian.script")
	keyEnv := fs.String("api-key-env", "", "override guardian.api_key_env")
	timeout := fs.Duration("timeout", 0, "override guardian.timeout (per review)")
	noScreen := fs.Bool("no-prescreen", false, "send every case to the backend (measures the backend alone)")
	asJSON := fs.Bool("json", false, "print the report as JSON")
	fs.Usage = func() { fmt.Fprintln(stderr, guardianUsage); fs.PrintDefaults() }
	if err := fs.Parse(args[1:]); err != nil {
		return exitUsage
	}
	if *corpus == "" || fs.NArg() != 0 {
		fs.Usage()
		return exitUsage
	}
	var gcfg guardian.Settings
	baseDir, _ := os.Getwd()
	if *cfgPath != "" {
		cfg, err := config.Load(*cfgPath)
		if err != nil {
			fmt.Fprintf(stderr, "netproxy guardian eval: %v\n", err)
			return exitUsage
		}
		gcfg, baseDir = config.GuardianSettings(cfg.Guardian), filepath.Dir(*cfgPath)
	}
	for _, o := range []struct {
		flag string
		dst  *string
	}{{*backend, &gcfg.Backend}, {*url, &gcfg.URL}, {*model, &gcfg.Model}, {*script, &gcfg.Script}, {*keyEnv, &gcfg.APIKeyEnv}} {
		if o.flag != "" {
			*o.dst = o.flag
		}
	}
	if *timeout > 0 {
		gcfg.Timeout = *timeout
	}
	if gcfg.Backend == "" {
		fmt.Fprintln(stderr, "netproxy guardian eval: no backend: give --config FILE with a [guardian] table, or --backend")
		return exitUsage
	}
	cases, err := eval.LoadDir(*corpus)
	if err != nil {
		fmt.Fprintf(stderr, "netproxy guardian eval: %v\n", err)
		return exitUsage
	}
	rev, err := guardian.NewBackend(gcfg, baseDir, os.Getenv)
	if err != nil {
		fmt.Fprintf(stderr, "netproxy guardian eval: %v\n", err)
		return exitUsage
	}
	label := gcfg.Backend
	if gcfg.Model != "" {
		label += " (model " + gcfg.Model + ")"
	}
	if !*noScreen {
		rev = guardian.WithPrescreen(rev, guardian.Deps{})
		label += " behind the pre-screen"
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Duration(len(cases)+1)*time.Minute)
	defer cancel()
	rep := eval.Run(ctx, rev, label, cases)
	if *asJSON {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		enc.Encode(rep)
	} else {
		rep.WriteText(stdout)
	}
	if rep.FalseAllows > 0 {
		return exitFalseAllow
	}
	return 0
}
