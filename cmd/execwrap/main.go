// Command execwrap gates a shell command with exec-policy rules and runs it in
// a sandbox whose only network path is netproxy (SPEC §6, §7.6). The main
// stays thin: each subcommand lives in its own file.
package main

import (
	"fmt"
	"io"
	"os"

	"github.com/netproxy/netproxy/sandbox"
	"github.com/netproxy/netproxy/sandbox/selftest"
)

const usage = `usage:
  execwrap check [--json] [--rules DIR]... [--approval-policy P] [--sandbox KIND] [--sandbox-permissions X] [--cwd DIR] [--shell PATH] [--tool T --args JSON] [-- ARGV...]
  execwrap run [same flags] [--network proxied|none|host] [--control SOCKET] [--session ID] [--env-id ID] [--timeout D]
               [--limit-memory SIZE|N%] [--limit-pids N] [--limit-tmpfs SIZE] [--allow-degraded] [--json] -- ARGV...
  execwrap selftest [--json] [--probe-host HOST:PORT] [run flags]
  execwrap doctor
`

func main() {
	// The sandbox init is re-executed inside the new namespaces; it must be
	// dispatched before anything else runs.
	if sandbox.IsInitArgs(os.Args) {
		os.Exit(sandbox.InitMain())
	}
	// The selftest's probe battery is the command inside the sandbox.
	if len(os.Args) > 1 && os.Args[1] == selftest.ProbeArg {
		os.Exit(selftest.ProbeMain(os.Args[2:], os.Stdout))
	}
	os.Exit(run(os.Args[1:], os.Stdin, os.Stdout, os.Stderr))
}

func run(args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return 2
	}
	switch args[0] {
	case "check":
		return runCheck(args[1:], stdin, stdout, stderr)
	case "run":
		return runRun(args[1:], stdin, stdout, stderr)
	case "selftest":
		return runSelftest(args[1:], stdin, stdout, stderr)
	case "doctor":
		return runDoctor(args[1:], stdout, stderr)
	case "-h", "--help", "help":
		fmt.Fprint(stdout, usage)
		return 0
	default:
		fmt.Fprintf(stderr, "execwrap: unknown command %q\n%s", args[0], usage)
		return 2
	}
}
