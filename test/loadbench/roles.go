package main

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// The benchmark's parties run as separate processes (this binary re-executed
// with -role) so each can be pinned to a CPU on its own: the HTTP upstream,
// the blob sender of the tunnel runs, and the null relay.

// runRole runs one helper role until its parent dies. It prints the
// listening address as its first stdout line.
func runRole(role, to string, size int64, body int, tlsDir string) error {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	fmt.Println(ln.Addr().String())
	switch role {
	case "http":
		return serveHTTPUpstream(ln, body)
	case "blob":
		return serveBlob(ln, size)
	case "relay":
		return serveRelay(ln, to)
	case "goproxy":
		return serveGoproxyLib(ln)
	case "https":
		return serveHTTPSOrigin(ln, tlsDir)
	}
	return fmt.Errorf("unknown role %q", role)
}

// serveHTTPUpstream is the plain-HTTP upstream: Go's net/http server with
// a small fixed body (a typical small API answer). size > 0 makes the body
// exactly size bytes (the peer bench's 1 KiB).
func serveHTTPUpstream(ln net.Listener, size int) error {
	body := []byte("hello from the benchmark upstream\n")
	if size > 0 {
		body = originBody(size)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Length", strconv.Itoa(len(body)))
		w.Write(body)
	})}
	return srv.Serve(ln)
}

// serveBlob sends size bytes to every connection, then closes it. The
// bytes come from a memfd with sendfile(2), so the sender costs as little
// as a sender can: no user-space copy.
func serveBlob(ln net.Listener, size int64) error {
	const chunk = 64 << 20
	fd, err := unix.MemfdCreate("loadbench-blob", unix.MFD_CLOEXEC)
	if err != nil {
		return err
	}
	f := os.NewFile(uintptr(fd), "blob")
	buf := make([]byte, 1<<20)
	for i := range buf {
		buf[i] = byte(i * 7)
	}
	for off := 0; off < chunk; off += len(buf) {
		if _, err := f.Write(buf); err != nil {
			return err
		}
	}
	for {
		c, err := ln.Accept()
		if err != nil {
			return err
		}
		go func() {
			defer c.Close()
			// Its own descriptor of the memfd: its own file offset.
			src, err := os.Open(fmt.Sprintf("/proc/self/fd/%d", fd))
			if err != nil {
				return
			}
			defer src.Close()
			for left := size; left > 0; {
				if _, err := src.Seek(0, io.SeekStart); err != nil {
					return
				}
				// ReadFrom of an *os.File (in a LimitedReader) into a
				// *net.TCPConn is sendfile(2).
				w, err := c.(*net.TCPConn).ReadFrom(io.LimitReader(src, min(left, chunk)))
				left -= w
				if err != nil || w == 0 {
					return
				}
			}
		}()
	}
}

// serveRelay is the null relay: the least work any proxy can do. Every
// accepted connection is paired with one connection to `to`, and bytes are
// copied both ways with io.Copy between the two *net.TCPConn (splice(2)) —
// no parsing, no policy, no accounting. It is the ceiling a relay can reach
// on this machine, measured in the same run as netproxy.
func serveRelay(ln net.Listener, to string) error {
	for {
		c, err := ln.Accept()
		if err != nil {
			return err
		}
		go func() {
			up, err := net.Dial("tcp", to)
			if err != nil {
				c.Close()
				return
			}
			a, b := c.(*net.TCPConn), up.(*net.TCPConn)
			done := make(chan struct{})
			go func() {
				io.Copy(b, a)
				b.CloseWrite()
				close(done)
			}()
			io.Copy(a, b)
			a.CloseWrite()
			<-done
			a.Close()
			b.Close()
		}()
	}
}

// helper is a running role process.
type helper struct {
	cmd  *exec.Cmd
	addr string
}

func startHelper(role string, args ...string) (*helper, error) {
	self, err := os.Executable()
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(self, append([]string{"-role", role}, args...)...)
	cmd.Stderr = os.Stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	out, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil {
		cmd.Process.Kill()
		cmd.Wait()
		return nil, fmt.Errorf("helper %s: %w", role, err)
	}
	return &helper{cmd: cmd, addr: strings.TrimSpace(line)}, nil
}

func (h *helper) pid() int { return h.cmd.Process.Pid }

func (h *helper) stop() {
	h.cmd.Process.Kill()
	h.cmd.Wait()
}

// pin sets the CPU affinity of every thread of process pid (nil cpus: all
// CPUs). Threads created later inherit it from their creator.
func pin(pid int, cpus []int) error {
	var set unix.CPUSet
	if cpus == nil {
		for i := 0; i < numCPU(); i++ {
			set.Set(i)
		}
	} else {
		for _, c := range cpus {
			set.Set(c)
		}
	}
	tasks, err := os.ReadDir(fmt.Sprintf("/proc/%d/task", pid))
	if err != nil {
		return err
	}
	for _, t := range tasks {
		tid, err := strconv.Atoi(t.Name())
		if err != nil {
			continue
		}
		if err := unix.SchedSetaffinity(tid, &set); err != nil && !errors.Is(err, unix.ESRCH) {
			return fmt.Errorf("pin %d/%d: %w", pid, tid, err)
		}
	}
	return nil
}

// settle gives re-pinned Go processes time to notice their new CPU count
// (the runtime re-reads its affinity about once a second) and lets the
// previous round's stragglers finish.
func settle() { time.Sleep(1200 * time.Millisecond) }
