package test

// Access records (issue 26 item 3, SPEC §7.5 second set of 2026-12-01):
// every allowed request or tunnel ends with a connection_end line carrying
// bytes each way (as netproxy_bytes_total counts them), duration, the
// upstream status of an HTTP exchange and a close reason; ts is when a line
// was decided and started when its request arrived, so the file is in ts
// order; `netproxy audit verify` passes on it and catches an edit.

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// byteServer is a TCP origin that reads exactly in bytes, answers out
// bytes and then, if closeFirst, closes; otherwise it waits for the
// client's end before closing.
func byteServer(t *testing.T, in, out int, closeFirst bool) int {
	t.Helper()
	return rawServer(t, func(c net.Conn) {
		c.SetDeadline(time.Now().Add(20 * time.Second))
		if _, err := io.ReadFull(c, make([]byte, in)); err != nil {
			return
		}
		c.Write(bytes.Repeat([]byte("d"), out))
		if !closeFirst {
			io.Copy(io.Discard, c)
		}
	})
}

// auditAll returns every audit line in file order.
func auditAll(t *testing.T, p *Proxy) []map[string]any {
	t.Helper()
	data, _ := os.ReadFile(p.Audit)
	var out []map[string]any
	for _, line := range bytes.Split(data, []byte("\n")) {
		if len(line) == 0 {
			continue
		}
		var m map[string]any
		if err := json.Unmarshal(line, &m); err != nil {
			t.Fatalf("audit line is not JSON: %s", line)
		}
		out = append(out, m)
	}
	return out
}

// ends waits for n connection_end lines matching keep and returns them.
func ends(t *testing.T, p *Proxy, n int, keep func(map[string]any) bool) []map[string]any {
	t.Helper()
	got := waitAudit(t, p, "connection_end", n, keep)
	if len(got) != n {
		t.Fatalf("%d connection_end lines match, want %d: %v", len(got), n, got)
	}
	return got
}

func num(m map[string]any, k string) float64 {
	v, _ := m[k].(float64)
	return v
}

// checkEnd checks the fields every connection_end line has.
func checkEnd(t *testing.T, m map[string]any, proto, host, method string, out, in int, status any, close string) {
	t.Helper()
	if m["protocol"] != proto || m["host"] != host || m["method"] != method {
		t.Fatalf("connection_end target: %v", m)
	}
	if num(m, "bytes_out") != float64(out) || num(m, "bytes_in") != float64(in) {
		t.Fatalf("connection_end bytes out/in = %v/%v, want %d/%d: %v", m["bytes_out"], m["bytes_in"], out, in, m)
	}
	if m["status"] != status {
		t.Fatalf("connection_end status = %v, want %v: %v", m["status"], status, m)
	}
	if m["close"] != close {
		t.Fatalf("connection_end close = %v, want %q: %v", m["close"], close, m)
	}
	if _, ok := m["duration_ms"].(float64); !ok {
		t.Fatalf("connection_end without duration_ms: %v", m)
	}
	for _, k := range []string{"port", "execution_id", "session_id", "client", "seq", "prev"} {
		if _, ok := m[k]; !ok {
			t.Fatalf("connection_end without %s: %v", k, m)
		}
	}
	checkTimes(t, m)
}

// checkTimes: ts ≥ started; on connection_end, duration_ms = ts − started
// (both rounded to the millisecond).
func checkTimes(t *testing.T, m map[string]any) {
	t.Helper()
	ts, err1 := time.Parse(time.RFC3339Nano, m["ts"].(string))
	started, err2 := time.Parse(time.RFC3339Nano, fmt.Sprint(m["started"]))
	if err1 != nil || err2 != nil {
		t.Fatalf("ts/started not RFC 3339: %v", m)
	}
	if ts.Before(started) {
		t.Fatalf("ts before started: %v", m)
	}
	if m["event"] == "connection_end" {
		if d := ts.Sub(started).Milliseconds() - int64(num(m, "duration_ms")); d < -1 || d > 1 {
			t.Fatalf("duration_ms %v is not ts − started (%v): %v", m["duration_ms"], ts.Sub(started), m)
		}
	}
}

// checkOrder: the file is in ts order and seq counts up by one.
func checkOrder(t *testing.T, lines []map[string]any) {
	t.Helper()
	var last time.Time
	for i, m := range lines {
		ts, err := time.Parse(time.RFC3339Nano, m["ts"].(string))
		if err != nil {
			t.Fatal(err)
		}
		if ts.Before(last) {
			t.Fatalf("line %d is out of ts order (%v after %v): %v", i+1, ts, last, m)
		}
		last = ts
		if i > 0 && num(m, "seq") != num(lines[i-1], "seq")+1 {
			t.Fatalf("line %d: seq %v after %v", i+1, m["seq"], lines[i-1]["seq"])
		}
	}
}

func auditVerify(t *testing.T, files ...string) (int, string) {
	t.Helper()
	cmd := exec.Command(netproxyBin, append([]string{"audit", "verify"}, files...)...)
	out, _ := cmd.CombinedOutput()
	return cmd.ProcessState.ExitCode(), string(out)
}

// TestAccessLogRequestsAndTunnels: plain HTTP keep-alive (two requests on
// one curl connection, and a POST with a known body), an opaque CONNECT
// tunnel whose upstream closes first, a SOCKS5 tunnel the client closes,
// and a tunnel closed by a reload (§3.9) each end with their
// connection_end line; the file verifies, and an edit is caught.
func TestAccessLogRequestsAndTunnels(t *testing.T) {
	up := StartUpstream(t, false)
	p := StartProxy(t, StdConfig())

	// Two GETs on one connection (curl reuses it for the same host).
	r := Curl(t, "-x", "http://"+p.HTTP, up.URL("up.test", "/hello"), up.URL("up.test", "/hello"))
	if r.Exit != 0 || r.Stdout != Hello+Hello {
		t.Fatalf("curl keep-alive: %d %q %s", r.Exit, r.Stdout, r.Stderr)
	}
	gets := ends(t, p, 2, func(m map[string]any) bool { return m["protocol"] == "http" && m["method"] == "GET" })
	for _, m := range gets {
		checkEnd(t, m, "http", "up.test", "GET", 0, len(Hello), float64(200), "complete")
	}
	if gets[0]["client"] != gets[1]["client"] {
		t.Fatalf("the two keep-alive requests name different client connections: %v / %v", gets[0]["client"], gets[1]["client"])
	}
	body := strings.Repeat("b", 400) // one segment: /echo answers as it reads
	r = Curl(t, "-x", "http://"+p.HTTP, "--data-binary", body, up.URL("up.test", "/echo"))
	if r.Exit != 0 || r.Stdout != body {
		t.Fatalf("curl POST: %d %s %d %.80q", r.Exit, r.Stderr, len(r.Stdout), r.Stdout)
	}
	post := ends(t, p, 1, func(m map[string]any) bool { return m["method"] == "POST" })
	checkEnd(t, post[0], "http", "up.test", "POST", len(body), len(body), float64(200), "complete")

	// Opaque CONNECT: 1000 bytes up, 2500 down, the upstream closes first.
	port := byteServer(t, 1000, 2500, true)
	c, err := net.DialTimeout("tcp", p.HTTP, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(10 * time.Second))
	fmt.Fprintf(c, "CONNECT up.test:%d HTTP/1.1\r\nHost: up.test:%d\r\n\r\n", port, port)
	br := bufio.NewReader(c)
	resp, err := http.ReadResponse(br, &http.Request{Method: "CONNECT"})
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("CONNECT: %v %v", resp, err)
	}
	c.Write(bytes.Repeat([]byte("u"), 1000))
	got, _ := io.ReadAll(br)
	if len(got) != 2500 {
		t.Fatalf("tunnel: %d bytes down, want 2500", len(got))
	}
	c.Close()
	tun := ends(t, p, 1, func(m map[string]any) bool { return m["method"] == "CONNECT" && num(m, "port") == float64(port) })
	checkEnd(t, tun[0], "https", "up.test", "CONNECT", 1000, 2500, nil, "upstream_closed")

	// SOCKS5: 700 up, 1200 down, the client closes first.
	sport := byteServer(t, 700, 1200, false)
	rep, sc := SocksConnect(t, p.SOCKS, nil, 0x01, "up.test", sport)
	if rep != 0 {
		t.Fatalf("SOCKS5: reply %d", rep)
	}
	sc.SetDeadline(time.Now().Add(10 * time.Second))
	sc.Write(bytes.Repeat([]byte("u"), 700))
	if _, err := io.ReadFull(sc, make([]byte, 1200)); err != nil {
		t.Fatal(err)
	}
	sc.Close()
	socks := ends(t, p, 1, func(m map[string]any) bool { return m["protocol"] == "socks5-tcp" })
	checkEnd(t, socks[0], "socks5-tcp", "up.test", "", 700, 1200, nil, "client_closed")

	// A tunnel closed by a reload that denies its host (SPEC §3.9).
	rc, rbr := framedTunnel(t, p, "https", nil, "closed.test", up.Port)
	rewriteDomains(t, p, [2]string{"closed.test", "deny"})
	if code, b := p.AdminRequest(t, "POST", "/api/reload", p.Token); code != 200 {
		t.Fatalf("reload: %d %s", code, b)
	}
	if !waitClosed(rc, 2*time.Second) {
		t.Fatal("the tunnel to a now-denied host is still open")
	}
	_ = rbr
	rl := ends(t, p, 1, func(m map[string]any) bool { return m["host"] == "closed.test" })
	if rl[0]["close"] != "policy_closed" || rl[0]["method"] != "CONNECT" || num(rl[0], "bytes_in") <= 0 {
		t.Fatalf("reload-closed tunnel: %v", rl[0])
	}

	p.Signal(syscall.SIGTERM)
	p.WaitExit(t, 10*time.Second)
	all := auditAll(t, p)
	checkOrder(t, all)
	for _, m := range all {
		if m["event"] == "network_decision" {
			checkTimes(t, m)
		}
	}
	raw, _ := os.ReadFile(p.Audit)
	if strings.Contains(string(raw), "Proxy-Authorization") || strings.Contains(string(raw), "?") {
		t.Fatal("the audit carries a header or a query string")
	}
	if code, out := auditVerify(t, p.Audit); code != 0 {
		t.Fatalf("audit verify on the access log: exit %d\n%s", code, out)
	}
	// Inflate one connection_end line's bytes_in: verify exits 1.
	lines := strings.SplitAfter(string(raw), "\n")
	edited := false
	for i, l := range lines {
		if strings.Contains(l, `"event":"connection_end"`) && strings.Contains(l, `"bytes_in":2500`) {
			lines[i] = strings.Replace(l, `"bytes_in":2500`, `"bytes_in":25`, 1)
			edited = true
			break
		}
	}
	if !edited {
		t.Fatal("no connection_end line with bytes_in 2500 to edit")
	}
	bad := filepath.Join(t.TempDir(), "edited.jsonl")
	os.WriteFile(bad, []byte(strings.Join(lines, "")), 0o600)
	if code, out := auditVerify(t, bad); code != 1 || !strings.Contains(out, "BROKEN") {
		t.Fatalf("an edited connection_end line: exit %d\n%s", code, out)
	}
}

// TestAccessLogIntercepted: an intercepted HTTPS request ends with one
// connection_end for the inner request (its method, status and body
// bytes) and one for the tunnel (CONNECT, no status, the inner bytes).
func TestAccessLogIntercepted(t *testing.T) {
	up := StartUpstream(t, true)
	p, _ := startLimitedMITM(t, up, "10s")
	ca := filepath.Join(p.Dir, "ca.pem")
	r := Curl(t, "-x", "http://"+p.HTTP, "--cacert", ca, up.URL("up.test", "/hello"))
	if r.Exit != 0 || r.Stdout != Hello {
		t.Fatalf("GET through MITM: exit %d %q %s", r.Exit, r.Stdout, r.Stderr)
	}
	inner := ends(t, p, 1, func(m map[string]any) bool { return m["method"] == "GET" })
	checkEnd(t, inner[0], "https", "up.test", "GET", 0, len(Hello), float64(200), "complete")
	outer := ends(t, p, 1, func(m map[string]any) bool { return m["method"] == "CONNECT" })
	checkEnd(t, outer[0], "https", "up.test", "CONNECT", 0, len(Hello), nil, "client_closed")
	if inner[0]["client"] != outer[0]["client"] {
		t.Fatalf("inner and tunnel lines name different clients: %v / %v", inner[0]["client"], outer[0]["client"])
	}
}

// TestAccessLogTsOrderWithSlowReview: a request waits 1.5 s for a
// reviewer while other requests are decided; its network_decision line is
// written with the decision time (ts) and its arrival (started), after the
// lines decided meanwhile, and the file stays in ts order.
func TestAccessLogTsOrderWithSlowReview(t *testing.T) {
	up := StartUpstream(t, false)
	p := apprStart(t, "[approvals]\nenabled = true\nreviewer = \"user\"\npolicy = \"on-request\"\ntimeout = \"30s\"\n", "", "")
	slow := p.goGet(up.URL("alpha.test", "/hello"))
	a := p.waitPending("alpha.test")
	for i := 0; i < 3; i++ {
		if r := p.get(up.URL("up.test", "/hello")); r.status != 200 {
			t.Fatalf("up.test while a review waits: %d %v", r.status, r.err)
		}
	}
	time.Sleep(1500 * time.Millisecond)
	p.decide(a.ID, "allow_once")
	apprExpect(t, "the reviewed request", apprAwait(t, slow), 200)
	ends(t, p.Proxy, 1, func(m map[string]any) bool { return m["host"] == "alpha.test" })

	all := auditAll(t, p.Proxy)
	checkOrder(t, all)
	var slowLine map[string]any
	lastUp := -1
	slowAt := -1
	for i, m := range all {
		switch {
		case m["event"] == "network_decision" && m["host"] == "alpha.test":
			slowLine, slowAt = m, i
		case m["event"] == "network_decision" && m["host"] == "up.test":
			lastUp = i
		}
	}
	if slowLine == nil {
		t.Fatal("no network_decision line for the reviewed request")
	}
	checkTimes(t, slowLine)
	ts, _ := time.Parse(time.RFC3339Nano, slowLine["ts"].(string))
	started, _ := time.Parse(time.RFC3339Nano, slowLine["started"].(string))
	if ts.Sub(started) < 1400*time.Millisecond {
		t.Fatalf("the reviewed request's ts − started = %v, want the review's wait (≥ 1.5 s): %v", ts.Sub(started), slowLine)
	}
	if slowAt < lastUp {
		t.Fatalf("the reviewed request's line (%d) is before a line decided while it waited (%d)", slowAt, lastUp)
	}
}
