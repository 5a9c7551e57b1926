package test

// Issue 29 item 2 (interception at the relay's shape): an intercepted
// HTTPS keep-alive stream — the shape of the interception row of `make
// bench-peers` (HTTP/1.1, small GETs, one kept connection) — must cost the
// real netproxy little per request: its heap allocations per inner
// request are read from its own /metrics (go_memstats_mallocs_total)
// around a run, and every request must still have been intercepted (the
// origin sees the secret, never the placeholder).

import (
	"bufio"
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"net/http"
	"regexp"
	"strconv"
	"testing"
	"time"
)

// interceptAllocsPerRequest bounds netproxy's allocations per intercepted
// keep-alive request, everything included (the inner request and its
// answer, the credential broker, metrics, scrapes). It was 72 before issue
// 29's work on the path and is 34 after it; the bound leaves room for
// scrape noise and a Go release, not for a copy of the request again.
const interceptAllocsPerRequest = 45

// mallocsTotal is netproxy's go_memstats_mallocs_total.
func mallocsTotal(t *testing.T, p *Proxy) float64 {
	t.Helper()
	code, text := p.AdminRequest(t, "GET", "/metrics", "")
	m := regexp.MustCompile(`(?m)^go_memstats_mallocs_total (\S+)$`).FindStringSubmatch(text)
	if code != 200 || m == nil {
		t.Fatalf("/metrics: %d, no go_memstats_mallocs_total", code)
	}
	v, err := strconv.ParseFloat(m[1], 64)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

func TestInterceptKeepAliveAllocations(t *testing.T) {
	f := startCredFixture(t)
	a := f.register(t)
	ph := a.placeholder(t, "openai")
	c := f.client(a.Token, false)
	u := fmt.Sprintf("https://api.cred.test:%d/ka", f.up.Port)
	get := func() {
		req, _ := http.NewRequest("GET", u, nil)
		req.Header.Set("Authorization", "Bearer "+ph)
		req.Header.Set("Accept", "*/*")
		resp, err := c.Do(req)
		if err != nil {
			t.Fatalf("GET %s: %v", u, err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 || string(b) != "GET /ka proto=HTTP/1.1" || resp.ProtoMajor != 1 {
			t.Fatalf("GET %s: %d %s %q", u, resp.StatusCode, resp.Proto, b)
		}
	}
	// The tunnel, its leaf and the upstream connection are set up first:
	// what is measured is the keep-alive stream.
	for i := 0; i < 50; i++ {
		get()
	}
	hits0, _ := f.up.seen()
	const n = 3000
	before := mallocsTotal(t, f.p)
	for i := 0; i < n; i++ {
		get()
	}
	per := (mallocsTotal(t, f.p) - before) / n
	hits, auths := f.up.seen()
	if hits-hits0 != n {
		t.Fatalf("the origin saw %d requests of %d", hits-hits0, n)
	}
	for _, au := range auths[hits0:] {
		if au != "Bearer "+credSecret {
			t.Fatalf("a request was not intercepted: the origin saw %q", au)
		}
	}
	t.Logf("netproxy allocations per intercepted keep-alive request: %.1f", per)
	if per > interceptAllocsPerRequest {
		t.Errorf("netproxy allocated %.1f times per intercepted keep-alive request, above %d: a per-request copy came back on the path (profile BenchmarkCredentialHTTPS/intercepted-h1/requests)", per, interceptAllocsPerRequest)
	}
	assertNoSecret(t, f.p, credSecret)
}

// TestInterceptClientGoneMidBody: a client that leaves in the middle of an
// intercepted HTTP/1.1 answer (a download it no longer wants) ends that
// tunnel only; netproxy goes on serving. (The tunnel's own upstream
// connection used to hand its read buffer back before net/http's body
// close drained it: a nil reader, and the process died.)
func TestInterceptClientGoneMidBody(t *testing.T) {
	f := startCredFixture(t)
	a := f.register(t)
	ph := a.placeholder(t, "openai")
	for i := 0; i < 3; i++ {
		c := f.client(a.Token, false)
		req, _ := http.NewRequest("GET", fmt.Sprintf("https://api.cred.test:%d/stream", f.up.Port), nil)
		req.Header.Set("Authorization", "Bearer "+ph)
		resp, err := c.Do(req)
		if err != nil {
			time.Sleep(300 * time.Millisecond) // a dying process is seen to exit
			if f.p.Exited() {
				t.Fatalf("netproxy exited after a client left mid-answer:\n%s", f.p.Output.String())
			}
			t.Fatalf("GET /stream: %v", err)
		}
		if _, err := io.ReadFull(resp.Body, make([]byte, 256<<10)); err != nil {
			t.Fatalf("GET /stream: %v", err)
		}
		resp.Body.Close() // leaves with most of 100 MiB unread
		c.CloseIdleConnections()
	}
	waitFor(t, 5*time.Second, func() bool {
		c := f.client(a.Token, false)
		defer c.CloseIdleConnections()
		req, _ := http.NewRequest("GET", fmt.Sprintf("https://api.cred.test:%d/after", f.up.Port), nil)
		req.Header.Set("Authorization", "Bearer "+ph)
		resp, err := c.Do(req)
		if err != nil {
			return false
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		return resp.StatusCode == 200 && string(b) == "GET /after proto=HTTP/1.1"
	}, "a request after clients left mid-answer")
	if f.p.Exited() {
		t.Fatalf("netproxy exited after a client left mid-answer:\n%s", f.p.Output.String())
	}
}

// interceptIdleKiB bounds netproxy's memory per idle intercepted HTTP/1.1
// connection after one request (the interception table's idle row).
// Holding the upstream connection's 64 KiB read buffer and 4 KiB head
// writer and the client's 4 KiB writer while idle, it was about 83 KiB
// (Pss); without them about 48 (two TLS sessions, the client's reader, a
// goroutine's stack remain).
const interceptIdleKiB = 65

// interceptedConn opens one intercepted HTTP/1.1 connection to
// api.cred.test through the proxy (frame, CONNECT, TLS with netproxy's
// leaf) and makes one request on it; the connection stays open.
func interceptedConn(t *testing.T, f *credFixture, token, ph string) net.Conn {
	t.Helper()
	c, err := net.Dial("tcp", f.p.HTTP)
	if err != nil {
		t.Fatal(err)
	}
	c.SetDeadline(time.Now().Add(20 * time.Second))
	target := fmt.Sprintf("api.cred.test:%d", f.up.Port)
	c.Write(Frame(token))
	fmt.Fprintf(c, "CONNECT %s HTTP/1.1\r\nHost: %s\r\n\r\n", target, target)
	br := bufio.NewReader(c)
	resp, err := http.ReadResponse(br, nil)
	if err != nil || resp.StatusCode != 200 || br.Buffered() != 0 {
		c.Close()
		t.Fatalf("CONNECT: %v %v", resp, err)
	}
	tc := tls.Client(c, &tls.Config{RootCAs: f.mitmCA, ServerName: "api.cred.test", NextProtos: []string{"http/1.1"}})
	fmt.Fprintf(tc, "GET /idle HTTP/1.1\r\nHost: %s\r\nAuthorization: Bearer %s\r\n\r\n", target, ph)
	tbr := bufio.NewReader(tc)
	resp, err = http.ReadResponse(tbr, nil)
	if err != nil {
		tc.Close()
		t.Fatalf("GET /idle: %v", err)
	}
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != 200 || string(b) != "GET /idle proto=HTTP/1.1" {
		tc.Close()
		t.Fatalf("GET /idle: %d %q", resp.StatusCode, b)
	}
	c.SetDeadline(time.Time{})
	return tc
}

// TestInterceptIdleConnectionsCostLittle: intercepted connections an agent
// keeps open after a request (an SDK's pool) cost netproxy little memory
// each while they wait, and each one still serves its next request.
func TestInterceptIdleConnectionsCostLittle(t *testing.T) {
	const n = 200
	f := startCredFixture(t)
	a := f.register(t)
	ph := a.placeholder(t, "openai")
	interceptedConn(t, f, a.Token, ph).Close() // the leaf is minted, the caches warm
	time.Sleep(time.Second)
	pid := f.p.Cmd.Process.Pid
	before := procPssKiB(t, pid)
	conns := make([]net.Conn, 0, n)
	defer func() {
		for _, c := range conns {
			c.Close()
		}
	}()
	for i := 0; i < n; i++ {
		conns = append(conns, interceptedConn(t, f, a.Token, ph))
	}
	time.Sleep(3 * time.Second) // the set-up garbage settles
	per := float64(procPssKiB(t, pid)-before) / n
	t.Logf("%d idle intercepted connections: %.1f KiB each", n, per)
	if per > interceptIdleKiB {
		t.Errorf("an idle intercepted connection costs %.1f KiB, want ≤ %d (a per-connection buffer is held while idle)", per, interceptIdleKiB)
	}
	// Each still serves: its next request goes over the kept connections.
	for i := 0; i < n; i += n / 10 {
		c := conns[i]
		c.SetDeadline(time.Now().Add(10 * time.Second))
		fmt.Fprintf(c, "GET /again HTTP/1.1\r\nHost: api.cred.test:%d\r\nAuthorization: Bearer %s\r\n\r\n", f.up.Port, ph)
		resp, err := http.ReadResponse(bufio.NewReader(c), nil)
		if err != nil {
			t.Fatalf("connection %d after idling: %v", i, err)
		}
		b, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != 200 || string(b) != "GET /again proto=HTTP/1.1" {
			t.Fatalf("connection %d after idling: %d %q", i, resp.StatusCode, b)
		}
	}
}
