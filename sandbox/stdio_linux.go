package sandbox

import (
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"sync"

	"golang.org/x/sys/unix"
)

// stdio holds the init's standard files. Only what cannot lead back to a
// host path is passed as is: a pipe, a socket or /dev/null. A regular file
// (or any other device) would let the command re-open it writable through
// /proc/self/fd/N, which follows the caller's own open and not the
// sandbox's read-only mounts; those, and any non-file reader or writer, get
// a pipe and a copying goroutine. A terminal on stdin is never handed in:
// the init gives the command a pty of its own and this side relays it
// (startPTY), so TIOCSTI and friends only ever reach the command's own
// terminal.
type stdio struct {
	child  [3]*os.File
	parent []*os.File // our ends, closed on return
	owned  []*os.File // child ends we created, closed after start
	done   [2]<-chan struct{}

	tty     *os.File // the caller's terminal (stdin), relayed through a pty
	relay   *ptyRelay
	relayMu sync.Mutex
}

// passThrough reports whether f may be given to the command as is.
func passThrough(f *os.File) bool {
	var st unix.Stat_t
	if err := unix.Fstat(int(f.Fd()), &st); err != nil {
		return false
	}
	switch st.Mode & unix.S_IFMT {
	case unix.S_IFIFO, unix.S_IFSOCK:
		return true
	case unix.S_IFCHR:
		return unix.Major(st.Rdev) == 1 && unix.Minor(st.Rdev) == 3 // /dev/null
	}
	return false
}

// newStdio prepares the init's standard files (see stdio).
func newStdio(in io.Reader, out, errw io.Writer) (*stdio, error) {
	st := &stdio{done: [2]<-chan struct{}{nil, nil}}
	fail := func(err error) (*stdio, error) {
		st.closeChildEnds()
		st.closeParentEnds()
		return nil, err
	}
	if f, ok := in.(*os.File); ok && isTerminal(f) {
		st.tty = f // the init's own stdin stays /dev/null
		in = nil
	}
	switch r := in.(type) {
	case nil:
	case *os.File:
		if passThrough(r) {
			st.child[0] = r
			break
		}
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
		if w == nil {
			continue
		}
		if f, ok := w.(*os.File); ok && passThrough(f) {
			st.child[i+1] = f
			continue
		}
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
			if _, err := io.Copy(w, pr); err != nil {
				// Our reader went away (`| head -1`): close this end so
				// the command's next write fails as it would without
				// execwrap (SIGPIPE) instead of blocking on a full pipe.
				pr.Close()
			}
		}()
	}
	return st, nil
}

// ptyConfig is the caller's terminal state for the init's pty, nil when
// stdin is not a terminal.
func (s *stdio) ptyConfig() *ptyConfig {
	if s.tty == nil {
		return nil
	}
	fd := int(s.tty.Fd())
	t, err := unix.IoctlGetTermios(fd, unix.TCGETS)
	if err != nil {
		return nil
	}
	pc := &ptyConfig{Termios: *t}
	if ws, err := unix.IoctlGetWinsize(fd, unix.TIOCGWINSZ); err == nil {
		pc.Rows, pc.Cols = ws.Row, ws.Col
	}
	return pc
}

// ptyRelay copies the caller's terminal to the pty master and back while
// the caller's terminal is in raw input mode.
type ptyRelay struct {
	master       *os.File
	ttyFD        int
	saved        *unix.Termios
	wakeR, wakeW int
	winch        chan os.Signal
	wg           sync.WaitGroup
}

// startPTY takes the master fd the init sent and relays it; the returned
// channel closes when the command's side of the pty is closed everywhere.
func (s *stdio) startPTY(masterFD int) (<-chan struct{}, error) {
	if s.tty == nil {
		unix.Close(masterFD)
		return nil, errors.New("sandbox: a pty without a terminal to relay")
	}
	if err := unix.SetNonblock(masterFD, true); err != nil {
		unix.Close(masterFD)
		return nil, fmt.Errorf("sandbox: pty master: %w", err)
	}
	r := &ptyRelay{master: os.NewFile(uintptr(masterFD), "pty-master"), ttyFD: int(s.tty.Fd())}
	var p [2]int
	if err := unix.Pipe2(p[:], unix.O_CLOEXEC); err != nil {
		r.master.Close()
		return nil, err
	}
	r.wakeR, r.wakeW = p[0], p[1]
	// A background job must neither change the terminal's settings nor
	// read it (SIGTTOU/SIGTTIN would stop execwrap): it relays output only.
	fg, ferr := unix.IoctlGetInt(r.ttyFD, unix.TIOCGPGRP)
	foreground := ferr == nil && fg == unix.Getpgrp()
	if t, err := unix.IoctlGetTermios(r.ttyFD, unix.TCGETS); err == nil && foreground {
		r.saved = t
		raw := *t
		// Raw input (the pty's line discipline does the editing, echo and
		// signals for the command), cooked output: the command's piped
		// output still goes through this terminal.
		raw.Iflag &^= unix.IGNBRK | unix.BRKINT | unix.PARMRK | unix.ISTRIP | unix.INLCR | unix.IGNCR | unix.ICRNL | unix.IXON
		raw.Lflag &^= unix.ECHO | unix.ECHONL | unix.ICANON | unix.ISIG | unix.IEXTEN
		raw.Cc[unix.VMIN], raw.Cc[unix.VTIME] = 1, 0
		_ = unix.IoctlSetTermios(r.ttyFD, unix.TCSETS, &raw)
	}
	s.relayMu.Lock()
	s.relay = r
	s.relayMu.Unlock()
	done := make(chan struct{})
	r.wg.Add(2)
	go func() { // command → caller's terminal
		defer r.wg.Done()
		defer close(done)
		_, _ = io.Copy(s.tty, r.master)
	}()
	go func() { // caller's terminal → command
		defer r.wg.Done()
		if foreground {
			r.copyIn()
		}
	}()
	r.winch = make(chan os.Signal, 1)
	signal.Notify(r.winch, unix.SIGWINCH)
	r.wg.Add(1)
	go func() {
		defer r.wg.Done()
		for range r.winch {
			if ws, err := unix.IoctlGetWinsize(r.ttyFD, unix.TIOCGWINSZ); err == nil {
				_ = unix.IoctlSetWinsize(int(r.master.Fd()), unix.TIOCSWINSZ, ws)
			}
		}
	}()
	return done, nil
}

// copyIn reads the caller's terminal only when poll says it is readable,
// so it can stop (wake pipe) without having consumed input meant for
// whatever reads the terminal next.
func (r *ptyRelay) copyIn() {
	buf := make([]byte, 4096)
	fds := []unix.PollFd{{Fd: int32(r.ttyFD), Events: unix.POLLIN}, {Fd: int32(r.wakeR), Events: unix.POLLIN}}
	for {
		fds[0].Revents, fds[1].Revents = 0, 0
		if _, err := unix.Poll(fds, -1); err != nil {
			if errors.Is(err, unix.EINTR) {
				continue
			}
			return
		}
		if fds[1].Revents != 0 {
			return
		}
		if fds[0].Revents&unix.POLLIN != 0 {
			n, err := unix.Read(r.ttyFD, buf)
			if n <= 0 || err != nil {
				return
			}
			if _, err := r.master.Write(buf[:n]); err != nil {
				return
			}
		} else if fds[0].Revents&(unix.POLLHUP|unix.POLLERR|unix.POLLNVAL) != 0 {
			return
		}
	}
}

// stop ends the relay and gives the caller's terminal its settings back.
func (r *ptyRelay) stop() {
	signal.Stop(r.winch)
	close(r.winch)
	_, _ = unix.Write(r.wakeW, []byte{0})
	r.master.Close()
	r.wg.Wait()
	unix.Close(r.wakeR)
	unix.Close(r.wakeW)
	if r.saved != nil {
		_ = unix.IoctlSetTermios(r.ttyFD, unix.TCSETS, r.saved)
	}
}

// finish closes every end and waits for the copiers, so nothing writes to
// the caller's writers after Run returned (the output was drained before,
// unless the run failed or a leaked writer outlived the grace period).
func (s *stdio) finish() {
	s.closeChildEnds()
	s.closeParentEnds()
	s.relayMu.Lock()
	r := s.relay
	s.relay = nil
	s.relayMu.Unlock()
	if r != nil {
		r.stop()
	}
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
