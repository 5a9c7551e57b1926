package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/netproxy/netproxy/internal/config"
	"github.com/netproxy/netproxy/sandbox"
	"github.com/netproxy/netproxy/sandbox/netctl"
	"github.com/netproxy/netproxy/sandbox/orchestrator"
	"github.com/netproxy/netproxy/sandbox/selftest"
)

// selftestTimeout bounds the probe battery when --timeout is not given.
const selftestTimeout = 2 * time.Minute

// runSelftest implements `execwrap selftest [--json] [--probe-host
// HOST:PORT] [run flags]` (SPEC §6.7): the probe battery runs as the
// command of one sandboxed attempt that `run` itself builds from the same
// flags (runner.attempt), against the live netproxy; the host side judges
// it. No approval is asked and nothing is retried outside the sandbox.
func runSelftest(args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	probeHost, rest, err := selftestFlags(args)
	if err != nil {
		fmt.Fprintf(stderr, "execwrap selftest: %v\n", err)
		return exitUsage
	}
	probeArgv := func(plan string) []string {
		return append(append([]string{}, rest...), "--", "/proc/self/exe", selftest.ProbeArg, plan)
	}
	// A first parse learns the workspace, kind and network the plan needs;
	// the second, with the plan, is the one that runs.
	inv, ro, err := parseRunFlags(probeArgv("{}"), stdin)
	if err != nil {
		fmt.Fprintf(stderr, "execwrap selftest: %v\n", err)
		return exitUsage
	}
	if !inv.Kind.Confining() {
		fmt.Fprintf(stderr, "execwrap selftest: --sandbox %s builds no sandbox, so there is no fence to probe (use read-only or workspace-write)\n", inv.Kind)
		return exitUsage
	}
	asJSON := ro.json
	kind, writable := orchestrator.WorkspaceRoots(inv.Kind, inv.Cwd, inv.BaseCwd, ro.writableRoots)
	if kind == sandbox.KindWorkspaceWrite {
		writable = append([]string{inv.Cwd}, writable...)
	}
	npAddrs, npErr := netproxyListeners(ro.control)
	npSecrets, npSecretsErr := netproxySecretPaths(ro.control)
	home, _ := os.UserHomeDir()
	host, err := selftest.Prepare(selftest.HostOptions{
		Network: ro.network, Capture: ro.captureOn, Workspace: inv.BaseCwd, Writable: writable, Home: home,
		NetproxyHome: config.HomeDir(), Control: ro.control,
		Netproxy: npAddrs, NetproxyErr: npErr, ProbeHost: probeHost,
		NetproxySecrets: npSecrets, NetproxySecretsErr: npSecretsErr, DenyRead: ro.denyRead,
	})
	if err != nil {
		fmt.Fprintf(stderr, "execwrap selftest: %v\n", err)
		return selftest.ExitSetup
	}
	defer host.Close()
	plan, err := json.Marshal(host.Plan)
	if err != nil {
		fmt.Fprintf(stderr, "execwrap selftest: %v\n", err)
		return selftest.ExitSetup
	}
	if inv, ro, err = parseRunFlags(probeArgv(string(plan)), stdin); err != nil {
		fmt.Fprintf(stderr, "execwrap selftest: %v\n", err)
		return exitUsage
	}
	ro.json = true // keep the battery's output for the judge, print nothing of it
	if ro.timeout == 0 {
		ro.timeout = selftestTimeout
	}
	_ = unix.Prctl(unix.PR_SET_DUMPABLE, 0, 0, 0, 0) // a token will live here
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	fwd, stop := forwardSignals()
	defer stop()
	r := &runner{inv: inv, opts: ro, stdin: stdin, stdout: io.Discard, stderr: stderr, signals: fwd,
		client: netctl.New(ro.control)}
	ar, err := r.attempt(ctx, true)
	rep := judgeSelftest(host, ar, err, ro.network, stderr)
	if asJSON {
		err = rep.WriteJSON(stdout)
	} else {
		err = rep.WriteText(stdout)
	}
	if err != nil {
		return selftest.ExitSetup
	}
	return rep.ExitCode()
}

// judgeSelftest turns the battery's attempt into the report.
func judgeSelftest(host *selftest.Host, ar orchestrator.AttemptResult, err error, network string, stderr io.Writer) selftest.Report {
	if err != nil {
		host.Close()
		rep := selftest.NewReport(string(sandbox.TierNone), network, nil)
		rep.Error = err.Error()
		return rep
	}
	got, perr := selftest.ParseProbeOutput(ar.Stdout)
	if perr != nil {
		fmt.Fprintf(stderr, "execwrap selftest: %v (exit %d, signal %q, timed out %v); its stderr:\n%s\n",
			perr, ar.Result.ExitCode, ar.Result.Signal, ar.Result.TimedOut, tail(ar.Stderr, 2048))
	}
	return selftest.NewReport(string(ar.Result.Tier), network, host.Judge(got))
}

// selftestFlags takes selftest's own flag (--probe-host) out of args; the
// rest are run flags. A command (`-- ARGV`) is refused: the battery is the
// command.
func selftestFlags(args []string) (probeHost string, rest []string, err error) {
	for i := 0; i < len(args); i++ {
		a := args[i]
		switch {
		case a == "--":
			return "", nil, errors.New("selftest runs its own probes: give run flags only, no command")
		case a == "--probe-host" || a == "-probe-host":
			if i+1 >= len(args) {
				return "", nil, errors.New("--probe-host needs HOST:PORT")
			}
			i++
			probeHost = args[i]
		case strings.HasPrefix(a, "--probe-host="):
			probeHost = strings.TrimPrefix(a, "--probe-host=")
		case a == "--tool" || a == "--args" || strings.HasPrefix(a, "--tool=") || strings.HasPrefix(a, "--args="):
			return "", nil, errors.New("selftest runs its own probes: --tool/--args do not apply")
		default:
			rest = append(rest, a)
		}
	}
	if probeHost != "" {
		if _, _, err := net.SplitHostPort(probeHost); err != nil {
			return "", nil, fmt.Errorf("--probe-host %q: want HOST:PORT", probeHost)
		}
	}
	return probeHost, rest, nil
}

// netproxyListeners finds netproxy's own listening addresses through the
// control socket's peer (SO_PEERCRED → /proc/PID). The reason is returned
// when they cannot be known.
func netproxyListeners(sock string) ([]string, string) {
	c, err := net.DialTimeout("unix", sock, netctl.QuickTimeout)
	if err != nil {
		return nil, fmt.Sprintf("netproxy's control socket %s: %v", sock, err)
	}
	defer c.Close()
	raw, err := c.(*net.UnixConn).SyscallConn()
	if err != nil {
		return nil, err.Error()
	}
	var cred *unix.Ucred
	var cerr error
	if err := raw.Control(func(fd uintptr) {
		cred, cerr = unix.GetsockoptUcred(int(fd), unix.SOL_SOCKET, unix.SO_PEERCRED)
	}); err != nil || cerr != nil {
		return nil, fmt.Sprintf("SO_PEERCRED on %s: %v", sock, errors.Join(err, cerr))
	}
	bound, err := sandbox.ProcessTCPListeners(int(cred.Pid))
	if err != nil {
		return nil, err.Error() + " (run selftest as netproxy's user or as root)"
	}
	if len(bound) == 0 {
		return nil, fmt.Sprintf("netproxy (pid %d) holds no listening TCP socket", cred.Pid)
	}
	return selftest.NetproxyAddrs(bound), ""
}

// netproxySecretPaths asks netproxy which paths hold its secrets, as
// `run` does (secrets.go), so the battery can try to read each; the reason
// is returned when they cannot be known.
func netproxySecretPaths(sock string) ([]string, string) {
	ctx, cancel := context.WithTimeout(context.Background(), netctl.QuickTimeout)
	defer cancel()
	paths, err := netctl.New(sock).SecretPaths(ctx)
	if err != nil {
		return nil, err.Error()
	}
	return paths, ""
}

func tail(b []byte, n int) string {
	if len(b) > n {
		b = b[len(b)-n:]
	}
	return string(b)
}
