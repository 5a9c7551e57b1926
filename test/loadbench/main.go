// Command loadbench is `make bench`'s end-to-end load test of netproxy: it
// starts the real binary and measures, in the same run and against the same
// upstream, plain-HTTP requests/s and p50/p99 latency through the proxy and
// directly (keep-alive, 64 connections), CONNECT tunnel throughput for a
// 1 GiB transfer through the proxy and directly, and the memory each idle
// CONNECT tunnel costs the proxy (RSS growth over 5 000 tunnels).
//
// It must never need the network beyond loopback.
package main

import (
	"bufio"
	"context"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

func main() {
	bin := flag.String("netproxy", "bin/netproxy", "netproxy binary")
	dur := flag.Duration("duration", 5*time.Second, "duration of each requests/s run")
	conns := flag.Int("conns", 64, "keep-alive connections for the requests/s runs")
	size := flag.Int64("bytes", 1<<30, "bytes per tunnel throughput run")
	tunnels := flag.Int("tunnels", 5000, "idle CONNECT tunnels for the memory run")
	flag.Parse()
	if err := run(*bin, *dur, *conns, *size, *tunnels); err != nil {
		fmt.Fprintln(os.Stderr, "loadbench:", err)
		os.Exit(1)
	}
}

func run(bin string, dur time.Duration, conns int, size int64, tunnels int) error {
	httpUp, err := startHTTPUpstream()
	if err != nil {
		return err
	}
	blobUp, err := startBlobUpstream(size)
	if err != nil {
		return err
	}
	holdUp, held, err := startHoldUpstream()
	if err != nil {
		return err
	}
	np, err := startNetproxy(bin)
	if err != nil {
		return err
	}
	defer np.stop()

	fmt.Printf("netproxy load benchmark (GOMAXPROCS-visible CPUs: %d)\n\n", numCPU())

	// 1. Plain HTTP, keep-alive, `conns` connections. Direct and proxied
	// runs alternate in short rounds so both see the same machine load.
	const rounds = 5
	var direct, proxied httpResult
	for i := 0; i < rounds; i++ {
		d, err := loadHTTP("", fmt.Sprintf("127.0.0.1:%d", httpUp), "/", conns, dur/rounds)
		if err != nil {
			return fmt.Errorf("direct HTTP: %w", err)
		}
		p, err := loadHTTP(np.httpAddr, fmt.Sprintf("up.test:%d", httpUp), "/", conns, dur/rounds)
		if err != nil {
			return fmt.Errorf("proxied HTTP: %w", err)
		}
		direct.add(d)
		proxied.add(p)
	}
	direct.finish()
	proxied.finish()
	fmt.Printf("plain HTTP, %d keep-alive connections, %d alternating rounds of %s:\n", conns, rounds, dur/rounds)
	fmt.Printf("  direct:  %9.0f req/s  p50 %-9s p99 %s\n", direct.rps, direct.p50, direct.p99)
	fmt.Printf("  netproxy:%9.0f req/s  p50 %-9s p99 %s\n", proxied.rps, proxied.p50, proxied.p99)
	fmt.Printf("  ratio:   %.1f %% of direct requests/s (target >= 70 %%)\n\n", 100*proxied.rps/direct.rps)

	// 2. CONNECT tunnel throughput.
	var bestDirect, bestProxied float64
	for i := 0; i < 3; i++ {
		d, err := transfer("", fmt.Sprintf("127.0.0.1:%d", blobUp), size)
		if err != nil {
			return fmt.Errorf("direct transfer: %w", err)
		}
		p, err := transfer(np.httpAddr, fmt.Sprintf("up.test:%d", blobUp), size)
		if err != nil {
			return fmt.Errorf("tunneled transfer: %w", err)
		}
		bestDirect, bestProxied = max(bestDirect, d), max(bestProxied, p)
	}
	fmt.Printf("CONNECT tunnel, %d MiB transfer (best of 3, alternating):\n", size>>20)
	fmt.Printf("  direct:   %8.0f MiB/s\n  netproxy: %8.0f MiB/s\n", bestDirect, bestProxied)
	fmt.Printf("  ratio:    %.1f %% of direct throughput (target >= 90 %%)\n\n", 100*bestProxied/bestDirect)

	// 3. Memory per idle tunnel.
	perTunnel, rssBefore, rssAfter, err := idleTunnels(np, fmt.Sprintf("up.test:%d", holdUp), held, tunnels)
	if err != nil {
		return fmt.Errorf("idle tunnels: %w", err)
	}
	fmt.Printf("idle CONNECT tunnels: %d\n", tunnels)
	fmt.Printf("  netproxy RSS: %.1f MiB before, %.1f MiB with the tunnels open\n", float64(rssBefore)/(1<<20), float64(rssAfter)/(1<<20))
	fmt.Printf("  memory per idle tunnel: %.1f KiB (target <= 20 KiB)\n", perTunnel/1024)
	return nil
}

func numCPU() int {
	data, _ := os.ReadFile("/proc/cpuinfo")
	return strings.Count(string(data), "processor\t:")
}

// ---------------------------------------------------------------------------
// upstreams (in this process, loopback only)

func startHTTPUpstream() (int, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	body := []byte("hello from the benchmark upstream\n")
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Length", strconv.Itoa(len(body)))
		w.Write(body)
	})}
	go srv.Serve(ln)
	return ln.Addr().(*net.TCPAddr).Port, nil
}

// startBlobUpstream sends size bytes to every connection, then closes it.
func startBlobUpstream(size int64) (int, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	buf := make([]byte, 256<<10)
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				for left := size; left > 0; {
					n := int64(len(buf))
					if n > left {
						n = left
					}
					w, err := c.Write(buf[:n])
					if err != nil {
						return
					}
					left -= int64(w)
				}
			}()
		}
	}()
	return ln.Addr().(*net.TCPAddr).Port, nil
}

// startHoldUpstream accepts and keeps connections open, sending nothing.
func startHoldUpstream() (int, *heldConns, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, nil, err
	}
	h := &heldConns{}
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			h.add(c)
		}
	}()
	return ln.Addr().(*net.TCPAddr).Port, h, nil
}

type heldConns struct {
	mu    sync.Mutex
	conns []net.Conn
}

func (h *heldConns) add(c net.Conn) {
	h.mu.Lock()
	h.conns = append(h.conns, c)
	h.mu.Unlock()
}

func (h *heldConns) closeAll() {
	h.mu.Lock()
	for _, c := range h.conns {
		c.Close()
	}
	h.conns = nil
	h.mu.Unlock()
}

// ---------------------------------------------------------------------------
// netproxy process

type netproxy struct {
	cmd      *exec.Cmd
	httpAddr string
	dir      string
}

func freeAddr() (string, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer ln.Close()
	return ln.Addr().String(), nil
}

func startNetproxy(bin string) (*netproxy, error) {
	dir, err := os.MkdirTemp("", "loadbench")
	if err != nil {
		return nil, err
	}
	var addrs [3]string
	for i := range addrs {
		if addrs[i], err = freeAddr(); err != nil {
			return nil, err
		}
	}
	// The production shape: audit on, metrics on, the local guard off only
	// because the upstream is on loopback.
	cfg := fmt.Sprintf(`[listen]
http = %q
socks5 = %q
admin = %q
[control]
socket = %q
[network]
allow_local_binding = true
[network.domains]
"up.test" = "allow"
[dns.hosts]
"up.test" = ["127.0.0.1"]
[approvals]
enabled = false
[audit]
path = %q
[log]
level = "warn"
`, addrs[0], addrs[1], addrs[2], filepath.Join(dir, "control.sock"), filepath.Join(dir, "audit.jsonl"))
	path := filepath.Join(dir, "netproxy.toml")
	if err := os.WriteFile(path, []byte(cfg), 0o644); err != nil {
		return nil, err
	}
	cmd := exec.Command(bin, "serve", "--config", path)
	cmd.Env = append(os.Environ(), "NETPROXY_HOME="+dir, "HOME="+dir)
	cmd.Stdout, cmd.Stderr = io.Discard, os.Stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	np := &netproxy{cmd: cmd, httpAddr: addrs[0], dir: dir}
	deadline := time.Now().Add(15 * time.Second)
	for time.Now().Before(deadline) {
		if resp, err := http.Get("http://" + addrs[2] + "/healthz"); err == nil {
			resp.Body.Close()
			return np, nil
		}
		time.Sleep(50 * time.Millisecond)
	}
	np.stop()
	return nil, fmt.Errorf("netproxy did not become healthy")
}

func (n *netproxy) stop() {
	n.cmd.Process.Signal(syscall.SIGTERM)
	done := make(chan struct{})
	go func() { n.cmd.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(20 * time.Second):
		n.cmd.Process.Kill()
		<-done
	}
	os.RemoveAll(n.dir)
}

func (n *netproxy) rss() (int64, error) {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", n.cmd.Process.Pid))
	if err != nil {
		return 0, err
	}
	for _, line := range strings.Split(string(data), "\n") {
		if strings.HasPrefix(line, "VmRSS:") {
			f := strings.Fields(line)
			kb, err := strconv.ParseInt(f[1], 10, 64)
			return kb * 1024, err
		}
	}
	return 0, fmt.Errorf("no VmRSS")
}

// ---------------------------------------------------------------------------
// measurements

type httpResult struct {
	rps      float64
	p50, p99 time.Duration
	lat      []time.Duration
	elapsed  time.Duration
}

func (r *httpResult) add(o httpResult) {
	r.lat = append(r.lat, o.lat...)
	r.elapsed += o.elapsed
}

func (r *httpResult) finish() {
	sort.Slice(r.lat, func(i, j int) bool { return r.lat[i] < r.lat[j] })
	r.rps = float64(len(r.lat)) / r.elapsed.Seconds()
	r.p50 = r.lat[len(r.lat)/2].Round(time.Microsecond)
	r.p99 = r.lat[len(r.lat)*99/100].Round(time.Microsecond)
}

// loadHTTP runs conns keep-alive connections, each sending requests back
// to back for dur. With proxy set, requests are absolute-form through it.
func loadHTTP(proxy, target, path string, conns int, dur time.Duration) (httpResult, error) {
	addr, reqLine := target, fmt.Sprintf("GET %s HTTP/1.1\r\nHost: %s\r\n\r\n", path, target)
	if proxy != "" {
		addr = proxy
		reqLine = fmt.Sprintf("GET http://%s%s HTTP/1.1\r\nHost: %s\r\n\r\n", target, path, target)
	}
	const warm = 200 * time.Millisecond // connections warm up, not counted
	ctx, cancel := context.WithTimeout(context.Background(), dur+warm)
	defer cancel()
	warmEnd := time.Now().Add(warm)
	var mu sync.Mutex
	var lat []time.Duration
	var firstErr error
	var wg sync.WaitGroup
	for i := 0; i < conns; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c, err := net.Dial("tcp", addr)
			if err != nil {
				mu.Lock()
				firstErr = err
				mu.Unlock()
				return
			}
			defer c.Close()
			br := bufio.NewReader(c)
			local := make([]time.Duration, 0, 1<<16)
			for ctx.Err() == nil {
				start := time.Now()
				if _, err := io.WriteString(c, reqLine); err != nil {
					break
				}
				resp, err := http.ReadResponse(br, nil)
				if err != nil {
					break
				}
				io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				if resp.StatusCode != 200 {
					mu.Lock()
					firstErr = fmt.Errorf("status %d", resp.StatusCode)
					mu.Unlock()
					return
				}
				if start.After(warmEnd) {
					local = append(local, time.Since(start))
				}
			}
			mu.Lock()
			lat = append(lat, local...)
			mu.Unlock()
		}()
	}
	wg.Wait()
	if firstErr != nil {
		return httpResult{}, firstErr
	}
	if len(lat) == 0 {
		return httpResult{}, fmt.Errorf("no requests completed")
	}
	return httpResult{lat: lat, elapsed: dur}, nil
}

// transfer reads size bytes from the blob upstream (through a CONNECT
// tunnel when proxy is set) and returns MiB/s.
func transfer(proxy, target string, size int64) (float64, error) {
	addr := target
	if proxy != "" {
		addr = proxy
	}
	c, err := net.Dial("tcp", addr)
	if err != nil {
		return 0, err
	}
	defer c.Close()
	var r io.Reader = c
	start := time.Now()
	if proxy != "" {
		fmt.Fprintf(c, "CONNECT %s HTTP/1.1\r\nHost: %s\r\n\r\n", target, target)
		br := bufio.NewReader(c)
		resp, err := http.ReadResponse(br, &http.Request{Method: http.MethodConnect})
		if err != nil {
			return 0, err
		}
		if resp.StatusCode != 200 {
			return 0, fmt.Errorf("CONNECT status %d", resp.StatusCode)
		}
		r = br
	} else {
		// The same target, dialed directly by its address.
		host, port, _ := net.SplitHostPort(target)
		_ = host
		c.Close()
		c, err = net.Dial("tcp", "127.0.0.1:"+port)
		if err != nil {
			return 0, err
		}
		defer c.Close()
		r = c
		start = time.Now()
	}
	buf := make([]byte, 256<<10)
	n, err := io.CopyBuffer(io.Discard, struct{ io.Reader }{r}, buf)
	if err != nil {
		return 0, err
	}
	if n != size {
		return 0, fmt.Errorf("got %d bytes, want %d", n, size)
	}
	return float64(n) / (1 << 20) / time.Since(start).Seconds(), nil
}

// idleTunnels opens n CONNECT tunnels that carry nothing and reports the
// proxy's RSS growth per tunnel.
func idleTunnels(np *netproxy, target string, held *heldConns, n int) (perTunnel float64, before, after int64, err error) {
	time.Sleep(2 * time.Second) // let the earlier runs' garbage be collected
	before, err = np.rss()
	if err != nil {
		return 0, 0, 0, err
	}
	clients := make([]net.Conn, 0, n)
	defer func() {
		for _, c := range clients {
			c.Close()
		}
		held.closeAll()
	}()
	req := fmt.Sprintf("CONNECT %s HTTP/1.1\r\nHost: %s\r\n\r\n", target, target)
	for i := 0; i < n; i++ {
		c, err := net.Dial("tcp", np.httpAddr)
		if err != nil {
			return 0, 0, 0, fmt.Errorf("tunnel %d: %w", i, err)
		}
		clients = append(clients, c)
		io.WriteString(c, req)
		// 39 bytes: "HTTP/1.1 200 Connection established\r\n\r\n"
		line := make([]byte, len("HTTP/1.1 200 Connection established\r\n\r\n"))
		c.SetReadDeadline(time.Now().Add(10 * time.Second))
		if _, err := io.ReadFull(c, line); err != nil || !strings.HasPrefix(string(line), "HTTP/1.1 200") {
			return 0, 0, 0, fmt.Errorf("tunnel %d: %q %v", i, line, err)
		}
		c.SetReadDeadline(time.Time{})
	}
	time.Sleep(3 * time.Second) // let the proxy settle (GC of the set-up garbage)
	after, err = np.rss()
	if err != nil {
		return 0, 0, 0, err
	}
	return float64(after-before) / float64(n), before, after, nil
}
