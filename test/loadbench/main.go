// Command loadbench is `make bench`'s end-to-end load test of netproxy. In
// one run, against the same endpoints, it measures:
//
//   - plain-HTTP requests/s and p50/p99 latency with wrk (one thread, 64
//     keep-alive connections) directly against the upstream, through
//     netproxy, and through a null relay (a bare splice relay: the ceiling of
//     any relay on this machine), unpinned and in two pinned layouts (wrk on
//     CPU 0 with the upstream and the proxy sharing CPU 1; wrk and upstream
//     sharing CPU 0 with the proxy alone on CPU 1);
//   - the throughput of a 1 GiB transfer (sendfile sender, splice-to-/dev/null
//     receiver) directly, through a netproxy CONNECT tunnel and through the
//     null relay;
//   - the memory each idle CONNECT tunnel costs netproxy (RSS growth over
//     5 000 tunnels).
//
// With -peers (`make bench-peers`, peers.go) it runs instead the side-by-side
// bench of issue 14: the same workloads directly, through a bare splice
// relay, Squid, Dante, a proxy on the goproxy library alone and netproxy;
// and its interception part (interception.go, issue 29): one HTTPS origin
// directly, through netproxy's opaque tunnel, and intercepted by Squid
// ssl-bump, mitmproxy and netproxy.
//
// Every party but wrk runs as its own process (this binary re-executed with
// -role) so it can be pinned. It must never need the network beyond loopback.
package main

import (
	"bytes"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/netproxy/netproxy/test/benchproc"
)

func main() {
	role := flag.String("role", "", "internal: run a helper role (http, blob, relay, goproxy, https)")
	tlsDir := flag.String("tlsdir", "", "internal: the https role's certificate directory")
	body := flag.Int("body", 0, "internal: the http role's body size (0: a 34-byte line)")
	to := flag.String("to", "", "internal: the relay's destination")
	bin := flag.String("netproxy", "bin/netproxy", "netproxy binary")
	wrk := flag.String("wrk", "wrk", "wrk binary (Debian package wrk)")
	dur := flag.Duration("duration", 3*time.Second, "length of each wrk run (whole seconds)")
	rounds := flag.Int("rounds", 3, "alternating rounds per HTTP layout")
	conns := flag.Int("conns", 64, "keep-alive connections for the requests/s runs")
	size := flag.Int64("bytes", 1<<30, "bytes per throughput run")
	tunnels := flag.Int("tunnels", 5000, "idle CONNECT tunnels for the memory run")
	only := flag.String("only", "http,tunnel,idle", "which parts to run (with -peers: "+strings.Join(peerParts, ",")+")")
	peers := flag.Bool("peers", false, "run the peer bench (make bench-peers): direct, bare relay, Squid, Dante, goproxy library, netproxy side by side")
	quick := flag.Bool("quick", false, "with -peers: short runs and small sizes, for developing the harness (numbers are not comparable)")
	squid := flag.String("squid", "squid", "with -peers: Squid binary (Debian package squid)")
	danted := flag.String("danted", "danted", "with -peers: Dante's server binary (Debian package dante-server)")
	mitmdump := flag.String("mitmdump", "mitmdump", "with -peers: mitmproxy's mitmdump (Debian package mitmproxy)")
	intercepts := flag.Int("intercepts", 500, "with -peers: idle intercepted connections per peer (interception part)")
	flag.Parse()
	set := map[string]bool{}
	flag.Visit(func(f *flag.Flag) { set[f.Name] = true })
	var err error
	switch {
	case *role != "":
		err = runRole(*role, *to, *size, *body, *tlsDir)
	case *peers:
		po := peerOptions{netproxy: *bin, wrk: *wrk, squid: *squid, danted: *danted, mitmdump: *mitmdump,
			dur: 5 * time.Second, rounds: *rounds, conns: *conns, size: *size, tunnels: *tunnels, intercepts: *intercepts, only: peerParts}
		if *quick {
			po.dur, po.size, po.tunnels, po.intercepts = time.Second, 256<<20, 500, 100
		}
		if set["intercepts"] {
			po.intercepts = *intercepts
		}
		if set["duration"] {
			po.dur = *dur
		}
		if set["bytes"] {
			po.size = *size
		}
		if set["tunnels"] {
			po.tunnels = *tunnels
		}
		if set["only"] {
			po.only = strings.Split(*only, ",")
		}
		err = runPeers(po)
	default:
		err = run(options{bin: *bin, wrk: *wrk, dur: *dur, rounds: *rounds, conns: *conns, size: *size, tunnels: *tunnels, only: strings.Split(*only, ",")})
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "loadbench:", err)
		os.Exit(1)
	}
}

type options struct {
	bin, wrk string
	dur      time.Duration
	rounds   int
	conns    int
	size     int64
	tunnels  int
	only     []string
}

func run(o options) error {
	if _, err := exec.LookPath(o.wrk); err != nil && slices.Contains(o.only, "http") {
		return fmt.Errorf("%s not found: install it with scripts/install-test-deps.sh (Debian package wrk)", o.wrk)
	}
	up, err := startHelper("http")
	if err != nil {
		return err
	}
	defer up.stop()
	blob, err := startHelper("blob", "-bytes", strconv.FormatInt(o.size, 10))
	if err != nil {
		return err
	}
	defer blob.stop()
	httpRelay, err := startHelper("relay", "-to", up.addr)
	if err != nil {
		return err
	}
	defer httpRelay.stop()
	blobRelay, err := startHelper("relay", "-to", blob.addr)
	if err != nil {
		return err
	}
	defer blobRelay.stop()
	holdUp, held, err := startHoldUpstream()
	if err != nil {
		return err
	}
	np, err := startNetproxy(o.bin)
	if err != nil {
		return err
	}
	defer np.stop()

	fmt.Printf("netproxy load benchmark: %d CPUs, %s\n\n", numCPU(), loadAvg())
	if slices.Contains(o.only, "http") {
		if err := benchHTTP(o, up, httpRelay, np); err != nil {
			return err
		}
	}
	if slices.Contains(o.only, "tunnel") {
		if err := benchTunnel(o, blob, blobRelay, np); err != nil {
			return err
		}
	}
	if slices.Contains(o.only, "idle") {
		_, upPort, _ := net.SplitHostPort(holdUp)
		perTunnel, rssBefore, rssAfter, err := idleTunnels(np, "up.test:"+upPort, held, o.tunnels)
		if err != nil {
			return fmt.Errorf("idle tunnels: %w", err)
		}
		fmt.Printf("idle CONNECT tunnels: %d\n", o.tunnels)
		fmt.Printf("  netproxy RSS: %.1f MiB before, %.1f MiB with the tunnels open\n", float64(rssBefore)/(1<<20), float64(rssAfter)/(1<<20))
		fmt.Printf("  memory per idle tunnel: %.1f KiB (target <= 20 KiB)\n", perTunnel/1024)
	}
	return nil
}

func numCPU() int {
	data, _ := os.ReadFile("/proc/cpuinfo")
	return strings.Count(string(data), "processor\t:")
}

func loadAvg() string {
	data, _ := os.ReadFile("/proc/loadavg")
	f := strings.Fields(string(data))
	if len(f) < 3 {
		return "load average unknown"
	}
	return "load average " + strings.Join(f[:3], " ")
}

// ---------------------------------------------------------------------------
// plain HTTP

// procSample is a process's CPU time and context switches (all threads).
type procSample struct {
	cpu      time.Duration
	switches int64
}

func sample(pid int) procSample {
	var s procSample
	if pid == 0 {
		return s
	}
	tasks, _ := os.ReadDir(fmt.Sprintf("/proc/%d/task", pid))
	for _, t := range tasks {
		dir := fmt.Sprintf("/proc/%d/task/%s/", pid, t.Name())
		if stat, err := os.ReadFile(dir + "stat"); err == nil {
			// Fields after the parenthesised command: utime is the 12th, stime the 13th.
			if i := bytes.LastIndexByte(stat, ')'); i > 0 {
				f := strings.Fields(string(stat[i+1:]))
				if len(f) > 12 {
					ut, _ := strconv.ParseInt(f[11], 10, 64)
					st, _ := strconv.ParseInt(f[12], 10, 64)
					s.cpu += time.Duration(ut+st) * (time.Second / clockTicks)
				}
			}
		}
		if status, err := os.ReadFile(dir + "status"); err == nil {
			for _, line := range strings.Split(string(status), "\n") {
				if k, v, ok := strings.Cut(line, ":"); ok && strings.HasSuffix(k, "voluntary_ctxt_switches") {
					n, _ := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
					s.switches += n
				}
			}
		}
	}
	return s
}

// clockTicks is USER_HZ, the unit of /proc/PID/stat times (100 on Linux).
const clockTicks = 100

func (s procSample) since(before procSample) procSample {
	return procSample{cpu: s.cpu - before.cpu, switches: s.switches - before.switches}
}

func (s *procSample) add(o procSample) {
	s.cpu += o.cpu
	s.switches += o.switches
}

// cpuPer is the CPU time per request in µs.
func (s procSample) cpuPer(requests int64) float64 {
	return float64(s.cpu.Microseconds()) / float64(requests)
}

type httpTotals struct {
	upstream, proxy procSample
	requests        int64
	elapsed         time.Duration
	p50s, p99s      []time.Duration
}

func (t *httpTotals) add(r wrkRun) {
	t.requests += r.requests
	t.elapsed += r.elapsed
	t.p50s = append(t.p50s, r.p50)
	t.p99s = append(t.p99s, r.p99)
}

func (t *httpTotals) rps() float64 { return float64(t.requests) / t.elapsed.Seconds() }

func median(d []time.Duration) time.Duration {
	s := slices.Clone(d)
	slices.Sort(s)
	return s[len(s)/2]
}

// benchHTTP runs wrk directly, through netproxy and through the null relay,
// alternating within each round so all three see the same machine load,
// first unpinned and then pinned.
func benchHTTP(o options, up, relay *helper, np *netproxy) error {
	dir, err := os.MkdirTemp("", "loadbench-wrk")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	_, upPort, _ := net.SplitHostPort(up.addr)
	host := "up.test:" + upPort
	type target struct {
		name, addr, script string
		proxyPID           int // the relaying process (0: none)
	}
	var targets []target
	for _, t := range []struct {
		name, addr, path string
		pid              int
	}{
		{"direct", up.addr, "/", 0},
		{"netproxy", np.httpAddr, "http://" + host + "/", np.cmd.Process.Pid},
		{"null relay", relay.addr, "/", relay.pid()},
	} {
		script, err := wrkScript(dir, strings.ReplaceAll(t.name, " ", "-"), t.path, host)
		if err != nil {
			return err
		}
		targets = append(targets, target{t.name, t.addr, script, t.pid})
	}
	relays := []int{np.cmd.Process.Pid, relay.pid()}
	layouts := []struct {
		name      string
		wrkCPUs   string
		upCPUs    []int // the upstream's
		relayCPUs []int // netproxy's and the null relay's
	}{
		{"unpinned (every process may use both CPUs)", "", nil, nil},
		{"pinned: wrk on CPU 0; upstream and netproxy (or the relay) share CPU 1", "0", []int{1}, []int{1}},
		{"pinned: wrk and upstream share CPU 0; netproxy (or the relay) alone on CPU 1", "0", []int{0}, []int{1}},
	}
	defer func() {
		pin(up.pid(), nil)
		for _, pid := range relays {
			pin(pid, nil)
		}
	}()
	for _, l := range layouts {
		if err := pin(up.pid(), l.upCPUs); err != nil {
			return err
		}
		for _, pid := range relays {
			if err := pin(pid, l.relayCPUs); err != nil {
				return err
			}
		}
		settle()
		// Warm-up: connections, pools and caches, not counted.
		for _, t := range targets {
			if _, err := runWrk(o.wrk, t.script, t.addr, o.conns, time.Second, l.wrkCPUs); err != nil {
				return fmt.Errorf("%s warm-up: %w", t.name, err)
			}
		}
		totals := make([]httpTotals, len(targets))
		for r := 0; r < o.rounds; r++ {
			for i, t := range targets {
				upBefore := sample(up.pid())
				proxyBefore := sample(t.proxyPID)
				res, err := runWrk(o.wrk, t.script, t.addr, o.conns, o.dur, l.wrkCPUs)
				if err != nil {
					return fmt.Errorf("%s: %w", t.name, err)
				}
				totals[i].add(res)
				totals[i].upstream.add(sample(up.pid()).since(upBefore))
				totals[i].proxy.add(sample(t.proxyPID).since(proxyBefore))
			}
		}
		fmt.Printf("plain HTTP, %s\n  wrk -t1 -c%d, %d alternating rounds of %s each, %s\n", l.name, o.conns, o.rounds, o.dur, loadAvg())
		fmt.Printf("  | path | requests/s | p50 | p99 | of direct | upstream CPU/req | proxy CPU/req | proxy context switches/req |\n  |---|---:|---:|---:|---:|---:|---:|---:|\n")
		for i, t := range targets {
			tt := &totals[i]
			proxyCPU, proxySwitches := "—", "—"
			if t.proxyPID != 0 {
				proxyCPU = fmt.Sprintf("%.1f µs", tt.proxy.cpuPer(tt.requests))
				proxySwitches = fmt.Sprintf("%.2f", float64(tt.proxy.switches)/float64(tt.requests))
			}
			fmt.Printf("  | %s | %.0f | %s | %s | %.1f %% | %.1f µs | %s | %s |\n", t.name, tt.rps(),
				median(tt.p50s).Round(time.Microsecond), median(tt.p99s).Round(time.Microsecond),
				100*tt.rps()/totals[0].rps(), tt.upstream.cpuPer(tt.requests), proxyCPU, proxySwitches)
		}
		fmt.Printf("  netproxy reaches %.1f %% of direct (target >= 70 %%) and %.1f %% of the null relay\n\n",
			100*totals[1].rps()/totals[0].rps(), 100*totals[1].rps()/totals[2].rps())
	}
	return nil
}

// ---------------------------------------------------------------------------
// tunnel throughput

// benchTunnel moves o.size bytes from the blob sender to a splice-to-
// /dev/null receiver: directly, through a netproxy CONNECT tunnel and
// through the null relay; best of five alternating runs each.
func benchTunnel(o options, blob, relay *helper, np *netproxy) error {
	_, blobPort, _ := net.SplitHostPort(blob.addr)
	const tries = 5
	best := make([]float64, 3)
	for i := 0; i < tries; i++ {
		runs := []func() (float64, error){
			func() (float64, error) { return transfer(blob.addr, "", o.size) },
			func() (float64, error) { return transfer(np.httpAddr, "up.test:"+blobPort, o.size) },
			func() (float64, error) { return transfer(relay.addr, "", o.size) },
		}
		for j, f := range runs {
			v, err := f()
			if err != nil {
				return fmt.Errorf("transfer %d: %w", j, err)
			}
			best[j] = max(best[j], v)
		}
	}
	fmt.Printf("%d MiB transfer (sendfile sender, splice receiver; best of %d alternating), %s\n", o.size>>20, tries, loadAvg())
	fmt.Printf("  | path | MiB/s | of direct |\n  |---|---:|---:|\n")
	for i, name := range []string{"direct", "netproxy CONNECT", "null relay"} {
		fmt.Printf("  | %s | %.0f | %.1f %% |\n", name, best[i], 100*best[i]/best[0])
	}
	fmt.Printf("  netproxy reaches %.1f %% of direct (target >= 90 %%) and %.1f %% of the null relay\n\n",
		100*best[1]/best[0], 100*best[1]/best[2])
	return nil
}

// transfer reads size bytes from addr (through a CONNECT to target when
// target is set) and returns MiB/s. The receiver splices the socket into
// /dev/null: it copies nothing to user space.
func transfer(addr, target string, size int64) (float64, error) {
	devNull, err := os.OpenFile(os.DevNull, os.O_WRONLY, 0)
	if err != nil {
		return 0, err
	}
	defer devNull.Close()
	start := time.Now()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		return 0, err
	}
	defer c.Close()
	if target != "" {
		fmt.Fprintf(c, "CONNECT %s HTTP/1.1\r\nHost: %s\r\n\r\n", target, target)
		head, err := readHead(c)
		if err != nil {
			return 0, err
		}
		if !bytes.HasPrefix(head, []byte("HTTP/1.1 200")) {
			return 0, fmt.Errorf("CONNECT answered %q", head)
		}
	}
	n, err := devNull.ReadFrom(c.(*net.TCPConn))
	if err != nil {
		return 0, err
	}
	if n != size {
		return 0, fmt.Errorf("got %d bytes, want %d", n, size)
	}
	return float64(n) / (1 << 20) / time.Since(start).Seconds(), nil
}

// readHead reads a response head byte by byte, so no tunnel byte is left
// in a buffer.
func readHead(c net.Conn) ([]byte, error) {
	var head []byte
	var b [1]byte
	c.SetReadDeadline(time.Now().Add(10 * time.Second))
	defer c.SetReadDeadline(time.Time{})
	for !bytes.HasSuffix(head, []byte("\r\n\r\n")) {
		if len(head) > 4096 {
			return nil, errors.New("response head too long")
		}
		if _, err := c.Read(b[:]); err != nil {
			return nil, err
		}
		head = append(head, b[0])
	}
	return head, nil
}

// ---------------------------------------------------------------------------
// idle tunnels

// startHoldUpstream accepts and keeps connections open, sending nothing.
func startHoldUpstream() (string, *heldConns, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", nil, err
	}
	h := &heldConns{}
	go func() {
		for {
			c, err := ln.Accept()
			if errors.Is(err, net.ErrClosed) {
				return
			}
			if err != nil { // e.g. out of descriptors: keep serving
				time.Sleep(10 * time.Millisecond)
				continue
			}
			h.add(c)
		}
	}()
	return ln.Addr().String(), h, nil
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

func (h *heldConns) count() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return len(h.conns)
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
	if err := benchproc.WaitHealthy(addrs[2], 15*time.Second); err != nil {
		np.stop()
		return nil, err
	}
	return np, nil
}

func (n *netproxy) stop() {
	benchproc.Stop(n.cmd, 20*time.Second)
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
