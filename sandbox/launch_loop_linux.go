package sandbox

import (
	"errors"
	"fmt"
	"os"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// The supervise and collect phases of a launch (launch_init_linux.go).

// ctlRecvd is one message from the init with the fds it carried.
type ctlRecvd struct {
	m   ctlMsg
	fds []int
}

// loopState is what the message loop has seen; a nil channel is one that
// is finished (or never existed).
type loopState struct {
	msgs                      <-chan ctlRecvd // from the init; nil once it closed
	waitCh                    <-chan error    // the init's reaping; nil once reaped
	outDone, errDone, ptyDone <-chan struct{} // output relays; nil once drained
	grace, killBackstop       <-chan time.Time

	exited    *ctlMsg // the init's `exited` report
	setupFail *ctlMsg // the init's `setup_failed` report
	failure   error   // this side failed the run (and killed it)
	waitErr   error
	waited    bool
	gotLn     int // in-sandbox listeners handed over
}

func (st *loopState) drained() bool {
	return st.outDone == nil && st.errDone == nil && st.ptyDone == nil
}

// done reports whether the loop may end: the command exited and its output
// is complete, or (a killed or failed run, or an init that never reported
// exited) the init is reaped, its channel closed and the output drained.
func (st *loopState) done(killed bool) bool {
	mustReap := killed || st.failure != nil || st.setupFail != nil || st.exited == nil
	if st.drained() && !mustReap {
		return true
	}
	return st.msgs == nil && st.drained() && st.waited
}

// leakedWriter: the init is reaped and gone but something still holds the
// output open (landlock tier: a daemon holding stdout); it must not hold
// the result forever.
func (st *loopState) leakedWriter() bool {
	return st.msgs == nil && st.waited && !st.drained()
}

// supervise runs the message loop until the run is over.
func (l *launch) supervise() *loopState {
	msgs := make(chan ctlRecvd, 8)
	go func() {
		defer close(msgs)
		for {
			m, fds, err := ctlRecv(l.parentFD)
			if err != nil {
				return
			}
			msgs <- ctlRecvd{m, fds}
		}
	}()
	waitCh := make(chan error, 1)
	go func() { waitCh <- l.waitInit() }()
	l.sv = startSupervisor(l.ctx, l.s, l.kill, l.signal)
	l.onExit(l.sv.close)
	st := &loopState{msgs: msgs, waitCh: waitCh, outDone: l.stdio.done[0], errDone: l.stdio.done[1]}
	l.loop(st)
	return st
}

// kill ends the run. The landlock tier has no pid namespace: the init
// kills the command and every descendant it adopted when asked (or when
// this side of the channel closes); the cgroup, where there is one, is the
// sure way. SIGKILL of the init follows after killGrace as a backstop.
func (l *launch) kill() {
	if l.cg != nil {
		l.cg.kill()
	}
	if l.tier == TierLandlock {
		// Read by the init once the command runs (queued until then;
		// before it, the backstop kills the init, nothing else exists).
		_ = l.send(ctlMsg{Type: msgKill})
		return
	}
	_ = l.cmd.Process.Kill()
}

// signal forwards sig: the init has handlers, so a signal from this
// (ancestor) namespace reaches it; it forwards to the command.
func (l *launch) signal(sig Signal) { _ = l.cmd.Process.Signal(syscall.Signal(sig)) }

// failKill fails the run with err and kills it.
func (l *launch) failKill(st *loopState, err error) {
	st.failure = err
	l.kill()
	if l.tier == TierLandlock {
		st.killBackstop = time.After(killGrace)
	}
}

func (l *launch) loop(st *loopState) {
	for {
		killed := l.sv.killed()
		if st.done(killed) {
			return
		}
		if st.leakedWriter() && st.grace == nil {
			st.grace = time.After(2 * time.Second)
		}
		if killed && l.tier == TierLandlock && st.killBackstop == nil && !st.waited {
			st.killBackstop = time.After(killGrace)
		}
		select {
		case <-st.grace:
			return
		case <-st.killBackstop:
			st.killBackstop = nil
			_ = l.cmd.Process.Kill()
		case <-l.sv.fired:
		case <-st.outDone:
			st.outDone = nil
		case <-st.errDone:
			st.errDone = nil
		case <-st.ptyDone:
			st.ptyDone = nil
		case r, ok := <-st.msgs:
			if !ok {
				st.msgs = nil
				continue
			}
			l.handle(st, r)
		case st.waitErr = <-st.waitCh:
			st.waited = true
			st.waitCh = nil
			st.killBackstop = nil
		}
	}
}

// handle acts on one message of the init; the fds it carried are closed
// unless a handler took them.
func (l *launch) handle(st *loopState, r ctlRecvd) {
	switch r.m.Type {
	case msgListener:
		l.acceptListener(st, r)
	case msgCapture:
		l.acceptCapture(st, r)
	case msgPTY:
		if len(r.fds) != 1 || l.cfg.PTY == nil {
			l.failKill(st, errors.New("sandbox: unexpected pty message"))
			break
		}
		d, err := l.stdio.startPTY(r.fds[0])
		if err != nil {
			l.failKill(st, err)
			break
		}
		st.ptyDone = d
		return // the fd is owned by the relay now
	case msgSetup:
		l.res.LandlockABI = r.m.LandlockABI
		l.res.Signals = append(l.res.Signals, r.m.Notes...)
	case msgExited:
		m := r.m
		st.exited = &m
		l.exitedClean()
	case msgSetupFailed:
		m := r.m
		st.setupFail = &m
	}
	closeFDs(r.fds)
}

// acceptListener relays an in-sandbox listener to netproxy (through a
// duplicate of its fd) and confirms the bridge once all are in.
func (l *launch) acceptListener(st *loopState, r ctlRecvd) {
	p, err := l.s.resolveProxy(l.ctx)
	if err != nil {
		l.failKill(st, err)
		return
	}
	if err := acceptListenerFD(l.ctx, l.br, p, r.m.Name, r.fds); err != nil {
		l.failKill(st, err)
		return
	}
	l.gotListener(st)
}

// gotListener counts one in-sandbox listener message and confirms the
// bridge once all are in (capture's sockets count as one).
func (l *launch) gotListener(st *loopState) {
	st.gotLn++
	want := len(l.cfg.Listeners)
	if l.cfg.Capture != nil {
		want++
	}
	if st.gotLn == want {
		if err := l.send(ctlMsg{Type: msgBridgeReady}); err != nil {
			l.failKill(st, fmt.Errorf("sandbox: confirm bridge: %w", err))
		}
	}
}

// acceptCapture serves capture's sockets (capture_linux.go).
func (l *launch) acceptCapture(st *loopState, r ctlRecvd) {
	if l.cfg.Capture == nil || l.capt != nil {
		l.failKill(st, errors.New("sandbox: unexpected capture message"))
		return
	}
	p, err := l.s.resolveProxy(l.ctx)
	if err != nil {
		l.failKill(st, err)
		return
	}
	c, err := acceptCapture(l.ctx, l.br, p, r.fds)
	if err != nil {
		l.failKill(st, err)
		return
	}
	l.capt = c
	l.gotListener(st)
}

// exitedClean: in the namespaces tier nothing of the sandbox runs after
// `exited`, so the placeholders' removal overlaps the output drain.
func (l *launch) exitedClean() {
	l.cleanExit = l.tier == TierNamespaces
	if !l.cleanExit || l.prepLease == nil || l.earlyRemoval != nil {
		return
	}
	done := make(chan struct{})
	l.earlyRemoval = done
	go func(lease *placeholderLease) {
		defer close(done)
		lease.release()
	}(l.prepLease)
}

// collect stops the control channel's reader and turns what the loop saw
// into the Result.
func (l *launch) collect(st *loopState) (Result, error) {
	// Wake the reader (it may still block in recvmsg) and let it finish
	// before exit closes the fd number.
	_ = unix.Shutdown(l.parentFD, unix.SHUT_RDWR)
	if st.msgs != nil {
		for r := range st.msgs {
			closeFDs(r.fds)
		}
	}
	l.res.TimedOut, l.res.Stopped = l.sv.result()
	l.res.Signals = append(l.res.Signals, l.br.refusedSignal()...)
	l.res.Signals = append(l.res.Signals, l.capt.signals()...)
	if st.failure == nil && l.sv.canceled() {
		st.failure = l.ctx.Err()
	}
	l.res.Duration = time.Since(l.start)
	var ps *os.ProcessState // written by the reaping goroutine: read only once it is done
	if st.waited {
		ps = l.cmd.ProcessState
	}
	return settle(l.res, l.tier, st, ps)
}

// settle decides the outcome: the init's setup failure, then this side's
// failure, then a timeout or stop, then the init's exit report; an init
// that died without one reports its own status.
func settle(res Result, tier Tier, st *loopState, ps *os.ProcessState) (Result, error) {
	switch {
	case st.setupFail != nil:
		f := st.setupFail
		return res, &SetupError{Tier: tier, Step: f.Step, Errno: f.Errno, Text: f.Text}
	case st.failure != nil:
		return res, st.failure
	case res.TimedOut:
		res.ExitCode, res.Signal = TimeoutExitCode, "SIGKILL"
	case res.Stopped:
		res.ExitCode, res.Signal = 128+int(unix.SIGKILL), "SIGKILL"
	case st.exited != nil:
		res.ExitCode, res.Signal = st.exited.Code, st.exited.Signal
	default:
		res.ExitCode, res.Signal = exitFromState(ps, st.waitErr)
		res.Signals = append(res.Signals, "init_died_without_report")
	}
	return res, nil
}
