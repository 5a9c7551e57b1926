package sandbox

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
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
		Setpgid: tier == TierNamespaces && !isTerminal(s.Stdin),
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
			httpAddr, socksAddr, ports, lerr := hostBridgeListeners(ctx, br, p)
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
		return res, fmt.Errorf("sandbox: stdio pipes: %w", err)
	}
	defer stdio.finish()
	cmd.Stdin, cmd.Stdout, cmd.Stderr = stdio.child[0], stdio.child[1], stdio.child[2]
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
	err = cmd.Start()
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
	kill := func() {
		if tier == TierLandlock {
			_ = unix.Kill(-cmd.Process.Pid, unix.SIGKILL)
		}
		_ = cmd.Process.Kill()
	}
	if err := ctlSend(parentFD, ctlMsg{Type: msgConfig, Config: cfg}); err != nil {
		kill()
		_ = cmd.Wait()
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
	go func() { waitCh <- cmd.Wait() }()

	timeout, stopTimer := timeoutAfter(s.Timeout)
	defer stopTimer()
	var (
		exited    *ctlMsg
		setupFail *ctlMsg
		failure   error
		waitErr   error
		waited    bool
		gotLn     int
	)
	ctxDone := ctx.Done()
	stop := s.Stop
	outDone, errDone := stdio.done[0], stdio.done[1]
	var grace <-chan time.Time
loop:
	for {
		mustReap := res.TimedOut || res.Stopped || failure != nil || setupFail != nil || exited == nil
		drained := outDone == nil && errDone == nil
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
		select {
		case <-grace:
			break loop
		case <-outDone:
			outDone = nil
		case <-errDone:
			errDone = nil
		case r, ok := <-msgs:
			if !ok {
				msgs = nil
				continue
			}
			switch r.m.Type {
			case msgListener:
				p, perr := s.resolveProxy(ctx)
				if perr != nil {
					failure = perr
					kill()
					for _, f := range r.fds {
						unix.Close(f)
					}
					continue
				}
				if lerr := acceptListenerFD(ctx, br, p, r.m.Name, r.fds); lerr != nil {
					failure = lerr
					kill()
					continue
				}
				gotLn++
				if gotLn == len(cfg.Listeners) {
					if serr := ctlSend(parentFD, ctlMsg{Type: msgBridgeReady}); serr != nil {
						failure = fmt.Errorf("sandbox: confirm bridge: %w", serr)
						kill()
					}
				}
			case msgSetup:
				res.LandlockABI = r.m.LandlockABI
				res.Signals = append(res.Signals, r.m.Notes...)
			case msgExited:
				m := r.m
				exited = &m
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
		case <-timeout:
			res.TimedOut = true
			timeout = nil
			kill()
		case <-ctxDone:
			ctxDone = nil
			if failure == nil {
				failure = ctx.Err()
			}
			kill()
		case <-stop:
			stop = nil
			res.Stopped = true
			kill()
		case sig := <-s.Signals:
			// The init has handlers, so a signal from this (ancestor)
			// namespace reaches it; it forwards to the command.
			_ = cmd.Process.Signal(syscall.Signal(sig))
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
// loopback ports (landlock tier and unsandboxed proxied runs).
func hostBridgeListeners(ctx context.Context, br *bridge, p *ProxyTarget) (httpAddr, socksAddr string, ports []uint16, err error) {
	var lc net.ListenConfig
	hl, err := lc.Listen(ctx, "tcp4", "127.0.0.1:0")
	if err != nil {
		return "", "", nil, fmt.Errorf("sandbox: bridge listener: %w", err)
	}
	br.serve(ctx, hl, p.HTTPAddr, p)
	httpAddr = hl.Addr().String()
	ports = append(ports, uint16(hl.Addr().(*net.TCPAddr).Port))
	if p.SOCKS5Addr != "" {
		sl, err := lc.Listen(ctx, "tcp4", "127.0.0.1:0")
		if err != nil {
			return "", "", nil, fmt.Errorf("sandbox: bridge listener: %w", err)
		}
		br.serve(ctx, sl, p.SOCKS5Addr, p)
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
// point at a host bridge that still attributes connections; nothing enforces
// that the command uses it.
func runUnsandboxed(ctx context.Context, s Spec) (Result, error) {
	start := time.Now()
	res := Result{Tier: TierNone}
	env := s.Env
	if s.Network == NetworkProxied {
		p, err := s.resolveProxy(ctx)
		if err != nil {
			return res, err
		}
		br := newBridge()
		defer br.close()
		httpAddr, socksAddr, _, err := hostBridgeListeners(ctx, br, p)
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
	timeout, stopTimer := timeoutAfter(s.Timeout)
	defer stopTimer()
	var waitErr error
	ctxDone := ctx.Done()
	stop := s.Stop
loop:
	for {
		select {
		case waitErr = <-waitCh:
			break loop
		case <-timeout:
			res.TimedOut = true
			timeout = nil
			kill()
		case <-ctxDone:
			ctxDone = nil
			kill()
		case <-stop:
			stop = nil
			res.Stopped = true
			kill()
		case sig := <-s.Signals:
			if group {
				_ = unix.Kill(-pgid, syscall.Signal(sig))
			} else {
				_ = cmd.Process.Signal(syscall.Signal(sig))
			}
		}
	}
	if group {
		_ = unix.Kill(-pgid, unix.SIGKILL) // leftovers of the group
	}
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

// stdio holds the init's standard files: a caller's *os.File is passed as
// is; any other reader or writer gets a pipe and a copying goroutine.
type stdio struct {
	child  [3]*os.File
	parent []*os.File // our ends, closed on return
	owned  []*os.File // child ends we created, closed after start
	done   [2]<-chan struct{}
}

var closedChan = func() chan struct{} { c := make(chan struct{}); close(c); return c }()

func newStdio(in io.Reader, out, errw io.Writer) (*stdio, error) {
	st := &stdio{done: [2]<-chan struct{}{nil, nil}}
	fail := func(err error) (*stdio, error) {
		st.closeChildEnds()
		st.closeParentEnds()
		return nil, err
	}
	switch r := in.(type) {
	case nil:
	case *os.File:
		st.child[0] = r
	default:
		pr, pw, err := os.Pipe()
		if err != nil {
			return fail(err)
		}
		st.child[0] = pr
		st.owned = append(st.owned, pr)
		go func() {
			_, _ = io.Copy(pw, r)
			pw.Close()
		}()
	}
	for i, w := range []io.Writer{out, errw} {
		switch f := w.(type) {
		case nil:
		case *os.File:
			st.child[i+1] = f
		default:
			pr, pw, err := os.Pipe()
			if err != nil {
				return fail(err)
			}
			st.child[i+1] = pw
			st.owned = append(st.owned, pw)
			st.parent = append(st.parent, pr)
			done := make(chan struct{})
			st.done[i] = done
			go func() {
				defer close(done)
				_, _ = io.Copy(f, pr)
			}()
		}
	}
	return st, nil
}

// finish closes every end and waits for the copiers, so nothing writes to
// the caller's writers after Run returned (the output was drained before,
// unless the run failed or a leaked writer outlived the grace period).
func (s *stdio) finish() {
	s.closeChildEnds()
	s.closeParentEnds()
	for _, d := range s.done {
		if d != nil {
			<-d
		}
	}
}

func (s *stdio) closeChildEnds() {
	for _, f := range s.owned {
		f.Close()
	}
	s.owned = nil
}

// closeParentEnds unblocks copiers still reading (only reached when the
// command's output is not drained yet, e.g. an early error return).
func (s *stdio) closeParentEnds() {
	for _, f := range s.parent {
		f.Close()
	}
	s.parent = nil
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
