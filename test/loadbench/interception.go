package main

import (
	"bufio"
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// The interception part of the peer bench (`-only interception`, issue 29
// item 3): the same HTTPS origin reached directly, through netproxy's opaque
// CONNECT tunnel (the reference: the client's TLS end to end), and through
// three intercepting proxies — Squid with ssl-bump, mitmproxy (mitmdump) and
// netproxy intercepting (a host named by a request rule) — each minting
// leaves with its own CA, which the client alone trusts for that column.
//
// The client is this process (wrk cannot speak HTTPS through a proxy): Go's
// crypto/tls over a CONNECT, HTTP/1.1 only (ALPN http/1.1), no client
// session resumption, the requests and responses read with net/http's
// parser. Pinning and rounds as the other parts: every proxy's tree alone on
// CPU 1, the client and the origin on CPU 0 (the latency row: all on CPU 0),
// each row in interleaved rounds whose order rotates, the median reported.
//
// Proof of interception, on every connection the bench opens: the client
// trusts only the column's CA, so its handshake completes only on a leaf
// that CA signed (the opaque and direct columns trust only the origin's CA);
// and the first request carries the client's TLS exported keying material
// (RFC 5705/8446), which the origin compares with its own: equal only when
// the client's TLS session reached the origin end to end. A column whose
// connection shows anything else fails (interceptProof.check).

// The interception table's columns.
const (
	icDirect = iota
	icOpaque
	icSquid
	icMitm
	icNetproxy
	nICols
)

var icNames = [nICols]string{"direct", "netproxy opaque tunnel", "Squid ssl-bump", "mitmproxy", "netproxy intercepting"}

// The interception table's rows.
const (
	irKeepAlive = iota
	irBig
	irLatency
	irIdle
	irCold
	irWarm
	nIRows
)

var irNames = [nIRows]string{
	"keep-alive HTTPS req/s (Go client, %d connections, HTTP/1.1, 1 KiB GET)",
	"8 MiB bodies MB/s (10⁶ B/s, one keep-alive connection)",
	"latency p50 / p99 µs, one keep-alive connection, all on CPU 0 (added over direct)",
	"KiB per idle connection after one request (fresh instance)",
	"cold handshake ms: dial, CONNECT, TLS, first GET, a name the proxy has not seen",
	"warm handshake ms: the same, a name seen before (leaf cached)",
}

const (
	bigBodySize   = 8 << 20
	ekmHeader     = "X-Loadbench-Ekm"
	verdictHeader = "X-Loadbench-Tls"
	ekmLabel      = "EXPORTER-loadbench-interception"
	// The origin's verdicts on a client's keying material.
	verdictEndToEnd   = "end-to-end"
	verdictTerminated = "terminated"
	// handshakesPerRound is the new connections per round and column of
	// the handshake rows (the round's value is their median).
	handshakesPerRound = 5
	// mainName is the name the measured requests use; cold names are
	// c<N>.up.test.
	mainName   = "up.test"
	opaqueName = "other.test"
)

// serveHTTPSOrigin is the interception part's origin: Go's net/http over
// TLS 1.3 with the certificate in dir (origin.pem, origin-key.pem),
// HTTP/1.1 only, answering / with the 1 KiB body and /big with 8 MiB. A
// request that carries the client's keying material gets the origin's
// verdict on it.
func serveHTTPSOrigin(ln net.Listener, dir string) error {
	pair, err := tls.LoadX509KeyPair(filepath.Join(dir, "origin.pem"), filepath.Join(dir, "origin-key.pem"))
	if err != nil {
		return err
	}
	small, big := originBody(originBodySize), originBody(bigBodySize)
	cl := &countingListener{Listener: ln}
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body := small
		switch r.URL.Path {
		case "/big":
			body = big
		case "/conns":
			body = []byte(strconv.FormatInt(cl.n.Load(), 10))
		}
		if ekm := r.Header.Get(ekmHeader); ekm != "" {
			w.Header().Set(verdictHeader, originVerdict(r.TLS, ekm))
		}
		w.Header().Set("Content-Length", strconv.Itoa(len(body)))
		w.Write(body)
	})
	srv := &http.Server{
		Handler:      h,
		TLSConfig:    &tls.Config{Certificates: []tls.Certificate{pair}, NextProtos: []string{"http/1.1"}},
		TLSNextProto: map[string]func(*http.Server, *tls.Conn, http.Handler){}, // no HTTP/2
		ErrorLog:     log.New(io.Discard, "", 0),
	}
	return srv.ServeTLS(cl, "", "")
}

// countingListener counts the connections the origin accepted: how many
// upstream connections a proxy opened for a given number of requests.
type countingListener struct {
	net.Listener
	n atomic.Int64
}

func (l *countingListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err == nil {
		l.n.Add(1)
	}
	return c, err
}

// originConns asks the origin (directly) how many connections it has
// accepted, not counting this question's own.
func (ib *interceptBench) originConns() (int64, error) {
	c, err := ib.target(icDirect, nil).open(mainName, ib.port)
	if err != nil {
		return 0, err
	}
	defer c.Close()
	c.tc.SetDeadline(time.Now().Add(10 * time.Second))
	fmt.Fprintf(c.tc, "GET /conns HTTP/1.1\r\nHost: %s\r\n\r\n", c.host)
	resp, err := http.ReadResponse(c.br, nil)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return 0, err
	}
	n, err := strconv.ParseInt(string(b), 10, 64)
	return n - 1, err
}

// originVerdict compares the client's keying material (hex) with the
// origin's own for the same label: equal only when one TLS session joins
// the client and the origin.
func originVerdict(cs *tls.ConnectionState, clientEKM string) string {
	if cs == nil {
		return "no-tls"
	}
	own, err := cs.ExportKeyingMaterial(ekmLabel, nil, 32)
	if err != nil {
		return "no-ekm"
	}
	if hex.EncodeToString(own) == clientEKM {
		return verdictEndToEnd
	}
	return verdictTerminated
}

// interceptProof is what one connection shows about who ended the client's
// TLS.
type interceptProof struct {
	root    string // common name of the root the client's verified chain ends in
	verdict string // the origin's verdict on the client's keying material
}

// check wants, for an intercepting column, the proxy's CA at the root of
// the client's chain and a terminated session at the origin; for the
// others, the origin's CA and one session end to end.
func (p interceptProof) check(intercept bool, proxyCA, originCA string) error {
	if intercept {
		if p.root != proxyCA {
			return fmt.Errorf("the client's certificate chain ends in %q, not the proxy's CA %q: the proxy did not mint the leaf", p.root, proxyCA)
		}
		if p.verdict != verdictTerminated {
			return fmt.Errorf("the origin's verdict on the client's TLS keying material is %q, want %q: the client's TLS was not terminated by the proxy", p.verdict, verdictTerminated)
		}
		return nil
	}
	if p.root != originCA {
		return fmt.Errorf("the client's certificate chain ends in %q, not the origin's CA %q: something intercepted", p.root, originCA)
	}
	if p.verdict != verdictEndToEnd {
		return fmt.Errorf("the origin's verdict on the client's TLS keying material is %q, want %q: the TLS session did not reach the origin end to end", p.verdict, verdictEndToEnd)
	}
	return nil
}

// httpsTarget is one column of the interception table.
type httpsTarget struct {
	col       int
	proc      *peerProc // whose tree is pinned and measured (nil: direct)
	addr      string    // where the client dials
	connect   bool      // CONNECT through addr
	byAddr    bool      // the CONNECT names 127.0.0.1 (mitmproxy resolves with the system resolver)
	name      string    // the TLS server name and Host of the measured requests
	intercept bool
	ca        *benchCA // the CA the client trusts for this column
	roots     *x509.CertPool
}

// httpsConn is one client connection of the bench.
type httpsConn struct {
	tc   *tls.Conn
	br   *bufio.Reader
	req  []byte // the GET / request
	host string
	buf  []byte
}

func (c *httpsConn) Close() error { return c.tc.Close() }

// open dials t, sets up the tunnel to name:port and completes the client's
// TLS handshake with only t's CA trusted.
func (t *httpsTarget) open(name string, port int) (*httpsConn, error) {
	raw, err := net.DialTimeout("tcp", t.addr, 10*time.Second)
	if err != nil {
		return nil, err
	}
	raw.SetDeadline(time.Now().Add(30 * time.Second))
	if t.connect {
		host := name
		if t.byAddr {
			host = "127.0.0.1"
		}
		if err := httpConnect(raw, net.JoinHostPort(host, strconv.Itoa(port))); err != nil {
			raw.Close()
			return nil, err
		}
	}
	tc := tls.Client(raw, &tls.Config{ServerName: name, RootCAs: t.roots, NextProtos: []string{"http/1.1"}, MinVersion: tls.VersionTLS12})
	if err := tc.Handshake(); err != nil {
		raw.Close()
		return nil, fmt.Errorf("TLS with %s's leaf for %s (only %q trusted): %w", icNames[t.col], name, t.ca.name, err)
	}
	raw.SetDeadline(time.Time{})
	host := net.JoinHostPort(name, strconv.Itoa(port))
	return &httpsConn{tc: tc, br: bufio.NewReaderSize(tc, 64<<10), host: host,
		req: []byte("GET / HTTP/1.1\r\nHost: " + host + "\r\n\r\n"), buf: make([]byte, originBodySize)}, nil
}

// openProven opens a connection and sends its first GET with the client's
// keying material; the connection must show what the column is.
func (t *httpsTarget) openProven(name string, port int, originCA string) (*httpsConn, error) {
	c, err := t.open(name, port)
	if err != nil {
		return nil, err
	}
	p, err := c.prove()
	if err == nil {
		err = p.check(t.intercept, t.ca.name, originCA)
	}
	if err != nil {
		c.Close()
		return nil, fmt.Errorf("%s, %s: %w", icNames[t.col], name, err)
	}
	return c, nil
}

// prove sends a GET / with the client's keying material and reads the
// origin's verdict.
func (c *httpsConn) prove() (interceptProof, error) {
	cs := c.tc.ConnectionState()
	var p interceptProof
	if len(cs.VerifiedChains) == 0 || len(cs.VerifiedChains[0]) == 0 {
		return p, errors.New("no verified certificate chain")
	}
	chain := cs.VerifiedChains[0]
	p.root = chain[len(chain)-1].Subject.CommonName
	ekm, err := cs.ExportKeyingMaterial(ekmLabel, nil, 32)
	if err != nil {
		return p, fmt.Errorf("exporting the TLS keying material: %w", err)
	}
	req := fmt.Sprintf("GET / HTTP/1.1\r\nHost: %s\r\n%s: %s\r\n\r\n", c.host, ekmHeader, hex.EncodeToString(ekm))
	resp, err := c.do([]byte(req), originBodySize)
	if err != nil {
		return p, err
	}
	p.verdict = resp.Header.Get(verdictHeader)
	return p, nil
}

// do sends req and reads a 200 with a body of exactly want bytes (the
// 1 KiB body is compared byte for byte, the 8 MiB one counted).
func (c *httpsConn) do(req []byte, want int) (*http.Response, error) {
	c.tc.SetDeadline(time.Now().Add(30 * time.Second))
	if _, err := c.tc.Write(req); err != nil {
		return nil, err
	}
	resp, err := http.ReadResponse(c.br, nil)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 300))
		return nil, fmt.Errorf("answer %s: %q", resp.Status, b)
	}
	if want == originBodySize {
		n, err := io.ReadFull(resp.Body, c.buf)
		if err != nil || !bytes.Equal(c.buf[:n], smallBody) {
			return nil, fmt.Errorf("body: %d bytes, not the origin's %d (%v)", n, want, err)
		}
		if extra, _ := resp.Body.Read(c.buf[:1]); extra != 0 {
			return nil, errors.New("body longer than the origin's")
		}
		return resp, nil
	}
	n, err := io.Copy(io.Discard, resp.Body)
	if err != nil || n != int64(want) {
		return nil, fmt.Errorf("body: %d bytes, want %d (%v)", n, want, err)
	}
	return resp, nil
}

var smallBody = originBody(originBodySize)

// interceptBench is the interception part of one peer-bench run.
type interceptBench struct {
	o               peerOptions
	fds             int
	tlsDir          string // the origin's certificate
	origin          *originTLS
	cas             [nICols]*benchCA
	originProc      *peerProc
	port            int
	squid, mitm, np *peerProc
	names           []string // cold-handshake names, in use order
	nextCold        [nICols]int
	hosts           map[string]string // every bench name → 127.0.0.1
	cells           [nIRows][nICols]cell
}

func (ib *interceptBench) procs() []*peerProc { return []*peerProc{ib.squid, ib.mitm, ib.np} }

func (ib *interceptBench) stopAll() {
	for _, p := range append(ib.procs(), ib.originProc) {
		if p != nil {
			p.stop()
		}
	}
	if ib.tlsDir != "" {
		os.RemoveAll(ib.tlsDir)
	}
}

// startInterception makes the certificates, starts the origin (CPU 0) and
// the three intercepting peers (CPU 1) and checks every column.
func startInterception(o peerOptions, fds int) (*interceptBench, error) {
	ib := &interceptBench{o: o, fds: fds, hosts: map[string]string{mainName: "127.0.0.1", opaqueName: "127.0.0.1"}}
	for i := 0; i < o.rounds*handshakesPerRound+handshakesPerRound; i++ {
		n := fmt.Sprintf("c%d.up.test", i)
		ib.names = append(ib.names, n)
		ib.hosts[n] = "127.0.0.1"
	}
	var err error
	if ib.origin, err = newOriginTLS(); err != nil {
		return nil, err
	}
	for col, cn := range map[int]string{icSquid: "loadbench Squid CA", icMitm: "loadbench mitmproxy CA", icNetproxy: "loadbench netproxy CA"} {
		if ib.cas[col], err = newBenchCA(cn); err != nil {
			return nil, err
		}
	}
	ib.cas[icDirect], ib.cas[icOpaque] = ib.origin.ca, ib.origin.ca
	if ib.tlsDir, err = os.MkdirTemp("", "bench-https-origin"); err != nil {
		return nil, err
	}
	if err := writeFiles(ib.tlsDir, map[string][]byte{"origin.pem": ib.origin.certPEM, "origin-key.pem": ib.origin.keyPEM}); err != nil {
		ib.stopAll()
		return nil, err
	}
	h, err := startHelper("https", "-tlsdir", ib.tlsDir)
	if err != nil {
		ib.stopAll()
		return nil, err
	}
	ib.originProc = fromHelper("https origin", h)
	if ib.port, err = portOf(h.addr); err != nil {
		ib.stopAll()
		return nil, err
	}
	if err := ib.startPeers(); err != nil {
		ib.stopAll()
		return nil, err
	}
	if err := pin(os.Getpid(), []int{0}); err != nil {
		ib.stopAll()
		return nil, err
	}
	if err := pinTree(ib.originProc.pid(), []int{0}); err != nil {
		ib.stopAll()
		return nil, err
	}
	if err := ib.pinPeers([]int{1}); err != nil {
		ib.stopAll()
		return nil, err
	}
	settle()
	if err := ib.preflight(); err != nil {
		ib.stopAll()
		return nil, err
	}
	return ib, nil
}

func (ib *interceptBench) startPeers() error {
	var err error
	if ib.squid, err = ib.newSquid(); err != nil {
		return err
	}
	if ib.mitm, err = ib.newMitm(); err != nil {
		return err
	}
	ib.np, err = ib.newNetproxy()
	return err
}

func (ib *interceptBench) newSquid() (*peerProc, error) {
	return startSquidBump(ib.o.squid, min(ib.fds, 65536), ib.cas[icSquid], ib.origin.ca.certPEM, ib.hosts)
}

func (ib *interceptBench) newMitm() (*peerProc, error) {
	return startMitmdump(ib.o.mitmdump, ib.cas[icMitm], ib.origin.ca.certPEM)
}

func (ib *interceptBench) newNetproxy() (*peerProc, error) {
	return startNetproxyIntercept(ib.o.netproxy, ib.port, ib.cas[icNetproxy], ib.origin.ca.certPEM, slices.Sorted(mapKeys(ib.hosts)))
}

func mapKeys(m map[string]string) func(func(string) bool) {
	return func(yield func(string) bool) {
		for k := range m {
			if !yield(k) {
				return
			}
		}
	}
}

func (ib *interceptBench) pinPeers(cpus []int) error {
	for _, p := range ib.procs() {
		if err := pinTree(p.pid(), cpus); err != nil {
			return fmt.Errorf("pin %s: %w", p.name, err)
		}
	}
	return nil
}

// target is column col with its process p (a fresh instance for the idle
// row, the run's otherwise).
func (ib *interceptBench) target(col int, p *peerProc) *httpsTarget {
	t := &httpsTarget{col: col, proc: p, name: mainName, ca: ib.cas[col], connect: true, intercept: true}
	switch col {
	case icDirect:
		t.addr, t.connect, t.intercept, t.proc = ib.originProc.httpAddr, false, false, nil
	case icOpaque:
		t.name, t.intercept = opaqueName, false
	case icMitm:
		t.byAddr = true
	}
	if p != nil {
		t.addr = p.httpAddr
	}
	t.roots = t.ca.pool()
	return t
}

func (ib *interceptBench) targets() []*httpsTarget {
	return []*httpsTarget{
		ib.target(icDirect, nil), ib.target(icOpaque, ib.np), ib.target(icSquid, ib.squid),
		ib.target(icMitm, ib.mitm), ib.target(icNetproxy, ib.np),
	}
}

// preflight: every column answers with the origin's body and shows what
// it is (intercepted or end to end); netproxy audits and counts.
func (ib *interceptBench) preflight() error {
	for _, t := range ib.targets() {
		c, err := t.openProven(t.name, ib.port, ib.origin.ca.name)
		if err != nil {
			return fmt.Errorf("preflight: %w%s", err, procTail(t.proc))
		}
		c.Close()
	}
	if err := checkNetproxyObserving(ib.np); err != nil {
		return fmt.Errorf("preflight, netproxy intercepting: %w", err)
	}
	return nil
}

// run measures every row of the interception table.
func (ib *interceptBench) run() error {
	for _, row := range []struct {
		name string
		f    func(*httpsTarget) (float64, float64, error)
		cols []int
		pin0 bool
	}{
		{"keep-alive", ib.keepAlive, allICols, false},
		{"8 MiB bodies", ib.bigBodies, allICols, false},
		{"latency", ib.latency, allICols, true},
		{"cold handshakes", ib.coldHandshakes, []int{icSquid, icMitm, icNetproxy}, false},
		{"warm handshakes", ib.warmHandshakes, allICols, false},
	} {
		fmt.Fprintf(os.Stderr, "peer bench: interception, %s ...\n", row.name)
		if row.pin0 {
			if err := ib.pinPeers([]int{0}); err != nil {
				return err
			}
			settle()
		}
		ib.rounds(rowOf(row.name), row.f, row.cols)
		if row.pin0 {
			if err := ib.pinPeers([]int{1}); err != nil {
				return err
			}
			settle()
		}
	}
	fmt.Fprintf(os.Stderr, "peer bench: interception, idle connections ...\n")
	return ib.benchIdle()
}

var allICols = []int{icDirect, icOpaque, icSquid, icMitm, icNetproxy}

func rowOf(name string) int {
	return map[string]int{"keep-alive": irKeepAlive, "8 MiB bodies": irBig, "latency": irLatency,
		"cold handshakes": irCold, "warm handshakes": irWarm}[name]
}

// rounds runs f for the columns cols in o.rounds rounds whose order
// rotates. A round that fails is discarded and noted; a cell stands on a
// majority of good rounds.
func (ib *interceptBench) rounds(row int, f func(*httpsTarget) (float64, float64, error), cols []int) {
	all := ib.targets()
	for r := 0; r < ib.o.rounds; r++ {
		for k := range cols {
			t := all[cols[(k+r)%len(cols)]]
			c := &ib.cells[row][t.col]
			v, v2, err := f(t)
			if err != nil {
				c.badRuns++
				c.notes = append(c.notes, fmt.Sprintf("round %d discarded: %v%s", r+1, err, procTail(t.proc)))
				fmt.Fprintf(os.Stderr, "  round %d %-22s DISCARDED: %v\n", r+1, icNames[t.col], err)
				continue
			}
			c.vals = append(c.vals, v)
			if row == irLatency {
				c.vals2 = append(c.vals2, v2)
			}
			fmt.Fprintf(os.Stderr, "  round %d %-22s %10.1f %s\n", r+1, icNames[t.col], v, maybe("/ ", fmtIf(row == irLatency, v2)))
		}
	}
	for _, col := range cols {
		c := &ib.cells[row][col]
		switch {
		case c.badRuns == 0:
		case 2*c.badRuns >= ib.o.rounds:
			c.fail("%d of %d rounds failed", c.badRuns, ib.o.rounds)
		default:
			c.mark = fmt.Sprintf(" [%d of %d rounds discarded]", c.badRuns, ib.o.rounds)
		}
	}
}

func fmtIf(ok bool, v float64) string {
	if !ok {
		return ""
	}
	return fmt.Sprintf("%.1f", v)
}

// openMany opens n proven connections through t, a few at a time.
func (ib *interceptBench) openMany(t *httpsTarget, n int) ([]*httpsConn, error) {
	conns := make([]*httpsConn, n)
	var firstErr error
	var mu sync.Mutex
	var wg sync.WaitGroup
	sem := make(chan struct{}, 4)
	for i := range conns {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			c, err := t.openProven(t.name, ib.port, ib.origin.ca.name)
			mu.Lock()
			defer mu.Unlock()
			if err != nil && firstErr == nil {
				firstErr = err
			}
			conns[i] = c
		}()
	}
	wg.Wait()
	if firstErr != nil {
		closeHTTPS(conns)
		return nil, firstErr
	}
	return conns, nil
}

func closeHTTPS(conns []*httpsConn) {
	for _, c := range conns {
		if c != nil {
			c.Close()
		}
	}
}

// keepAlive: o.conns proven connections, then GET / on each in a loop for
// o.dur; requests per second over all of them.
func (ib *interceptBench) keepAlive(t *httpsTarget) (float64, float64, error) {
	conns, err := ib.openMany(t, ib.o.conns)
	if err != nil {
		return 0, 0, err
	}
	defer closeHTTPS(conns)
	conns0, err := ib.originConns()
	if err != nil {
		return 0, 0, err
	}
	var total atomic.Int64
	var errOnce sync.Once
	var firstErr error
	var wg sync.WaitGroup
	start := time.Now()
	deadline := start.Add(ib.o.dur)
	for _, c := range conns {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for time.Now().Before(deadline) {
				if _, err := c.do(c.req, originBodySize); err != nil {
					errOnce.Do(func() { firstErr = err })
					return
				}
				total.Add(1)
			}
		}()
	}
	wg.Wait()
	elapsed := time.Since(start)
	if firstErr != nil {
		return 0, 0, firstErr
	}
	conns1, err := ib.originConns()
	if err != nil {
		return 0, 0, err
	}
	// The origin's view: new upstream connections per 1 000 requests
	// (a proxy that does not keep its upstream connections pays a TLS
	// handshake per request).
	c := &ib.cells[irKeepAlive][t.col]
	c.opens = append(c.opens, 1000*float64(conns1-conns0-1)/float64(total.Load()))
	return float64(total.Load()) / elapsed.Seconds(), 0, nil
}

// bigBodies: GET /big (8 MiB) on one proven connection in a loop for o.dur
// (at least twice); MB/s.
func (ib *interceptBench) bigBodies(t *httpsTarget) (float64, float64, error) {
	c, err := t.openProven(t.name, ib.port, ib.origin.ca.name)
	if err != nil {
		return 0, 0, err
	}
	defer c.Close()
	req := []byte("GET /big HTTP/1.1\r\nHost: " + c.host + "\r\n\r\n")
	var n int64
	start := time.Now()
	for i := 0; i < 2 || time.Since(start) < ib.o.dur; i++ {
		if _, err := c.do(req, bigBodySize); err != nil {
			return 0, 0, err
		}
		n += bigBodySize
	}
	return float64(n) / 1e6 / time.Since(start).Seconds(), 0, nil
}

// latency: sequential GET / on one proven connection for o.dur; p50, p99 in µs.
func (ib *interceptBench) latency(t *httpsTarget) (float64, float64, error) {
	c, err := t.openProven(t.name, ib.port, ib.origin.ca.name)
	if err != nil {
		return 0, 0, err
	}
	defer c.Close()
	var lat []time.Duration
	for end := time.Now().Add(ib.o.dur); time.Now().Before(end); {
		t0 := time.Now()
		if _, err := c.do(c.req, originBodySize); err != nil {
			return 0, 0, err
		}
		lat = append(lat, time.Since(t0))
	}
	slices.Sort(lat)
	p := func(q float64) float64 { return float64(lat[int(q*float64(len(lat)-1))]) / float64(time.Microsecond) }
	return p(0.50), p(0.99), nil
}

// handshakes times handshakesPerRound new proven connections (name gives
// each one's name) and returns their median in ms.
func (ib *interceptBench) handshakes(t *httpsTarget, name func() string) (float64, float64, error) {
	var ms []float64
	for i := 0; i < handshakesPerRound; i++ {
		n := name()
		start := time.Now()
		c, err := t.openProven(n, ib.port, ib.origin.ca.name)
		if err != nil {
			return 0, 0, err
		}
		ms = append(ms, float64(time.Since(start))/float64(time.Millisecond))
		c.Close()
	}
	return medianF(ms), 0, nil
}

func (ib *interceptBench) coldHandshakes(t *httpsTarget) (float64, float64, error) {
	return ib.handshakes(t, func() string {
		n := ib.names[ib.nextCold[t.col]]
		ib.nextCold[t.col]++
		return n
	})
}

func (ib *interceptBench) warmHandshakes(t *httpsTarget) (float64, float64, error) {
	return ib.handshakes(t, func() string { return t.name })
}

// benchIdle opens o.intercepts proven connections (one request each)
// through a fresh instance of each proxy and charges the growth of its
// tree's Pss to them.
func (ib *interceptBench) benchIdle() error {
	for _, col := range []int{icOpaque, icSquid, icMitm, icNetproxy} {
		c := &ib.cells[irIdle][col]
		kib, note, err := ib.idleOne(col)
		if err != nil {
			c.fail("%v", err)
			fmt.Fprintf(os.Stderr, "  %-22s FAILED: %v\n", icNames[col], err)
			continue
		}
		c.vals = append(c.vals, kib)
		c.notes = append(c.notes, note)
		fmt.Fprintf(os.Stderr, "  %-22s %.1f KiB per connection (%s)\n", icNames[col], kib, note)
	}
	return nil
}

func (ib *interceptBench) idleOne(col int) (float64, string, error) {
	start := map[int]func() (*peerProc, error){icOpaque: ib.newNetproxy, icNetproxy: ib.newNetproxy, icSquid: ib.newSquid, icMitm: ib.newMitm}[col]
	p, err := start()
	if err != nil {
		return 0, "", err
	}
	defer p.stop()
	if err := pinTree(p.pid(), []int{1}); err != nil {
		return 0, "", err
	}
	t := ib.target(col, p)
	warm, err := ib.openMany(t, 16)
	if err != nil {
		return 0, "", fmt.Errorf("warm-up: %w%s", err, p.logTail())
	}
	closeHTTPS(warm)
	time.Sleep(2 * time.Second)
	before, err := treePss(p.pid())
	if err != nil {
		return 0, "", err
	}
	n := ib.o.intercepts
	conns, err := ib.openMany(t, n)
	if err != nil {
		return 0, "", fmt.Errorf("%d connections: %w%s", n, err, p.logTail())
	}
	defer closeHTTPS(conns)
	time.Sleep(3 * time.Second) // let the peer settle (Go: GC of the set-up garbage)
	after, err := treePss(p.pid())
	if err != nil {
		return 0, "", err
	}
	procs, _ := treePIDs(p.pid())
	note := fmt.Sprintf("%d connections, Pss %.1f → %.1f MiB over %d process(es)", n, float64(before)/(1<<20), float64(after)/(1<<20), len(procs))
	return float64(after-before) / 1024 / float64(n), note, nil
}

// ---------------------------------------------------------------------------
// output

// applicableI says which cells of the interception table are measured.
func applicableI(row, col int) bool {
	switch row {
	case irIdle:
		return col != icDirect
	case irCold:
		return col == icSquid || col == icMitm || col == icNetproxy
	}
	return true
}

// printInterceptTable prints the interception table, its notes and the
// issue-29 interception targets; it returns the number of failed cells.
func (ib *interceptBench) printInterceptTable() int {
	fmt.Printf("### Interception (issue 29): the same HTTPS origin directly, through netproxy's opaque tunnel, and intercepted\n\n")
	fmt.Printf("Client: this process, Go crypto/tls through CONNECT, HTTP/1.1, no client session resumption; every connection proven "+
		"(the leaf chains to the column's CA, the origin's verdict on the client's TLS keying material). Median of %d interleaved rounds "+
		"(idle: one run of %d connections on a fresh instance; handshakes: each round the median of %d). In brackets: the ratio to the opaque tunnel "+
		"(opaque tunnel: to direct). Pinning: proxy alone on CPU 1, client and origin on CPU 0; latency row: all on CPU 0. Runs of %s.\n\n",
		ib.o.rounds, ib.o.intercepts, handshakesPerRound, ib.o.dur)
	rows := slices.Clone(irNames[:])
	rows[irKeepAlive] = fmt.Sprintf(rows[irKeepAlive], ib.o.conns)
	failed := printMarkdownTable(icNames[:], rows, ib.cellText)
	var notes []string
	for r := 0; r < nIRows; r++ {
		for col := 0; col < nICols; col++ {
			c := &ib.cells[r][col]
			if len(c.notes) == 0 && len(c.opens) == 0 && c.failed == "" {
				continue
			}
			text := c.noteText("%.1f", " connections accepted by the origin per 1 000 requests")
			notes = append(notes, fmt.Sprintf("- %s, %s: %s", shortIRow(r), icNames[col], text))
		}
	}
	if len(notes) > 0 {
		fmt.Printf("Notes:\n%s\n\n", strings.Join(notes, "\n"))
	}
	ib.printTargets()
	return failed
}

// shortIRow is a row's name up to its first parenthesis or colon.
func shortIRow(r int) string {
	name := irNames[r]
	if i := strings.IndexAny(name, "(:"); i > 0 {
		name = strings.TrimSpace(name[:i])
	}
	return name
}

func (ib *interceptBench) cellText(row, col int) (string, bool) {
	if !applicableI(row, col) {
		return "—", false
	}
	c := &ib.cells[row][col]
	if c.failed != "" {
		return "**failed**", true
	}
	if !c.ok() {
		return "**missing**", true
	}
	v := c.median()
	ratio := func(decimals int) string {
		ref := icOpaque
		if col == icOpaque {
			ref = icDirect
		}
		if rc := &ib.cells[row][ref]; col != icDirect && rc.ok() && applicableI(row, ref) {
			return fmt.Sprintf("%s (%.2f×)", fmtNum(v, decimals), v/rc.median())
		}
		return fmtNum(v, decimals)
	}
	switch row {
	case irKeepAlive, irBig:
		return ratio(0) + c.mark, false
	case irIdle:
		return ratio(1) + c.mark, false
	case irLatency:
		s := fmt.Sprintf("%.0f / %.0f", v, c.median2())
		if dc := &ib.cells[row][icDirect]; col != icDirect && dc.ok() {
			s += fmt.Sprintf(" (%+.0f / %+.0f)", v-dc.median(), c.median2()-dc.median2())
		}
		return s + c.mark, false
	case irCold, irWarm:
		return fmt.Sprintf("%.2f", v) + c.mark, false
	}
	return "?", true
}

// printTargets checks issue 29's interception targets against this run.
func (ib *interceptBench) printTargets() {
	fmt.Printf("netproxy intercepting against issue 29's interception targets (this run):\n\n| target | measured | result |\n|---|---|---|\n")
	for _, tg := range []struct {
		name     string
		row, ref int
		want     float64
	}{
		{"intercepted keep-alive req/s ≥ 1.5× Squid ssl-bump", irKeepAlive, icSquid, 1.5},
		{"intercepted keep-alive req/s ≥ 3× mitmproxy", irKeepAlive, icMitm, 3},
		{"intercepted 8 MiB MB/s ≥ 0.8× the opaque tunnel", irBig, icOpaque, 0.8},
	} {
		c, rc := &ib.cells[tg.row][icNetproxy], &ib.cells[tg.row][tg.ref]
		if !c.ok() || !rc.ok() {
			fmt.Printf("| %s | — | not measured |\n", tg.name)
			continue
		}
		v, ref := c.median(), rc.median()
		actual := fmt.Sprintf("%.2f× (%s vs %s)", v/ref, fmtNum(v, 0), fmtNum(ref, 0))
		if v/ref >= tg.want {
			fmt.Printf("| %s | %s | met |\n", tg.name, actual)
		} else {
			fmt.Printf("| %s | %s | **missed**: %.1f %% short |\n", tg.name, actual, 100*(tg.want-v/ref)/tg.want)
		}
	}
	fmt.Println()
}
