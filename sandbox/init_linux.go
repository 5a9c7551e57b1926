package sandbox

import (
	"errors"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// initRun builds the sandbox in the init, in order: the namespaces tier's
// mounts, network and listeners; the command's pty; keyring, dumpable and
// capabilities; Landlock and seccomp; the cgroups; then the command.
func initRun(ctl int, cfg *initConfig, cgroupProcs []int) (int, error) {
	var notes []string
	if cfg.Tier == TierNamespaces {
		n, err := initNamespaces(ctl, cfg)
		if err != nil {
			return 0, err
		}
		notes = append(notes, n...)
	} else {
		// Landlock tier: no pid namespace, so adopt orphans to kill them.
		_ = unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
	}
	stdin, ownPTY, err := initPTY(ctl, cfg)
	if err != nil {
		return 0, err
	}
	if err := joinAnonymousSessionKeyring(); err != nil {
		return 0, stepErr("session_keyring", err)
	}
	if err := unix.Prctl(unix.PR_SET_DUMPABLE, 0, 0, 0, 0); err != nil {
		return 0, stepErr("set_nondumpable", err)
	}
	if err := dropCapabilities(); err != nil {
		return 0, stepErr("drop_capabilities", err)
	}
	abi, n, err := initLandlock(cfg, ownPTY)
	if err != nil {
		return 0, err
	}
	notes = append(notes, n...)
	filter := FilterOptions{AllowInet: true}
	if cfg.Tier == TierLandlock {
		filter.AllowInet = cfg.Network != NetworkNone
		filter.InetStreamOnly = true
		filter.DenyListen = true
	}
	if err := installSeccomp(filter); err != nil {
		return 0, stepErr("seccomp", err)
	}
	// Join the run's cgroups only now, right before the command starts:
	// the setup's own page faults are not charged to a fresh memory
	// cgroup, and the command is inside from its first instruction. The
	// parent opened the files: v1 `tasks` ("0" moves this thread, the one
	// that forks the command; no global lock) and, when the init was not
	// cloned into the v2 cgroup, the v2 cgroup.procs.
	for _, fd := range cgroupProcs {
		_, err := unix.Write(fd, []byte("0"))
		unix.Close(fd)
		if err != nil {
			return 0, stepErr("join_cgroup", err)
		}
	}
	if err := ctlSend(ctl, ctlMsg{Type: msgSetup, LandlockABI: abi, Notes: notes}); err != nil {
		return 0, stepErr("report_setup", err)
	}
	return superviseCommand(ctl, cfg, stdin)
}

// initNamespaces builds the namespaces tier's filesystem, hostname, /tmp
// files, loopback and in-sandbox proxy listeners.
func initNamespaces(ctl int, cfg *initConfig) ([]string, error) {
	plan, err := planMounts(cfg, pathExists)
	if err != nil {
		return nil, stepErr("mount_plan", err)
	}
	var prepared func() error
	if cfg.AwaitPrepared {
		prepared = func() error {
			r, fds, err := ctlRecv(ctl)
			closeFDs(fds)
			if err == nil && r.Type != msgPrepared {
				err = fmt.Errorf("unexpected %q", r.Type)
			}
			return err
		}
	}
	notes, err := applyMounts(plan, prepared)
	if err != nil {
		return nil, err
	}
	_ = unix.Sethostname([]byte("sandbox"))
	if err := writeFiles("/tmp", cfg.Files); err != nil { // the private tmpfs
		return nil, stepErr("write_files", err)
	}
	if err := bringLoopbackUp(); err != nil {
		return nil, stepErr("loopback_up", err)
	}
	n, err := initListeners(ctl, cfg.Listeners, cfg.Capture)
	return append(notes, n...), err
}

// initListeners hands the in-sandbox proxy listeners (and capture's
// sockets) to the parent and waits for its bridge.
func initListeners(ctl int, ls []listenerConfig, cc *captureConfig) ([]string, error) {
	if len(ls) == 0 && cc == nil {
		return nil, nil
	}
	for _, l := range ls {
		fd, err := listenLoopback(l.Port)
		if err != nil {
			return nil, stepErr(fmt.Sprintf("listen 127.0.0.1:%d", l.Port), err)
		}
		err = ctlSend(ctl, ctlMsg{Type: msgListener, Name: l.Name}, fd)
		unix.Close(fd)
		if err != nil {
			return nil, stepErr("send_listener", err)
		}
	}
	var notes []string
	if cc != nil {
		n, err := initCapture(ctl, cc)
		if err != nil {
			return nil, err
		}
		notes = n
	}
	r, fds, err := ctlRecv(ctl)
	closeFDs(fds)
	if err != nil || r.Type != msgBridgeReady {
		return nil, stepErr("bridge_ready", fmt.Errorf("parent did not confirm the bridge (%v, %q)", err, r.Type))
	}
	return notes, nil
}

// initPTY gives the command a terminal of its own when the caller has one:
// the master goes to the parent, the slave is the command's stdin (-1:
// none).
func initPTY(ctl int, cfg *initConfig) (stdin int, ownPTY string, err error) {
	if cfg.PTY == nil {
		return -1, "", nil
	}
	// After the mounts: in the namespaces tier /dev/ptmx is the
	// sandbox's own devpts instance, so the command's terminal is
	// /dev/pts/0 there and ttyname() works.
	master, slave, err := openPTY(cfg.PTY)
	if err != nil {
		return -1, "", stepErr("pty", err)
	}
	if n, err := unix.IoctlGetUint32(master, unix.TIOCGPTN); err == nil {
		ownPTY = fmt.Sprintf("/dev/pts/%d", n)
	}
	err = ctlSend(ctl, ctlMsg{Type: msgPTY}, master)
	unix.Close(master)
	if err != nil {
		unix.Close(slave)
		return -1, "", stepErr("send_pty", err)
	}
	return slave, ownPTY, nil
}

// initLandlock applies the tier's Landlock rules; its ABI is 0 when the
// kernel has none (refused for root unless --allow-degraded).
func initLandlock(cfg *initConfig, ownPTY string) (abi int, notes []string, err error) {
	rw := append([]string(nil), cfg.WritableRoots...)
	if cfg.Kind == KindWorkspaceWrite {
		rw = append(rw, cfg.Cwd)
	}
	ll := landlockRules{RWDirs: rw, Hidden: cfg.Hidden, SplitRW: cfg.Tier == TierLandlock}
	if cfg.Tier == TierNamespaces {
		ll.RWDirs = append(ll.RWDirs, "/tmp", "/run", "/dev/shm")
	} else {
		// The writable roots keep .git & co. read-only (llprotect_linux.go),
		// listed with the command's own credentials; the private TMPDIR
		// is no workspace and stays writable whole.
		roots, protected, n, err := landlockProtection(rw, cfg.ProtectedNames)
		if err != nil {
			return 0, nil, stepErr("git_scan", err)
		}
		notes = append(notes, n...)
		ll.RWDirs, ll.ReadOnly = append(roots, cfg.PrivateTmp), protected
		ll.HandleNet, ll.ConnectPorts, ll.Required, ll.MinABI = true, cfg.ConnectPorts, true, 4
		// No private /dev here: Landlock grants only the usual nodes and
		// the command's own pty, never the host's other terminals.
		ll.HostDev, ll.OwnPTY = true, ownPTY
	}
	abi, err = applyLandlock(ll)
	if err != nil {
		return 0, nil, stepErr("landlock", err)
	}
	if abi == 0 {
		if cfg.RequireLandlock {
			return 0, nil, stepErr("landlock", errors.New("Landlock is unavailable on this kernel and the caller is root: "+
				"the namespaces alone would leave root's other open paths (/proc/self/fd re-opens, host mounts) unconfined; "+
				"failing closed. Pass --allow-degraded to run without Landlock"))
		}
		notes = append(notes, "landlock_unavailable")
	}
	return abi, notes, nil
}

// openPTY opens a new pty pair (close-on-exec) and gives the slave the
// caller's terminal settings and size.
func openPTY(pc *ptyConfig) (master, slave int, err error) {
	master, err = unix.Open("/dev/ptmx", unix.O_RDWR|unix.O_NOCTTY|unix.O_CLOEXEC, 0)
	if err != nil {
		return -1, -1, fmt.Errorf("open /dev/ptmx: %w", err)
	}
	if err := unix.IoctlSetPointerInt(master, unix.TIOCSPTLCK, 0); err != nil {
		unix.Close(master)
		return -1, -1, fmt.Errorf("unlockpt: %w", err)
	}
	slave, err = ptyPeer(master)
	if err != nil {
		unix.Close(master)
		return -1, -1, fmt.Errorf("TIOCGPTPEER: %w", err)
	}
	_ = unix.IoctlSetTermios(slave, unix.TCSETS, &pc.Termios)
	if pc.Rows > 0 && pc.Cols > 0 {
		_ = unix.IoctlSetWinsize(slave, unix.TIOCSWINSZ, &unix.Winsize{Row: pc.Rows, Col: pc.Cols})
	}
	return master, slave, nil
}

// ptyPeer opens the slave of master through TIOCGPTPEER (no path lookup,
// so no race with the devpts instance's names).
func ptyPeer(master int) (int, error) {
	fd, _, e := unix.Syscall(unix.SYS_IOCTL, uintptr(master), unix.TIOCGPTPEER, uintptr(unix.O_RDWR|unix.O_NOCTTY|unix.O_CLOEXEC))
	if e != 0 {
		return -1, e
	}
	return int(fd), nil
}

// joinAnonymousSessionKeyring gives this thread (and so the command) a new,
// empty, unnamed session keyring instead of the caller's. The name must be
// NULL: an empty string would name a keyring that other processes can join.
// seccomp then refuses every keyring syscall; this covers what is already
// reachable through inherited credentials (/proc/keys, request_key helpers).
func joinAnonymousSessionKeyring() error {
	_, _, e := unix.RawSyscall(unix.SYS_KEYCTL, unix.KEYCTL_JOIN_SESSION_KEYRING, 0, 0)
	if e == 0 || e == unix.ENOSYS { // ENOSYS: no keyrings in this kernel at all
		return nil
	}
	return e
}

// superviseCommand starts the command from the locked thread, forwards
// signals to it and reaps every child until it exits.
// The command always starts a new session (setsid): it never shares the
// caller's controlling terminal. With a pty (stdin >= 0) that pty becomes
// its stdin and controlling terminal.
func superviseCommand(ctl int, cfg *initConfig, stdin int) (int, error) {
	path, err := lookPath(cfg.Argv[0], cfg.Env)
	if err != nil {
		fmt.Fprintf(os.Stderr, "execwrap: %v\n", err)
		_ = ctlSend(ctl, ctlMsg{Type: msgExited, Code: 127})
		return 127, nil
	}
	// The init lets go of the caller's stdio once the command has it, so
	// the caller sees EOF when the command's side closes, not when the
	// namespaces are torn down.
	devnull, err := unix.Open("/dev/null", unix.O_RDWR|unix.O_CLOEXEC, 0)
	if err != nil {
		return 125, stepErr("open /dev/null", err)
	}
	sigs := make(chan os.Signal, 16)
	signal.Notify(sigs, unix.SIGINT, unix.SIGTERM, unix.SIGHUP, unix.SIGQUIT, unix.SIGUSR1, unix.SIGUSR2, unix.SIGWINCH)
	files := []uintptr{0, 1, 2}
	sys := &syscall.SysProcAttr{Setsid: true}
	if stdin >= 0 {
		files[0] = uintptr(stdin)
		sys.Setctty, sys.Ctty = true, 0
	}
	pid, err := syscall.ForkExec(path, cfg.Argv, &syscall.ProcAttr{
		Dir:   cfg.Cwd,
		Env:   cfg.Env,
		Files: files,
		Sys:   sys,
	})
	if stdin >= 0 {
		unix.Close(stdin)
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "execwrap: cannot start %s: %v\n", cfg.Argv[0], err)
		code := 126
		if errors.Is(err, unix.ENOENT) {
			code = 127
		}
		_ = ctlSend(ctl, ctlMsg{Type: msgExited, Code: code})
		return code, nil
	}
	for fd := range 3 {
		_ = unix.Dup3(devnull, fd, 0)
	}
	unix.Close(devnull)
	_ = ctlSend(ctl, ctlMsg{Type: msgStarted, Pid: pid})
	go func() {
		for s := range sigs {
			_ = unix.Kill(-pid, s.(syscall.Signal)) // the command's session and group
		}
	}()
	// The parent asks for a kill (timeout, stop) over the channel, and a
	// closed channel means the parent is gone: either way the command and
	// everything it started go (the landlock tier has no pid namespace to
	// take them down).
	go func() {
		for {
			m, fds, err := ctlRecv(ctl)
			for _, f := range fds {
				unix.Close(f)
			}
			if err != nil || m.Type == msgKill {
				_ = unix.Kill(-pid, unix.SIGKILL)
				_ = unix.Kill(pid, unix.SIGKILL)
				killDescendants(false)
				return
			}
		}
	}()
	for {
		var ws unix.WaitStatus
		got, err := unix.Wait4(-1, &ws, 0, nil)
		if errors.Is(err, unix.EINTR) {
			continue
		}
		if err != nil {
			return 125, stepErr("wait", err)
		}
		if got != pid {
			continue
		}
		code, sig := 0, ""
		switch {
		case ws.Exited():
			code = ws.ExitStatus()
		case ws.Signaled():
			code = 128 + int(ws.Signal())
			sig = unix.SignalName(ws.Signal())
		}
		if cfg.Tier == TierLandlock {
			killDescendants(true)
		} else {
			killNamespace()
		}
		_ = ctlSend(ctl, ctlMsg{Type: msgExited, Code: code, Signal: sig})
		return code, nil
	}
}

// killDescendants SIGKILLs every child adopted by this subreaper (landlock
// tier: there is no pid namespace to take them down), over every thread's
// children list (an orphan is adopted by any live thread of the reaper).
// With reap, it also reaps them so the next round sees the grandchildren
// they leave; without, the caller's wait loop reaps.
func killDescendants(reap bool) {
	for round := range 16 {
		kids := childPids()
		if len(kids) == 0 {
			return
		}
		for _, p := range kids {
			_ = unix.Kill(p, unix.SIGKILL)
		}
		if !reap {
			time.Sleep(time.Duration(round+1) * time.Millisecond)
			continue
		}
		for {
			var ws unix.WaitStatus
			if p, _ := unix.Wait4(-1, &ws, unix.WNOHANG, nil); p <= 0 {
				break
			}
		}
	}
}

// killNamespace kills and reaps every other process of this pid namespace
// (the init is its pid 1), so that when `exited` is reported nothing of the
// sandbox runs any more: the parent may then remove the placeholders.
func killNamespace() {
	for range 16 {
		_ = unix.Kill(-1, unix.SIGKILL) // pid 1: every process of the namespace but itself
		for {
			var ws unix.WaitStatus
			_, err := unix.Wait4(-1, &ws, 0, nil)
			if errors.Is(err, unix.EINTR) {
				continue
			}
			if err != nil { // ECHILD: none left
				break
			}
		}
		if err := unix.Kill(-1, 0); errors.Is(err, unix.ESRCH) {
			return
		}
	}
}

func childPids() []int {
	var pids []int
	tasks, _ := os.ReadDir("/proc/self/task")
	for _, t := range tasks {
		b, err := os.ReadFile("/proc/self/task/" + t.Name() + "/children")
		if err != nil {
			continue
		}
		for _, k := range strings.Fields(string(b)) {
			if p, err := strconv.Atoi(k); err == nil {
				pids = append(pids, p)
			}
		}
	}
	return pids
}

// lookPath resolves name against PATH from the command's environment (the
// init itself runs with an empty environment).
func lookPath(name string, env []string) (string, error) {
	if strings.Contains(name, "/") {
		return name, nil
	}
	path := "/usr/local/bin:/usr/bin:/bin:/usr/local/sbin:/usr/sbin:/sbin"
	for _, kv := range env {
		if v, ok := strings.CutPrefix(kv, "PATH="); ok {
			path = v
		}
	}
	for _, dir := range filepath.SplitList(path) {
		if dir == "" {
			dir = "."
		}
		p := filepath.Join(dir, name)
		if fi, err := os.Stat(p); err == nil && fi.Mode().IsRegular() && unix.Access(p, unix.X_OK) == nil {
			return p, nil
		}
	}
	return "", fmt.Errorf("%s: command not found", name)
}

func pathExists(p string) bool {
	_, err := os.Stat(p)
	return err == nil
}
