package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"sort"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/netproxy/netproxy/attribution"
	"github.com/netproxy/netproxy/sandbox"
	"github.com/netproxy/netproxy/sandbox/netctl"
	"github.com/netproxy/netproxy/sandbox/orchestrator"
)

// attempt runs the command once (the orchestrator's AttemptFunc; selftest
// runs its probe battery through it too).
func (r *runner) attempt(ctx context.Context, sandboxed bool) (orchestrator.AttemptResult, error) {
	return r.attempter().Run(ctx, sandboxed)
}

// attempter is the run's flags as the orchestrator's Attempter.
func (r *runner) attempter() *orchestrator.Attempter {
	a := &orchestrator.Attempter{
		Argv: r.inv.HandlerArgv, Env: r.inv.Env, Cwd: r.inv.Cwd, BaseCwd: r.inv.BaseCwd,
		Kind: r.inv.Kind, Network: sandbox.NetworkMode(r.opts.network), Tier: sandbox.Tier(r.opts.tier),
		Capture: r.opts.captureOn, CaptureRequired: r.opts.captureRequired,
		WritableRoots: r.opts.writableRoots, Limits: r.opts.limits, AllowDegraded: r.opts.allowDegraded,
		Timeout: r.opts.timeout, Signals: r.signals, Requirement: r.inv.Requirement,
		Stdin: r.stdin, MaxOutput: r.opts.maxOutput, WaitDenials: r.opts.json,
		Control: r.client, OwnHidden: ownHiddenPaths(r.client.Socket(), r.opts.denyRead), Notes: r.stderr,
		Execution: attribution.ExecutionSpec{
			SessionID: r.opts.session, EnvironmentID: r.opts.envID, TurnID: r.opts.turnID,
			Command: r.inv.HandlerArgv, Cwd: r.inv.Cwd, ApprovalPolicy: r.inv.Policy.String(),
			Network: r.opts.netPolicy,
		},
	}
	if !r.opts.json { // --json prints the captured output in the result only
		a.Stdout, a.Stderr = r.stdout, r.stderr
	}
	return a
}

// runResult is the --json result of SPEC §7.6.
type runResult struct {
	ExitCode        int                           `json:"exit_code"`
	Signal          *string                       `json:"signal"`
	TimedOut        bool                          `json:"timed_out"`
	Stdout          string                        `json:"stdout"`
	Stderr          string                        `json:"stderr"`
	StdoutTruncated bool                          `json:"stdout_truncated,omitempty"`
	StderrTruncated bool                          `json:"stderr_truncated,omitempty"`
	DurationMS      int64                         `json:"duration_ms"`
	Requirement     json.RawMessage               `json:"requirement"`
	Sandbox         resultSandbox                 `json:"sandbox"`
	NetworkDenials  []orchestrator.NetworkDenial  `json:"network_denials"`
	Attempts        []orchestrator.AttemptRecord  `json:"attempts"`
	Approvals       []orchestrator.ApprovalRecord `json:"approvals,omitempty"`
	ExecutionID     string                        `json:"execution_id,omitempty"`
	Rejected        string                        `json:"rejected,omitempty"`
	Error           string                        `json:"error,omitempty"`
}

type resultSandbox struct {
	Tier        string   `json:"tier"`
	Denied      bool     `json:"denied"`
	Signals     []string `json:"signals"`
	LandlockABI int      `json:"landlock_abi,omitempty"`
}

func (r *runner) buildResult(out orchestrator.Outcome, d time.Duration) runResult {
	res := runResult{
		DurationMS:     d.Milliseconds(),
		Requirement:    r.inv.RequirementJSON,
		NetworkDenials: []orchestrator.NetworkDenial{},
		Attempts:       out.Attempts,
		Approvals:      out.Approvals,
		Rejected:       out.Rejected,
		Sandbox:        resultSandbox{Tier: string(sandbox.TierNone), Signals: []string{}, Denied: out.Denied},
	}
	if res.Attempts == nil {
		res.Attempts = []orchestrator.AttemptRecord{}
	}
	if f := out.Final; f != nil {
		res.ExitCode = f.Result.ExitCode
		if f.Result.Signal != "" {
			s := f.Result.Signal
			res.Signal = &s
		}
		res.TimedOut = f.Result.TimedOut
		res.Stdout, res.Stderr = string(f.Stdout), string(f.Stderr)
		res.ExecutionID = f.ExecutionID
		res.Sandbox.Tier = string(f.Result.Tier)
		res.Sandbox.LandlockABI = f.Result.LandlockABI
		res.Sandbox.Signals = append(res.Sandbox.Signals, f.Result.Signals...)
	}
	res.Sandbox.Signals = append(res.Sandbox.Signals, out.Evidence...)
	// Network denials of every attempt: the first (sandboxed) one is where
	// they matter.
	if out.Final != nil {
		res.NetworkDenials = append(res.NetworkDenials, out.Final.NetworkDenials...)
	}
	res.StdoutTruncated = r.truncated(out, true)
	res.StderrTruncated = r.truncated(out, false)
	return res
}

func (r *runner) truncated(out orchestrator.Outcome, stdout bool) bool {
	if out.Final == nil {
		return false
	}
	b := out.Final.Stderr
	if stdout {
		b = out.Final.Stdout
	}
	return r.opts.maxOutput > 0 && len(b) >= r.opts.maxOutput
}

// runApprover asks netproxy's approval service, else the user on a TTY,
// else fails closed.
type runApprover struct{ r *runner }

func (r *runner) approver() orchestrator.Approver { return runApprover{r} }

func (a runApprover) Approve(ctx context.Context, q orchestrator.Question) (orchestrator.Answer, error) {
	r := a.r
	req := netctl.ApprovalRequest{
		SessionID: r.opts.session, EnvironmentID: r.opts.envID,
		Command: r.inv.ApprovalIdentity, Shell: r.inv.ApprovalShell, Cwd: r.inv.Cwd, Reason: q.Reason,
		Justification: r.inv.Justification, SandboxPermissions: r.inv.SandboxPermissions,
		ProposedAmendment: r.inv.Requirement.ProposedAmendment,
		ApprovalPolicy:    r.inv.Policy.String(),
	}
	if !q.Retry { // an escalated retry keeps its own question
		req.Reason = r.inv.ApprovalReason
	}
	ans, err := r.client.RequestApproval(ctx, req)
	if err == nil {
		return orchestrator.Answer{Approved: ans.Approved && strings.HasPrefix(ans.Decision, "allow"),
			Decision: ans.Decision, Reviewer: ans.Reviewer, Message: ans.Rationale}, nil
	}
	var se *netctl.StatusError
	if errors.As(err, &se) && se.Status != 503 && se.Status != 404 {
		return orchestrator.Answer{}, err // netproxy answered: never second-guess it
	}
	if tty, terr := os.OpenFile("/dev/tty", os.O_RDWR, 0); terr == nil && isTTY(r.stdin) {
		defer tty.Close()
		return promptTTY(ctx, tty, r.inv, q)
	}
	return orchestrator.Answer{}, fmt.Errorf("no reviewer could be asked (%v) and stdin is not a terminal; failing closed", err)
}

func promptTTY(ctx context.Context, tty *os.File, inv *invocation, q orchestrator.Question) (orchestrator.Answer, error) {
	reason := q.Reason
	if reason == "" {
		reason = "the exec policy requires approval for this command"
	}
	fmt.Fprintf(tty, "\nexecwrap: approval needed: %s\n  command: %s\n  cwd:     %s\nRun it? [y/N] ",
		reason, strings.Join(inv.ApprovalIdentity, " "), inv.Cwd)
	line := make(chan string, 1)
	go func() {
		s, _ := bufio.NewReader(tty).ReadString('\n')
		line <- strings.ToLower(strings.TrimSpace(s))
	}()
	select {
	case <-ctx.Done():
		return orchestrator.Answer{}, ctx.Err()
	case s := <-line:
		if s == "y" || s == "yes" {
			return orchestrator.Answer{Approved: true, Decision: "approved", Reviewer: "tty"}, nil
		}
		return orchestrator.Answer{Decision: "denied", Reviewer: "tty"}, nil
	}
}

func isTTY(r io.Reader) bool {
	f, ok := r.(*os.File)
	if !ok {
		return false
	}
	_, err := unix.IoctlGetTermios(int(f.Fd()), unix.TCGETS)
	return err == nil
}

// runDoctor implements `execwrap doctor [--json]`.
func runDoctor(args []string, stdout, stderr io.Writer) int {
	asJSON := false
	for _, a := range args {
		switch a {
		case "--json", "-json":
			asJSON = true
		default:
			fmt.Fprintf(stderr, "execwrap doctor: unknown argument %q (usage: execwrap doctor [--json])\n", a)
			return exitUsage
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	rep := sandbox.Probe(ctx, "/proc/self/exe", []string{sandbox.InitArg})
	capt := sandbox.ProbeCapture(ctx, "/proc/self/exe", []string{sandbox.InitArg})
	sock := netctl.DefaultSocket()
	ctlState := "reachable"
	if err := netctl.New(sock).Ping(ctx); err != nil {
		ctlState = "unreachable: " + err.Error()
	}
	code := 0
	if rep.AutoTier == "unavailable" {
		code = 1
	}
	if asJSON {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		_ = enc.Encode(struct {
			sandbox.HostReport
			ControlSocket      string            `json:"control_socket"`
			ControlSocketState string            `json:"control_socket_state"`
			Capture            sandbox.TierProbe `json:"capture"`
			NodeEnvProxy       string            `json:"node_use_env_proxy"`
		}{rep, sock, ctlState, capt, nodeEnvProxyNote})
		return code
	}
	w := func(k, v string) { fmt.Fprintf(stdout, "%-34s %s\n", k, v) }
	w("kernel", rep.Kernel+" ("+rep.Arch+")")
	w("euid", fmt.Sprint(rep.EUID))
	w("container", orDash(rep.Container))
	for _, k := range sortedKeys(rep.Sysctls) {
		w(k, rep.Sysctls[k])
	}
	w("LSMs", rep.LSMs)
	w("landlock ABI", fmt.Sprint(rep.LandlockABI))
	w("seccomp filters", fmt.Sprint(rep.SeccompFilter))
	w("bwrap", orDash(rep.BwrapPath))
	w("tier namespaces (user+mnt+pid+net)", probeText(rep.NamespacesTier))
	w("tier landlock (degraded)", probeText(rep.LandlockTier))
	w("execwrap run --tier auto uses", rep.AutoTier)
	w("per-run cgroup (kill, limits)", cgroupText(rep.Cgroups))
	w("netproxy control socket", sock+" ("+ctlState+")")
	w("transparent capture (--capture)", captureDoctorText(capt))
	w("NODE_USE_ENV_PROXY", nodeEnvProxyNote)
	if code != 0 {
		fmt.Fprintln(stdout, "\nexecwrap cannot sandbox on this host: enable unprivileged user namespaces or use a kernel with Landlock ABI >= 4.")
	}
	if rep.LandlockABI == 0 && rep.EUID == 0 {
		fmt.Fprintln(stdout, "\nLandlock is unavailable and you are root: `execwrap run` fails closed unless given --allow-degraded (namespaces, mounts, caps and seccomp without Landlock).")
	}
	return code
}

func cgroupText(c sandbox.CgroupSupport) string {
	if !c.OK {
		return "UNAVAILABLE: " + c.Note + " (no pids/memory limits; the landlock tier's timeout then relies on the init killing what it adopted)"
	}
	s := "ok, cgroup.kill=" + fmt.Sprint(c.Kill) + ", limits: " + orDash(strings.Join(c.Limits, "+"))
	if c.Note != "" {
		s += " [" + c.Note + "]"
	}
	return s
}

func probeText(p sandbox.TierProbe) string {
	s := "ok (" + p.Duration + ")"
	if !p.OK {
		s = "FAILED: " + p.Error
	}
	if len(p.Signals) > 0 {
		s += " [" + strings.Join(p.Signals, ", ") + "]"
	}
	return s
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func sortedKeys(m map[string]string) []string {
	ks := make([]string, 0, len(m))
	for k := range m {
		ks = append(ks, k)
	}
	sort.Strings(ks)
	return ks
}
