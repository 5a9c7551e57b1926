// Command netproxy is the egress proxy of SPEC §7.1. The main stays thin:
// each subcommand lives in its own file and calls into packages.
package main

import (
	"fmt"
	"io"
	"os"
)

const usage = `usage:
  netproxy serve [--config FILE]
  netproxy check [--config FILE] [--json] [--protocol http|https|socks5] [--method M] [--execution-policy FILE] HOST[:PORT]
  netproxy replay --config CANDIDATE [--against LIVE] [--json] [--strict] AUDIT.jsonl...
  netproxy approvals list|show ID|decide ID DECISION|watch [--admin URL]
  netproxy cluster status [--config FILE] [--json]
  netproxy config validate FILE
  netproxy audit verify FILE...
  netproxy guardian eval --corpus DIR [--config FILE] [--backend B] [--json]
`

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

// run dispatches a subcommand and returns the process exit code.
func run(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return 2
	}
	switch args[0] {
	case "serve":
		return runServe(args[1:], stdout, stderr)
	case "check":
		return runCheck(args[1:], stdout, stderr)
	case "replay":
		return runReplay(args[1:], stdout, stderr)
	case "approvals":
		return runApprovals(args[1:], stdout, stderr)
	case "cluster":
		return runCluster(args[1:], stdout, stderr)
	case "config":
		return runConfig(args[1:], stdout, stderr)
	case "guardian":
		return runGuardian(args[1:], stdout, stderr)
	case "audit":
		return runAudit(args[1:], stdout, stderr)
	case "-h", "--help", "help":
		fmt.Fprint(stdout, usage)
		return 0
	default:
		fmt.Fprintf(stderr, "netproxy: unknown command %q\n%s", args[0], usage)
		return 2
	}
}
