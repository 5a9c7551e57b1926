package sandbox

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// In-sandbox proxy ports. Fixed: every sandbox has its own network namespace.
const (
	sandboxHTTPPort  = 3128
	sandboxSOCKSPort = 1080
	// TimeoutExitCode is reported when the timeout killed the command.
	TimeoutExitCode = 124
)

// initEnv is the init's own environment (the command's travels on fd 3):
// the init allocates little and lives briefly, so no GC.
var initEnv = []string{"GOGC=off"}

// SetupError is an init failure before the command started. It is never a
// sandbox denial: nothing ran.
type SetupError struct {
	Tier  Tier
	Step  string
	Errno string
	Text  string
}

func (e *SetupError) Error() string {
	return fmt.Sprintf("sandbox setup failed (tier %s) at %s: %s", e.Tier, e.Step, e.Text)
}

// UnavailableError says no sandbox tier works on this host (fail closed).
type UnavailableError struct{ Causes []string }

func (e *UnavailableError) Error() string {
	return "cannot sandbox on this host: " + joinCauses(e.Causes) +
		". Fix: enable unprivileged user namespaces (user.max_user_namespaces > 0, no AppArmor userns restriction, no container seccomp profile blocking clone(CLONE_NEWUSER)) or a kernel with Landlock ABI >= 4; or run with --sandbox danger-full-access (requires approval)"
}

func joinCauses(c []string) string {
	s := ""
	for i, x := range c {
		if i > 0 {
			s += "; "
		}
		s += x
	}
	return s
}

// Run executes one attempt of s and reports what happened. A non-nil error
// means the command did not run (validation, setup or an unavailable
// sandbox); a command failure is a Result with a non-zero ExitCode.
func Run(ctx context.Context, s Spec) (Result, error) {
	if err := validateSpec(&s); err != nil {
		return Result{}, err
	}
	if !s.Kind.Confining() {
		return runUnsandboxed(ctx, s)
	}
	switch s.Tier {
	case TierNamespaces, TierLandlock:
		return runInit(ctx, s, s.Tier)
	case TierAuto, "":
		res, err := runInit(ctx, s, TierNamespaces)
		var ue *usernsError
		if !errors.As(err, &ue) {
			return res, err
		}
		causes := []string{"user namespaces unavailable (" + ue.Error() + ")"}
		if abi := LandlockABI(); abi < 4 {
			causes = append(causes, fmt.Sprintf("Landlock ABI %d < 4 (TCP connect rules need ABI 4)", abi))
			return Result{}, &UnavailableError{Causes: causes}
		}
		res, err = runInit(ctx, s, TierLandlock)
		res.Signals = append([]string{"degraded:" + causes[0]}, res.Signals...)
		return res, err
	default:
		return Result{}, fmt.Errorf("sandbox tier %q: want auto, namespaces or landlock", s.Tier)
	}
}

func validateSpec(s *Spec) error {
	if len(s.Argv) == 0 || s.Argv[0] == "" {
		return errors.New("sandbox: empty command")
	}
	if !filepath.IsAbs(s.Cwd) {
		return fmt.Errorf("sandbox: cwd %q is not absolute", s.Cwd)
	}
	if fi, err := os.Stat(s.Cwd); err != nil || !fi.IsDir() {
		return fmt.Errorf("sandbox: cwd %q is not a directory", s.Cwd)
	}
	if _, err := ParseKind(string(s.Kind)); err != nil {
		return err
	}
	if _, err := ParseNetworkMode(string(s.Network)); err != nil {
		return err
	}
	if s.Network == NetworkHost && s.Kind.Confining() {
		return fmt.Errorf("--network host needs --sandbox danger-full-access or external (got %s)", s.Kind)
	}
	if s.Network == NetworkNone && !s.Kind.Confining() {
		return fmt.Errorf("--network none needs --sandbox read-only or workspace-write (got %s)", s.Kind)
	}
	if s.Network == NetworkProxied && s.ProxyResolve == nil {
		if err := checkProxyTarget(s.Proxy); err != nil {
			return err
		}
	}
	for _, r := range s.WritableRoots {
		if !filepath.IsAbs(r) {
			return fmt.Errorf("--writable-root %q is not absolute", r)
		}
	}
	if s.ProtectedNames == nil {
		s.ProtectedNames = DefaultProtectedNames
	}
	if s.InitPath == "" {
		s.InitPath = "/proc/self/exe"
		s.InitArgs = []string{"__sandbox-init"}
	}
	return nil
}

func checkProxyTarget(p *ProxyTarget) error {
	if p == nil || p.HTTPAddr == "" || p.Token == "" || p.WriteFrame == nil {
		return errors.New("sandbox: --network proxied needs a registered execution (netproxy address, token and frame writer)")
	}
	return nil
}

// resolveProxy returns the target, asking ProxyResolve at most once: its
// failure is remembered too, since each in-sandbox listener asks again and
// a resolver may not be callable twice.
func (s *Spec) resolveProxy(ctx context.Context) (*ProxyTarget, error) {
	if s.Proxy == nil && s.ProxyResolve != nil {
		p, err := s.ProxyResolve(ctx)
		if err == nil {
			err = checkProxyTarget(p)
		}
		if err != nil {
			s.ProxyResolve = func(context.Context) (*ProxyTarget, error) { return nil, err }
			return nil, err
		}
		s.Proxy, s.ProxyResolve = p, nil
	}
	return s.Proxy, nil
}

// usernsError: cloning the init into new namespaces failed, i.e. the host
// does not give us user namespaces. Only this error degrades to Landlock.
type usernsError struct{ err error }

func (e *usernsError) Error() string {
	switch {
	case errors.Is(e.err, unix.ENOSPC):
		return "clone(CLONE_NEWUSER): ENOSPC, user.max_user_namespaces is 0 or exhausted"
	case errors.Is(e.err, unix.EPERM), errors.Is(e.err, unix.EACCES):
		return "clone(CLONE_NEWUSER): " + errnoName(e.err) + ", blocked by a container seccomp profile, kernel.unprivileged_userns_clone=0 or AppArmor (kernel.apparmor_restrict_unprivileged_userns=1)"
	}
	return "clone(CLONE_NEWUSER): " + e.err.Error()
}

func (e *usernsError) Unwrap() error { return e.err }

func runInit(ctx context.Context, s Spec, tier Tier) (res Result, err error) {
	start := time.Now()
	res.Tier = tier
	sp, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_SEQPACKET|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return res, fmt.Errorf("sandbox: control socketpair: %w", err)
	}
	parentFD := sp[0]
	childEnd := os.NewFile(uintptr(sp[1]), "sandbox-control")
	defer childEnd.Close() // early returns; closed again (harmlessly) after the start
	defer unix.Close(parentFD)

	cfg := &initConfig{
		Argv: s.Argv, Cwd: s.Cwd, Tier: tier, Kind: s.Kind, Network: s.Network,
		WritableRoots: s.WritableRoots, ProtectedNames: s.ProtectedNames,
		TmpfsSize:       tmpfsSizeOption(s.Limits.TmpfsBytes),
		RequireLandlock: os.Geteuid() == 0 && !s.AllowDegraded,
	}
	env := StripProxyEnv(s.Env)
	if err := checkFiles(s.Files); err != nil {
		return res, err
	}
	var br *bridge
	if s.Network == NetworkProxied {
		br = newBridge()
		defer br.close()
	}
	var tree peerTree // the init's pid once started: the landlock tier's bridge serves only its tree
	switch tier {
	case TierNamespaces:
		if s.Network == NetworkProxied {
			cfg.Listeners = []listenerConfig{{Name: "http", Port: sandboxHTTPPort}}
			socks := ""
			if s.Proxy == nil || s.Proxy.SOCKS5Addr != "" {
				cfg.Listeners = append(cfg.Listeners, listenerConfig{Name: "socks5", Port: sandboxSOCKSPort})
				socks = "127.0.0.1:" + strconv.Itoa(sandboxSOCKSPort)
			}
			env = ProxyEnv(env, "127.0.0.1:"+strconv.Itoa(sandboxHTTPPort), socks)
		}
		cfg.Files, env = s.Files, fileEnv(env, "/tmp", s.Files)
	case TierLandlock:
		tmp, terr := os.MkdirTemp("", "execwrap-tmp-")
		if terr != nil {
			return res, fmt.Errorf("sandbox: private TMPDIR: %w", terr)
		}
		defer os.RemoveAll(tmp)
		cfg.PrivateTmp = tmp
		env = SetEnv(env, "TMPDIR", tmp)
		if err := writeFiles(tmp, s.Files); err != nil {
			return res, err
		}
		env = fileEnv(env, tmp, s.Files)
		if s.Network == NetworkProxied {
			p, perr := s.resolveProxy(ctx)
			if perr != nil {
				return res, perr
			}
			httpAddr, socksAddr, ports, lerr := hostBridgeListeners(ctx, br, p, &tree)
			if lerr != nil {
				return res, lerr
			}
			cfg.ConnectPorts = ports
			env = ProxyEnv(env, httpAddr, socksAddr)
		}
	}
	cfg.Env = SetEnv(env, "EXECWRAP_SANDBOX", "1")

	cmd := &exec.Cmd{
		Path:       s.InitPath,
		Args:       append([]string{s.InitPath}, s.InitArgs...),
		Env:        initEnv,
		Dir:        "/",
		ExtraFiles: []*os.File{childEnd},
		WaitDelay:  2 * time.Second,
		SysProcAttr: &syscall.SysProcAttr{
			Pdeathsig: syscall.SIGKILL,
		},
	}
	if tier == TierNamespaces {
		euid, egid := os.Geteuid(), os.Getegid()
		cmd.SysProcAttr.Cloneflags = syscall.CLONE_NEWUSER | syscall.CLONE_NEWNS | syscall.CLONE_NEWPID |
			syscall.CLONE_NEWNET | syscall.CLONE_NEWIPC | syscall.CLONE_NEWUTS
		cmd.SysProcAttr.UidMappings = []syscall.SysProcIDMap{{ContainerID: euid, HostID: euid, Size: 1}}
		cmd.SysProcAttr.GidMappings = []syscall.SysProcIDMap{{ContainerID: egid, HostID: egid, Size: 1}}
		cmd.SysProcAttr.GidMappingsEnableSetgroups = false
		if euid != 0 {
			// The init runs as the real uid: it needs these to build the
			// sandbox and drops them all before the command starts.
			cmd.SysProcAttr.AmbientCaps = []uintptr{unix.CAP_SYS_ADMIN, unix.CAP_NET_ADMIN, unix.CAP_SETPCAP}
		}
	} else {
		cmd.SysProcAttr.Setpgid = true
	}
	// Own pipes instead of exec.Cmd's: the result is ready when the command
	// has exited and its output is drained, without waiting for the kernel
	// to tear the pid and network namespaces down (tens of ms), which the
	// reaping goroutine absorbs in the background.
	stdio, err := newStdio(s.Stdin, s.Stdout, s.Stderr)
	if err != nil {
		childEnd.Close()
		return res, fmt.Errorf("sandbox: stdio: %w", err)
	}
	defer stdio.finish()
	cfg.PTY = stdio.ptyConfig()
	cmd.Stdin, cmd.Stdout, cmd.Stderr = stdio.child[0], stdio.child[1], stdio.child[2]
	// The run's cgroup and the protected-name placeholders are made while
	// the init starts (both are filesystem work that would otherwise add to
	// the start-up); the config, and so the command, waits for them.
	var (
		prepLease    *placeholderLease
		cleanExit    bool // the init reported exited: it is the only process left
		earlyRemoval chan struct{}
	)
	reaped := make(chan struct{})
	var reapOnce sync.Once
	waitInit := func() error {
		err := cmd.Wait()
		reapOnce.Do(func() { close(reaped) })
		return err
	}
	// The cgroup first (the init is cloned into it), then the
	// placeholders while the init starts.
	cg, cgNote, err := newRunCgroup(s.Limits)
	if err != nil {
		childEnd.Close()
		return res, fmt.Errorf("sandbox: cgroup: %w", err)
	}
	if cgNote != "" {
		res.Signals = append(res.Signals, strings.Split(cgNote, ",")...)
	}
	prepCh := startPrep(s, tier)
	prepTaken := false
	takePrep := func() runPrep {
		p := <-prepCh
		prepTaken = true
		return p
	}
	defer func() {
		if !prepTaken {
			prepLease = takePrep().lease
		}
		// A placeholder goes only when nothing of the run can create the
		// name any more: the init reports `exited` only after it killed
		// and reaped every other process of its pid namespace (it is the
		// last one, and it runs no command code); otherwise (a failed or
		// killed run) the init must be reaped first, whose exit takes the
		// rest of the pid namespace with it.
		if prepLease != nil && cmd.Process != nil && !cleanExit {
			_ = cmd.Process.Kill()
			select {
			case <-reaped:
			case <-time.After(2 * time.Second):
			}
		}
		if earlyRemoval != nil {
			<-earlyRemoval // started at `exited`
			prepLease = nil
		}
		finishPrep(runPrep{cg: cg, lease: prepLease})
	}()
	restoreDumpable := func() {}
	if tier == TierNamespaces && os.Geteuid() != 0 {
		// Go writes the child's uid_map from this process; a non-dumpable
		// unprivileged process cannot open /proc/<child>/uid_map (its
		// /proc files belong to root). Allow it for the clone only.
		if d, derr := unix.PrctlRetInt(unix.PR_GET_DUMPABLE, 0, 0, 0, 0); derr == nil && d == 0 {
			_ = unix.Prctl(unix.PR_SET_DUMPABLE, 1, 0, 0, 0)
			restoreDumpable = func() { _ = unix.Prctl(unix.PR_SET_DUMPABLE, 0, 0, 0, 0) }
		}
	}
	// CLONE_INTO_CGROUP: born in the run's v2 cgroup, no migration (a
	// cgroup.procs write takes a global lock whose write side waits for an
	// RCU grace period, milliseconds under load). A seccomp profile that
	// refuses clone3 (Docker's) leaves the join to the init.
	joinV2 := false
	if dirFD := cg.v2DirFD(); dirFD >= 0 {
		cmd.SysProcAttr.UseCgroupFD, cmd.SysProcAttr.CgroupFD = true, dirFD
		err = cmd.Start()
		unix.Close(dirFD)
		if err != nil && cmd.Process == nil && errors.Is(err, unix.ENOSYS) {
			// An exec.Cmd starts once: retry with a copy.
			retry := &exec.Cmd{Path: cmd.Path, Args: cmd.Args, Env: cmd.Env, Dir: cmd.Dir, ExtraFiles: cmd.ExtraFiles,
				WaitDelay: cmd.WaitDelay, Stdin: cmd.Stdin, Stdout: cmd.Stdout, Stderr: cmd.Stderr}
			sys := *cmd.SysProcAttr
			sys.UseCgroupFD, sys.CgroupFD = false, 0
			retry.SysProcAttr = &sys
			cmd = retry
			joinV2 = true
			err = cmd.Start()
		}
	} else {
		err = cmd.Start()
	}
	restoreDumpable()
	if err != nil {
		childEnd.Close()
		if tier == TierNamespaces && isUsernsStartError(err) {
			return res, &usernsError{err: errors.Unwrap(err)}
		}
		return res, fmt.Errorf("sandbox: start init: %w", err)
	}
	childEnd.Close()
	stdio.closeChildEnds()
	tree.set(cmd.Process.Pid)
	// The landlock tier has no pid namespace: the init kills the command
	// and every descendant it adopted when asked (or when this side of
	// the channel closes); the cgroup, where there is one, is the sure
	// way. SIGKILL of the init follows after killGrace as a backstop.
	var killBackstop <-chan time.Time
	kill := func() {
		if cg != nil {
			cg.kill()
		}
		if tier == TierLandlock {
			// Read by the init once the command runs (queued until then;
			// before it, the backstop kills the init, nothing else exists).
			_ = ctlSend(parentFD, ctlMsg{Type: msgKill})
			return
		}
		_ = cmd.Process.Kill()
	}
	// What to hide is planned while the init starts (it needs it only
	// with the config).
	hidden, hideNotes, err := planHidden(s.HiddenPaths, keepVisible(s, cfg.PrivateTmp), osHideFS())
	if err != nil {
		_ = cmd.Process.Kill()
		_ = waitInit()
		return res, fmt.Errorf("sandbox: %w", err)
	}
	cfg.Hidden = hidden
	res.Signals = append(res.Signals, hideNotes...)
	// The init joins the v1 cgroups (and the v2 one when it was not born
	// there) itself right before it starts the command (init_linux.go),
	// through these files.
	var procFDs []int
	if cg != nil {
		fds, err := cg.openJoinFiles(joinV2)
		if err != nil {
			_ = cmd.Process.Kill()
			_ = waitInit()
			return res, fmt.Errorf("sandbox: %w", err)
		}
		procFDs = fds
		cfg.CgroupFDs = len(fds)
	}
	cfg.AwaitPrepared = cfg.Tier == TierNamespaces && s.Kind == KindWorkspaceWrite
	err = ctlSend(parentFD, ctlMsg{Type: msgConfig, Config: cfg}, procFDs...)
	for _, fd := range procFDs {
		unix.Close(fd)
	}
	if err == nil && cfg.AwaitPrepared {
		// The init builds its mounts meanwhile and waits for this only
		// before it protects the names.
		p := takePrep()
		prepLease = p.lease
		if err = p.err; err == nil {
			err = ctlSend(parentFD, ctlMsg{Type: msgPrepared})
		}
	}
	if err != nil {
		_ = cmd.Process.Kill()
		_ = waitInit()
		return res, fmt.Errorf("sandbox: send config: %w", err)
	}

	msgs := make(chan ctlRecvd, 8)
	go func() {
		defer close(msgs)
		for {
			m, fds, err := ctlRecv(parentFD)
			if err != nil {
				return
			}
			msgs <- ctlRecvd{m, fds}
		}
	}()
	waitCh := make(chan error, 1)
	go func() { waitCh <- waitInit() }()

	sv := startSupervisor(ctx, s, kill, func(sig Signal) {
		// The init has handlers, so a signal from this (ancestor)
		// namespace reaches it; it forwards to the command.
		_ = cmd.Process.Signal(syscall.Signal(sig))
	})
	defer sv.close()
	var (
		exited    *ctlMsg
		setupFail *ctlMsg
		failure   error
		waitErr   error
		waited    bool
		gotLn     int
	)
	failKill := func(err error) {
		failure = err
		kill()
		if tier == TierLandlock {
			killBackstop = time.After(killGrace)
		}
	}
	outDone, errDone, ptyDone := stdio.done[0], stdio.done[1], (<-chan struct{})(nil)
	var grace <-chan time.Time
loop:
	for {
		killed := sv.killed()
		mustReap := killed || failure != nil || setupFail != nil || exited == nil
		drained := outDone == nil && errDone == nil && ptyDone == nil
		if drained && !mustReap {
			break // the command exited and its output is complete
		}
		if msgs == nil && drained && waited {
			break
		}
		if msgs == nil && waited && !drained && grace == nil {
			// A leaked writer (landlock tier: a daemon holding stdout)
			// must not hold the result forever.
			grace = time.After(2 * time.Second)
		}
		if killed && tier == TierLandlock && killBackstop == nil && !waited {
			killBackstop = time.After(killGrace)
		}
		select {
		case <-grace:
			break loop
		case <-killBackstop:
			killBackstop = nil
			_ = cmd.Process.Kill()
		case <-sv.fired:
		case <-outDone:
			outDone = nil
		case <-errDone:
			errDone = nil
		case <-ptyDone:
			ptyDone = nil
		case r, ok := <-msgs:
			if !ok {
				msgs = nil
				continue
			}
			switch r.m.Type {
			case msgListener:
				p, perr := s.resolveProxy(ctx)
				if perr != nil {
					for _, f := range r.fds {
						unix.Close(f)
					}
					failKill(perr)
					continue
				}
				if lerr := acceptListenerFD(ctx, br, p, r.m.Name, r.fds); lerr != nil {
					failKill(lerr)
					continue
				}
				gotLn++
				if gotLn == len(cfg.Listeners) {
					if serr := ctlSend(parentFD, ctlMsg{Type: msgBridgeReady}); serr != nil {
						failKill(fmt.Errorf("sandbox: confirm bridge: %w", serr))
					}
				}
			case msgPTY:
				if len(r.fds) != 1 || cfg.PTY == nil {
					failKill(errors.New("sandbox: unexpected pty message"))
					break
				}
				d, perr := stdio.startPTY(r.fds[0])
				if perr != nil {
					failKill(perr)
					break
				}
				ptyDone = d
				r.fds = nil // owned by the relay now
			case msgSetup:
				res.LandlockABI = r.m.LandlockABI
				res.Signals = append(res.Signals, r.m.Notes...)

			case msgExited:
				m := r.m
				exited = &m
				cleanExit = tier == TierNamespaces
				if cleanExit && prepLease != nil && earlyRemoval == nil {
					// Nothing of the sandbox runs any more: overlap the
					// removal with the output drain.
					earlyRemoval = make(chan struct{})
					go func(l *placeholderLease) {
						defer close(earlyRemoval)
						l.release()
					}(prepLease)
				}
			case msgSetupFailed:
				m := r.m
				setupFail = &m
			}
			for _, f := range r.fds {
				unix.Close(f)
			}
		case waitErr = <-waitCh:
			waited = true
			waitCh = nil
			killBackstop = nil
		}
	}
	// Wake the reader (it may still block in recvmsg) and let it finish
	// before the deferred close frees the fd number.
	_ = unix.Shutdown(parentFD, unix.SHUT_RDWR)
	if msgs != nil {
		for r := range msgs {
			for _, f := range r.fds {
				unix.Close(f)
			}
		}
	}
	res.TimedOut, res.Stopped = sv.result()
	res.Signals = append(res.Signals, br.refusedSignal()...)
	if failure == nil && sv.canceled() {
		failure = ctx.Err()
	}
	res.Duration = time.Since(start)
	switch {
	case setupFail != nil:
		return res, &SetupError{Tier: tier, Step: setupFail.Step, Errno: setupFail.Errno, Text: setupFail.Text}
	case failure != nil:
		return res, failure
	case res.TimedOut:
		res.ExitCode, res.Signal = TimeoutExitCode, "SIGKILL"
	case res.Stopped:
		res.ExitCode, res.Signal = 128+int(unix.SIGKILL), "SIGKILL"
	case exited != nil:
		res.ExitCode, res.Signal = exited.Code, exited.Signal
	default:
		res.ExitCode, res.Signal = exitFromState(cmd.ProcessState, waitErr)
		res.Signals = append(res.Signals, "init_died_without_report")
	}
	return res, nil
}

// runPrep is the filesystem work done while the init starts.
type runPrep struct {
	cg    *runCgroup
	lease *placeholderLease
	err   error // the placeholders could not be made: the run fails closed
}

// startPrep creates, under workspace-write in the namespaces tier, a
// placeholder for every missing protected name: an empty mode-0 directory
// the init mounts read-only over, so the command cannot create that name
// (a planted .git would run code in the user's next host `git status`).
// finishPrep releases them (placeholders_linux.go: the last run removes
// them).
func startPrep(s Spec, tier Tier) <-chan runPrep {
	ch := make(chan runPrep, 1)
	if tier != TierNamespaces || s.Kind != KindWorkspaceWrite {
		ch <- runPrep{}
		return ch
	}
	go func() {
		l, err := acquirePlaceholders(protectedRoots(s), s.ProtectedNames,
			func(base string) { startJanitor(s.InitPath, s.InitArgs, base) })
		ch <- runPrep{lease: l, err: err}
	}()
	return ch
}

// finishPrep kills whatever is left in the cgroup, then removes the
// placeholders and the cgroup side by side.
func finishPrep(p runPrep) {
	if p.cg != nil {
		p.cg.kill()
	}
	var wg sync.WaitGroup
	if p.lease != nil {
		wg.Add(1)
		go func() {
			defer wg.Done()
			p.lease.release()
		}()
	}
	if p.cg != nil {
		p.cg.remove()
	}
	wg.Wait()
}

// killGrace is how long the landlock tier's init gets to kill the command
// and its descendants before it is killed itself.
const killGrace = time.Second

// tmpfsSizeOption is a tmpfs size= value in bytes, "" for no limit.
func tmpfsSizeOption(n int64) string {
	if n <= 0 {
		return ""
	}
	return strconv.FormatInt(n, 10)
}

// protectedRoots are the writable roots whose protected names the init
// re-binds read-only (the cwd under workspace-write, plus --writable-root).
func protectedRoots(s Spec) []string {
	roots := append([]string{s.Cwd}, s.WritableRoots...)
	return dedupeNested(roots)
}

// supervisor turns the timeout, the caller's context, Spec.Stop and
// forwarded signals into kill and signal calls for both launch paths, on a
// goroutine of its own; fired wakes the caller's loop after each kill.
type supervisor struct {
	fired                        chan struct{}
	done                         chan struct{}
	wg                           sync.WaitGroup
	mu                           sync.Mutex
	timedOut, stopped, cancelled bool
}

func startSupervisor(ctx context.Context, s Spec, kill func(), signal func(Signal)) *supervisor {
	sv := &supervisor{fired: make(chan struct{}, 1), done: make(chan struct{})}
	timeout, stopTimer := timeoutAfter(s.Timeout)
	sv.wg.Add(1)
	go func() {
		defer sv.wg.Done()
		defer stopTimer()
		ctxDone, stop := ctx.Done(), s.Stop
		for {
			var flag *bool
			select {
			case <-sv.done:
				return
			case <-timeout:
				timeout, flag = nil, &sv.timedOut
			case <-ctxDone:
				ctxDone, flag = nil, &sv.cancelled
			case <-stop:
				stop, flag = nil, &sv.stopped
			case sig := <-s.Signals:
				signal(sig)
				continue
			}
			sv.mu.Lock()
			*flag = true
			sv.mu.Unlock()
			kill()
			select {
			case sv.fired <- struct{}{}:
			default:
			}
		}
	}()
	return sv
}

func (sv *supervisor) killed() bool {
	sv.mu.Lock()
	defer sv.mu.Unlock()
	return sv.timedOut || sv.stopped || sv.cancelled
}

func (sv *supervisor) result() (timedOut, stopped bool) {
	sv.mu.Lock()
	defer sv.mu.Unlock()
	return sv.timedOut, sv.stopped
}

func (sv *supervisor) canceled() bool {
	sv.mu.Lock()
	defer sv.mu.Unlock()
	return sv.cancelled
}

// close stops the goroutine (it must stop reading the shared signal
// channel when the attempt ends).
func (sv *supervisor) close() {
	select {
	case <-sv.done:
	default:
		close(sv.done)
	}
	sv.wg.Wait()
}

type ctlRecvd struct {
	m   ctlMsg
	fds []int
}

func exitFromState(ps *os.ProcessState, waitErr error) (int, string) {
	if ps == nil {
		return 125, ""
	}
	if ws, ok := ps.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		return 128 + int(ws.Signal()), unix.SignalName(ws.Signal())
	}
	return ps.ExitCode(), ""
}

func isUsernsStartError(err error) bool {
	return errors.Is(err, unix.EPERM) || errors.Is(err, unix.EACCES) || errors.Is(err, unix.ENOSPC) ||
		errors.Is(err, unix.EINVAL) || errors.Is(err, unix.EUSERS)
}

// acceptListenerFD validates a listener fd sent by the init (exactly one fd,
// a listening TCP socket bound to 127.0.0.1 on a non-zero port) and starts
// relaying it.
func acceptListenerFD(ctx context.Context, br *bridge, p *ProxyTarget, name string, fds []int) error {
	if len(fds) != 1 {
		return fmt.Errorf("sandbox: listener %q: want exactly one fd, got %d", name, len(fds))
	}
	fd := fds[0]
	if br == nil {
		return fmt.Errorf("sandbox: unexpected listener %q without a proxied network", name)
	}
	upstream := ""
	switch name {
	case "http":
		upstream = p.HTTPAddr
	case "socks5":
		upstream = p.SOCKS5Addr
	}
	if upstream == "" && name == "socks5" {
		// netproxy has no SOCKS5 listener: leave the in-sandbox port closed.
		return nil
	}
	if upstream == "" {
		return fmt.Errorf("sandbox: listener %q has no netproxy upstream", name)
	}
	if v, err := unix.GetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_ACCEPTCONN); err != nil || v != 1 {
		return fmt.Errorf("sandbox: listener %q is not listening", name)
	}
	if v, err := unix.GetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_TYPE); err != nil || v != unix.SOCK_STREAM {
		return fmt.Errorf("sandbox: listener %q is not a stream socket", name)
	}
	sa, err := unix.Getsockname(fd)
	in4, ok := sa.(*unix.SockaddrInet4)
	if err != nil || !ok || netip.AddrFrom4(in4.Addr) != netip.AddrFrom4([4]byte{127, 0, 0, 1}) || in4.Port == 0 {
		return fmt.Errorf("sandbox: listener %q is not bound to 127.0.0.1:<port>", name)
	}
	dup, err := unix.FcntlInt(uintptr(fd), unix.F_DUPFD_CLOEXEC, 0)
	if err != nil {
		return err
	}
	f := os.NewFile(uintptr(dup), "sandbox-listener-"+name)
	l, err := net.FileListener(f)
	f.Close()
	if err != nil {
		return fmt.Errorf("sandbox: listener %q: %w", name, err)
	}
	br.serve(ctx, l, upstream, p)
	return nil
}

// hostBridgeListeners opens per-execution listeners on ephemeral host
// loopback ports (landlock tier and unsandboxed proxied runs). Any host
// process can connect to them, so each connection is served only when the
// peer socket belongs to tree (the execution's own processes): the bridge
// must never lend the execution's identity to an unrelated process.
func hostBridgeListeners(ctx context.Context, br *bridge, p *ProxyTarget, tree *peerTree) (httpAddr, socksAddr string, ports []uint16, err error) {
	var lc net.ListenConfig
	hl, err := lc.Listen(ctx, "tcp4", "127.0.0.1:0")
	if err != nil {
		return "", "", nil, fmt.Errorf("sandbox: bridge listener: %w", err)
	}
	br.serveFiltered(ctx, hl, p.HTTPAddr, p, tree.owns)
	httpAddr = hl.Addr().String()
	ports = append(ports, uint16(hl.Addr().(*net.TCPAddr).Port))
	if p.SOCKS5Addr != "" {
		sl, err := lc.Listen(ctx, "tcp4", "127.0.0.1:0")
		if err != nil {
			return "", "", nil, fmt.Errorf("sandbox: bridge listener: %w", err)
		}
		br.serveFiltered(ctx, sl, p.SOCKS5Addr, p, tree.owns)
		socksAddr = sl.Addr().String()
		ports = append(ports, uint16(sl.Addr().(*net.TCPAddr).Port))
	}
	return httpAddr, socksAddr, ports, nil
}

func isTerminal(r any) bool {
	f, ok := r.(*os.File)
	if !ok {
		return false
	}
	_, err := unix.IoctlGetTermios(int(f.Fd()), unix.TCGETS)
	return err == nil
}

// runUnsandboxed runs the command directly (danger-full-access, external,
// or an approved escalation). With --network proxied the proxy variables
// point at a host bridge that still attributes connections (only those of
// the command's own process tree); nothing enforces that the command uses
// it.
func runUnsandboxed(ctx context.Context, s Spec) (Result, error) {
	start := time.Now()
	res := Result{Tier: TierNone}
	env := s.Env
	var (
		tree peerTree
		br   *bridge
	)
	if s.Network == NetworkProxied {
		p, err := s.resolveProxy(ctx)
		if err != nil {
			return res, err
		}
		br = newBridge()
		defer br.close()
		httpAddr, socksAddr, _, err := hostBridgeListeners(ctx, br, p, &tree)
		if err != nil {
			return res, err
		}
		env = ProxyEnv(env, httpAddr, socksAddr)
		res.Signals = append(res.Signals, "network_not_enforced")
	}
	env, removeFiles, err := privateFiles(env, s.Files)
	if err != nil {
		return res, err
	}
	defer removeFiles()
	path, err := lookPath(s.Argv[0], env)
	if err != nil {
		fmt.Fprintf(stderrOf(s), "execwrap: %v\n", err)
		res.ExitCode = 127
		return res, nil
	}
	cmd := &exec.Cmd{Path: path, Args: s.Argv, Env: env, Dir: s.Cwd, Stdin: s.Stdin, Stdout: s.Stdout, Stderr: s.Stderr,
		WaitDelay: 2 * time.Second, SysProcAttr: &syscall.SysProcAttr{Setpgid: !isTerminal(s.Stdin), Pdeathsig: syscall.SIGKILL}}
	if err := cmd.Start(); err != nil {
		fmt.Fprintf(stderrOf(s), "execwrap: cannot start %s: %v\n", s.Argv[0], err)
		res.ExitCode = 126
		return res, nil
	}
	tree.set(cmd.Process.Pid)
	pgid := cmd.Process.Pid
	group := cmd.SysProcAttr.Setpgid
	kill := func() {
		if group {
			_ = unix.Kill(-pgid, unix.SIGKILL)
		}
		_ = cmd.Process.Kill()
	}
	waitCh := make(chan error, 1)
	go func() { waitCh <- cmd.Wait() }()
	sv := startSupervisor(ctx, s, kill, func(sig Signal) {
		if group {
			_ = unix.Kill(-pgid, syscall.Signal(sig))
		} else {
			_ = cmd.Process.Signal(syscall.Signal(sig))
		}
	})
	waitErr := <-waitCh
	sv.close()
	if group {
		_ = unix.Kill(-pgid, unix.SIGKILL) // leftovers of the group
	}
	res.TimedOut, res.Stopped = sv.result()
	res.Signals = append(res.Signals, br.refusedSignal()...)
	res.Duration = time.Since(start)
	if res.TimedOut {
		res.ExitCode, res.Signal = TimeoutExitCode, "SIGKILL"
		return res, nil
	}
	res.ExitCode, res.Signal = exitFromState(cmd.ProcessState, waitErr)
	return res, ctx.Err()
}

func stderrOf(s Spec) interface{ Write([]byte) (int, error) } {
	if s.Stderr != nil {
		return s.Stderr
	}
	return os.Stderr
}

// timeoutAfter returns a channel that fires after d, or never when d <= 0,
// and the function that releases its timer.
func timeoutAfter(d time.Duration) (<-chan time.Time, func()) {
	if d <= 0 {
		return nil, func() {}
	}
	t := time.NewTimer(d)
	return t.C, func() { t.Stop() }
}
