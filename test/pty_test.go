package test

import (
	"bytes"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// openPTY opens a pseudo-terminal pair: the controlling side and the
// terminal a child process writes to.
func openPTY(t *testing.T) (ptmx, tty *os.File) {
	t.Helper()
	m, err := os.OpenFile("/dev/ptmx", os.O_RDWR|syscall.O_NOCTTY, 0)
	if err != nil {
		t.Fatalf("no pseudo-terminals here: %v", err)
	}
	if err := unix.IoctlSetPointerInt(int(m.Fd()), unix.TIOCSPTLCK, 0); err != nil {
		m.Close()
		t.Fatal(err)
	}
	n, err := unix.IoctlGetInt(int(m.Fd()), unix.TIOCGPTN)
	if err != nil {
		m.Close()
		t.Fatal(err)
	}
	s, err := os.OpenFile(fmt.Sprintf("/dev/pts/%d", n), os.O_RDWR|syscall.O_NOCTTY, 0)
	if err != nil {
		m.Close()
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close(); m.Close() })
	return m, s
}

// startOnTerminal starts the configured proxy with its stdout on a
// pseudo-terminal (stderr still to p.Output), waits until it is healthy and
// has printed its approvals page line, and returns what it printed there.
func startOnTerminal(t *testing.T, p *Proxy) string {
	t.Helper()
	ptmx, tty := openPTY(t)
	var mu sync.Mutex
	var out bytes.Buffer
	go func() {
		buf := make([]byte, 4096)
		for {
			n, err := ptmx.Read(buf)
			mu.Lock()
			out.Write(buf[:n])
			mu.Unlock()
			if err != nil {
				return
			}
		}
	}()
	cmd := exec.Command(netproxyBin, "serve", "--config", p.ConfigPath)
	cmd.Env = p.Env()
	cmd.Stdout, cmd.Stderr = tty, p.Output
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	p.Cmd = cmd
	p.exited = make(chan struct{})
	go func() { cmd.Wait(); close(p.exited) }()
	t.Cleanup(func() {
		if !p.Exited() {
			syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
			<-p.exited
		}
	})
	deadline := time.Now().Add(15 * time.Second)
	for time.Now().Before(deadline) {
		if p.Exited() {
			t.Fatalf("netproxy serve exited early:\n%s", p.Output.String())
		}
		mu.Lock()
		s := out.String()
		mu.Unlock()
		if strings.Contains(s, "approvals page") && strings.Count(s, "\n") >= 6 {
			if resp, err := http.Get("http://" + p.Admin + "/healthz"); err == nil {
				resp.Body.Close()
				if resp.StatusCode == 200 {
					return s
				}
			}
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Fatalf("netproxy serve on a terminal not ready within 15s\n%s", p.Output.String())
	return ""
}
