package sandbox

import (
	"context"
	"errors"
	"io"
	"net"
	"os/exec"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// The supervise and collect phases without namespaces: the control channel
// is a fake (a message channel in, a recording send out).

type fakeCtl struct {
	mu   sync.Mutex
	sent []string
	fail error // every send fails with it
}

func (f *fakeCtl) send(m ctlMsg, fds ...int) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.sent = append(f.sent, m.Type)
	return f.fail
}

func (f *fakeCtl) types() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]string(nil), f.sent...)
}

func testLaunch(t *testing.T, tier Tier, s Spec) (*launch, *fakeCtl) {
	ctl := &fakeCtl{}
	l := &launch{ctx: context.Background(), s: s, tier: tier, start: time.Now(), parentFD: -1,
		reaped: make(chan struct{}), send: ctl.send, cfg: &initConfig{}, cmd: &exec.Cmd{}, stdio: &stdio{}}
	t.Cleanup(l.exit)
	return l, ctl
}

func fdOpen(fd int) bool {
	_, err := unix.FcntlInt(uintptr(fd), unix.F_GETFD, 0)
	return err == nil
}

// listenerFD is a real listening socket on 127.0.0.1, as the init sends it.
func listenerFD(t *testing.T) int {
	t.Helper()
	ln, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	f, err := ln.(*net.TCPListener).File()
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	fd, err := unix.Dup(int(f.Fd()))
	if err != nil {
		t.Fatal(err)
	}
	return fd
}

func testProxy() *ProxyTarget {
	return &ProxyTarget{HTTPAddr: "127.0.0.1:9", Token: "t",
		WriteFrame: func(io.Writer, string) error { return nil }}
}

func TestLaunchHandle(t *testing.T) {
	for _, c := range []struct {
		name      string
		bridge    bool
		resolve   error // Spec.ProxyResolve fails with it
		sendFail  error
		listeners int
		msg       ctlMsg
		fd        bool // the message carries a listener fd
		wantFail  string
		wantSent  []string
		check     func(t *testing.T, l *launch, st *loopState)
	}{
		{name: "setup notes", msg: ctlMsg{Type: msgSetup, LandlockABI: 6, Notes: []string{"a", "b"}},
			check: func(t *testing.T, l *launch, st *loopState) {
				if l.res.LandlockABI != 6 || !reflect.DeepEqual(l.res.Signals, []string{"a", "b"}) {
					t.Errorf("res %+v", l.res)
				}
			}},
		{name: "exited", msg: ctlMsg{Type: msgExited, Code: 3, Signal: "SIGSEGV"},
			check: func(t *testing.T, l *launch, st *loopState) {
				if st.exited == nil || st.exited.Code != 3 || l.cleanExit {
					t.Errorf("exited %+v cleanExit %v (landlock: never clean)", st.exited, l.cleanExit)
				}
			}},
		{name: "setup failed", msg: ctlMsg{Type: msgSetupFailed, Step: "mount", Text: "x"},
			check: func(t *testing.T, l *launch, st *loopState) {
				if st.setupFail == nil || st.setupFail.Step != "mount" {
					t.Errorf("setupFail %+v", st.setupFail)
				}
			}},
		{name: "pty without a pty config", msg: ctlMsg{Type: msgPTY}, fd: true,
			wantFail: "unexpected pty message", wantSent: []string{msgKill}},
		{name: "listener without a bridge", msg: ctlMsg{Type: msgListener, Name: "http"}, fd: true,
			wantFail: "without a proxied network", wantSent: []string{msgKill}},
		{name: "listener, proxy unresolvable", bridge: true, resolve: errors.New("no netproxy"),
			msg: ctlMsg{Type: msgListener, Name: "http"}, fd: true,
			wantFail: "no netproxy", wantSent: []string{msgKill}},
		{name: "listener without an upstream", bridge: true, msg: ctlMsg{Type: msgListener, Name: "ftp"}, fd: true,
			wantFail: "no netproxy upstream", wantSent: []string{msgKill}},
		{name: "first of two listeners", bridge: true, listeners: 2,
			msg: ctlMsg{Type: msgListener, Name: "http"}, fd: true},
		{name: "last listener confirms the bridge", bridge: true, listeners: 1,
			msg: ctlMsg{Type: msgListener, Name: "http"}, fd: true, wantSent: []string{msgBridgeReady}},
		{name: "bridge confirmation fails", bridge: true, listeners: 1, sendFail: errors.New("EPIPE"),
			msg: ctlMsg{Type: msgListener, Name: "http"}, fd: true,
			wantFail: "confirm bridge", wantSent: []string{msgBridgeReady, msgKill}},
	} {
		t.Run(c.name, func(t *testing.T) {
			s := Spec{Proxy: testProxy()}
			if c.resolve != nil {
				s.Proxy, s.ProxyResolve = nil, func(context.Context) (*ProxyTarget, error) { return nil, c.resolve }
			}
			l, ctl := testLaunch(t, TierLandlock, s)
			ctl.fail = c.sendFail
			if c.bridge {
				l.br = newBridge()
				l.onExit(l.br.close)
			}
			l.cfg.Listeners = make([]listenerConfig, c.listeners)
			r := ctlRecvd{m: c.msg}
			if c.fd {
				r.fds = []int{listenerFD(t)}
			}
			st := &loopState{}
			l.handle(st, r)
			if c.fd && fdOpen(r.fds[0]) {
				t.Errorf("fd %d left open", r.fds[0])
			}
			if c.wantFail == "" && st.failure != nil || c.wantFail != "" && (st.failure == nil || !strings.Contains(st.failure.Error(), c.wantFail)) {
				t.Errorf("failure %v, want %q", st.failure, c.wantFail)
			}
			if c.wantFail != "" && st.killBackstop == nil {
				t.Error("a failed landlock-tier run has no kill backstop")
			}
			if got := ctl.types(); !reflect.DeepEqual(got, c.wantSent) && (len(got) > 0 || len(c.wantSent) > 0) {
				t.Errorf("sent %q, want %q", got, c.wantSent)
			}
			if c.check != nil {
				c.check(t, l, st)
			}
		})
	}
}

func TestLoopStateDone(t *testing.T) {
	open := make(chan struct{})
	msgs := make(chan ctlRecvd)
	exited := &ctlMsg{Type: msgExited}
	for _, c := range []struct {
		name       string
		st         loopState
		killed     bool
		done, leak bool
	}{
		{name: "exited and drained", st: loopState{exited: exited, msgs: msgs}, done: true},
		{name: "exited, output pending", st: loopState{exited: exited, msgs: msgs, outDone: open}},
		{name: "exited, pty pending", st: loopState{exited: exited, msgs: msgs, ptyDone: open}},
		{name: "killed: wait for the reap", st: loopState{exited: exited, msgs: msgs}, killed: true},
		{name: "killed, reaped, channel closed", st: loopState{exited: exited, waited: true}, killed: true, done: true},
		{name: "no exit report: reaped but channel open", st: loopState{msgs: msgs, waited: true}},
		{name: "no exit report, all done", st: loopState{waited: true}, done: true},
		{name: "failed: wait for the reap", st: loopState{exited: exited, msgs: msgs, failure: errors.New("x")}},
		{name: "setup failed, all done", st: loopState{setupFail: exited, waited: true}, done: true},
		{name: "leaked writer", st: loopState{waited: true, errDone: open}, leak: true},
		{name: "not reaped: no leak yet", st: loopState{errDone: open}},
	} {
		if got := c.st.done(c.killed); got != c.done {
			t.Errorf("%s: done %v, want %v", c.name, got, c.done)
		}
		if got := c.st.leakedWriter(); got != c.leak {
			t.Errorf("%s: leakedWriter %v, want %v", c.name, got, c.leak)
		}
	}
}

func TestSettle(t *testing.T) {
	exited := &ctlMsg{Type: msgExited, Code: 7}
	for _, c := range []struct {
		name       string
		res        Result
		st         loopState
		wantErr    string
		code       int
		signal     string
		initDied   bool
		isSetupErr bool
	}{
		{name: "setup failure wins", res: Result{TimedOut: true}, isSetupErr: true, wantErr: "at mount: boom",
			st: loopState{setupFail: &ctlMsg{Step: "mount", Text: "boom"}, failure: errors.New("x"), exited: exited}},
		{name: "own failure", st: loopState{failure: errors.New("bridge"), exited: exited}, wantErr: "bridge"},
		{name: "timeout", res: Result{TimedOut: true}, st: loopState{exited: exited}, code: TimeoutExitCode, signal: "SIGKILL"},
		{name: "stopped", res: Result{Stopped: true}, st: loopState{exited: exited}, code: 137, signal: "SIGKILL"},
		{name: "exit report", st: loopState{exited: &ctlMsg{Code: 3, Signal: "SIGTERM"}}, code: 3, signal: "SIGTERM"},
		{name: "init died", st: loopState{}, code: 125, initDied: true},
	} {
		res, err := settle(c.res, TierNamespaces, &c.st, nil)
		var se *SetupError
		if c.wantErr != "" {
			if err == nil || !strings.Contains(err.Error(), c.wantErr) || errors.As(err, &se) != c.isSetupErr {
				t.Errorf("%s: err %v, want %q (setup error %v)", c.name, err, c.wantErr, c.isSetupErr)
			}
			continue
		}
		died := len(res.Signals) == 1 && res.Signals[0] == "init_died_without_report"
		if err != nil || res.ExitCode != c.code || res.Signal != c.signal || died != c.initDied {
			t.Errorf("%s: %+v %v, want code %d signal %q died %v", c.name, res, err, c.code, c.signal, c.initDied)
		}
	}
}

// TestLaunchLoop drives the whole loop and collect through the fake
// channel: a normal exit, and a cancelled run that must wait for the init
// to be reaped and ask the landlock-tier init to kill.
func TestLaunchLoop(t *testing.T) {
	t.Run("exit", func(t *testing.T) {
		l, ctl := testLaunch(t, TierLandlock, Spec{})
		l.sv = startSupervisor(l.ctx, l.s, l.kill, l.signal)
		l.onExit(l.sv.close)
		msgs, out := make(chan ctlRecvd, 2), make(chan struct{})
		msgs <- ctlRecvd{m: ctlMsg{Type: msgSetup, LandlockABI: 4}}
		msgs <- ctlRecvd{m: ctlMsg{Type: msgExited, Code: 2}}
		close(msgs) // the reader's end, as after collect's shutdown
		close(out)
		st := &loopState{msgs: msgs, waitCh: make(chan error), outDone: out}
		l.loop(st)
		res, err := l.collect(st)
		if err != nil || res.ExitCode != 2 || res.LandlockABI != 4 || len(ctl.types()) != 0 {
			t.Fatalf("res %+v err %v sent %q", res, err, ctl.types())
		}
	})
	t.Run("cancelled", func(t *testing.T) {
		l, ctl := testLaunch(t, TierLandlock, Spec{})
		ctx, cancel := context.WithCancel(context.Background())
		l.ctx = ctx
		// A real process stands in for the init: the kill backstop may fire.
		l.cmd = exec.Command("sleep", "30")
		if err := l.cmd.Start(); err != nil {
			t.Fatal(err)
		}
		defer func() { _ = l.cmd.Process.Kill(); _ = l.cmd.Wait() }()
		l.sv = startSupervisor(l.ctx, l.s, l.kill, l.signal)
		l.onExit(l.sv.close)
		msgs, waitCh := make(chan ctlRecvd), make(chan error, 1)
		st := &loopState{msgs: msgs, waitCh: waitCh}
		done := make(chan struct{})
		go func() { defer close(done); l.loop(st) }()
		cancel()
		for len(ctl.types()) == 0 {
			time.Sleep(time.Millisecond)
		}
		select {
		case <-done:
			t.Fatal("the loop ended before the init was reaped")
		case <-time.After(50 * time.Millisecond):
		}
		close(msgs)
		waitCh <- nil
		<-done
		if _, err := l.collect(st); !errors.Is(err, context.Canceled) {
			t.Fatalf("err %v, want context.Canceled", err)
		}
		if got := ctl.types(); got[0] != msgKill {
			t.Fatalf("sent %q, want kill first", got)
		}
	})
}
