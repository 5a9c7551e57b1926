// Command soak is `make soak`: a long run of the real `netproxy serve`
// under many concurrent connections of mixed traffic, watching for leaks and
// for lost or corrupted responses (issue 12).
//
// It starts netproxy (audit and metrics on) and an upstream process (this
// binary re-executed with -role upstream: an HTTP server whose bodies carry
// a CRC-32 header, an upload endpoint that answers the CRC-32 of what it
// received, and a TCP echo server for tunnels), then keeps -conns client
// connections busy for -duration, each playing one role:
//
//	keepalive  keep-alive GETs of random-size checksummed bodies
//	upload     keep-alive POSTs of random bodies, the CRC answered back
//	connect    a CONNECT tunnel to the echo server, random messages echoed
//	socks      the same through SOCKS5
//	blocked    keep-alive GETs to a denied host (403 JSON expected)
//	slow       a request head sent a few bytes at a time, then checked
//	abandon    a connection that sends part of a head and goes away
//
// Every 10 s it prints netproxy's RSS, open descriptors and goroutines and
// the window's operations, errors and p99 latency. It fails on growth of
// any of the three after the warm-up, on any lost or corrupted response,
// and on a sustained p99 latency blow-up. It must never need the network beyond
// loopback.
package main

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"errors"
	"flag"
	"fmt"
	"hash/crc32"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/netproxy/netproxy/test/benchproc"
)

type options struct {
	bin      string
	conns    int
	duration time.Duration
	warmup   time.Duration
	think    time.Duration
	interval time.Duration
}

func main() {
	role := flag.String("role", "", "internal: run the upstream")
	var o options
	flag.StringVar(&o.bin, "netproxy", "bin/netproxy", "netproxy binary")
	flag.IntVar(&o.conns, "conns", 10000, "concurrent client connections")
	flag.DurationVar(&o.duration, "duration", 10*time.Minute, "length of the run (warm-up included)")
	flag.DurationVar(&o.warmup, "warmup", 2*time.Minute, "warm-up before growth is judged")
	flag.DurationVar(&o.think, "think", 5*time.Second, "mean pause between a connection's operations")
	flag.DurationVar(&o.interval, "interval", 10*time.Second, "report interval")
	flag.Parse()
	if *role == "upstream" {
		if err := serveUpstream(); err != nil {
			fmt.Fprintln(os.Stderr, "upstream:", err)
			os.Exit(1)
		}
		return
	}
	if err := run(o); err != nil {
		fmt.Fprintln(os.Stderr, "soak: FAIL:", err)
		os.Exit(1)
	}
	fmt.Println("soak: PASS")
}

// raiseNoFile lifts the descriptor limit (inherited by both children).
func raiseNoFile(want uint64) uint64 {
	var r syscall.Rlimit
	syscall.Getrlimit(syscall.RLIMIT_NOFILE, &r)
	if r.Max < want {
		r.Max = want // allowed as root; otherwise the soft limit below
		if syscall.Setrlimit(syscall.RLIMIT_NOFILE, &syscall.Rlimit{Cur: want, Max: want}) == nil {
			return want
		}
		syscall.Getrlimit(syscall.RLIMIT_NOFILE, &r)
	}
	r.Cur = r.Max
	syscall.Setrlimit(syscall.RLIMIT_NOFILE, &r)
	return r.Cur
}

// ---- upstream role ----

func serveUpstream() error {
	hl, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	el, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	fmt.Printf("%d %d\n", hl.Addr().(*net.TCPAddr).Port, el.Addr().(*net.TCPAddr).Port)
	os.Stdout.Sync()
	go func() {
		for {
			c, err := el.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				io.Copy(c, c)
			}()
		}
	}()
	mux := http.NewServeMux()
	mux.HandleFunc("/blob", func(w http.ResponseWriter, r *http.Request) {
		n, _ := strconv.Atoi(r.URL.Query().Get("n"))
		seed, _ := strconv.ParseUint(r.URL.Query().Get("seed"), 10, 64)
		b := blob(n, seed)
		w.Header().Set("X-Crc32", strconv.FormatUint(uint64(crc32.ChecksumIEEE(b)), 10))
		w.Header().Set("Content-Length", strconv.Itoa(len(b)))
		w.Write(b)
	})
	mux.HandleFunc("/upload", func(w http.ResponseWriter, r *http.Request) {
		h := crc32.NewIEEE()
		n, _ := io.Copy(h, r.Body)
		fmt.Fprintf(w, "%d %d", n, h.Sum32())
	})
	return (&http.Server{Handler: mux, ReadHeaderTimeout: 30 * time.Second}).Serve(hl)
}

// blob is n deterministic bytes for seed.
func blob(n int, seed uint64) []byte {
	b := make([]byte, n+8)
	r := rand.NewPCG(seed, seed^0x9e3779b97f4a7c15)
	for i := 0; i < n; i += 8 {
		binary.LittleEndian.PutUint64(b[i:], r.Uint64())
	}
	return b[:n]
}

// ---- the run ----

type stats struct {
	ops, lost, corrupt atomic.Int64
	mu                 sync.Mutex
	lat                []time.Duration // this window's
	firstErrs          []string
	byRole             map[string]int
}

func (s *stats) ok(d time.Duration) {
	s.ops.Add(1)
	s.mu.Lock()
	s.lat = append(s.lat, d)
	s.mu.Unlock()
}

// okSlow counts an operation whose latency is the client's own doing (a
// head sent slowly on purpose): it stays out of the latency figures.
func (s *stats) okSlow() { s.ops.Add(1) }

func (s *stats) fail(kind *atomic.Int64, role, msg string) {
	kind.Add(1)
	s.mu.Lock()
	if s.byRole == nil {
		s.byRole = map[string]int{}
	}
	k := role + " corrupt"
	if kind == &s.lost {
		k = role + " lost"
	}
	s.byRole[k]++
	if len(s.firstErrs) < 50 {
		m := fmt.Sprintf("%s %s: %s", time.Now().Format("15:04:05"), role, msg)
		s.firstErrs = append(s.firstErrs, m)
		fmt.Println("  error:", m)
	}
	s.mu.Unlock()
}

func (s *stats) window() (p50, p99 time.Duration, n int) {
	s.mu.Lock()
	l := s.lat
	s.lat = nil
	s.mu.Unlock()
	if len(l) == 0 {
		return 0, 0, 0
	}
	slices.Sort(l)
	return l[len(l)/2], l[len(l)*99/100], len(l)
}

type env struct {
	httpAddr, socksAddr string
	upPort, echoPort    int
	think               time.Duration
	st                  *stats
	stop                chan struct{}
}

func (e *env) pause() bool {
	d := time.Duration(rand.Int64N(int64(2*e.think) + 1))
	select {
	case <-e.stop:
		return false
	case <-time.After(d):
		return true
	}
}

func (e *env) stopped() bool {
	select {
	case <-e.stop:
		return true
	default:
		return false
	}
}

type sample struct {
	at                 time.Duration
	rssKB, fds, gorout int64
	ops, lost, corrupt int64
	p50, p99           time.Duration
	windowOps          int
	active             float64
}

func run(o options) error {
	limit := raiseNoFile(uint64(3*o.conns + 4096))
	fmt.Printf("soak: %d connections for %v (warm-up %v, think %v), descriptor limit %d\n", o.conns, o.duration, o.warmup, o.think, limit)
	self, _ := os.Executable()
	up := exec.Command(self, "-role", "upstream")
	up.Stderr = os.Stderr
	up.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	out, _ := up.StdoutPipe()
	if err := up.Start(); err != nil {
		return err
	}
	defer up.Process.Kill()
	var upPort, echoPort int
	if _, err := fmt.Fscan(bufio.NewReader(out), &upPort, &echoPort); err != nil {
		return fmt.Errorf("upstream ports: %w", err)
	}
	np, err := startNetproxy(o.bin, o.conns)
	if err != nil {
		return err
	}
	defer np.stop()
	e := &env{httpAddr: np.http, socksAddr: np.socks, upPort: upPort, echoPort: echoPort, think: o.think, st: &stats{}, stop: make(chan struct{})}
	roles := []struct {
		name  string
		share int
		fn    func(*env, string)
	}{
		{"keepalive", 30, keepAlive}, {"upload", 10, upload}, {"connect", 15, tunnel},
		{"socks", 15, tunnel}, {"blocked", 10, blocked}, {"slow", 10, slow}, {"abandon", 10, abandon},
	}
	var wg sync.WaitGroup
	start := time.Now()
	ramp := 20 * time.Second
	go func() {
		for i := 0; i < o.conns; i++ {
			k := i % 100
			var fn func(*env, string)
			var name string
			for _, r := range roles {
				if k < r.share {
					fn, name = r.fn, r.name
					break
				}
				k -= r.share
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				fn(e, name)
			}()
			if e.stopped() {
				return
			}
			time.Sleep(ramp / time.Duration(o.conns))
		}
	}()
	var samples []sample
	tick := time.NewTicker(o.interval)
	defer tick.Stop()
	fmt.Println("  time | RSS MiB | fds | goroutines | active conns | ops (window) | p50 | p99 | lost | corrupt")
	for range tick.C {
		s := sample{at: time.Since(start).Round(time.Second)}
		s.rssKB, s.fds = procStats(np.cmd.Process.Pid)
		s.gorout, s.active = np.goroutines()
		s.ops, s.lost, s.corrupt = e.st.ops.Load(), e.st.lost.Load(), e.st.corrupt.Load()
		s.p50, s.p99, s.windowOps = e.st.window()
		samples = append(samples, s)
		fmt.Printf("  %5v | %7.1f | %5d | %6d | %6.0f | %8d (%6d) | %v | %v | %d | %d\n", s.at, float64(s.rssKB)/1024, s.fds, s.gorout, s.active,
			s.ops, s.windowOps, s.p50.Round(time.Microsecond), s.p99.Round(time.Microsecond), s.lost, s.corrupt)
		if time.Since(start) >= o.duration {
			break
		}
	}
	close(e.stop)
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(30 * time.Second):
	}
	return judge(o, samples, e.st)
}

// judge applies the pass criteria to the samples.
func judge(o options, samples []sample, st *stats) error {
	var errs []string
	last := samples[len(samples)-1]
	if last.lost > 0 || last.corrupt > 0 {
		errs = append(errs, fmt.Sprintf("%d lost and %d corrupted responses", last.lost, last.corrupt))
	}
	// The baseline is the warm-up's last sample; the end is the median of
	// the last three (one sample is noise).
	wi := -1
	for i, s := range samples {
		if s.at <= o.warmup.Round(time.Second) {
			wi = i
		}
	}
	if wi < 0 || wi >= len(samples)-3 {
		errs = append(errs, "run too short to judge growth after the warm-up")
	} else {
		base := samples[wi]
		tail := samples[len(samples)-3:]
		med := func(f func(sample) int64) int64 {
			v := []int64{f(tail[0]), f(tail[1]), f(tail[2])}
			slices.Sort(v)
			return v[1]
		}
		rss, fds, gor := med(func(s sample) int64 { return s.rssKB }), med(func(s sample) int64 { return s.fds }), med(func(s sample) int64 { return s.gorout })
		fmt.Printf("soak: after warm-up RSS %.1f→%.1f MiB, fds %d→%d, goroutines %d→%d\n", float64(base.rssKB)/1024, float64(rss)/1024, base.fds, fds, base.gorout, gor)
		if rss > base.rssKB*5/4+16<<10 {
			errs = append(errs, fmt.Sprintf("RSS grew from %d to %d KiB after the warm-up", base.rssKB, rss))
		}
		if fds > base.fds*21/20+64 {
			errs = append(errs, fmt.Sprintf("descriptors grew from %d to %d after the warm-up", base.fds, fds))
		}
		if gor > base.gorout*21/20+128 {
			errs = append(errs, fmt.Sprintf("goroutines grew from %d to %d after the warm-up", base.gorout, gor))
		}
		var warm []time.Duration
		for _, s := range samples[:wi+1] {
			if s.windowOps > 0 {
				warm = append(warm, s.p99)
			}
		}
		if len(warm) > 0 {
			slices.Sort(warm)
			ref := warm[len(warm)/2]
			// A blow-up is sustained: three windows in a row beyond 10×
			// the warm-up's median p99 (and beyond 1 s). One window can be
			// another job's burst on a shared machine.
			run := 0
			for _, s := range samples[wi+1:] {
				if s.windowOps > 0 && s.p99 > 10*ref && s.p99 > time.Second {
					if run++; run == 3 {
						errs = append(errs, fmt.Sprintf("p99 %v at %v (three windows running) against %v during the warm-up", s.p99, s.at, ref))
						break
					}
				} else {
					run = 0
				}
			}
		}
	}
	fmt.Printf("soak: %d operations, %d lost, %d corrupted\n", last.ops, last.lost, last.corrupt)
	st.mu.Lock()
	for k, n := range st.byRole {
		fmt.Printf("soak:   %s: %d\n", k, n)
	}
	st.mu.Unlock()
	if len(errs) > 0 {
		return errors.New(strings.Join(errs, "; "))
	}
	return nil
}

func procStats(pid int) (rssKB, fds int64) {
	if b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid)); err == nil {
		for _, line := range strings.Split(string(b), "\n") {
			if strings.HasPrefix(line, "VmRSS:") {
				rssKB, _ = strconv.ParseInt(strings.Fields(line)[1], 10, 64)
			}
		}
	}
	if ents, err := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid)); err == nil {
		fds = int64(len(ents))
	}
	return
}

// ---- netproxy ----

type netproxy struct {
	cmd                *exec.Cmd
	http, socks, admin string
	dir                string
}

func freeAddr() string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		panic(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

func startNetproxy(bin string, conns int) (*netproxy, error) {
	dir, err := os.MkdirTemp("", "soak")
	if err != nil {
		return nil, err
	}
	np := &netproxy{http: freeAddr(), socks: freeAddr(), admin: freeAddr(), dir: dir}
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
"denied.test" = "deny"
[dns.hosts]
"up.test" = ["127.0.0.1"]
"denied.test" = ["127.0.0.1"]
[approvals]
enabled = false
[audit]
path = %q
[log]
level = "warn"
[limits]
max_connections = %d
header_timeout = "30s"
idle_timeout = "1m"
`, np.http, np.socks, np.admin, filepath.Join(dir, "control.sock"), filepath.Join(dir, "audit.jsonl"), conns+conns/10+100)
	path := filepath.Join(dir, "netproxy.toml")
	if err := os.WriteFile(path, []byte(cfg), 0o644); err != nil {
		return nil, err
	}
	np.cmd = exec.Command(bin, "serve", "--config", path)
	np.cmd.Env = append(os.Environ(), "NETPROXY_HOME="+dir, "HOME="+dir)
	np.cmd.Stdout, np.cmd.Stderr = os.Stderr, os.Stderr
	np.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := np.cmd.Start(); err != nil {
		return nil, err
	}
	if err := benchproc.WaitHealthy(np.admin, 15*time.Second); err != nil {
		np.stop()
		return nil, err
	}
	return np, nil
}

func (n *netproxy) stop() {
	benchproc.Stop(n.cmd, 20*time.Second)
	os.RemoveAll(n.dir)
}

// goroutines reads go_goroutines and the active connections from /metrics.
func (n *netproxy) goroutines() (int64, float64) {
	resp, err := http.Get("http://" + n.admin + "/metrics")
	if err != nil {
		return -1, -1
	}
	defer resp.Body.Close()
	var g int64 = -1
	var active float64
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if v, ok := strings.CutPrefix(line, "go_goroutines "); ok {
			f, _ := strconv.ParseFloat(v, 64)
			g = int64(f)
		}
		if strings.HasPrefix(line, "netproxy_connections_active{") {
			f, _ := strconv.ParseFloat(line[strings.LastIndexByte(line, ' ')+1:], 64)
			active += f
		}
	}
	return g, active
}

// ---- client roles ----

const opTimeout = 30 * time.Second

func dial(e *env, addr string) (net.Conn, error) {
	return net.DialTimeout("tcp", addr, 10*time.Second)
}

// keepAlive: GETs of checksummed bodies over one keep-alive connection.
func keepAlive(e *env, role string) {
	for !e.stopped() {
		c, err := dial(e, e.httpAddr)
		if err != nil {
			e.st.fail(&e.st.lost, role, "dial: "+err.Error())
			if !e.pause() {
				return
			}
			continue
		}
		br := bufio.NewReader(c)
		for i := 0; i < 50 && (i == 0 || e.pause()); i++ { // the first at once: a silent new connection is cut after header_timeout
			n, seed := rand.IntN(64<<10), rand.Uint64()
			start := time.Now()
			c.SetDeadline(time.Now().Add(opTimeout))
			fmt.Fprintf(c, "GET http://up.test:%d/blob?n=%d&seed=%d HTTP/1.1\r\nHost: up.test:%d\r\n\r\n", e.upPort, n, seed, e.upPort)
			resp, body, ok := e.readAnswer(br, role)
			if !ok {
				break
			}
			want, _ := strconv.ParseUint(resp.Header.Get("X-Crc32"), 10, 32)
			if resp.StatusCode != 200 || len(body) != n || crc32.ChecksumIEEE(body) != uint32(want) || !bytes.Equal(body, blob(n, seed)) {
				e.st.fail(&e.st.corrupt, role, fmt.Sprintf("status %d, %d of %d bytes", resp.StatusCode, len(body), n))
				break
			}
			e.st.ok(time.Since(start))
			if resp.Close {
				break // the proxy said it closes: a new connection
			}
		}
		c.Close()
	}
}

// readAnswer reads one response and its whole body; a failure is counted
// as lost for role.
func (e *env) readAnswer(br *bufio.Reader, role string) (*http.Response, []byte, bool) {
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		e.st.fail(&e.st.lost, role, err.Error())
		return nil, nil, false
	}
	body, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil {
		e.st.fail(&e.st.lost, role, "body: "+err.Error())
		return nil, nil, false
	}
	return resp, body, true
}

// upload: POSTs of random bodies; the upstream answers length and CRC.
func upload(e *env, role string) {
	for !e.stopped() {
		c, err := dial(e, e.httpAddr)
		if err != nil {
			e.st.fail(&e.st.lost, role, "dial: "+err.Error())
			if !e.pause() {
				return
			}
			continue
		}
		br := bufio.NewReader(c)
		for i := 0; i < 20 && (i == 0 || e.pause()); i++ { // the first at once: a silent new connection is cut after header_timeout
			body := blob(rand.IntN(256<<10), rand.Uint64())
			start := time.Now()
			c.SetDeadline(time.Now().Add(opTimeout))
			fmt.Fprintf(c, "POST http://up.test:%d/upload HTTP/1.1\r\nHost: up.test:%d\r\nContent-Length: %d\r\n\r\n", e.upPort, e.upPort, len(body))
			c.Write(body)
			resp, got, ok := e.readAnswer(br, role)
			if !ok {
				break
			}
			if want := fmt.Sprintf("%d %d", len(body), crc32.ChecksumIEEE(body)); resp.StatusCode != 200 || string(got) != want {
				e.st.fail(&e.st.corrupt, role, fmt.Sprintf("status %d, %q want %q", resp.StatusCode, got, want))
				break
			}
			e.st.ok(time.Since(start))
			if resp.Close {
				break // the proxy said it closes: a new connection
			}
		}
		c.Close()
	}
}

// tunnel: a CONNECT (role "connect") or SOCKS5 tunnel to the echo server.
func tunnel(e *env, role string) {
	for !e.stopped() {
		c, err := openTunnel(e, role)
		if err != nil {
			e.st.fail(&e.st.lost, role, err.Error())
			if !e.pause() {
				return
			}
			continue
		}
		buf := make([]byte, 16<<10)
		for i := 0; i < 30 && (i == 0 || e.pause()); i++ { // the first at once: a silent new connection is cut after header_timeout
			msg := blob(1+rand.IntN(16<<10), rand.Uint64())
			start := time.Now()
			c.SetDeadline(time.Now().Add(opTimeout))
			if _, err := c.Write(msg); err != nil {
				e.st.fail(&e.st.lost, role, "write: "+err.Error())
				break
			}
			if _, err := io.ReadFull(c, buf[:len(msg)]); err != nil {
				e.st.fail(&e.st.lost, role, "echo: "+err.Error())
				break
			}
			if !bytes.Equal(buf[:len(msg)], msg) {
				e.st.fail(&e.st.corrupt, role, "echo differs")
				break
			}
			e.st.ok(time.Since(start))
		}
		c.Close()
	}
}

func openTunnel(e *env, role string) (net.Conn, error) {
	if role == "socks" {
		c, err := dial(e, e.socksAddr)
		if err != nil {
			return nil, err
		}
		c.SetDeadline(time.Now().Add(opTimeout))
		c.Write([]byte{5, 1, 0})
		var sel [2]byte
		if _, err := io.ReadFull(c, sel[:]); err != nil {
			c.Close()
			return nil, fmt.Errorf("socks greeting: %w", err)
		}
		req := append([]byte{5, 1, 0, 3, byte(len("up.test"))}, "up.test"...)
		req = binary.BigEndian.AppendUint16(req, uint16(e.echoPort))
		c.Write(req)
		var rep [10]byte
		if _, err := io.ReadFull(c, rep[:]); err != nil || rep[1] != 0 {
			c.Close()
			return nil, fmt.Errorf("socks reply %d: %v", rep[1], err)
		}
		return c, nil
	}
	c, err := dial(e, e.httpAddr)
	if err != nil {
		return nil, err
	}
	c.SetDeadline(time.Now().Add(opTimeout))
	fmt.Fprintf(c, "CONNECT up.test:%d HTTP/1.1\r\nHost: up.test:%d\r\n\r\n", e.echoPort, e.echoPort)
	br := bufio.NewReader(c)
	resp, err := http.ReadResponse(br, &http.Request{Method: "CONNECT"})
	if err != nil || resp.StatusCode != 200 || br.Buffered() > 0 {
		c.Close()
		return nil, fmt.Errorf("CONNECT: %v %v", resp, err)
	}
	return c, nil
}

// blocked: keep-alive GETs to a denied host.
func blocked(e *env, role string) {
	for !e.stopped() {
		c, err := dial(e, e.httpAddr)
		if err != nil {
			e.st.fail(&e.st.lost, role, "dial: "+err.Error())
			if !e.pause() {
				return
			}
			continue
		}
		br := bufio.NewReader(c)
		for i := 0; i < 50 && (i == 0 || e.pause()); i++ { // the first at once: a silent new connection is cut after header_timeout
			start := time.Now()
			c.SetDeadline(time.Now().Add(opTimeout))
			io.WriteString(c, "GET http://denied.test/x?q=1 HTTP/1.1\r\nHost: denied.test\r\n\r\n")
			resp, err := http.ReadResponse(br, nil)
			if err != nil {
				e.st.fail(&e.st.lost, role, err.Error())
				break
			}
			body, err := io.ReadAll(resp.Body)
			resp.Body.Close()
			if err != nil || resp.StatusCode != 403 || !bytes.Contains(body, []byte(`"reason":"denied"`)) {
				e.st.fail(&e.st.corrupt, role, fmt.Sprintf("status %d %q %v", resp.StatusCode, body, err))
				break
			}
			e.st.ok(time.Since(start))
			if resp.Close {
				break // the proxy said it closes: a new connection
			}
		}
		c.Close()
	}
}

// slow: a head sent a few bytes at a time, within the header timeout.
func slow(e *env, role string) {
	for e.pause() {
		c, err := dial(e, e.httpAddr)
		if err != nil {
			e.st.fail(&e.st.lost, role, "dial: "+err.Error())
			continue
		}
		n, seed := rand.IntN(8<<10), rand.Uint64()
		head := fmt.Sprintf("GET http://up.test:%d/blob?n=%d&seed=%d HTTP/1.1\r\nHost: up.test:%d\r\nConnection: close\r\n\r\n", e.upPort, n, seed, e.upPort)
		c.SetDeadline(time.Now().Add(opTimeout))
		failed := false
		for i := 0; i < len(head); i += 8 {
			if _, err := io.WriteString(c, head[i:min(i+8, len(head))]); err != nil {
				e.st.fail(&e.st.lost, role, "write: "+err.Error())
				failed = true
				break
			}
			time.Sleep(60 * time.Millisecond)
		}
		if !failed {
			resp, err := http.ReadResponse(bufio.NewReader(c), nil)
			if err != nil {
				e.st.fail(&e.st.lost, role, err.Error())
			} else {
				body, err := io.ReadAll(resp.Body)
				if err != nil || resp.StatusCode != 200 || !bytes.Equal(body, blob(n, seed)) {
					e.st.fail(&e.st.corrupt, role, fmt.Sprintf("status %d, %d of %d bytes, %v", resp.StatusCode, len(body), n, err))
				} else {
					e.st.okSlow()
				}
			}
		}
		c.Close()
	}
}

// abandon: part of a head (or of a SOCKS5 greeting), then gone.
func abandon(e *env, role string) {
	for e.pause() {
		addr, part := e.httpAddr, "GET http://up.test/ HTTP/1.1\r\nHost: up"
		if rand.IntN(2) == 0 {
			addr, part = e.socksAddr, "\x05\x01"
		}
		c, err := dial(e, addr)
		if err != nil {
			e.st.fail(&e.st.lost, role, "dial: "+err.Error())
			continue
		}
		io.WriteString(c, part)
		select {
		case <-e.stop:
		case <-time.After(time.Duration(rand.Int64N(int64(8 * time.Second)))):
		}
		c.Close()
	}
}
