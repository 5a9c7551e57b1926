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
		if s.Capture && s.CaptureRequired && s.Network == NetworkProxied {
			causes = append(causes, "--capture on needs the namespaces tier (the landlock tier has no network namespace to capture in)")
			return Result{}, &UnavailableError{Causes: causes}
		}
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
		s.InitArgs = []string{InitArg}
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
