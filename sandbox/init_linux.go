package sandbox

import (
	"errors"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"
)

// InitMain is the body of `execwrap __sandbox-init`: it runs as pid 1 of the
// new namespaces (or, in the landlock tier, as a plain child), reads its
// config from fd 3, builds the sandbox, starts the command as its child,
// forwards signals, reaps, and exits with the command's status. It returns
// the process exit code.
func InitMain() int {
	// Every restriction below is per thread; the command is forked from this
	// thread. Never unlocked.
	runtime.LockOSThread()
	// Nothing but 0-2 may reach the command: fds execwrap itself inherited
	// without close-on-exec (an agent socket, say) would be a way out.
	_ = unix.CloseRange(ctlInitFD+1, ^uint(0), unix.CLOSE_RANGE_CLOEXEC)
	ctl := ctlInitFD
	m, fds, err := ctlRecv(ctl)
	for _, f := range fds {
		unix.Close(f)
	}
	if err != nil || m.Type != msgConfig || m.Config == nil {
		fmt.Fprintf(os.Stderr, "execwrap __sandbox-init: no config on fd 3 (%v); this command is internal to execwrap run\n", err)
		return 125
	}
	unix.CloseOnExec(ctl)
	cfg := m.Config
	code, err := initRun(ctl, cfg)
	if err != nil {
		var se *stepError
		step := "setup"
		if errors.As(err, &se) {
			step = se.Step
		}
		_ = ctlSend(ctl, ctlMsg{Type: msgSetupFailed, Step: step, Errno: errnoName(errors.Unwrap(err)), Text: err.Error()})
		return 125
	}
	return code
}

func initRun(ctl int, cfg *initConfig) (int, error) {
	var notes []string
	if cfg.Tier == TierNamespaces {
		plan, err := planMounts(cfg, pathExists)
		if err != nil {
			return 0, stepErr("mount_plan", err)
		}
		n, err := applyMounts(plan)
		if err != nil {
			return 0, err
		}
		notes = append(notes, n...)
		_ = unix.Sethostname([]byte("sandbox"))
		if err := writeFiles("/tmp", cfg.Files); err != nil { // the private tmpfs
			return 0, stepErr("write_files", err)
		}
		if err := bringLoopbackUp(); err != nil {
			return 0, stepErr("loopback_up", err)
		}
		if len(cfg.Listeners) > 0 {
			for _, l := range cfg.Listeners {
				fd, err := listenLoopback(l.Port)
				if err != nil {
					return 0, stepErr(fmt.Sprintf("listen 127.0.0.1:%d", l.Port), err)
				}
				err = ctlSend(ctl, ctlMsg{Type: msgListener, Name: l.Name}, fd)
				unix.Close(fd)
				if err != nil {
					return 0, stepErr("send_listener", err)
				}
			}
			r, fds, err := ctlRecv(ctl)
			for _, f := range fds {
				unix.Close(f)
			}
			if err != nil || r.Type != msgBridgeReady {
				return 0, stepErr("bridge_ready", fmt.Errorf("parent did not confirm the bridge (%v, %q)", err, r.Type))
			}
		}
	} else {
		// Landlock tier: no pid namespace, so adopt orphans to kill them.
		_ = unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
	}
	if err := unix.Prctl(unix.PR_SET_DUMPABLE, 0, 0, 0, 0); err != nil {
		return 0, stepErr("set_nondumpable", err)
	}
	if err := dropCapabilities(); err != nil {
		return 0, stepErr("drop_capabilities", err)
	}
	rw := append([]string(nil), cfg.WritableRoots...)
	if cfg.Kind == KindWorkspaceWrite {
		rw = append(rw, cfg.Cwd)
	}
	ll := landlockRules{RWDirs: rw}
	if cfg.Tier == TierNamespaces {
		ll.RWDirs = append(ll.RWDirs, "/tmp", "/run", "/dev/shm")
	} else {
		ll.RWDirs = append(ll.RWDirs, cfg.PrivateTmp)
		ll.HandleNet, ll.ConnectPorts, ll.Required, ll.MinABI = true, cfg.ConnectPorts, true, 4
	}
	abi, err := applyLandlock(ll)
	if err != nil {
		return 0, stepErr("landlock", err)
	}
	if abi == 0 {
		notes = append(notes, "landlock_unavailable")
	}
	filter := FilterOptions{AllowInet: true}
	if cfg.Tier == TierLandlock {
		filter.AllowInet = cfg.Network != NetworkNone
		filter.InetStreamOnly = true
	}
	if err := installSeccomp(filter); err != nil {
		return 0, stepErr("seccomp", err)
	}
	if err := ctlSend(ctl, ctlMsg{Type: msgSetup, LandlockABI: abi, Notes: notes}); err != nil {
		return 0, stepErr("report_setup", err)
	}
	return superviseCommand(ctl, cfg)
}

// superviseCommand starts the command from the locked thread, forwards
// signals to it and reaps every child until it exits.
func superviseCommand(ctl int, cfg *initConfig) (int, error) {
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
	pid, err := syscall.ForkExec(path, cfg.Argv, &syscall.ProcAttr{
		Dir:   cfg.Cwd,
		Env:   cfg.Env,
		Files: []uintptr{0, 1, 2},
		Sys:   &syscall.SysProcAttr{Setpgid: cfg.Setpgid},
	})
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
			target := pid
			if cfg.Setpgid {
				target = -pid
			}
			_ = unix.Kill(target, s.(syscall.Signal))
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
			killDescendants()
		}
		_ = ctlSend(ctl, ctlMsg{Type: msgExited, Code: code, Signal: sig})
		return code, nil
	}
}

// killDescendants SIGKILLs every child adopted by this subreaper (landlock
// tier: there is no pid namespace to take them down).
func killDescendants() {
	for range 8 {
		b, err := os.ReadFile(fmt.Sprintf("/proc/self/task/%d/children", unix.Gettid()))
		kids := strings.Fields(string(b))
		if err != nil || len(kids) == 0 {
			return
		}
		for _, k := range kids {
			var p int
			if _, err := fmt.Sscan(k, &p); err == nil {
				_ = unix.Kill(p, unix.SIGKILL)
			}
		}
		for {
			var ws unix.WaitStatus
			if p, _ := unix.Wait4(-1, &ws, unix.WNOHANG, nil); p <= 0 {
				break
			}
		}
	}
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
