package sandbox

import (
	"encoding/json"
	"errors"
	"fmt"

	"golang.org/x/sys/unix"
)

// The init and the parent talk over one SOCK_SEQPACKET socketpair (fd 3 in
// the init): JSON messages that keep their boundaries, plus SCM_RIGHTS for
// listener fds. Nothing secret ever crosses it.

const (
	ctlInitFD     = 3
	ctlMaxMessage = 1 << 20
)

// Message types.
const (
	msgConfig      = "config"       // parent → init
	msgListener    = "listener"     // init → parent, with one fd
	msgBridgeReady = "bridge_ready" // parent → init
	msgSetup       = "setup"        // init → parent: landlock ABI, notes
	msgStarted     = "started"      // init → parent
	msgExited      = "exited"       // init → parent (namespaces tier: no other process of the sandbox is left)
	msgSetupFailed = "setup_failed" // init → parent
	msgPTY         = "pty"          // init → parent, with the pty master fd
	msgKill        = "kill"         // parent → init: kill the command and every descendant
	msgPrepared    = "prepared"     // parent → init: the placeholders exist
	msgCapture     = "capture"      // init → parent, with capture's sockets (capture_init_linux.go)
)

// initConfig is what the init needs; it never carries a token.
type initConfig struct {
	Argv           []string         `json:"argv"`
	Env            []string         `json:"env"`
	Files          []File           `json:"files,omitempty"` // namespaces tier: written in /tmp
	Cwd            string           `json:"cwd"`
	Tier           Tier             `json:"tier"`
	Kind           Kind             `json:"kind"`
	Network        NetworkMode      `json:"network"`
	WritableRoots  []string         `json:"writable_roots"`
	ProtectedNames []string         `json:"protected_names"`
	Hidden         []hiddenPath     `json:"hidden,omitempty"` // hide.go
	Listeners      []listenerConfig `json:"listeners,omitempty"`
	Capture        *captureConfig   `json:"capture,omitempty"`       // namespaces tier, proxied
	ConnectPorts   []uint16         `json:"connect_ports,omitempty"` // landlock tier
	PrivateTmp     string           `json:"private_tmp,omitempty"`   // landlock tier
	// TmpfsSize is size= for /tmp, /run and /dev/shm ("" → kernel default).
	TmpfsSize string `json:"tmpfs_size,omitempty"`
	// RequireLandlock fails the setup when Landlock is unavailable (a root
	// caller without --allow-degraded).
	RequireLandlock bool `json:"require_landlock,omitempty"`
	// AwaitPrepared: the init waits for msgPrepared (the placeholders for
	// missing protected names exist) before it protects the names.
	AwaitPrepared bool `json:"await_prepared,omitempty"`
	// CgroupFDs is the number of cgroup.procs files (open for writing)
	// that come with the config message; the init joins them before it
	// starts the command.
	CgroupFDs int `json:"cgroup_fds,omitempty"`
	// PTY asks the init for a terminal of its own for the command's stdin.
	PTY *ptyConfig `json:"pty,omitempty"`
}

// ptyConfig is the caller's terminal state copied onto the command's pty.
type ptyConfig struct {
	Termios unix.Termios `json:"termios"`
	Rows    uint16       `json:"rows"`
	Cols    uint16       `json:"cols"`
}

type listenerConfig struct {
	Name string `json:"name"` // "http" or "socks5"
	Port int    `json:"port"` // on 127.0.0.1 inside the netns
}

type ctlMsg struct {
	Type        string      `json:"type"`
	Config      *initConfig `json:"config,omitempty"`
	Name        string      `json:"name,omitempty"`
	Step        string      `json:"step,omitempty"`
	Errno       string      `json:"errno,omitempty"`
	Text        string      `json:"text,omitempty"`
	Pid         int         `json:"pid,omitempty"`
	Code        int         `json:"code"`
	Signal      string      `json:"signal,omitempty"`
	LandlockABI int         `json:"landlock_abi,omitempty"`
	Notes       []string    `json:"notes,omitempty"`
}

func ctlSend(fd int, m ctlMsg, fds ...int) error {
	b, err := json.Marshal(m)
	if err != nil {
		return err
	}
	var oob []byte
	if len(fds) > 0 {
		oob = unix.UnixRights(fds...)
	}
	for {
		err = unix.Sendmsg(fd, b, oob, nil, 0)
		if !errors.Is(err, unix.EINTR) {
			return err
		}
	}
}

// ctlRecv reads one message and any fds passed with it. io.EOF-like end is
// reported as errCtlClosed.
func ctlRecv(fd int) (ctlMsg, []int, error) {
	buf := make([]byte, ctlMaxMessage)
	oob := make([]byte, unix.CmsgSpace(4*4))
	var (
		n, oobn, flags int
		err            error
	)
	for resets := 0; ; {
		n, oobn, flags, _, err = unix.Recvmsg(fd, buf, oob, unix.MSG_CMSG_CLOEXEC)
		// A peer that closed with our message unread (the init failing
		// its setup before reading "prepared") leaves ECONNRESET pending,
		// and a seqpacket recv reports it before the messages still
		// queued — the setup failure among them. The error is cleared once
		// reported: read on, to the queued messages and then EOF.
		if errors.Is(err, unix.ECONNRESET) && resets < 4 {
			resets++
			continue
		}
		if !errors.Is(err, unix.EINTR) {
			break
		}
	}
	if err != nil {
		return ctlMsg{}, nil, err
	}
	var fds []int
	if oobn > 0 {
		scms, perr := unix.ParseSocketControlMessage(oob[:oobn])
		if perr != nil {
			return ctlMsg{}, nil, fmt.Errorf("control channel: bad control message: %w", perr)
		}
		for _, scm := range scms {
			got, rerr := unix.ParseUnixRights(&scm)
			if rerr != nil {
				return ctlMsg{}, nil, fmt.Errorf("control channel: bad SCM_RIGHTS: %w", rerr)
			}
			fds = append(fds, got...)
		}
	}
	closeAll := func() {
		for _, f := range fds {
			unix.Close(f)
		}
	}
	if flags&(unix.MSG_TRUNC|unix.MSG_CTRUNC) != 0 {
		closeAll()
		return ctlMsg{}, nil, errors.New("control channel: truncated message")
	}
	if n == 0 {
		closeAll()
		return ctlMsg{}, nil, errCtlClosed
	}
	var m ctlMsg
	if err := json.Unmarshal(buf[:n], &m); err != nil {
		closeAll()
		return ctlMsg{}, nil, fmt.Errorf("control channel: bad message: %w", err)
	}
	return m, fds, nil
}

var errCtlClosed = errors.New("control channel closed")
