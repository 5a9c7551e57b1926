package main

import (
	"crypto/tls"
	"io"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// wrk 4.1's report of a run with errors, as the peer bench must read it.
const wrkReportWithErrors = `Running 1s test @ http://127.0.0.1:4000/
  1 threads and 64 connections
  Thread Stats   Avg      Stdev     Max   +/- Stdev
    Latency     2.10ms  340.12us   9.80ms   91.00%
    Req/Sec    30.10k     1.20k   32.00k    80.00%
  Latency Distribution
     50%    2.05ms
     75%    2.20ms
     90%    2.40ms
     99%    3.10ms
  30123 requests in 1.00s, 33.45MB read
  Socket errors: connect 2, read 12, write 0, timeout 1
  Non-2xx or 3xx responses: 7
Requests/sec:  30100.00
Transfer/sec:     33.40MB
`

func TestParseWrkCountsErrors(t *testing.T) {
	r, err := parseWrk([]byte(wrkReportWithErrors))
	if err != nil {
		t.Fatal(err)
	}
	if r.requests != 30123 || r.elapsed != time.Second {
		t.Errorf("requests %d in %s, want 30123 in 1s", r.requests, r.elapsed)
	}
	if r.p50 != 2050*time.Microsecond || r.p99 != 3100*time.Microsecond {
		t.Errorf("p50 %s p99 %s", r.p50, r.p99)
	}
	if r.sockErrs != 15 || r.non2xx != 7 {
		t.Errorf("socket errors %d non-2xx %d, want 15 and 7", r.sockErrs, r.non2xx)
	}
	if f := 33.45; r.bytes != int64(f*(1<<20)) {
		t.Errorf("bytes %d, want %d", r.bytes, int64(f*(1<<20)))
	}
	if r.errLine != "Socket errors: connect 2, read 12, write 0, timeout 1" {
		t.Errorf("errLine %q", r.errLine)
	}
}

func TestFmtNum(t *testing.T) {
	for _, c := range []struct {
		v    float64
		d    int
		want string
	}{{39830, 0, "39 830"}, {1234567.891, 1, "1 234 567.9"}, {12, 2, "12.00"}, {-4500, 0, "-4 500"}, {999, 0, "999"}} {
		if got := fmtNum(c.v, c.d); got != c.want {
			t.Errorf("fmtNum(%v, %d) = %q, want %q", c.v, c.d, got, c.want)
		}
	}
}

func TestMedianF(t *testing.T) {
	if m := medianF([]float64{3, 1, 2}); m != 2 {
		t.Errorf("median of 3 = %v", m)
	}
	if m := medianF([]float64{4, 1, 2, 3}); m != 2.5 {
		t.Errorf("median of 4 = %v", m)
	}
}

// The process-tree readers see this test process and its CPU time.
func TestTreeAccountingOfSelf(t *testing.T) {
	pids, err := treePIDs(os.Getpid())
	if err != nil || len(pids) == 0 || pids[0] != os.Getpid() {
		t.Fatalf("treePIDs: %v %v", pids, err)
	}
	before, err := treeCPU(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	for end := time.Now().Add(100 * time.Millisecond); time.Now().Before(end); {
	}
	after, err := treeCPU(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	if after <= before {
		t.Errorf("CPU time did not grow over a 100 ms busy loop: %s → %s", before, after)
	}
	pss, err := treePss(os.Getpid())
	if err != nil || pss <= 0 {
		t.Errorf("treePss: %d %v", pss, err)
	}
}

// Every peer template renders with the data the bench passes, and a key
// the bench forgot is an error rather than "<no value>" in a config.
func TestPeerTemplatesRender(t *testing.T) {
	dir := t.TempDir()
	for name, data := range map[string]map[string]any{
		"squid.conf":      {"Dir": dir, "Port": 3128, "FDs": 4096},
		"sockd.conf":      {"Dir": dir, "Port": 1080, "Privileged": "root", "Unprivileged": "nobody"},
		"squid-bump.conf": {"Dir": dir, "Port": 3129, "FDs": 4096, "Certgen": squidCertgen},
	} {
		path, err := renderPeerConfig(name, dir, data)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		b, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		if strings.Contains(string(b), "<no value>") || strings.Contains(string(b), "{{") {
			t.Errorf("%s rendered with a hole:\n%s", name, b)
		}
	}
	b, _ := os.ReadFile(filepath.Join(dir, "squid-bump.conf"))
	for _, want := range []string{
		"http_port 127.0.0.1:3129 ssl-bump tls-cert=" + dir + "/ca.pem tls-key=" + dir + "/ca-key.pem generate-host-certificates=on",
		"sslcrtd_program " + squidCertgen + " -s " + dir + "/ssl_db",
		"ssl_bump peek step1\nssl_bump bump all\n",
		"tls_outgoing_options cafile=" + dir + "/origin-ca.pem",
		"hosts_file " + dir + "/hosts",
	} {
		if !strings.Contains(string(b), want) {
			t.Errorf("squid-bump.conf lacks %q", want)
		}
	}
	if _, err := renderPeerConfig("squid-bump.conf", dir, map[string]any{"Dir": dir, "Port": 1, "FDs": 1}); err == nil {
		t.Error("squid-bump.conf rendered without Certgen")
	}
}

func TestInterceptProofCheck(t *testing.T) {
	const proxyCA, originCA = "proxy CA", "origin CA"
	for _, c := range []struct {
		p         interceptProof
		intercept bool
		ok        bool
	}{
		{interceptProof{proxyCA, verdictTerminated}, true, true},
		{interceptProof{originCA, verdictEndToEnd}, false, true},
		// An intercepting column whose client saw the origin's leaf, or
		// whose TLS reached the origin end to end, did not intercept.
		{interceptProof{originCA, verdictEndToEnd}, true, false},
		{interceptProof{originCA, verdictTerminated}, true, false},
		{interceptProof{proxyCA, verdictEndToEnd}, true, false},
		{interceptProof{proxyCA, ""}, true, false},
		{interceptProof{proxyCA, "no-ekm"}, true, false},
		// The reference columns must not be intercepted.
		{interceptProof{proxyCA, verdictTerminated}, false, false},
		{interceptProof{originCA, verdictTerminated}, false, false},
		{interceptProof{originCA, ""}, false, false},
	} {
		err := c.p.check(c.intercept, proxyCA, originCA)
		if (err == nil) != c.ok {
			t.Errorf("%+v intercept=%v: %v, want ok=%v", c.p, c.intercept, err, c.ok)
		}
	}
}

// The proof over real TLS: the bench's origin, a relay that passes the
// client's TLS through (as an opaque tunnel) and one that terminates it
// with a leaf of its own CA (as an intercepting proxy). Each column claim
// holds only for the relay that really does it.
func TestInterceptProofOverRealTLS(t *testing.T) {
	origin, err := newOriginTLS()
	if err != nil {
		t.Fatal(err)
	}
	proxyCA, err := newBenchCA("test proxy CA")
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	if err := writeFiles(dir, map[string][]byte{"origin.pem": origin.certPEM, "origin-key.pem": origin.keyPEM}); err != nil {
		t.Fatal(err)
	}
	listen := func() net.Listener {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { ln.Close() })
		return ln
	}
	oln := listen()
	go serveHTTPSOrigin(oln, dir)
	opaque := listen()
	go serveRelay(opaque, oln.Addr().String())

	// The terminating relay: TLS with its own leaf toward the client, its
	// own verified TLS toward the origin, bytes copied between.
	lc, lk, err := proxyCA.leaf([]string{mainName})
	if err != nil {
		t.Fatal(err)
	}
	pair, err := tls.X509KeyPair(lc, lk)
	if err != nil {
		t.Fatal(err)
	}
	term := listen()
	go func() {
		for {
			c, err := term.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				tc := tls.Server(c, &tls.Config{Certificates: []tls.Certificate{pair}, NextProtos: []string{"http/1.1"}})
				up, err := tls.Dial("tcp", oln.Addr().String(), &tls.Config{ServerName: mainName, RootCAs: origin.ca.pool()})
				if err != nil {
					return
				}
				defer up.Close()
				go io.Copy(up, tc)
				io.Copy(tc, up)
			}()
		}
	}()

	_, port, _ := net.SplitHostPort(oln.Addr().String())
	p, _ := strconv.Atoi(port)
	for _, c := range []struct {
		name      string
		addr      string
		intercept bool
		ca        *benchCA
		ok        bool
	}{
		{"opaque relay as an opaque column", opaque.Addr().String(), false, origin.ca, true},
		{"terminating relay as an intercepting column", term.Addr().String(), true, proxyCA, true},
		{"opaque relay claimed to intercept", opaque.Addr().String(), true, proxyCA, false},
		{"terminating relay claimed opaque", term.Addr().String(), false, origin.ca, false},
	} {
		tg := &httpsTarget{col: icSquid, addr: c.addr, name: mainName, intercept: c.intercept, ca: c.ca, roots: c.ca.pool()}
		conn, err := tg.openProven(mainName, p, origin.ca.name)
		if conn != nil {
			conn.Close()
		}
		if (err == nil) != c.ok {
			t.Errorf("%s: %v, want ok=%v", c.name, err, c.ok)
		}
	}
}
