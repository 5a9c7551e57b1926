package orchestrator

import (
	"context"
	"errors"
	"fmt"
	"io"
	"path/filepath"
	"sync"
	"time"

	"github.com/netproxy/netproxy/attribution"
	"github.com/netproxy/netproxy/execcore"
	"github.com/netproxy/netproxy/sandbox"
	"github.com/netproxy/netproxy/sandbox/netctl"
)

// Control is the part of netproxy's control API an attempt uses
// (*netctl.Client).
type Control interface {
	Register(ctx context.Context, spec attribution.ExecutionSpec) (netctl.Registration, error)
	Events(ctx context.Context, id string) (<-chan attribution.Event, error)
	Unregister(ctx context.Context, id string) error
	SecretPaths(ctx context.Context) ([]string, error)
}

// Attempter runs one attempt of a command as a run's flags describe it;
// Run is a Plan's AttemptFunc. It decides what an unsandboxed attempt
// still keeps (escalatedKind, gitGuard), registers the execution with
// netproxy for a proxied network and collects its denials.
type Attempter struct {
	Argv    []string
	Env     []string
	Cwd     string
	BaseCwd string // the workspace: --cwd or the current directory
	Kind    sandbox.Kind
	Network sandbox.NetworkMode
	Tier    sandbox.Tier
	// Capture and CaptureRequired are sandbox.Spec's (transparent capture).
	Capture, CaptureRequired bool
	WritableRoots            []string
	Limits                   sandbox.Limits
	AllowDegraded            bool
	Timeout                  time.Duration
	Signals                  <-chan sandbox.Signal
	Requirement              execcore.Requirement // a rule's sandbox bypass is checked against git (gitGuard)

	Stdin          io.Reader
	Stdout, Stderr io.Writer // the caller's output, written live; nil: captured only
	MaxOutput      int       // bytes of each output kept in the AttemptResult
	WaitDenials    bool      // wait for the event stream's end even after a success (the denials are printed)

	Control   Control
	Execution attribution.ExecutionSpec // what a proxied attempt registers
	OwnHidden []string                  // paths hidden without asking netproxy
	Notes     io.Writer                 // "execwrap run: note: …" lines
}

// escalatedKind is the sandbox an attempt runs in. An approved escalation
// or a bypassing allow rule runs without one (a proxied network stays
// proxied: attributed, not enforced), except under an explicit --network
// none: that is the operator's limit, not the sandbox's, and only the
// sandbox can enforce it, so it never turns into host networking.
func escalatedKind(kind sandbox.Kind, network sandbox.NetworkMode, sandboxed bool) (sandbox.Kind, bool) {
	if sandboxed || !kind.Confining() {
		return kind, false
	}
	if network == sandbox.NetworkNone {
		return kind, true
	}
	return sandbox.KindDangerFullAccess, false
}

// WorkspaceRoots keeps the writable root of workspace-write on the
// workspace (the base cwd), wherever a tool call's workdir points: the
// sandbox makes its own cwd writable, so a workdir other than the base cwd
// runs as read-only with the workspace and the --writable-root folders as
// the writable roots. A model's workdir never chooses what is writable.
func WorkspaceRoots(kind sandbox.Kind, cwd, base string, extra []string) (sandbox.Kind, []string) {
	if kind != sandbox.KindWorkspaceWrite || filepath.Clean(cwd) == filepath.Clean(base) {
		return kind, extra
	}
	return sandbox.KindReadOnly, append([]string{filepath.Clean(base)}, extra...)
}

// Run runs the command once, sandboxed or not.
func (a *Attempter) Run(ctx context.Context, sandboxed bool) (AttemptResult, error) {
	var ar AttemptResult
	env, sandboxed, gitNotes := a.gitGuard(ctx, sandboxed)
	kind, keptSandbox := escalatedKind(a.Kind, a.Network, sandboxed)
	outBuf, errBuf := newCappedBuffer(a.MaxOutput), newCappedBuffer(a.MaxOutput)
	kind, writable := WorkspaceRoots(kind, a.Cwd, a.BaseCwd, a.WritableRoots)
	waitHidden := func() ([]string, error) { return nil, nil }
	if kind.Confining() {
		waitHidden = a.startHiddenPaths(ctx)
	}
	spec := sandbox.Spec{
		Argv: a.Argv, Cwd: a.Cwd, Env: env,
		Kind: kind, Network: a.Network, Tier: a.Tier,
		WritableRoots: writable,
		Stdin:         a.Stdin, Timeout: a.Timeout, Signals: a.Signals,
		Limits: a.Limits, AllowDegraded: a.AllowDegraded,
		Capture: a.Capture, CaptureRequired: a.CaptureRequired,
		Stdout: teeTo(a.Stdout, outBuf), Stderr: teeTo(a.Stderr, errBuf),
	}
	evCtx, evCancel := context.WithCancel(ctx)
	defer evCancel()
	var ns *netSession
	if a.Network == sandbox.NetworkProxied {
		ns = a.startNetwork(ctx, evCtx, &spec)
	}
	var (
		res sandbox.Result
		err error
	)
	spec.HiddenPaths, err = waitHidden()
	if err == nil {
		res, err = sandbox.Run(ctx, spec)
	}
	if ns != nil {
		ar.ExecutionID = ns.finish(err != nil || res.ExitCode != 0 || a.WaitDenials)
	}
	if err != nil {
		return ar, err
	}
	ar.NetworkDenials, ar.DeniedByUser = ns.outcome()
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

func teeTo(live io.Writer, capture io.Writer) io.Writer {
	if live == nil {
		return capture
	}
	return io.MultiWriter(live, capture)
}

// gitGuard applies SPEC §6.5 to a command that names git: it inspects the
// repositories the command's git can reach and returns the command's
// environment with every driver their own configuration defines
// neutralised (sandboxed or not). A rule's bypass of the sandbox is refused
// — the command runs sandboxed — when a repository's configuration names a
// program or could not be inspected: failing closed, since an override
// only covers what the inspection saw.
func (a *Attempter) gitGuard(ctx context.Context, sandboxed bool) (env []string, stillSandboxed bool, notes []string) {
	env = a.Env
	if !sandbox.MentionsGit(a.Argv) {
		return env, sandboxed, nil
	}
	roots := append([]string{a.BaseCwd}, a.WritableRoots...)
	g, err := sandbox.InspectGit(ctx, env, a.Cwd, roots)
	if withCfg, cerr := sandbox.WithGitConfig(env, g.Overrides); cerr == nil {
		env = withCfg
	} else if err == nil {
		err = cerr
	}
	bypass := !sandboxed && a.Kind.Confining() &&
		a.Requirement.Kind == execcore.Skip && a.Requirement.BypassSandbox
	if !bypass {
		return env, sandboxed, nil
	}
	switch {
	case err != nil:
		fmt.Fprintf(a.Notes, "execwrap run: note: the rule's sandbox bypass is refused, the repositories could not be inspected: %v\n", err)
		return env, true, []string{"git_bypass_refused:uninspected"}
	case len(g.Programs) > 0:
		fmt.Fprintf(a.Notes, "execwrap run: note: the rule's sandbox bypass is refused: repository configuration names a program (%s); running sandboxed\n", g.Programs[0])
		return env, true, []string{"git_bypass_refused:" + g.Programs[0]}
	}
	return env, sandboxed, nil
}

// startHiddenPaths asks netproxy for its secret paths in the background
// (overlapping the registration) and returns the wait for the full list.
// netproxy not running is no error (a --network none run, say): the
// sandbox still hides OwnHidden. Any other failure fails the run closed: a
// sandbox must not start without knowing what to hide.
func (a *Attempter) startHiddenPaths(ctx context.Context) func() ([]string, error) {
	type answer struct {
		paths []string
		err   error
	}
	ch := make(chan answer, 1)
	go func() {
		qctx, cancel := context.WithTimeout(ctx, netctl.QuickTimeout)
		defer cancel()
		p, err := a.Control.SecretPaths(qctx)
		ch <- answer{p, err}
	}()
	own := append([]string(nil), a.OwnHidden...)
	return func() ([]string, error) {
		r := <-ch
		if errors.Is(r.err, netctl.ErrUnreachable) {
			return own, nil
		}
		if r.err != nil {
			return nil, fmt.Errorf("cannot learn which paths hold netproxy's secrets (GET secret-paths): %w", r.err)
		}
		return append(own, r.paths...), nil
	}
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
