package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"github.com/netproxy/netproxy/attribution"
	"github.com/netproxy/netproxy/sandbox"
	"github.com/netproxy/netproxy/sandbox/netctl"
	"github.com/netproxy/netproxy/sandbox/orchestrator"
)

// attempt runs the command once (the orchestrator's AttemptFunc).
func (r *runner) attempt(ctx context.Context, sandboxed bool) (orchestrator.AttemptResult, error) {
	var ar orchestrator.AttemptResult
	env, sandboxed, gitNotes := r.gitGuard(ctx, sandboxed)
	kind := r.inv.Kind
	network := sandbox.NetworkMode(r.opts.network)
	var keptSandbox bool
	if !sandboxed && kind.Confining() {
		if network == sandbox.NetworkNone {
			// An explicit --network none is the operator's limit, not the
			// sandbox's: only the sandbox can enforce it, so a bypassing
			// rule or an escalation never turns it into host networking.
			keptSandbox = true
		} else {
			// An approved escalation or a bypassing allow rule: no sandbox.
			// A proxied network stays proxied (attributed, not enforced).
			kind = sandbox.KindDangerFullAccess
		}
	}
	outBuf, errBuf := newCappedBuffer(r.opts.maxOutput), newCappedBuffer(r.opts.maxOutput)
	kind, writable := workspaceRoots(kind, r.inv.Cwd, r.inv.BaseCwd, r.opts.writableRoots)
	waitHidden := func() ([]string, error) { return nil, nil }
	if kind.Confining() {
		waitHidden = r.startHiddenPaths(ctx)
	}
	spec := sandbox.Spec{
		Argv: r.inv.HandlerArgv, Cwd: r.inv.Cwd, Env: env,
		Kind: kind, Network: network, Tier: sandbox.Tier(r.opts.tier),
		WritableRoots: writable,
		Stdin:         r.stdin, Timeout: r.opts.timeout, Signals: r.signals,
		Limits: r.opts.limits, AllowDegraded: r.opts.allowDegraded,
	}
	if r.opts.json {
		spec.Stdout, spec.Stderr = outBuf, errBuf
	} else {
		spec.Stdout, spec.Stderr = io.MultiWriter(r.stdout, outBuf), io.MultiWriter(r.stderr, errBuf)
	}

	var (
		collected = make(chan struct{})
		mu        sync.Mutex
		denials   []orchestrator.NetworkDenial
		byUser    bool
	)
	close(collected)
	var (
		reg      netctl.Registration
		regCh    chan regOutcome
		consumed bool
	)
	evCtx, evCancel := context.WithCancel(ctx)
	defer evCancel()
	if network == sandbox.NetworkProxied {
		// Register and subscribe while the sandbox is being built; the
		// command starts only after ProxyResolve returned, so the event
		// stream is live before any request can be made.
		regCh = make(chan regOutcome, 1)
		go func() { regCh <- r.register(ctx, evCtx) }()
		// Credential placeholders and the CA bundle must be in the
		// command's environment before the sandbox starts
		// (docs/credentials.md): wait for the registration.
		o := <-regCh
		regCh <- o
		applyCredentials(&spec, o.reg)
		stop := make(chan struct{})
		spec.Stop = stop
		spec.ProxyResolve = func(rctx context.Context) (*sandbox.ProxyTarget, error) {
			var o regOutcome
			select {
			case o = <-regCh:
			case <-rctx.Done():
				return nil, rctx.Err()
			}
			consumed = true
			if o.err != nil {
				return nil, fmt.Errorf("--network proxied: %w", o.err)
			}
			reg = o.reg
			collected = make(chan struct{})
			go func() {
				defer close(collected)
				var once sync.Once
				for ev := range o.events {
					mu.Lock()
					switch ev.Type {
					case attribution.EventDeniedByUser:
						byUser = true
						once.Do(func() { close(stop) })
					case attribution.EventNetworkDecision, attribution.EventDeniedByPolicy:
						if ev.Decision != "allow" && ev.Host != "" {
							denials = appendDenial(denials, orchestrator.NetworkDenial{Host: ev.Host, Port: ev.Port,
								Protocol: ev.Protocol, Reason: ev.Reason, Source: ev.Source, Decision: ev.Decision})
						}
					}
					mu.Unlock()
				}
			}()
			return &sandbox.ProxyTarget{
				HTTPAddr: reg.HTTPProxy, SOCKS5Addr: reg.SOCKS5Proxy, Token: reg.Token,
				WriteFrame: attribution.WriteFrame,
			}, nil
		}
	}

	var (
		res sandbox.Result
		err error
	)
	spec.HiddenPaths, err = waitHidden()
	if err == nil {
		res, err = sandbox.Run(ctx, spec)
	}
	if network == sandbox.NetworkProxied {
		if !consumed {
			// The sandbox failed before it needed the proxy: finish and
			// undo the registration.
			if o := <-regCh; o.err == nil {
				reg = o.reg
			}
		}
		if reg.ExecutionID != "" {
			ar.ExecutionID = reg.ExecutionID
			// Events of this execution end with execution_ended after the
			// DELETE; give the stream a moment so late decisions count.
			uctx, ucancel := context.WithTimeout(context.Background(), netctl.QuickTimeout)
			_ = r.client.Unregister(uctx, reg.ExecutionID)
			ucancel()
			// The denials decide nothing after a success and are only
			// printed with --json: skip the wait for the stream's end then.
			if err != nil || res.ExitCode != 0 || r.opts.json {
				select {
				case <-collected:
				case <-time.After(2 * time.Second):
				}
			}
		}
	}
	if err != nil {
		return ar, err
	}
	mu.Lock()
	ar.NetworkDenials, ar.DeniedByUser = denials, byUser
	mu.Unlock()
	if ar.DeniedByUser {
		res.Signals = append(res.Signals, "denied_by_user")
	}
	if keptSandbox {
		res.Signals = append(res.Signals, "sandbox_kept_for_network_none")
	}
	res.Signals = append(res.Signals, gitNotes...)
	ar.Result = res
	ar.Stdout, ar.Stderr = outBuf.Bytes(), errBuf.Bytes()
	return ar, nil
}

// workspaceRoots keeps the writable root of workspace-write on the
// workspace (the base cwd), wherever a tool call's workdir points: the
// sandbox makes its own cwd writable, so a workdir other than the base cwd
// runs as read-only with the workspace and the --writable-root folders as
// the writable roots. A model's workdir never chooses what is writable.
func workspaceRoots(kind sandbox.Kind, cwd, base string, extra []string) (sandbox.Kind, []string) {
	if kind != sandbox.KindWorkspaceWrite || filepath.Clean(cwd) == filepath.Clean(base) {
		return kind, extra
	}
	return sandbox.KindReadOnly, append([]string{filepath.Clean(base)}, extra...)
}

type regOutcome struct {
	reg    netctl.Registration
	events <-chan attribution.Event
	err    error
}

// register creates the execution and opens its event stream (on evCtx, so
// the stream ends with the attempt). A failure after registering
// unregisters again.
func (r *runner) register(ctx, evCtx context.Context) regOutcome {
	rctx, rcancel := context.WithTimeout(ctx, netctl.QuickTimeout)
	defer rcancel()
	reg, err := r.client.Register(rctx, attribution.ExecutionSpec{
		SessionID: r.opts.session, EnvironmentID: r.opts.envID, TurnID: r.opts.turnID,
		Command: r.inv.HandlerArgv, Cwd: r.inv.Cwd, ApprovalPolicy: r.inv.Policy.String(),
		Network: r.opts.netPolicy,
	})
	if err != nil {
		return regOutcome{err: err}
	}
	for _, n := range reg.NetworkNotes {
		fmt.Fprintf(r.stderr, "execwrap run: note: %s\n", n)
	}
	events, err := r.client.Events(evCtx, reg.ExecutionID)
	if err != nil {
		uctx, ucancel := context.WithTimeout(context.Background(), netctl.QuickTimeout)
		_ = r.client.Unregister(uctx, reg.ExecutionID)
		ucancel()
		return regOutcome{err: fmt.Errorf("event stream: %w", err)}
	}
	return regOutcome{reg: reg, events: events}
}

func appendDenial(ds []orchestrator.NetworkDenial, d orchestrator.NetworkDenial) []orchestrator.NetworkDenial {
	for _, x := range ds {
		if x == d {
			return ds
		}
	}
	return append(ds, d)
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

// cappedBuffer keeps the first max bytes written and accepts (drops) the
// rest, so a chatty command never blocks on a full pipe.
type cappedBuffer struct {
	mu  sync.Mutex
	max int
	buf []byte
}

func newCappedBuffer(max int) *cappedBuffer { return &cappedBuffer{max: max} }

func (c *cappedBuffer) Write(p []byte) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if room := c.max - len(c.buf); room > 0 {
		n := min(room, len(p))
		c.buf = append(c.buf, p[:n]...)
	}
	return len(p), nil
}

func (c *cappedBuffer) Bytes() []byte {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]byte(nil), c.buf...)
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
			ControlSocket      string `json:"control_socket"`
			ControlSocketState string `json:"control_socket_state"`
		}{rep, sock, ctlState})
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
