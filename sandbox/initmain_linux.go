package sandbox

import (
	"errors"
	"fmt"
	"os"
	"runtime"

	"golang.org/x/sys/unix"
)

// The re-exec entry of the sandbox init: `execwrap __sandbox-init` (or any
// binary that dispatches InitArg to InitMain first thing in its main, as
// the package's tests do) is what a launch clones (launch_init_linux.go).
// The same entry runs the placeholder janitor (placeholders_linux.go).

// InitArg is the first argument that makes a binary the sandbox init.
const InitArg = "__sandbox-init"

// IsInitArgs reports whether a process's arguments (os.Args) ask for the
// sandbox init; the binary must then call InitMain before anything else.
func IsInitArgs(args []string) bool { return len(args) > 1 && args[1] == InitArg }

// InitMain is the body of `execwrap __sandbox-init`: it runs as pid 1 of the
// new namespaces (or, in the landlock tier, as a plain child), reads its
// config from fd 3, builds the sandbox, starts the command as its child,
// forwards signals, reaps, and exits with the command's status. It returns
// the process exit code.
func InitMain() int {
	if base := os.Getenv(janitorEnv); base != "" {
		return placeholderJanitor(base)
	}
	// Every restriction below is per thread; the command is forked from this
	// thread. Never unlocked.
	runtime.LockOSThread()
	// Nothing but 0-2 may reach the command: fds execwrap itself inherited
	// without close-on-exec (an agent socket, say) would be a way out.
	_ = unix.CloseRange(ctlInitFD+1, ^uint(0), unix.CLOSE_RANGE_CLOEXEC)
	ctl := ctlInitFD
	m, fds, err := ctlRecv(ctl)
	if err != nil || m.Type != msgConfig || m.Config == nil || len(fds) != m.Config.CgroupFDs {
		for _, f := range fds {
			unix.Close(f)
		}
		fmt.Fprintf(os.Stderr, "execwrap __sandbox-init: no config on fd 3 (%v); this command is internal to execwrap run\n", err)
		return 125
	}
	unix.CloseOnExec(ctl)
	cfg := m.Config
	code, err := initRun(ctl, cfg, fds)
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
