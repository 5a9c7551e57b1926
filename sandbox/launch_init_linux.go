package sandbox

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// launch is one attempt of a sandboxed command through the init
// (`__sandbox-init`). Its phases run in order, each a method:
//
//	prepare    control channel, the init's config and environment, the
//	           init's command and stdio, the run's cgroup (launch_init_linux.go)
//	clone      start the init in its namespaces / cgroup
//	handshake  what to hide, cgroup join files, config, placeholders ready
//	supervise  the message loop until the command exited and its output
//	           is drained (launch_loop_linux.go)
//	collect    the Result from what the loop saw
//
// Whatever a phase set up is undone by exit, in reverse order.
type launch struct {
	ctx   context.Context
	s     Spec
	tier  Tier
	start time.Time
	res   Result
	undo  []func() // run by exit, last first

	parentFD int                              // our end of the control channel
	childEnd *os.File                         // the init's end (fd 3 there)
	send     func(m ctlMsg, fds ...int) error // to the init; a fake in tests
	cfg      *initConfig
	br       *bridge   // proxied network only
	capt     *capturer // transparent capture, once its sockets arrived
	tree     peerTree  // the init's pid once started: the landlock tier's bridge serves only its tree
	cmd      *exec.Cmd
	stdio    *stdio
	sv       *supervisor

	cg     *runCgroup
	joinV2 bool // the init joins the v2 cgroup itself (no CLONE_INTO_CGROUP)

	// The protected-name placeholders are made while the init starts
	// (startPrep); the config, and so the command, waits for them.
	prepCh       <-chan runPrep
	prepTaken    bool
	prepLease    *placeholderLease
	cleanExit    bool          // the init reported exited: it is the only process left
	earlyRemoval chan struct{} // the placeholders' removal started at `exited`
	reaped       chan struct{}
	reapOnce     sync.Once
}

func runInit(ctx context.Context, s Spec, tier Tier) (Result, error) {
	l := &launch{ctx: ctx, s: s, tier: tier, start: time.Now(), parentFD: -1, reaped: make(chan struct{})}
	l.res.Tier = tier
	defer l.exit()
	if err := l.prepare(); err != nil {
		return l.res, err
	}
	if err := l.clone(); err != nil {
		return l.res, err
	}
	if err := l.handshake(); err != nil {
		return l.res, err
	}
	return l.collect(l.supervise())
}

// onExit registers an undo step; exit runs them last first.
func (l *launch) onExit(f func()) { l.undo = append(l.undo, f) }

func (l *launch) exit() {
	for i := len(l.undo) - 1; i >= 0; i-- {
		l.undo[i]()
	}
}

// prepare builds everything the init needs before it is cloned.
func (l *launch) prepare() error {
	sp, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_SEQPACKET|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("sandbox: control socketpair: %w", err)
	}
	l.parentFD, l.childEnd = sp[0], os.NewFile(uintptr(sp[1]), "sandbox-control")
	l.onExit(func() { l.childEnd.Close() }) // early returns; closed (harmlessly) again after the start
	l.onExit(func() { unix.Close(l.parentFD) })
	l.send = func(m ctlMsg, fds ...int) error { return ctlSend(l.parentFD, m, fds...) }
	s := &l.s
	l.cfg = &initConfig{
		Argv: s.Argv, Cwd: s.Cwd, Tier: l.tier, Kind: s.Kind, Network: s.Network,
		WritableRoots: s.WritableRoots, ProtectedNames: s.ProtectedNames,
		TmpfsSize:       tmpfsSizeOption(s.Limits.TmpfsBytes),
		RequireLandlock: os.Geteuid() == 0 && !s.AllowDegraded,
	}
	if err := checkFiles(s.Files); err != nil {
		return err
	}
	if s.Network == NetworkProxied {
		l.br = newBridge()
		l.onExit(l.br.close)
	}
	env, err := l.tierEnv(StripProxyEnv(s.Env))
	if err != nil {
		return err
	}
	l.cfg.Env = SetEnv(env, "EXECWRAP_SANDBOX", "1")
	if err := l.prepareCommand(); err != nil {
		return err
	}
	return l.prepareCgroup()
}

// tierEnv adds to the command's environment what its tier provides: the
// in-sandbox proxy listeners and /tmp files (namespaces), or a private
// TMPDIR, the files in it and host bridge listeners (landlock).
func (l *launch) tierEnv(env []string) ([]string, error) {
	s, cfg := &l.s, l.cfg
	if l.tier == TierNamespaces {
		if s.Network == NetworkProxied {
			cfg.Listeners = []listenerConfig{{Name: "http", Port: sandboxHTTPPort}}
			socks := ""
			if s.Proxy == nil || s.Proxy.SOCKS5Addr != "" {
				cfg.Listeners = append(cfg.Listeners, listenerConfig{Name: "socks5", Port: sandboxSOCKSPort})
				socks = "127.0.0.1:" + strconv.Itoa(sandboxSOCKSPort)
			}
			env = ProxyEnv(env, "127.0.0.1:"+strconv.Itoa(sandboxHTTPPort), socks)
			if s.Capture {
				cfg.Capture = &captureConfig{Port: capturePort}
			}
		}
		cfg.Files = s.Files
		return fileEnv(env, "/tmp", s.Files), nil
	}
	if l.tier != TierLandlock {
		return env, nil
	}
	tmp, err := os.MkdirTemp("", "execwrap-tmp-")
	if err != nil {
		return nil, fmt.Errorf("sandbox: private TMPDIR: %w", err)
	}
	l.onExit(func() { os.RemoveAll(tmp) })
	cfg.PrivateTmp = tmp
	env = SetEnv(env, "TMPDIR", tmp)
	if err := writeFiles(tmp, s.Files); err != nil {
		return nil, err
	}
	env = fileEnv(env, tmp, s.Files)
	if s.Network != NetworkProxied {
		return env, nil
	}
	if s.Capture {
		// No network namespace here to capture in (docs/sandbox.md).
		l.res.Signals = append(l.res.Signals, "capture_unavailable:landlock_tier")
	}
	p, err := s.resolveProxy(l.ctx)
	if err != nil {
		return nil, err
	}
	httpAddr, socksAddr, ports, err := hostBridgeListeners(l.ctx, l.br, p, &l.tree)
	if err != nil {
		return nil, err
	}
	cfg.ConnectPorts = ports
	return ProxyEnv(env, httpAddr, socksAddr), nil
}

// prepareCommand builds the init's exec.Cmd and its standard files.
func (l *launch) prepareCommand() error {
	s := &l.s
	l.cmd = &exec.Cmd{
		Path:        s.InitPath,
		Args:        append([]string{s.InitPath}, s.InitArgs...),
		Env:         initEnv,
		Dir:         "/",
		ExtraFiles:  []*os.File{l.childEnd},
		WaitDelay:   2 * time.Second,
		SysProcAttr: &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL},
	}
	if l.tier == TierNamespaces {
		euid, egid := os.Geteuid(), os.Getegid()
		sys := l.cmd.SysProcAttr
		sys.Cloneflags = syscall.CLONE_NEWUSER | syscall.CLONE_NEWNS | syscall.CLONE_NEWPID |
			syscall.CLONE_NEWNET | syscall.CLONE_NEWIPC | syscall.CLONE_NEWUTS
		sys.UidMappings = []syscall.SysProcIDMap{{ContainerID: euid, HostID: euid, Size: 1}}
		sys.GidMappings = []syscall.SysProcIDMap{{ContainerID: egid, HostID: egid, Size: 1}}
		sys.GidMappingsEnableSetgroups = false
		if euid != 0 {
			// The init runs as the real uid: it needs these to build the
			// sandbox and drops them all before the command starts.
			sys.AmbientCaps = []uintptr{unix.CAP_SYS_ADMIN, unix.CAP_NET_ADMIN, unix.CAP_SETPCAP}
			if l.cfg.Capture != nil {
				// The resolver's port 53 and the capture port are privileged.
				sys.AmbientCaps = append(sys.AmbientCaps, unix.CAP_NET_BIND_SERVICE)
			}
		}
	} else {
		l.cmd.SysProcAttr.Setpgid = true
	}
	// Own pipes instead of exec.Cmd's: the result is ready when the command
	// has exited and its output is drained, without waiting for the kernel
	// to tear the pid and network namespaces down (tens of ms), which the
	// reaping goroutine absorbs in the background.
	stdio, err := newStdio(s.Stdin, s.Stdout, s.Stderr)
	if err != nil {
		return fmt.Errorf("sandbox: stdio: %w", err)
	}
	l.stdio = stdio
	l.onExit(stdio.finish)
	l.cfg.PTY = stdio.ptyConfig()
	l.cmd.Stdin, l.cmd.Stdout, l.cmd.Stderr = stdio.child[0], stdio.child[1], stdio.child[2]
	return nil
}

// prepareCgroup makes the run's cgroup (the init is cloned into it) and
// starts the placeholders, which are made while the init starts (both are
// filesystem work that would otherwise add to the start-up).
func (l *launch) prepareCgroup() error {
	cg, note, err := newRunCgroup(l.s.Limits)
	if err != nil {
		return fmt.Errorf("sandbox: cgroup: %w", err)
	}
	l.cg = cg
	if note != "" {
		l.res.Signals = append(l.res.Signals, strings.Split(note, ",")...)
	}
	l.prepCh = startPrep(l.s, l.tier)
	l.onExit(l.finishRun)
	return nil
}

func (l *launch) takePrep() runPrep {
	p := <-l.prepCh
	l.prepTaken = true
	return p
}

// finishRun removes the placeholders and the cgroup. A placeholder goes
// only when nothing of the run can create the name any more: the init
// reports `exited` only after it killed and reaped every other process of
// its pid namespace (it is the last one, and it runs no command code);
// otherwise (a failed or killed run) the init must be reaped first, whose
// exit takes the rest of the pid namespace with it.
func (l *launch) finishRun() {
	if !l.prepTaken {
		l.prepLease = l.takePrep().lease
	}
	if l.prepLease != nil && l.cmd.Process != nil && !l.cleanExit {
		_ = l.cmd.Process.Kill()
		select {
		case <-l.reaped:
		case <-time.After(2 * time.Second):
		}
	}
	if l.earlyRemoval != nil {
		<-l.earlyRemoval // started at `exited`
		l.prepLease = nil
	}
	finishPrep(runPrep{cg: l.cg, lease: l.prepLease})
}

// waitInit reaps the init and tells finishRun it is gone.
func (l *launch) waitInit() error {
	err := l.cmd.Wait()
	l.reapOnce.Do(func() { close(l.reaped) })
	return err
}

// clone starts the init.
func (l *launch) clone() error {
	restoreDumpable := l.allowIDMaps()
	err := l.startInit()
	restoreDumpable()
	l.childEnd.Close()
	if err != nil {
		if l.tier == TierNamespaces && isUsernsStartError(err) {
			return &usernsError{err: errors.Unwrap(err)}
		}
		return fmt.Errorf("sandbox: start init: %w", err)
	}
	l.stdio.closeChildEnds()
	l.tree.set(l.cmd.Process.Pid)
	return nil
}

// allowIDMaps: Go writes the child's uid_map from this process; a
// non-dumpable unprivileged process cannot open /proc/<child>/uid_map (its
// /proc files belong to root). Allow it for the clone only.
func (l *launch) allowIDMaps() (restore func()) {
	if l.tier != TierNamespaces || os.Geteuid() == 0 {
		return func() {}
	}
	if d, err := unix.PrctlRetInt(unix.PR_GET_DUMPABLE, 0, 0, 0, 0); err != nil || d != 0 {
		return func() {}
	}
	_ = unix.Prctl(unix.PR_SET_DUMPABLE, 1, 0, 0, 0)
	return func() { _ = unix.Prctl(unix.PR_SET_DUMPABLE, 0, 0, 0, 0) }
}

// startInit uses CLONE_INTO_CGROUP: born in the run's v2 cgroup, no
// migration (a cgroup.procs write takes a global lock whose write side
// waits for an RCU grace period, milliseconds under load). A seccomp
// profile that refuses clone3 (Docker's) leaves the join to the init.
func (l *launch) startInit() error {
	dirFD := l.cg.v2DirFD()
	if dirFD < 0 {
		return l.cmd.Start()
	}
	cmd := l.cmd
	cmd.SysProcAttr.UseCgroupFD, cmd.SysProcAttr.CgroupFD = true, dirFD
	err := cmd.Start()
	unix.Close(dirFD)
	if err == nil || cmd.Process != nil || !errors.Is(err, unix.ENOSYS) {
		return err
	}
	// An exec.Cmd starts once: retry with a copy.
	retry := &exec.Cmd{Path: cmd.Path, Args: cmd.Args, Env: cmd.Env, Dir: cmd.Dir, ExtraFiles: cmd.ExtraFiles,
		WaitDelay: cmd.WaitDelay, Stdin: cmd.Stdin, Stdout: cmd.Stdout, Stderr: cmd.Stderr}
	sys := *cmd.SysProcAttr
	sys.UseCgroupFD, sys.CgroupFD = false, 0
	retry.SysProcAttr = &sys
	l.cmd, l.joinV2 = retry, true
	return retry.Start()
}

// handshake completes the init's config (what to hide is planned while the
// init starts: it needs it only with the config) and sends it; a failure
// kills and reaps the init.
func (l *launch) handshake() error {
	err := l.sendConfig()
	if err != nil {
		_ = l.cmd.Process.Kill()
		_ = l.waitInit()
	}
	return err
}

func (l *launch) sendConfig() error {
	hidden, notes, err := planHidden(l.s.HiddenPaths, keepVisible(l.s, l.cfg.PrivateTmp), osHideFS())
	if err != nil {
		return fmt.Errorf("sandbox: %w", err)
	}
	l.cfg.Hidden = hidden
	l.res.Signals = append(l.res.Signals, notes...)
	// The init joins the v1 cgroups (and the v2 one when it was not born
	// there) itself right before it starts the command (init_linux.go),
	// through these files.
	var procFDs []int
	if l.cg != nil {
		if procFDs, err = l.cg.openJoinFiles(l.joinV2); err != nil {
			return fmt.Errorf("sandbox: %w", err)
		}
		l.cfg.CgroupFDs = len(procFDs)
	}
	l.cfg.AwaitPrepared = l.tier == TierNamespaces && l.s.Kind == KindWorkspaceWrite
	err = l.send(ctlMsg{Type: msgConfig, Config: l.cfg}, procFDs...)
	closeFDs(procFDs)
	if err == nil && l.cfg.AwaitPrepared {
		// The init builds its mounts meanwhile and waits for this only
		// before it protects the names.
		p := l.takePrep()
		l.prepLease = p.lease
		if err = p.err; err == nil {
			err = l.send(ctlMsg{Type: msgPrepared})
		}
	}
	if err != nil {
		return fmt.Errorf("sandbox: send config: %w", err)
	}
	return nil
}

func closeFDs(fds []int) {
	for _, fd := range fds {
		unix.Close(fd)
	}
}
