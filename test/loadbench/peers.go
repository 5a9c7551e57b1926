package main

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime/debug"
	"slices"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// The peer bench (`make bench-peers`, issue 14): the same workloads, in one
// run and interleaved round by round, directly against the origin, through
// a bare splice relay (the ceiling of any relay), Squid, Dante, a proxy made
// of the goproxy library alone, and netproxy with its production settings.
// Pinning: every proxy (and relay) alone on CPU 1; wrk, the transfer
// receiver (this process) and the origins on CPU 0; for the latency row,
// everything on CPU 0. It prints one markdown table and netproxy's issue-14
// targets, and fails when any measurement failed (a wrong answer, errors,
// a short transfer, a run that did not reconnect).

// peerParts are the parts of the peer bench, in run order (-only).
var peerParts = []string{"keepalive", "newconn", "latency", "tunnel", "idle", "interception"}

type peerOptions struct {
	netproxy, wrk, squid, danted string
	mitmdump                     string        // the interception part's mitmproxy
	dur                          time.Duration // each wrk run
	rounds                       int           // interleaved rounds per row (the median is reported)
	conns                        int           // wrk connections for the req/s rows
	size                         int64         // bytes per tunnel transfer
	tunnels                      int           // idle tunnels per peer
	intercepts                   int           // idle intercepted connections per peer (interception part)
	only                         []string
}

// The table's columns.
const (
	colDirect = iota
	colRelay
	colSquid
	colDante
	colGoproxy
	colNetproxy
	nCols
)

var colNames = [nCols]string{"direct", "bare relay", "Squid", "Dante", "goproxy lib", "netproxy"}

// The table's rows.
const (
	rowKeepAlive = iota
	rowNewConn
	rowLatency
	rowConnectMBs
	rowSocksMBs
	rowConnectCPU
	rowSocksCPU
	rowIdleConnect
	rowIdleSocks
	nRows
)

var rowNames = [nRows]string{
	"keep-alive req/s (wrk -t1 -c64, 1 KiB GET)",
	"new connection per request req/s (wrk -t1 -c64, `Connection: close`)",
	"latency p50 / p99 µs, one keep-alive connection, all on CPU 0 (added over direct)",
	"CONNECT tunnel MB/s (10⁶ B/s)",
	"SOCKS5 tunnel MB/s (10⁶ B/s)",
	"proxy CPU s per GiB, CONNECT",
	"proxy CPU s per GiB, SOCKS5",
	"KiB per idle CONNECT tunnel",
	"KiB per idle SOCKS5 tunnel",
}

// originBodySize is the plain-HTTP response body of the peer bench.
const originBodySize = 1024

// cell is one measure of one column: one value per round (and a second
// value for the latency row's p99), or why it failed.
type cell struct {
	vals, vals2 []float64
	opens       []float64 // new-connection row: TCP connections accepted per request, per round
	failed      string
	notes       []string
	mark        string // shown after the value (e.g. fewer idle tunnels than asked)
	badRuns     int    // rounds discarded for errors
}

func (c *cell) fail(format string, a ...any) {
	if c.failed == "" {
		c.failed = fmt.Sprintf(format, a...)
	}
}

func (c *cell) ok() bool { return c.failed == "" && len(c.vals) > 0 }

func (c *cell) median() float64  { return medianF(c.vals) }
func (c *cell) median2() float64 { return medianF(c.vals2) }

func medianF(v []float64) float64 {
	if len(v) == 0 {
		return 0
	}
	s := slices.Clone(v)
	slices.Sort(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

// peerBench is one run of the peer bench: its processes and results.
type peerBench struct {
	o                    peerOptions
	origin, blob         *peerProc // CPU 0
	httpRelay, blobRelay *peerProc // bare relays, CPU 1
	squid, dante, gp, np *peerProc // CPU 1
	originPort, blobPort int
	hold                 *heldConns
	holdPort             int
	fds                  int
	cells                [nRows][nCols]cell
	skipped              [nRows]bool // part not run (-only)
}

func runPeers(o peerOptions) error {
	for _, p := range o.only {
		if !slices.Contains(peerParts, p) {
			return fmt.Errorf("-only: unknown part %q (parts: %s)", p, strings.Join(peerParts, ","))
		}
	}
	if numCPU() < 2 {
		return fmt.Errorf("the peer bench pins the proxy and the client to different CPUs: needs 2 CPUs, have %d", numCPU())
	}
	// The plain parts need every peer of issue 14; the interception part
	// needs Squid (with OpenSSL) and mitmdump.
	plain := slices.ContainsFunc(o.only, func(p string) bool { return p != "interception" })
	intercept := slices.Contains(o.only, "interception")
	bins := []*string{&o.netproxy, &o.squid}
	if plain {
		bins = append(bins, &o.wrk, &o.danted)
	}
	if intercept {
		bins = append(bins, &o.mitmdump)
	}
	// Absolute paths: the peers run in their own directories.
	for _, b := range bins {
		path, err := exec.LookPath(*b)
		if err == nil {
			path, err = filepath.Abs(path)
		}
		if err != nil {
			return fmt.Errorf("%s not found: run scripts/install-test-deps.sh --bench-peers (Debian packages squid-openssl, dante-server, wrk, mitmproxy) and make build", *b)
		}
		*b = path
	}
	if _, err := exec.LookPath("taskset"); err != nil {
		return fmt.Errorf("taskset not found (Debian package util-linux)")
	}
	fds, err := raiseNoFile(65536)
	if err != nil {
		return err
	}
	if fds < 2*o.tunnels+2000 || fds < 12000 {
		return fmt.Errorf("RLIMIT_NOFILE is %d: the idle-tunnel run needs at least %d", fds, max(12000, 2*o.tunnels+2000))
	}
	fmt.Printf("# netproxy peer bench (issues 14, 29)\n\n%d CPUs, %s, %s\n%s\n\n", numCPU(), loadAvg(), time.Now().UTC().Format(time.RFC3339), versions(o, plain, intercept))
	failed := 0
	if plain {
		n, err := runPlainPeers(o, fds)
		if err != nil {
			return err
		}
		failed += n
	}
	if intercept {
		start := time.Now()
		fmt.Fprintf(os.Stderr, "peer bench: interception ...\n")
		ib, err := startInterception(o, fds)
		if err != nil {
			return fmt.Errorf("interception: %w", err)
		}
		err = ib.run()
		if err == nil {
			failed += ib.printInterceptTable()
		}
		ib.stopAll()
		if err != nil {
			return fmt.Errorf("interception: %w", err)
		}
		fmt.Fprintf(os.Stderr, "peer bench: interception done in %s\n", time.Since(start).Round(time.Second))
	}
	if failed > 0 {
		return fmt.Errorf("%d measurement(s) failed: see the table", failed)
	}
	return nil
}

// runPlainPeers runs the parts of issue 14 (all but interception) and
// prints their table; it returns the number of failed cells.
func runPlainPeers(o peerOptions, fds int) (int, error) {
	b := &peerBench{o: o, fds: fds}
	for r := range b.skipped {
		b.skipped[r] = true
	}
	defer b.stopAll()
	if err := b.startAll(); err != nil {
		return 0, err
	}
	if err := b.preflight(); err != nil {
		return 0, err
	}
	run := func(part string, f func() error) error {
		if !slices.Contains(o.only, part) {
			return nil
		}
		start := time.Now()
		fmt.Fprintf(os.Stderr, "peer bench: %s ...\n", part)
		if err := f(); err != nil {
			return fmt.Errorf("%s: %w", part, err)
		}
		fmt.Fprintf(os.Stderr, "peer bench: %s done in %s\n", part, time.Since(start).Round(time.Second))
		return nil
	}
	for _, p := range []struct {
		part string
		f    func() error
	}{
		{"keepalive", func() error { return b.benchHTTP(rowKeepAlive) }},
		{"newconn", func() error { return b.benchHTTP(rowNewConn) }},
		{"latency", func() error { return b.benchHTTP(rowLatency) }},
		{"tunnel", b.benchTunnels},
		{"idle", b.benchIdle},
	} {
		if err := run(p.part, p.f); err != nil {
			return 0, err
		}
	}
	return b.printTable(), nil
}

// raiseNoFile raises this process's RLIMIT_NOFILE (inherited by every peer
// it starts) to want, or to the hard limit when it may not raise that, and
// returns the soft limit in force.
func raiseNoFile(want uint64) (int, error) {
	var l unix.Rlimit
	if err := unix.Getrlimit(unix.RLIMIT_NOFILE, &l); err != nil {
		return 0, err
	}
	if l.Max < want {
		if unix.Setrlimit(unix.RLIMIT_NOFILE, &unix.Rlimit{Cur: want, Max: want}) == nil {
			return int(want), nil
		}
	}
	l.Cur = min(l.Max, max(want, l.Cur))
	if err := unix.Setrlimit(unix.RLIMIT_NOFILE, &l); err != nil {
		return 0, fmt.Errorf("RLIMIT_NOFILE: %w", err)
	}
	return int(l.Cur), nil
}

func versions(o peerOptions, plain, intercept bool) string {
	first := func(name string, args ...string) string {
		out, _ := exec.Command(name, args...).CombinedOutput()
		line, _, _ := strings.Cut(strings.TrimSpace(string(out)), "\n")
		return strings.TrimSpace(line)
	}
	gp := "?"
	if bi, ok := debug.ReadBuildInfo(); ok {
		for _, d := range bi.Deps {
			if d.Path == "github.com/elazarl/goproxy" {
				gp = d.Version
			}
		}
	}
	rev := first("git", "rev-parse", "--short=12", "HEAD")
	if rev == "" || strings.Contains(rev, " ") {
		rev = "?"
	} else if first("git", "status", "--porcelain", "--untracked-files=no") != "" {
		rev += "+changes"
	}
	var parts []string
	parts = append(parts, first(o.squid, "-v"))
	if plain {
		parts = append(parts, first(o.danted, "-v"), first(o.wrk, "-v"), "goproxy "+gp)
	}
	if intercept {
		parts = append(parts, mitmdumpVersion(o.mitmdump))
	}
	parts = append(parts, fmt.Sprintf("netproxy %s (tree %s)", o.netproxy, rev))
	return strings.Join(parts, "; ")
}

// startAll starts the origins, the bare relays and the peers, and pins them.
func (b *peerBench) startAll() error {
	h, err := startHelper("http", "-body", strconv.Itoa(originBodySize))
	if err != nil {
		return err
	}
	b.origin = fromHelper("origin", h)
	if h, err = startHelper("blob", "-bytes", strconv.FormatInt(b.o.size, 10)); err != nil {
		return err
	}
	b.blob = fromHelper("blob", h)
	if b.originPort, err = portOf(b.origin.httpAddr); err != nil {
		return err
	}
	if b.blobPort, err = portOf(b.blob.httpAddr); err != nil {
		return err
	}
	if h, err = startHelper("relay", "-to", b.origin.httpAddr); err != nil {
		return err
	}
	b.httpRelay = fromHelper("bare relay", h)
	if h, err = startHelper("relay", "-to", b.blob.httpAddr); err != nil {
		return err
	}
	b.blobRelay = fromHelper("bare relay", h)
	if h, err = startHelper("goproxy"); err != nil {
		return err
	}
	b.gp = fromHelper("goproxy lib", h)
	if b.squid, err = startSquid(b.o.squid, min(b.fds, 65536)); err != nil {
		return err
	}
	if b.dante, err = startDante(b.o.danted); err != nil {
		return err
	}
	if b.np, err = startNetproxyPeer(b.o.netproxy, b.originPort); err != nil {
		return err
	}
	holdAddr, held, err := startHoldUpstream()
	if err != nil {
		return err
	}
	b.hold = held
	if b.holdPort, err = portOf(holdAddr); err != nil {
		return err
	}
	// This process is the transfer receiver and the idle-tunnel client.
	if err := pin(os.Getpid(), []int{0}); err != nil {
		return err
	}
	for _, p := range []*peerProc{b.origin, b.blob} {
		if err := pinTree(p.pid(), []int{0}); err != nil {
			return err
		}
	}
	if err := b.pinProxies([]int{1}); err != nil {
		return err
	}
	settle()
	return nil
}

func (b *peerBench) proxies() []*peerProc {
	return []*peerProc{b.httpRelay, b.blobRelay, b.squid, b.dante, b.gp, b.np}
}

func (b *peerBench) pinProxies(cpus []int) error {
	for _, p := range b.proxies() {
		if err := pinTree(p.pid(), cpus); err != nil {
			return fmt.Errorf("pin %s: %w", p.name, err)
		}
	}
	return nil
}

func (b *peerBench) stopAll() {
	for _, p := range append(b.proxies(), b.origin, b.blob) {
		if p != nil {
			p.stop()
		}
	}
	if b.hold != nil {
		b.hold.closeAll()
	}
}

func portOf(addr string) (int, error) {
	_, p, err := net.SplitHostPort(addr)
	if err != nil {
		return 0, err
	}
	return strconv.Atoi(p)
}

// ---------------------------------------------------------------------------
// what each column talks to

// httpTarget is one column of the plain-HTTP rows.
type httpTarget struct {
	col  int
	addr string // where wrk connects
	path string // origin-form for direct and the relay, absolute-form through a proxy
	proc *peerProc
}

func (b *peerBench) httpTargets() []httpTarget {
	abs := fmt.Sprintf("http://up.test:%d/", b.originPort)
	return []httpTarget{
		{colDirect, b.origin.httpAddr, "/", nil},
		{colRelay, b.httpRelay.httpAddr, "/", b.httpRelay},
		{colSquid, b.squid.httpAddr, abs, b.squid},
		{colGoproxy, b.gp.httpAddr, abs, b.gp},
		{colNetproxy, b.np.httpAddr, abs, b.np},
	}
}

func (b *peerBench) hostHeader() string { return fmt.Sprintf("up.test:%d", b.originPort) }

// tunnelTarget is one column of the tunnel rows: how to reach the blob
// sender, and whose CPU time counts.
type tunnelTarget struct {
	col, mbRow, cpuRow int
	via                tunnelVia
	proc               *peerProc
}

func (b *peerBench) tunnelTargets() []tunnelTarget {
	return []tunnelTarget{
		// direct: the CPU row shows the origin's (the sender's) CPU.
		{colDirect, rowConnectMBs, rowConnectCPU, tunnelVia{addr: b.blob.httpAddr, kind: "direct"}, b.blob},
		{colRelay, rowConnectMBs, rowConnectCPU, tunnelVia{addr: b.blobRelay.httpAddr, kind: "direct"}, b.blobRelay},
		{colSquid, rowConnectMBs, rowConnectCPU, tunnelVia{addr: b.squid.httpAddr, kind: "connect", host: "up.test"}, b.squid},
		{colGoproxy, rowConnectMBs, rowConnectCPU, tunnelVia{addr: b.gp.httpAddr, kind: "connect", host: "up.test"}, b.gp},
		{colNetproxy, rowConnectMBs, rowConnectCPU, tunnelVia{addr: b.np.httpAddr, kind: "connect", host: "up.test"}, b.np},
		// Dante resolves names with the system's resolver, which does not
		// know up.test: it gets the address.
		{colDante, rowSocksMBs, rowSocksCPU, tunnelVia{addr: b.dante.socksAddr, kind: "socks5", host: "127.0.0.1"}, b.dante},
		{colNetproxy, rowSocksMBs, rowSocksCPU, tunnelVia{addr: b.np.socksAddr, kind: "socks5", host: "up.test"}, b.np},
	}
}

// ---------------------------------------------------------------------------
// preflight: every column really relays the origin's bytes

func (b *peerBench) preflight() error {
	want := originBody(originBodySize)
	for _, t := range b.httpTargets() {
		if err := checkHTTP(t.addr, t.path, b.hostHeader(), want); err != nil {
			return fmt.Errorf("preflight, %s does not relay plain HTTP: %w%s", colNames[t.col], err, procTail(t.proc))
		}
	}
	for _, t := range b.tunnelTargets() {
		if err := checkTunnel(t.via, b.blobPort); err != nil {
			return fmt.Errorf("preflight, %s does not tunnel (%s): %w%s", colNames[t.col], t.via.kind, err, procTail(t.proc))
		}
	}
	if err := checkNetproxyObserving(b.np); err != nil {
		return fmt.Errorf("preflight: %w", err)
	}
	return nil
}

func procTail(p *peerProc) string {
	if p == nil {
		return ""
	}
	return p.logTail()
}

// checkHTTP sends one GET and wants a 200 with exactly the origin's body.
func checkHTTP(addr, path, host string, want []byte) error {
	c, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		return err
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := fmt.Fprintf(c, "GET %s HTTP/1.1\r\nHost: %s\r\nConnection: close\r\n\r\n", path, host); err != nil {
		return err
	}
	resp, err := readResponse(c)
	if err != nil {
		return err
	}
	if resp.status != 200 || string(resp.body) != string(want) {
		return fmt.Errorf("answer %d with %d body bytes, want 200 with the origin's %d bytes: %q", resp.status, len(resp.body), len(want), truncate(resp.head, 300))
	}
	return nil
}

// rawResponse is one HTTP answer as the preflight reads it.
type rawResponse struct {
	status     int
	head, body []byte
}

func readResponse(c net.Conn) (rawResponse, error) {
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		return rawResponse{}, err
	}
	defer resp.Body.Close()
	var head bytes.Buffer
	fmt.Fprintf(&head, "%s %s\r\n", resp.Proto, resp.Status)
	resp.Header.Write(&head)
	body, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		return rawResponse{}, err
	}
	return rawResponse{status: resp.StatusCode, head: head.Bytes(), body: body}, nil
}

func truncate(b []byte, n int) []byte {
	if len(b) > n {
		return b[:n]
	}
	return b
}

// checkTunnel opens the tunnel and wants the blob sender's first 64 KiB.
func checkTunnel(v tunnelVia, port int) error {
	c, err := v.open(port)
	if err != nil {
		return err
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(10 * time.Second))
	buf := make([]byte, 64<<10)
	if _, err := io.ReadFull(c, buf); err != nil {
		return fmt.Errorf("reading the origin's bytes: %w", err)
	}
	for i, x := range buf {
		if x != byte(i*7) {
			return fmt.Errorf("byte %d is %#x, not the origin's %#x", i, x, byte(i*7))
		}
	}
	return nil
}

// ---------------------------------------------------------------------------
// plain HTTP rows

// benchHTTP runs one plain-HTTP row: rounds × every column with wrk, in an
// order that rotates each round, and judges each run.
func (b *peerBench) benchHTTP(row int) error {
	b.skipped[row] = false
	dir, err := os.MkdirTemp("", "bench-peers-wrk")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	conns, maxErr := b.o.conns, 0.001
	var extra []string
	switch row {
	case rowNewConn:
		extra, maxErr = []string{"Connection", "close"}, 0.01
	case rowLatency:
		conns = 1
		// Everything on one CPU: the proxies join wrk and the origin on CPU 0.
		if err := b.pinProxies([]int{0}); err != nil {
			return err
		}
		settle()
		defer func() {
			b.pinProxies([]int{1})
			settle()
		}()
	}
	targets := b.httpTargets()
	scripts := make([]string, len(targets))
	for i, t := range targets {
		if scripts[i], err = wrkScript(dir, strconv.Itoa(t.col), t.path, b.hostHeader(), extra...); err != nil {
			return err
		}
	}
	// Warm-up, not counted: connections, pools, caches.
	for i, t := range targets {
		if _, out, err := runWrkReport(b.o.wrk, scripts[i], t.addr, conns, time.Second, "0"); err != nil {
			b.cells[row][t.col].fail("warm-up: %v %s", err, truncate(out, 200))
		}
	}
	for r := 0; r < b.o.rounds; r++ {
		for k := range targets {
			i := (k + r) % len(targets)
			t := targets[i]
			c := &b.cells[row][t.col]
			if c.failed != "" {
				continue
			}
			_, opens0, _ := tcpOpens()
			res, out, err := runWrkReport(b.o.wrk, scripts[i], t.addr, conns, b.o.dur, "0")
			_, opens1, _ := tcpOpens()
			if err != nil {
				c.fail("wrk: %v", err)
				continue
			}
			bad := b.judgeHTTP(row, c, res, opens1-opens0, maxErr)
			if bad != "" {
				c.badRuns++
				c.notes = append(c.notes, fmt.Sprintf("round %d discarded: %s", r+1, bad))
			}
			fmt.Fprintf(os.Stderr, "  round %d %-11s %8.0f req/s p50 %s p99 %s, %d requests, %d errors%s%s\n", r+1, colNames[t.col],
				float64(res.requests)/res.elapsed.Seconds(), res.p50, res.p99, res.requests, res.non2xx+res.sockErrs,
				maybe(": DISCARDED ", bad), maybe(": FAILED ", c.failed))
			if len(bytes.TrimSpace(out)) == 0 {
				c.fail("wrk printed nothing")
			}
		}
	}
	// A cell stands on a majority of good rounds; the discarded ones are
	// marked in the table and explained in the notes.
	for _, t := range targets {
		c := &b.cells[row][t.col]
		if c.badRuns == 0 || c.failed != "" {
			continue
		}
		if 2*c.badRuns >= b.o.rounds {
			c.fail("%d of %d rounds had too many errors", c.badRuns, b.o.rounds)
		} else {
			c.mark = fmt.Sprintf(" [%d of %d rounds discarded]", c.badRuns, b.o.rounds)
		}
	}
	return nil
}

// judgeHTTP records one wrk run of a plain-HTTP row. A run with errors
// above maxErr of its requests (non-2xx, socket errors — wrk's timeouts
// included) is discarded and returned as bad; the cell fails outright on
// what says the harness measured the wrong thing: no request completed,
// responses shorter than the body, or (new-connection row) fewer accepted
// TCP connections than requests.
func (b *peerBench) judgeHTTP(row int, c *cell, res wrkRun, passiveOpens int64, maxErr float64) (bad string) {
	if res.requests == 0 {
		c.fail("wrk completed no request")
		return ""
	}
	if errs := res.non2xx + res.sockErrs; errs > 0 {
		if float64(errs) > maxErr*float64(res.requests) {
			return fmt.Sprintf("%d errors in %d requests (> %.1f %%): %s", errs, res.requests, 100*maxErr, res.errLine)
		}
		c.notes = append(c.notes, fmt.Sprintf("%s (of %d requests)", res.errLine, res.requests))
	}
	if per := float64(res.bytes) / float64(res.requests); per < originBodySize {
		c.fail("wrk read %.0f bytes per request, less than the %d-byte body: not the origin's answers", per, originBodySize)
		return ""
	}
	if row == rowNewConn {
		// Every request must have opened a connection (through a proxy,
		// its own upstream connections may add more).
		per := float64(passiveOpens) / float64(res.requests)
		if per < 0.95 {
			c.fail("only %.2f TCP connections accepted per request: wrk did not reconnect", per)
			return ""
		}
		c.opens = append(c.opens, per)
	}
	if row == rowLatency {
		c.vals = append(c.vals, float64(res.p50)/float64(time.Microsecond))
		c.vals2 = append(c.vals2, float64(res.p99)/float64(time.Microsecond))
		return ""
	}
	c.vals = append(c.vals, float64(res.requests)/res.elapsed.Seconds())
	return ""
}

// ---------------------------------------------------------------------------
// tunnels

// benchTunnels moves o.size bytes from the blob sender to this process
// (splicing into /dev/null) through every column, rounds × interleaved,
// and charges each relaying process tree its CPU time per GiB.
func (b *peerBench) benchTunnels() error {
	b.skipped[rowConnectMBs], b.skipped[rowSocksMBs] = false, false
	b.skipped[rowConnectCPU], b.skipped[rowSocksCPU] = false, false
	targets := b.tunnelTargets()
	gib := float64(b.o.size) / (1 << 30)
	for r := 0; r < b.o.rounds; r++ {
		for k := range targets {
			t := targets[(k+r)%len(targets)]
			mb, cpu := &b.cells[t.mbRow][t.col], &b.cells[t.cpuRow][t.col]
			if mb.failed != "" {
				continue
			}
			cpu0, err := treeCPU(t.proc.pid())
			if err != nil {
				return err
			}
			mbs, err := transferVia(t.via, b.blobPort, b.o.size)
			if err != nil {
				mb.fail("%v%s", err, procTail(t.proc))
				cpu.fail("transfer failed")
				continue
			}
			cpu1, err := treeCPU(t.proc.pid())
			if err != nil {
				return err
			}
			mb.vals = append(mb.vals, mbs)
			cpu.vals = append(cpu.vals, (cpu1-cpu0).Seconds()/gib)
			fmt.Fprintf(os.Stderr, "  round %d %-11s %-7s %6.0f MB/s, %s CPU\n", r+1, colNames[t.col], t.via.kind, mbs, cpu1-cpu0)
		}
	}
	// The bare relay and direct have no SOCKS5 of their own: their
	// transfers are the SOCKS5 rows' references too.
	for _, col := range []int{colDirect, colRelay} {
		b.cells[rowSocksMBs][col] = b.cells[rowConnectMBs][col]
		b.cells[rowSocksCPU][col] = b.cells[rowConnectCPU][col]
	}
	return nil
}

// transferVia reads size bytes from the blob sender through v and returns
// MB/s (10⁶ bytes per second), from the dial to the last byte. The bytes
// are spliced into /dev/null: the receiver copies nothing to user space.
func transferVia(v tunnelVia, port int, size int64) (float64, error) {
	devNull, err := os.OpenFile(os.DevNull, os.O_WRONLY, 0)
	if err != nil {
		return 0, err
	}
	defer devNull.Close()
	start := time.Now()
	c, err := v.open(port)
	if err != nil {
		return 0, err
	}
	defer c.Close()
	n, err := devNull.ReadFrom(c.(*net.TCPConn))
	if err != nil {
		return 0, err
	}
	if n != size {
		return 0, fmt.Errorf("got %d bytes, want %d", n, size)
	}
	return float64(n) / 1e6 / time.Since(start).Seconds(), nil
}

// ---------------------------------------------------------------------------
// idle tunnels

// idleTarget is one column of the idle-tunnel rows. Each is measured on a
// fresh instance of the peer, so one peer's earlier runs (a Go heap grown
// by the HTTP rows, Squid's memory pools) do not hide its tunnels' cost.
type idleTarget struct {
	col, row int
	start    func() (*peerProc, error)
	via      func(p *peerProc) tunnelVia
}

func (b *peerBench) idleTargets() []idleTarget {
	holdAddr := fmt.Sprintf("127.0.0.1:%d", b.holdPort)
	helperStart := func(name, role string, args ...string) func() (*peerProc, error) {
		return func() (*peerProc, error) {
			h, err := startHelper(role, args...)
			if err != nil {
				return nil, err
			}
			return fromHelper(name, h), nil
		}
	}
	direct := func(p *peerProc) tunnelVia { return tunnelVia{addr: p.httpAddr, kind: "direct"} }
	connect := func(p *peerProc) tunnelVia { return tunnelVia{addr: p.httpAddr, kind: "connect", host: "up.test"} }
	socks := func(host string) func(p *peerProc) tunnelVia {
		return func(p *peerProc) tunnelVia { return tunnelVia{addr: p.socksAddr, kind: "socks5", host: host} }
	}
	npStart := func() (*peerProc, error) { return startNetproxyPeer(b.o.netproxy, b.holdPort) }
	return []idleTarget{
		{colRelay, rowIdleConnect, helperStart("bare relay", "relay", "-to", holdAddr), direct},
		{colSquid, rowIdleConnect, func() (*peerProc, error) { return startSquid(b.o.squid, min(b.fds, 65536)) }, connect},
		{colGoproxy, rowIdleConnect, helperStart("goproxy lib", "goproxy"), connect},
		{colNetproxy, rowIdleConnect, npStart, connect},
		{colDante, rowIdleSocks, func() (*peerProc, error) { return startDante(b.o.danted) }, socks("127.0.0.1")},
		{colNetproxy, rowIdleSocks, npStart, socks("up.test")},
	}
}

// benchIdle opens o.tunnels idle tunnels through each peer in turn (a
// fresh instance on CPU 1) to an upstream that holds them open and sends
// nothing, and charges the growth of the peer tree's Pss to the tunnels.
func (b *peerBench) benchIdle() error {
	b.skipped[rowIdleConnect], b.skipped[rowIdleSocks] = false, false
	for _, t := range b.idleTargets() {
		c := &b.cells[t.row][t.col]
		kib, n, note, err := b.idleOne(t)
		if err != nil {
			c.fail("%v", err)
			continue
		}
		c.vals = append(c.vals, kib)
		if n != b.o.tunnels {
			c.mark = fmt.Sprintf(" [%s tunnels]", fmtNum(float64(n), 0))
		}
		c.notes = append(c.notes, note)
		fmt.Fprintf(os.Stderr, "  %-11s %s: %.1f KiB per tunnel (%s)\n", colNames[t.col], shortRow(t.row), kib, note)
	}
	b.cells[rowIdleSocks][colRelay] = b.cells[rowIdleConnect][colRelay]
	return nil
}

func (b *peerBench) idleOne(t idleTarget) (kib float64, n int, note string, err error) {
	p, err := t.start()
	if err != nil {
		return 0, 0, "", err
	}
	defer p.stop()
	if err := pinTree(p.pid(), []int{1}); err != nil {
		return 0, 0, "", err
	}
	via := t.via(p)
	defer b.hold.closeAll()
	// Warm the peer's code paths and lazy set-up with a few tunnels, held
	// open long enough to count the descriptors each costs the peer's
	// main process.
	const warm = 16
	fds0, err := countFDs(p.pid())
	if err != nil {
		return 0, 0, "", err
	}
	var warmConns []net.Conn
	for i := 0; i < warm; i++ {
		c, err := via.open(b.holdPort)
		if err != nil {
			closeAll(warmConns)
			return 0, 0, "", fmt.Errorf("warm-up tunnel: %w%s", err, p.logTail())
		}
		warmConns = append(warmConns, c)
	}
	// The relays dial the upstream after the client's dial returns: wait
	// for the warm-up's upstream connections before dropping them, so none
	// is counted as a measured tunnel.
	for deadline := time.Now().Add(5 * time.Second); b.hold.count() < warm && time.Now().Before(deadline); {
		time.Sleep(20 * time.Millisecond)
	}
	time.Sleep(200 * time.Millisecond)
	fds1, err := countFDs(p.pid())
	if err != nil {
		return 0, 0, "", err
	}
	closeAll(warmConns)
	b.hold.closeAll()
	time.Sleep(2 * time.Second)
	if n := b.hold.count(); n != 0 {
		return 0, 0, "", fmt.Errorf("%d upstream connections arrived after the warm-up", n)
	}
	// As many tunnels as asked, unless the peer's process would run out of
	// descriptors first (RLIMIT_NOFILE cannot always be raised: without
	// CAP_SYS_RESOURCE the hard limit stays).
	n = b.o.tunnels
	perTunnel := (fds1 - fds0 + warm - 1) / warm
	if perTunnel > 0 && fds0+perTunnel*n+200 > b.fds {
		n = (b.fds - fds0 - 200) / perTunnel
		note = fmt.Sprintf("only %d tunnels (RLIMIT_NOFILE is %d here and cannot be raised); ", n, b.fds)
	}
	before, err := treePss(p.pid())
	if err != nil {
		return 0, 0, "", err
	}
	clients := make([]net.Conn, 0, n)
	defer func() { closeAll(clients) }()
	for i := 0; i < n; i++ {
		c, err := via.open(b.holdPort)
		if err != nil {
			return 0, 0, "", fmt.Errorf("%stunnel %d of %d: %w%s", note, i+1, n, err, p.logTail())
		}
		clients = append(clients, c)
	}
	// Every tunnel must have reached the upstream.
	deadline := time.Now().Add(10 * time.Second)
	for b.hold.count() < n && time.Now().Before(deadline) {
		time.Sleep(50 * time.Millisecond)
	}
	time.Sleep(3 * time.Second) // let the peer settle (Go: GC of the set-up garbage)
	if got := b.hold.count(); got != n {
		return 0, 0, "", fmt.Errorf("%s%d upstream connections for %d tunnels", note, got, n)
	}
	after, err := treePss(p.pid())
	if err != nil {
		return 0, 0, "", err
	}
	procs, _ := treePIDs(p.pid())
	note += fmt.Sprintf("Pss %.1f → %.1f MiB over %d process(es), %d descriptors per tunnel in the main process", float64(before)/(1<<20), float64(after)/(1<<20), len(procs), perTunnel)
	return float64(after-before) / 1024 / float64(n), n, note, nil
}

func closeAll(conns []net.Conn) {
	for _, c := range conns {
		c.Close()
	}
}

// countFDs is the number of open descriptors of process pid.
func countFDs(pid int) (int, error) {
	ents, err := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid))
	return len(ents), err
}

// ---------------------------------------------------------------------------
// output

// printTable prints the table, the notes and netproxy's targets; it
// returns the number of failed cells.
func (b *peerBench) printTable() int {
	fmt.Printf("Each cell: the median of %d interleaved rounds (idle tunnels: one run of %d tunnels on a fresh instance); "+
		"in brackets the ratio to direct / to the bare relay.\n", b.o.rounds, b.o.tunnels)
	fmt.Printf("Pinning: proxy alone on CPU 1, wrk / receiver and origin on CPU 0; latency row: all on CPU 0. "+
		"wrk runs of %s; tunnels of %d MiB.\n\n", b.o.dur, b.o.size>>20)
	var rows []string
	for r := 0; r < nRows; r++ {
		if !b.skipped[r] {
			rows = append(rows, rowNames[r])
		} else {
			rows = append(rows, "")
		}
	}
	failed := printMarkdownTable(colNames[:], rows, b.cellText)
	var notes []string
	for r := 0; r < nRows; r++ {
		for col := 0; col < nCols; col++ {
			c := &b.cells[r][col]
			if b.skipped[r] || (len(c.notes) == 0 && len(c.opens) == 0 && c.failed == "") {
				continue
			}
			if (r == rowSocksMBs || r == rowSocksCPU || r == rowIdleSocks) && (col == colDirect || col == colRelay) {
				continue // copies of the CONNECT rows' cells
			}
			text := c.noteText("%.2f", " TCP connections accepted per request (wrk reconnects)")
			notes = append(notes, fmt.Sprintf("- %s, %s: %s", shortRow(r), colNames[col], text))
		}
	}
	if len(notes) > 0 {
		fmt.Printf("Notes:\n%s\n\n", strings.Join(notes, "\n"))
	}
	b.printTargets()
	return failed
}

// printMarkdownTable prints one table: a row per non-empty name in rows,
// a column per name in cols, each cell from cell; it returns the number of
// cells cell calls bad.
func printMarkdownTable(cols, rows []string, cell func(row, col int) (string, bool)) int {
	fmt.Printf("| measure |")
	for _, n := range cols {
		fmt.Printf(" %s |", n)
	}
	fmt.Printf("\n|---|")
	for range cols {
		fmt.Printf("---:|")
	}
	fmt.Println()
	failed := 0
	for r, name := range rows {
		if name == "" {
			continue
		}
		fmt.Printf("| %s |", name)
		for col := range cols {
			s, bad := cell(r, col)
			if bad {
				failed++
			}
			fmt.Printf(" %s |", s)
		}
		fmt.Println()
	}
	fmt.Println()
	return failed
}

// noteText is a cell's notes for the table's notes: why it failed, its
// notes, and the range of its opens (format opensFmt, followed by opensWhat).
func (c *cell) noteText(opensFmt, opensWhat string) string {
	ns := dedupe(c.notes)
	if len(c.opens) > 0 {
		lo, hi := fmt.Sprintf(opensFmt, slices.Min(c.opens)), fmt.Sprintf(opensFmt, slices.Max(c.opens))
		if lo != hi {
			lo += "–" + hi
		}
		ns = append(ns, lo+opensWhat)
	}
	text := strings.Join(ns, "; ")
	if c.failed != "" {
		text = "FAILED: " + c.failed + maybe("; ", text)
	}
	return text
}

func maybe(sep, s string) string {
	if s == "" {
		return ""
	}
	return sep + s
}

func dedupe(s []string) []string {
	var out []string
	for _, x := range s {
		if !slices.Contains(out, x) {
			out = append(out, x)
		}
	}
	return out
}

func shortRow(r int) string {
	name, _, _ := strings.Cut(rowNames[r], " (")
	return name
}

// applicable says which cells of the table are measured at all.
func applicable(row, col int) bool {
	switch row {
	case rowKeepAlive, rowNewConn, rowLatency:
		return col != colDante
	case rowConnectMBs, rowConnectCPU:
		return col != colDante
	case rowSocksMBs, rowSocksCPU:
		return col == colDirect || col == colRelay || col == colDante || col == colNetproxy
	case rowIdleConnect:
		return col == colRelay || col == colSquid || col == colGoproxy || col == colNetproxy
	case rowIdleSocks:
		return col == colRelay || col == colDante || col == colNetproxy
	}
	return false
}

// cellText renders one cell; bad reports a cell that should have a value
// and has none.
func (b *peerBench) cellText(row, col int) (string, bool) {
	if !applicable(row, col) {
		return "—", false
	}
	c := &b.cells[row][col]
	if c.failed != "" {
		return "**failed**", true
	}
	if !c.ok() {
		return "**missing**", true
	}
	s, bad := b.cellValue(row, col)
	return s + c.mark, bad
}

func (b *peerBench) cellValue(row, col int) (string, bool) {
	c := &b.cells[row][col]
	v := c.median()
	ratios := func(decimals int) string {
		d, r := "—", "—"
		if dc := &b.cells[row][colDirect]; col != colDirect && dc.ok() && row != rowConnectCPU && row != rowSocksCPU {
			d = fmt.Sprintf("%.2f×", v/dc.median())
		}
		if rc := &b.cells[row][colRelay]; col != colRelay && col != colDirect && rc.ok() {
			r = fmt.Sprintf("%.2f×", v/rc.median())
		}
		if d == "—" && r == "—" {
			return fmtNum(v, decimals)
		}
		return fmt.Sprintf("%s (%s / %s)", fmtNum(v, decimals), d, r)
	}
	switch row {
	case rowKeepAlive, rowNewConn, rowConnectMBs, rowSocksMBs:
		if col == colDirect {
			return fmtNum(v, 0), false
		}
		return ratios(0), false
	case rowLatency:
		p50, p99 := v, c.median2()
		s := fmt.Sprintf("%.0f / %.0f", p50, p99)
		if dc := &b.cells[row][colDirect]; col != colDirect && dc.ok() {
			s += fmt.Sprintf(" (%+.0f / %+.0f)", p50-dc.median(), p99-dc.median2())
		}
		return s, false
	case rowConnectCPU, rowSocksCPU:
		if col == colDirect {
			return fmt.Sprintf("%.2f (origin)", v), false
		}
		return ratios(2), false
	case rowIdleConnect, rowIdleSocks:
		if col == colRelay {
			return fmtNum(v, 1), false
		}
		return ratios(1), false
	}
	return "?", true
}

// fmtNum prints v with the given decimals and a space between thousands.
func fmtNum(v float64, decimals int) string {
	s := strconv.FormatFloat(v, 'f', decimals, 64)
	intPart, frac, _ := strings.Cut(s, ".")
	neg := strings.HasPrefix(intPart, "-")
	intPart = strings.TrimPrefix(intPart, "-")
	var out []byte
	for i := range intPart {
		if i > 0 && (len(intPart)-i)%3 == 0 {
			out = append(out, ' ')
		}
		out = append(out, intPart[i])
	}
	res := string(out)
	if neg {
		res = "-" + res
	}
	if frac != "" {
		res += "." + frac
	}
	return res
}

// printTargets checks issue 14's targets for netproxy against this run.
func (b *peerBench) printTargets() {
	type check struct {
		name   string
		ok     bool   // measured
		met    bool   // target met
		actual string // what was measured
		miss   string // by how much it is missed
	}
	var checks []check
	get := func(row, col int) (float64, bool) {
		c := &b.cells[row][col]
		if b.skipped[row] || !c.ok() {
			return 0, false
		}
		return c.median(), true
	}
	ratioAtLeast := func(name string, row, col, refCol int, want float64) {
		v, ok1 := get(row, col)
		ref, ok2 := get(row, refCol)
		ck := check{name: name, ok: ok1 && ok2}
		if ck.ok {
			ratio := v / ref
			ck.met = ratio >= want
			ck.actual = fmt.Sprintf("%.2f× (%s vs %s)", ratio, fmtNum(v, 0), fmtNum(ref, 0))
			ck.miss = fmt.Sprintf("%.1f %% short", 100*(want-ratio)/want)
		}
		checks = append(checks, ck)
	}
	atMost := func(name string, v float64, ok bool, limit float64, unit string, decimals int) {
		ck := check{name: name, ok: ok}
		if ok {
			ck.met = v <= limit
			ck.actual = fmtNum(v, decimals) + " " + unit
			ck.miss = fmt.Sprintf("over by %s %s (%.0f %%)", fmtNum(v-limit, decimals), unit, 100*(v-limit)/limit)
		}
		checks = append(checks, ck)
	}
	ratioAtLeast("CONNECT MB/s ≥ 0.95× bare relay", rowConnectMBs, colNetproxy, colRelay, 0.95)
	ratioAtLeast("CONNECT MB/s ≥ goproxy lib", rowConnectMBs, colNetproxy, colGoproxy, 1)
	ratioAtLeast("SOCKS5 MB/s ≥ 0.95× bare relay", rowSocksMBs, colNetproxy, colRelay, 0.95)
	{
		// goproxy has no SOCKS5: netproxy's SOCKS5 against its CONNECT.
		v, ok1 := get(rowSocksMBs, colNetproxy)
		ref, ok2 := get(rowConnectMBs, colGoproxy)
		ck := check{name: "SOCKS5 MB/s ≥ goproxy lib (its CONNECT)", ok: ok1 && ok2}
		if ck.ok {
			ck.met = v >= ref
			ck.actual = fmt.Sprintf("%.2f× (%s vs %s)", v/ref, fmtNum(v, 0), fmtNum(ref, 0))
			ck.miss = fmt.Sprintf("%.1f %% short", 100*(1-v/ref))
		}
		checks = append(checks, ck)
	}
	v, ok := get(rowConnectCPU, colNetproxy)
	atMost("CPU per GiB, CONNECT ≤ 0.15 s", v, ok, 0.15, "s", 2)
	v, ok = get(rowSocksCPU, colNetproxy)
	atMost("CPU per GiB, SOCKS5 ≤ 0.15 s", v, ok, 0.15, "s", 2)
	v, ok = get(rowIdleConnect, colNetproxy)
	atMost("idle CONNECT tunnel ≤ 8 KiB", v, ok, 8, "KiB", 1)
	v, ok = get(rowIdleSocks, colNetproxy)
	atMost("idle SOCKS5 tunnel ≤ 10 KiB", v, ok, 10, "KiB", 1)
	lat, dlat := &b.cells[rowLatency][colNetproxy], &b.cells[rowLatency][colDirect]
	latOK := !b.skipped[rowLatency] && lat.ok() && dlat.ok()
	atMost("added latency p50 ≤ 60 µs", lat.median()-dlat.median(), latOK, 60, "µs", 0)
	atMost("added latency p99 ≤ 150 µs", lat.median2()-dlat.median2(), latOK, 150, "µs", 0)
	ratioAtLeast("keep-alive req/s ≥ 0.85× direct", rowKeepAlive, colNetproxy, colDirect, 0.85)
	ratioAtLeast("new-connection req/s ≥ 0.85× direct", rowNewConn, colNetproxy, colDirect, 0.85)

	fmt.Printf("netproxy against issue 14's targets (this run):\n\n| target | measured | result |\n|---|---|---|\n")
	for _, ck := range checks {
		switch {
		case !ck.ok:
			fmt.Printf("| %s | — | not measured |\n", ck.name)
		case ck.met:
			fmt.Printf("| %s | %s | met |\n", ck.name, ck.actual)
		default:
			fmt.Printf("| %s | %s | **missed**: %s |\n", ck.name, ck.actual, ck.miss)
		}
	}
	fmt.Println()
}
