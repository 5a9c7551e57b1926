package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"github.com/netproxy/netproxy/execcore"
	"io"
	"os"
	"os/signal"
	"runtime/debug"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/netproxy/netproxy/attribution"
	"github.com/netproxy/netproxy/execcore/approvalpolicy"
	"github.com/netproxy/netproxy/sandbox"
	"github.com/netproxy/netproxy/sandbox/netctl"
	"github.com/netproxy/netproxy/sandbox/orchestrator"
)

// Exit codes of `execwrap run` that are not the command's own (documented
// in docs/sandbox.md).
const (
	exitUsage         = 2
	exitForbidden     = 10
	exitNotApproved   = 11
	exitSandboxFailed = 125
)

// runOptions are the run-only flags (the check flags come from the shared
// parser).
type runOptions struct {
	network string
	capture string // --capture on|off (run_capture.go)
	// captureOn, captureRequired: settled from capture, network and tier.
	captureOn, captureRequired bool
	netFlags                   *networkFlags              // --allow-domain, --deny-domain, --network-mode
	netPolicy                  *attribution.NetworkPolicy // what they register (nil: none)
	control                    string
	session                    string
	envID                      string
	turnID                     string
	timeout                    time.Duration
	json                       bool
	writableRoots              []string
	tier                       string
	maxOutput                  int
	limits                     sandbox.Limits
	allowDegraded              bool
	denyRead                   []string // --deny-read, absolute (secrets.go)
}

// runRun implements `execwrap run` (SPEC §6.4, §7.6).
func runRun(args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	inv, ro, err := parseRunFlags(args, stdin)
	if err != nil {
		fmt.Fprintf(stderr, "execwrap run: %v\n", err)
		return exitUsage
	}
	// A one-shot process: collect garbage only past a generous ceiling.
	debug.SetGCPercent(-1)
	debug.SetMemoryLimit(256 << 20)
	// The token will live in this process: keep same-uid processes out of
	// its memory and /proc entries.
	_ = unix.Prctl(unix.PR_SET_DUMPABLE, 0, 0, 0, 0)

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	fwd, stop := forwardSignals()
	defer stop()

	r := &runner{inv: inv, opts: ro, stdin: stdin, stdout: stdout, stderr: stderr, signals: fwd,
		client: netctl.New(ro.control)}
	return r.run(ctx)
}

// forwardSignals relays SIGINT/TERM/HUP/QUIT to the sandboxed command and
// holds SIGPIPE until stop is called.
func forwardSignals() (<-chan sandbox.Signal, func()) {
	sigs := make(chan os.Signal, 8)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP, syscall.SIGQUIT)
	// A reader of our output that goes away (`execwrap run … | head -1`)
	// must not kill execwrap before it removed the placeholders: with
	// SIGPIPE handled, such writes fail with EPIPE instead. (Handled, not
	// ignored: an ignored SIGPIPE would be inherited by the command.)
	pipes := make(chan os.Signal, 1)
	signal.Notify(pipes, syscall.SIGPIPE)
	fwd := make(chan sandbox.Signal, 8)
	go func() {
		for s := range sigs {
			select {
			case fwd <- sandbox.Signal(s.(syscall.Signal)):
			default:
			}
		}
	}()
	return fwd, func() { signal.Stop(sigs); signal.Stop(pipes) }
}

// invocation is the command as execcore sees it plus the sandbox flags.
type invocation struct {
	HandlerArgv        []string
	Cwd                string
	BaseCwd            string // the workspace: --cwd or the current directory
	ApprovalIdentity   []string
	ApprovalShell      []string // the shell and flag of the approval key
	Requirement        execcore.Requirement
	ExecSource         string          // "prefix" | "heuristics": what decided (for netproxy's metrics)
	RequirementJSON    json.RawMessage // execcore's requirement object, verbatim
	Policy             approvalpolicy.Policy
	Kind               sandbox.Kind
	SandboxPermissions string
	Justification      string
	ApprovalReason     string // the reason sent with an exec approval (approvalReason)
	Env                []string
	TimeoutMS          uint64 // a tool call's timeout_ms
}

func parseRunFlags(args []string, stdin io.Reader) (*invocation, runOptions, error) {
	var ro runOptions
	fs := flag.NewFlagSet("execwrap run", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	cf := registerCheckFlags(fs)
	ro.netFlags = registerNetworkFlags(fs)
	fs.StringVar(&ro.network, "network", "", "proxied | none | host")
	fs.StringVar(&ro.capture, "capture", captureDefault, "on | off: transparent capture of programs that ignore proxy settings (default: on in the namespaces tier with --network proxied; see docs/sandbox.md)")
	fs.StringVar(&ro.control, "control", "", "netproxy control socket")
	fs.StringVar(&ro.session, "session", "default", "session id")
	fs.StringVar(&ro.envID, "env-id", "default", "environment id")
	fs.StringVar(&ro.turnID, "turn-id", "", "turn id")
	fs.DurationVar(&ro.timeout, "timeout", 0, "kill the command after this long")
	fs.StringVar(&ro.tier, "tier", "auto", "auto | namespaces | landlock")
	fs.IntVar(&ro.maxOutput, "max-output", 1<<20, "bytes of stdout and of stderr kept in the result")
	limitMemory := fs.String("limit-memory", sandbox.DefaultLimitMemory, "memory limit of the run's cgroup: bytes with K/M/G/T, N% of RAM, or 0 for none")
	fs.IntVar(&ro.limits.Pids, "limit-pids", sandbox.DefaultLimitPids, "process limit of the run's cgroup (0: none)")
	limitTmpfs := fs.String("limit-tmpfs", sandbox.DefaultLimitTmpfs, "size of each private tmpfs (/tmp, /run, /dev/shm): bytes with K/M/G/T, N% of RAM, or 0 for the kernel default")
	fs.BoolVar(&ro.allowDegraded, "allow-degraded", false, "as root, run in the namespaces tier even when Landlock is unavailable")
	fs.Var((*repeated)(&ro.denyRead), "deny-read", "a path the sandbox must not read, besides netproxy's secrets and ~/.ssh, ~/.aws, … (repeatable)")
	if err := fs.Parse(args); err != nil {
		return nil, ro, err
	}
	var err error
	if ro.denyRead, err = absPaths("--deny-read", ro.denyRead); err != nil {
		return nil, ro, err
	}
	if ro.limits.Pids < 0 {
		return nil, ro, errors.New("--limit-pids must be >= 0")
	}
	ram := totalRAM()
	if ro.limits.MemoryBytes, err = sandbox.ParseByteSize("--limit-memory", *limitMemory, ram); err != nil {
		return nil, ro, err
	}
	if ro.limits.TmpfsBytes, err = sandbox.ParseByteSize("--limit-tmpfs", *limitTmpfs, ram); err != nil {
		return nil, ro, err
	}
	cf.Argv = fs.Args()
	ro.json = cf.JSON
	if ro.control == "" {
		ro.control = netctl.DefaultSocket()
	}
	if ro.maxOutput < 0 {
		return nil, ro, errors.New("--max-output must be >= 0")
	}
	if ro.timeout < 0 {
		return nil, ro, errors.New("--timeout must be >= 0")
	}
	switch sandbox.Tier(ro.tier) {
	case sandbox.TierAuto, sandbox.TierNamespaces, sandbox.TierLandlock:
	default:
		return nil, ro, fmt.Errorf("--tier %q: want auto, namespaces or landlock", ro.tier)
	}
	inv, err := evaluateInvocation(cf, ro, stdin)
	if err != nil {
		return nil, ro, err
	}
	// input() made every --writable-root absolute.
	ro.writableRoots = cf.WritableRoots
	if ro.timeout == 0 && inv.TimeoutMS > 0 {
		ro.timeout = time.Duration(inv.TimeoutMS) * time.Millisecond
	}
	if err := ro.settleNetwork(inv.Kind); err != nil {
		return nil, ro, err
	}
	if ro.captureOn, ro.captureRequired, err = settleCapture(ro.capture, ro.network, ro.tier); err != nil {
		return nil, ro, err
	}
	return inv, ro, nil
}

// settleNetwork defaults --network by the sandbox kind (proxied when it
// confines, else host), refuses the combinations that cannot hold and
// builds the network policy to register.
func (ro *runOptions) settleNetwork(kind sandbox.Kind) error {
	if ro.network == "" {
		ro.network = string(sandbox.NetworkProxied)
		if !kind.Confining() {
			ro.network = string(sandbox.NetworkHost)
		}
	}
	if _, err := sandbox.ParseNetworkMode(ro.network); err != nil {
		return err
	}
	if ro.network == string(sandbox.NetworkHost) && kind.Confining() {
		return fmt.Errorf("--network host needs --sandbox danger-full-access or external (got %s)", kind)
	}
	if ro.network == string(sandbox.NetworkNone) && !kind.Confining() {
		return fmt.Errorf("--network none needs --sandbox read-only or workspace-write (got %s)", kind)
	}
	np, err := ro.netFlags.policy(ro.network)
	if err != nil {
		return err
	}
	ro.netPolicy = np
	return nil
}

// totalRAM is the host's RAM in bytes (0 when unknown).
func totalRAM() int64 {
	var si unix.Sysinfo_t
	if err := unix.Sysinfo(&si); err != nil {
		return 0
	}
	return int64(si.Totalram) * int64(si.Unit)
}

// runner carries one `execwrap run` through the orchestrator.
type runner struct {
	inv            *invocation
	opts           runOptions
	stdin          io.Reader
	stdout, stderr io.Writer
	signals        <-chan sandbox.Signal
	client         *netctl.Client
}

func (r *runner) run(ctx context.Context) int {
	start := time.Now()
	r.reportExecDecision(ctx)
	plan := orchestrator.Plan{
		Requirement:        r.inv.Requirement,
		Policy:             r.inv.Policy,
		SandboxPermissions: r.inv.SandboxPermissions,
		Confining:          r.inv.Kind.Confining(),
		Approver:           r.approver(),
		Attempt:            r.attempt,
	}
	out, err := orchestrator.Run(ctx, plan)
	res := r.buildResult(out, time.Since(start))
	code := res.ExitCode
	if err != nil {
		fmt.Fprintf(r.stderr, "execwrap run: %v\n", err)
		code = exitSandboxFailed
		res.ExitCode = code
		res.Error = err.Error()
	} else if out.Rejected != "" {
		fmt.Fprintf(r.stderr, "execwrap run: %s\n", out.Rejected)
		code = exitNotApproved
		if out.RejectedBy == "forbidden" {
			code = exitForbidden
		}
		res.ExitCode = code
	} else if out.Denied && out.Final != nil && !r.opts.json {
		fmt.Fprintf(r.stderr, "execwrap run: the sandbox likely blocked this command (%s)\n", strings.Join(out.Evidence, ", "))
	}
	if r.opts.json {
		enc := json.NewEncoder(r.stdout)
		enc.SetIndent("", "  ")
		if err := enc.Encode(res); err != nil {
			return exitSandboxFailed
		}
	}
	return code
}
