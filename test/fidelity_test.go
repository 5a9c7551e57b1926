package test

// End-to-end tests of issue 12: the data path behaves like a well-kept
// HTTP proxy (items 1–6) and stays bounded under attack (items 7–9). Each
// runs the real netproxy binary against a real local server and a real
// client (curl, net/http, a minimal WebSocket client written here).

import (
	"bufio"
	"bytes"
	"crypto/rand"
	"crypto/sha1"
	"crypto/tls"
	"encoding/base64"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptrace"
	"net/textproto"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// rawServer is a TCP server whose connections are handled by serve.
func rawServer(t *testing.T, serve func(c net.Conn)) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				defer c.Close()
				serve(c)
			}()
		}
	}()
	t.Cleanup(func() { ln.Close() })
	return ln.Addr().(*net.TCPAddr).Port
}

// httpServer starts a net/http server with h on 127.0.0.1.
func httpServer(t *testing.T, h http.Handler) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: h}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	return ln.Addr().(*net.TCPAddr).Port
}

// readHead reads a request head from br (nil at EOF).
func readHead(br *bufio.Reader) []string {
	var head []string
	for {
		line, err := br.ReadString('\n')
		if err != nil {
			return nil
		}
		line = strings.TrimRight(line, "\r\n")
		if line == "" {
			return head
		}
		head = append(head, line)
	}
}

// Item 1: an upload the upstream refuses part-way (413 after 1 MiB, with
// Expect: 100-continue) reaches the client as the upstream's 413, every
// time, with curl and with Go.
func TestExpectContinueRejectedMidUploadForwards413(t *testing.T) {
	var seen atomic.Int64
	port := httpServer(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n, _ := io.CopyN(io.Discard, r.Body, 1<<20)
		seen.Add(n)
		w.Header().Set("Content-Type", "text/plain")
		w.WriteHeader(http.StatusRequestEntityTooLarge)
		io.WriteString(w, "too large\n")
	}))
	p := StartProxy(t, StdConfig())
	file := filepath.Join(t.TempDir(), "upload.bin")
	big := make([]byte, 8<<20)
	rand.Read(big)
	os.WriteFile(file, big, 0o600)
	target := fmt.Sprintf("http://up.test:%d/upload", port)
	bad := 0
	for i := 0; i < 12; i++ {
		r := Curl(t, "-x", "http://"+p.HTTP, "-H", "Expect: 100-continue", "-T", file, "-o", "/dev/null", "-w", "%{http_code}", target)
		if r.Stdout != "413" {
			bad++
			t.Logf("curl #%d: exit %d code %q stderr %s", i, r.Exit, r.Stdout, r.Stderr)
		}
	}
	// Go's client, with and without Expect.
	for i := 0; i < 4; i++ {
		req, _ := http.NewRequest("PUT", target, bytes.NewReader(big))
		if i%2 == 0 {
			req.Header.Set("Expect", "100-continue")
		}
		resp, err := p.HTTPClient(false).Do(req)
		if err != nil {
			bad++
			t.Logf("go client #%d: %v", i, err)
			continue
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 413 || string(body) != "too large\n" {
			bad++
			t.Logf("go client #%d: %d %q", i, resp.StatusCode, body)
		}
	}
	if bad > 0 {
		t.Fatalf("%d of 16 uploads did not get the upstream's 413", bad)
	}
}

// Item 2: a Content-Length response that arrives slowly is relayed as it
// arrives: the status line at once, each part when it comes.
func TestSlowContentLengthResponseIsFlushed(t *testing.T) {
	const parts, gap = 6, 400 * time.Millisecond
	port := rawServer(t, func(c net.Conn) {
		br := bufio.NewReader(c)
		if readHead(br) == nil {
			return
		}
		fmt.Fprintf(c, "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: %d\r\n\r\n", parts*33)
		for i := 0; i < parts; i++ {
			time.Sleep(gap)
			c.Write(bytes.Repeat([]byte{'a' + byte(i)}, 33))
		}
	})
	p := StartProxy(t, StdConfig())
	check := func(name string, c net.Conn, req string) {
		t.Helper()
		defer c.Close()
		start := time.Now()
		io.WriteString(c, req)
		br := bufio.NewReader(c)
		c.SetReadDeadline(time.Now().Add(10 * time.Second))
		line, err := br.ReadString('\n')
		ttfb := time.Since(start)
		if err != nil || !strings.HasPrefix(line, "HTTP/1.1 200") {
			t.Fatalf("%s: status line %q %v", name, line, err)
		}
		if ttfb > gap/2 {
			t.Fatalf("%s: status line after %v; the upstream sent it at once", name, ttfb)
		}
		readHead(br)
		var b [33]byte
		if _, err := io.ReadFull(br, b[:]); err != nil || b[0] != 'a' {
			t.Fatalf("%s: first part %q %v", name, b, err)
		}
		if first := time.Since(start); first > gap+gap/2 {
			t.Fatalf("%s: first body part after %v; the upstream sent it after %v", name, first, gap)
		}
	}
	c, _ := net.Dial("tcp", p.HTTP)
	check("http", c, fmt.Sprintf("GET http://up.test:%d/slow HTTP/1.1\r\nHost: up.test:%d\r\n\r\n", port, port))
	// Through CONNECT and SOCKS5 the bytes are tunneled as they come.
	c, _ = net.Dial("tcp", p.HTTP)
	fmt.Fprintf(c, "CONNECT up.test:%d HTTP/1.1\r\nHost: up.test:%d\r\n\r\n", port, port)
	br := bufio.NewReader(c)
	if h := readHead(br); len(h) == 0 || !strings.Contains(h[0], " 200") {
		t.Fatalf("CONNECT: %q", h)
	}
	check("connect", c, "GET /slow HTTP/1.1\r\nHost: up.test\r\n\r\n")
	rep, sc := SocksConnect(t, p.SOCKS, nil, 1, "up.test", port)
	if rep != 0 {
		t.Fatalf("SOCKS5 reply %d", rep)
	}
	check("socks5", sc, "GET /slow HTTP/1.1\r\nHost: up.test\r\n\r\n")
}

// wsServer is an echo WebSocket server (RFC 6455, text frames up to 125
// bytes) that also counts the handshakes it saw with Upgrade intact.
func wsServer(t *testing.T, upgrades *atomic.Int64) int {
	return httpServer(t, wsEchoHandler(upgrades))
}

func wsEchoHandler(upgrades *atomic.Int64) http.HandlerFunc {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !strings.EqualFold(r.Header.Get("Upgrade"), "websocket") || !strings.Contains(strings.ToLower(r.Header.Get("Connection")), "upgrade") {
			http.Error(w, "not a websocket handshake", http.StatusBadRequest)
			return
		}
		upgrades.Add(1)
		sum := sha1.Sum([]byte(r.Header.Get("Sec-WebSocket-Key") + "258EAFA5-E914-47DA-95CA-C5AB0DC85B11"))
		c, brw, err := http.NewResponseController(w).Hijack()
		if err != nil {
			return
		}
		defer c.Close()
		fmt.Fprintf(brw, "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Accept: %s\r\n\r\n", base64.StdEncoding.EncodeToString(sum[:]))
		brw.Flush()
		for {
			var h [2]byte
			if _, err := io.ReadFull(brw, h[:]); err != nil {
				return
			}
			n := int(h[1] & 0x7f)
			var mask [4]byte
			io.ReadFull(brw, mask[:])
			payload := make([]byte, n)
			if _, err := io.ReadFull(brw, payload); err != nil {
				return
			}
			for i := range payload {
				payload[i] ^= mask[i%4]
			}
			brw.Write(append([]byte{0x81, byte(n)}, payload...))
			brw.Flush()
		}
	})
}

// wsHandshake sends a WebSocket handshake for target on c (absolute-form
// when abs) and returns the reader after a 101, or the status line.
func wsHandshake(c net.Conn, host string, port int, abs bool) (*bufio.Reader, string) {
	key := make([]byte, 16)
	rand.Read(key)
	target := "/ws"
	if abs {
		target = fmt.Sprintf("http://%s:%d/ws", host, port)
	}
	fmt.Fprintf(c, "GET %s HTTP/1.1\r\nHost: %s:%d\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Key: %s\r\nSec-WebSocket-Version: 13\r\n\r\n",
		target, host, port, base64.StdEncoding.EncodeToString(key))
	br := bufio.NewReader(c)
	c.SetReadDeadline(time.Now().Add(10 * time.Second))
	head := readHead(br)
	c.SetReadDeadline(time.Time{})
	if len(head) == 0 {
		return nil, "no answer"
	}
	if !strings.HasPrefix(head[0], "HTTP/1.1 101") {
		return nil, head[0]
	}
	return br, head[0]
}

// wsEcho sends one masked text frame and reads the echo.
func wsEcho(c net.Conn, br *bufio.Reader, msg string) (string, error) {
	mask := [4]byte{1, 2, 3, 4}
	frame := []byte{0x81, 0x80 | byte(len(msg))}
	frame = append(frame, mask[:]...)
	for i := 0; i < len(msg); i++ {
		frame = append(frame, msg[i]^mask[i%4])
	}
	c.SetDeadline(time.Now().Add(5 * time.Second))
	defer c.SetDeadline(time.Time{})
	if _, err := c.Write(frame); err != nil {
		return "", err
	}
	var h [2]byte
	if _, err := io.ReadFull(br, h[:]); err != nil {
		return "", err
	}
	b := make([]byte, h[1]&0x7f)
	_, err := io.ReadFull(br, b)
	return string(b), err
}

// Item 3: ws:// through the HTTP proxy (absolute-form GET with Upgrade)
// reaches the upstream with the handshake intact, and after the 101 the
// two sockets are spliced; the connection is in the open-connection
// registry: a reload that denies the host closes it. Through CONNECT and
// SOCKS5 the handshake is tunneled as bytes.
func TestWebSocketThroughHTTPProxy(t *testing.T) {
	var upgrades atomic.Int64
	port := wsServer(t, &upgrades)
	c := StdConfig()
	c.Domains = append(c.Domains, [2]string{"ws.test", "allow"})
	c.Hosts["ws.test"] = []string{"127.0.0.1"}
	p := StartProxy(t, c)

	conn, err := net.Dial("tcp", p.HTTP)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	br, status := wsHandshake(conn, "ws.test", port, true)
	if br == nil {
		t.Fatalf("handshake through the HTTP proxy: %q (upstream saw %d upgrades)", status, upgrades.Load())
	}
	for _, m := range []string{"hello", "second message"} {
		if got, err := wsEcho(conn, br, m); err != nil || got != m {
			t.Fatalf("echo %q: %q %v", m, got, err)
		}
	}
	if v := metricValue(t, p, "netproxy_connections_active", `{listener="http"}`); v != 1 {
		t.Fatalf("connections_active{http} = %v with one WebSocket open, want 1", v)
	}
	// CONNECT and SOCKS5 carry the same handshake as bytes.
	tc, _ := net.Dial("tcp", p.HTTP)
	defer tc.Close()
	fmt.Fprintf(tc, "CONNECT ws.test:%d HTTP/1.1\r\nHost: ws.test:%d\r\n\r\n", port, port)
	tbr := bufio.NewReader(tc)
	if h := readHead(tbr); len(h) == 0 || !strings.Contains(h[0], " 200") {
		t.Fatalf("CONNECT: %q", h)
	}
	if wbr, st := wsHandshake(&prefixedConn{Conn: tc, r: tbr}, "ws.test", port, false); wbr == nil {
		t.Fatalf("handshake through CONNECT: %q", st)
	} else if got, err := wsEcho(tc, wbr, "via connect"); err != nil || got != "via connect" {
		t.Fatalf("echo through CONNECT: %q %v", got, err)
	}
	rep, sc := SocksConnect(t, p.SOCKS, nil, 1, "ws.test", port)
	if rep != 0 {
		t.Fatalf("SOCKS5 reply %d", rep)
	}
	if wbr, st := wsHandshake(sc, "ws.test", port, false); wbr == nil {
		t.Fatalf("handshake through SOCKS5: %q", st)
	} else if got, err := wsEcho(sc, wbr, "via socks"); err != nil || got != "via socks" {
		t.Fatalf("echo through SOCKS5: %q %v", got, err)
	}

	// Revocation reaches the spliced connection.
	rewriteDomains(t, p, [2]string{"ws.test", "deny"})
	if code, body := p.AdminRequest(t, "POST", "/api/reload", p.Token); code != 200 {
		t.Fatalf("reload: %d %s", code, body)
	}
	if !waitClosed(conn, 2*time.Second) {
		t.Fatal("the WebSocket to a now-denied host is still open after the reload")
	}
}

// prefixedConn reads through r (bytes already buffered) and writes to Conn.
type prefixedConn struct {
	net.Conn
	r *bufio.Reader
}

func (p *prefixedConn) Read(b []byte) (int, error) { return p.r.Read(b) }

// Item 4: HTTP/1.1 response trailers and 103 Early Hints are relayed.
func TestTrailersAndEarlyHintsForwarded(t *testing.T) {
	port := httpServer(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/trailers":
			w.Header().Set("Trailer", "Grpc-Status, X-Checksum")
			w.WriteHeader(200)
			io.WriteString(w, "body")
			w.(http.Flusher).Flush()
			w.Header().Set("Grpc-Status", "0")
			w.Header().Set("X-Checksum", "abc123")
		case "/hints":
			w.Header().Set("Link", "</style.css>; rel=preload; as=style")
			w.WriteHeader(http.StatusEarlyHints)
			time.Sleep(50 * time.Millisecond)
			w.Header().Del("Link")
			io.WriteString(w, "final")
		}
	}))
	p := StartProxy(t, StdConfig())
	client := p.HTTPClient(true)
	resp, err := client.Get(fmt.Sprintf("http://up.test:%d/trailers", port))
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if string(body) != "body" || resp.Trailer.Get("Grpc-Status") != "0" || resp.Trailer.Get("X-Checksum") != "abc123" {
		t.Fatalf("trailers: body %q trailer %v", body, resp.Trailer)
	}
	var hints []string
	trace := &httptrace.ClientTrace{Got1xxResponse: func(code int, h textproto.MIMEHeader) error {
		hints = append(hints, fmt.Sprintf("%d %s", code, h.Get("Link")))
		return nil
	}}
	req, _ := http.NewRequest("GET", fmt.Sprintf("http://up.test:%d/hints", port), nil)
	req = req.WithContext(httptrace.WithClientTrace(req.Context(), trace))
	resp, err = client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ = io.ReadAll(resp.Body)
	resp.Body.Close()
	if string(body) != "final" || len(hints) != 1 || !strings.HasPrefix(hints[0], "103 </style.css>") {
		t.Fatalf("early hints: body %q hints %q", body, hints)
	}
	// curl shows the 103 too.
	r := Curl(t, "-x", "http://"+p.HTTP, "-i", fmt.Sprintf("http://up.test:%d/hints", port))
	if !strings.Contains(r.Stdout, "HTTP/1.1 103") || !strings.Contains(r.Stdout, "final") {
		t.Fatalf("curl: %q %s", r.Stdout, r.Stderr)
	}
}

// Item 5: a request the upstream may already have acted on is not resent
// after a reused connection failed: the upstream reads each request and
// then drops the connection without answering the second one on it.
func TestNoRetryOfNonIdempotentRequests(t *testing.T) {
	var mu sync.Mutex
	counts := map[string]int{}
	port := rawServer(t, func(c net.Conn) {
		br := bufio.NewReader(c)
		for n := 0; ; n++ {
			head := readHead(br)
			if head == nil {
				return
			}
			mu.Lock()
			counts[head[0]]++
			mu.Unlock()
			if n == 1 {
				return // acted on it, then the connection broke
			}
			io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
		}
	})
	p := StartProxy(t, StdConfig())
	do := func(method string) int {
		c, err := net.Dial("tcp", p.HTTP)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		fmt.Fprintf(c, "%s http://up.test:%d/%s HTTP/1.1\r\nHost: up.test:%d\r\nContent-Length: 0\r\n\r\n", method, port, strings.ToLower(method), port)
		c.SetReadDeadline(time.Now().Add(10 * time.Second))
		resp, err := http.ReadResponse(bufio.NewReader(c), nil)
		if err != nil {
			t.Fatalf("%s: %v", method, err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	for _, m := range []string{"POST", "DELETE"} {
		if code := do("GET"); code != 200 { // warms a pooled connection
			t.Fatalf("GET: %d", code)
		}
		code := do(m)
		mu.Lock()
		n := counts[fmt.Sprintf("%s /%s HTTP/1.1", m, strings.ToLower(m))]
		mu.Unlock()
		if n != 1 {
			t.Fatalf("the upstream received the %s %d times (status %d); it must never be resent", m, n, code)
		}
		if code != http.StatusBadGateway {
			t.Fatalf("%s on a broken connection: status %d, want 502", m, code)
		}
	}
	// An idempotent request is retried once on a fresh connection, as
	// net/http does.
	do("GET")
	if code := do("GET"); code != 200 {
		t.Fatalf("a GET on a broken reused connection: %d, want a retry and 200", code)
	}
}

// Item 6: an unsolicited response queued on an idle upstream connection
// must never become the next client's answer.
func TestIdleUpstreamWithQueuedResponseIsNotReused(t *testing.T) {
	var requests atomic.Int64
	port := rawServer(t, func(c net.Conn) {
		br := bufio.NewReader(c)
		for {
			head := readHead(br)
			if head == nil {
				return
			}
			requests.Add(1)
			io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
			time.Sleep(50 * time.Millisecond)
			io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Length: 8\r\n\r\nPOISONED")
		}
	})
	p := StartProxy(t, StdConfig())
	for i := 0; i < 5; i++ {
		// Each request from a new client connection, keep-alive (no
		// Connection: close), so the proxy pools the upstream connection.
		c, err := net.Dial("tcp", p.HTTP)
		if err != nil {
			t.Fatal(err)
		}
		fmt.Fprintf(c, "GET http://up.test:%d/n%d HTTP/1.1\r\nHost: up.test:%d\r\n\r\n", port, i, port)
		c.SetReadDeadline(time.Now().Add(10 * time.Second))
		resp, err := http.ReadResponse(bufio.NewReader(c), nil)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		c.Close()
		if string(body) != "ok" {
			t.Fatalf("request %d got %q: another request's queued response", i, body)
		}
		time.Sleep(200 * time.Millisecond)
	}
	if n := requests.Load(); n != 5 {
		t.Fatalf("the upstream saw %d requests, want 5", n)
	}
}

// rssKB is the resident set of pid in KiB.
func rssKB(t *testing.T, pid int) int {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(line, "VmRSS:") {
			n, _ := strconv.Atoi(strings.Fields(line)[1])
			return n
		}
	}
	return -1
}

// Item 7: 200 connections each sending ~1 MiB of tiny headers to a blocked
// host get 431 after max_header_bytes, memory stays bounded by what was
// received, and other clients are served meanwhile. max_headers counts
// fields.
func TestHeaderFloodIsBounded(t *testing.T) {
	up := StartUpstream(t, false)
	p := StartProxy(t, StdConfig())
	pid := p.Cmd.Process.Pid
	var flood bytes.Buffer
	flood.WriteString("GET http://denied.test/ HTTP/1.1\r\n")
	for j := 0; flood.Len() < 1<<20; j++ {
		fmt.Fprintf(&flood, "h%d:\r\n", j)
	}
	before := rssKB(t, pid)
	var wg sync.WaitGroup
	var answered431, conns atomic.Int64
	for i := 0; i < 200; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			c, err := net.Dial("tcp", p.HTTP)
			if err != nil {
				return
			}
			defer c.Close()
			conns.Add(1)
			c.SetDeadline(time.Now().Add(30 * time.Second))
			go c.Write(flood.Bytes())
			line, _ := bufio.NewReader(c).ReadString('\n')
			if strings.HasPrefix(line, "HTTP/1.1 431") {
				answered431.Add(1)
			}
		}(i)
	}
	// A probe during the flood is answered promptly.
	start := time.Now()
	resp, err := p.HTTPClient(false).Get(up.URL("up.test", "/hello"))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	probe := time.Since(start)
	peak := rssKB(t, pid)
	wg.Wait()
	after := rssKB(t, pid)
	t.Logf("RSS before %d KiB, during %d KiB, after %d KiB; probe %v; 431s %d/%d", before, peak, after, probe, answered431.Load(), conns.Load())
	if answered431.Load() != conns.Load() {
		t.Fatalf("%d of %d flooding connections got a 431", answered431.Load(), conns.Load())
	}
	// What was received is at most 200 × 64 KiB = 12.5 MiB (plus socket
	// buffers); allow the runtime's slack, not the 2.4 GB of before.
	if grow := max(peak, after) - before; grow > 96<<10 {
		t.Fatalf("RSS grew by %d KiB during a header flood", grow)
	}
	if probe > 2*time.Second {
		t.Fatalf("a probe waited %v during the flood", probe)
	}
	// max_headers: 100 fields pass, 101 are a 431.
	for n, want := range map[int]string{100: "HTTP/1.1 200", 101: "HTTP/1.1 431"} {
		var b strings.Builder
		fmt.Fprintf(&b, "GET %s HTTP/1.1\r\nHost: up.test:%d\r\n", up.URL("up.test", "/hello"), up.Port)
		for j := 2; j < n; j++ { // Host, n-2 of these, Connection
			fmt.Fprintf(&b, "X-F%d: v\r\n", j)
		}
		b.WriteString("Connection: close\r\n\r\n")
		out, _ := RawExchange(t, p.HTTP, []byte(b.String()), 5*time.Second)
		if !strings.HasPrefix(out, want) {
			t.Fatalf("%d header fields: %q, want %s", n, firstLine(out), want)
		}
	}
}

func firstLine(s string) string {
	line, _, _ := strings.Cut(s, "\n")
	return line
}

// Item 8: an upstream that answers 101 must not pin connection slots once
// the clients left — neither on the body path (a POST without Upgrade,
// answered 502), nor for a real upgrade the client closes, nor inside MITM.
func TestUpgrade101DoesNotLeakConnectionSlots(t *testing.T) {
	port := rawServer(t, func(c net.Conn) {
		br := bufio.NewReader(c)
		if readHead(br) == nil {
			return
		}
		io.WriteString(c, "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\r\n")
		c.SetReadDeadline(time.Now().Add(time.Minute))
		io.Copy(io.Discard, c) // holds the connection open, ignoring its end
		time.Sleep(time.Minute)
	})
	p := StartProxy(t, StdConfig())
	var wg sync.WaitGroup
	var got101 atomic.Int64
	for i := 0; i < 200; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			c, err := net.Dial("tcp", p.HTTP)
			if err != nil {
				return
			}
			defer c.Close()
			if i%2 == 0 {
				fmt.Fprintf(c, "POST http://up.test:%d/x HTTP/1.1\r\nHost: up.test:%d\r\nContent-Length: 5\r\n\r\nhello", port, port)
			} else {
				fmt.Fprintf(c, "GET http://up.test:%d/x HTTP/1.1\r\nHost: up.test:%d\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\r\n", port, port)
			}
			c.SetReadDeadline(time.Now().Add(10 * time.Second))
			line, _ := bufio.NewReader(c).ReadString('\n')
			if strings.HasPrefix(line, "HTTP/1.1 101") {
				got101.Add(1)
			}
		}(i)
	}
	wg.Wait()
	if got101.Load() != 100 {
		t.Fatalf("%d upgrade requests got a 101, want 100 (and no 101 for a request that did not ask)", got101.Load())
	}
	deadline := time.Now().Add(15 * time.Second)
	for {
		v := metricValue(t, p, "netproxy_connections_active", `{listener="http"}`)
		if v == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("connections_active{http} = %v 15 s after every client closed", v)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// Item 9: "Transfer-Encoding : chunked" (space before the colon) is a 400
// (RFC 9112 §5.1), on the HTTP listener and inside MITM.
func TestSpaceBeforeColonIs400(t *testing.T) {
	up := StartUpstream(t, false)
	p := StartProxy(t, StdConfig())
	hits := up.Hits()
	out, _ := RawExchange(t, p.HTTP, []byte(fmt.Sprintf(
		"POST %s HTTP/1.1\r\nHost: up.test:%d\r\nTransfer-Encoding : chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n", up.URL("up.test", "/echo"), up.Port)), 5*time.Second)
	if !strings.HasPrefix(out, "HTTP/1.1 400") {
		t.Fatalf("answer %q, want 400", firstLine(out))
	}
	if up.Hits() != hits {
		t.Fatal("the request reached the upstream")
	}
}

// mitmFixture starts a limited-mode proxy with MITM in front of a TLS
// upstream serving a WebSocket echo on /ws and a rogue 101 (never asked
// for, connection held open) on every other path.
func mitmFixture(t *testing.T) (*Proxy, int, *atomic.Int64) {
	t.Helper()
	var upgrades atomic.Int64
	ws := wsEchoHandler(&upgrades)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/ws":
			ws(w, r)
			return
		case "/slow":
			w.Header().Set("Content-Length", "99")
			w.WriteHeader(200)
			for i := 0; i < 3; i++ {
				w.(http.Flusher).Flush()
				time.Sleep(400 * time.Millisecond)
				w.Write(bytes.Repeat([]byte{'a' + byte(i)}, 33))
			}
			return
		case "/hints":
			w.Header().Set("Link", "</style.css>; rel=preload; as=style")
			w.WriteHeader(http.StatusEarlyHints)
			w.Header().Del("Link")
			io.WriteString(w, "final")
			return
		case "/trailers":
			w.Header().Set("Trailer", "Grpc-Status")
			io.WriteString(w, "body")
			w.(http.Flusher).Flush()
			w.Header().Set("Grpc-Status", "0")
			return
		}
		c, brw, err := http.NewResponseController(w).Hijack()
		if err != nil {
			return
		}
		defer c.Close()
		brw.WriteString("HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\r\n")
		brw.Flush()
		c.SetReadDeadline(time.Now().Add(time.Minute))
		io.Copy(io.Discard, c)
		time.Sleep(time.Minute)
	})}
	tln := tls.NewListener(ln, &tls.Config{Certificates: []tls.Certificate{selfSigned(t)}, NextProtos: []string{"http/1.1"}})
	go srv.Serve(tln)
	t.Cleanup(func() { srv.Close() })
	port := ln.Addr().(*net.TCPAddr).Port
	cfg := StdConfig()
	cfg.Mode = "limited"
	cfg.Extra = "[mitm]\nenabled = true\nca_cert = \"ca.pem\"\nca_key = \"ca-key.pem\"\nupstream_ca = \"upstream.pem\"\n"
	p := WriteProxyConfig(t, cfg)
	writeMITMFiles(t, p.Dir, &Upstream{Port: port, TLS: true})
	p.Start(t)
	return p, port, &upgrades
}

// mitmConn opens an intercepted TLS session to up.test:port.
func mitmConn(t *testing.T, p *Proxy, port int) *tls.Conn {
	t.Helper()
	c, err := net.Dial("tcp", p.HTTP)
	if err != nil {
		t.Fatal(err)
	}
	fmt.Fprintf(c, "CONNECT up.test:%d HTTP/1.1\r\nHost: up.test:%d\r\n\r\n", port, port)
	br := bufio.NewReader(c)
	if h := readHead(br); len(h) == 0 || !strings.Contains(h[0], " 200") {
		c.Close()
		t.Fatalf("CONNECT: %q", h)
	}
	tc := tls.Client(c, &tls.Config{ServerName: "up.test", InsecureSkipVerify: true, NextProtos: []string{"http/1.1"}})
	tc.SetDeadline(time.Now().Add(10 * time.Second))
	if err := tc.Handshake(); err != nil {
		c.Close()
		t.Fatal(err)
	}
	tc.SetDeadline(time.Time{})
	return tc
}

// Items 3, 8 and 9 inside MITM: a wss:// handshake is relayed and spliced;
// a 101 nobody asked for is a 502 and frees the slot when the client
// leaves; "Transfer-Encoding :" is a 400; a head beyond the limits a 431.
func TestMITMUpgradeSlotsAndMalformedHeads(t *testing.T) {
	p, port, upgrades := mitmFixture(t)

	// The fixture intercepts because of limited mode, where a request
	// carrying Upgrade is refused (SPEC §3.8, issue 24 item 3): after a 101
	// nothing would be checked.
	tc := mitmConn(t, p, port)
	br, status := wsHandshake(tc, "up.test", port, false)
	if br != nil || !strings.Contains(status, " 403") || upgrades.Load() != 0 {
		t.Fatalf("wss handshake inside limited-mode MITM: %q (upstream saw %d upgrades), want 403", status, upgrades.Load())
	}
	tc.Close()

	var wg sync.WaitGroup
	var got502 atomic.Int64
	for i := 0; i < 50; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			tc := mitmConn(t, p, port)
			defer tc.Close()
			fmt.Fprintf(tc, "GET /rogue HTTP/1.1\r\nHost: up.test:%d\r\n\r\n", port)
			tc.SetReadDeadline(time.Now().Add(10 * time.Second))
			line, _ := bufio.NewReader(tc).ReadString('\n')
			if strings.HasPrefix(line, "HTTP/1.1 502") {
				got502.Add(1)
			}
		}()
	}
	wg.Wait()
	if got502.Load() != 50 {
		t.Fatalf("%d of 50 unrequested 101s were answered 502", got502.Load())
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		v := metricValue(t, p, "netproxy_connections_active", `{listener="http"}`)
		if v == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("connections_active{http} = %v after every MITM client left", v)
		}
		time.Sleep(200 * time.Millisecond)
	}

	for _, c := range []struct{ head, want string }{
		{fmt.Sprintf("GET /x HTTP/1.1\r\nHost: up.test:%d\r\nTransfer-Encoding : chunked\r\n\r\n0\r\n\r\n", port), "HTTP/1.1 400"},
		{fmt.Sprintf("GET /x HTTP/1.1\r\nHost: up.test:%d\r\n%s\r\n", port, strings.Repeat("h:\r\n", 200)), "HTTP/1.1 431"},
		{fmt.Sprintf("GET /x HTTP/1.1\r\nHost: up.test:%d\r\nX: %s\r\n\r\n", port, strings.Repeat("a", 70<<10)), "HTTP/1.1 431"},
	} {
		tc := mitmConn(t, p, port)
		io.WriteString(tc, c.head)
		tc.SetReadDeadline(time.Now().Add(10 * time.Second))
		line, _ := bufio.NewReader(tc).ReadString('\n')
		tc.Close()
		if !strings.HasPrefix(line, c.want) {
			t.Fatalf("inside MITM %q…: %q, want %s", c.head[:40], line, c.want)
		}
	}
}

// Items 2 and 4 inside MITM: a slow Content-Length body is relayed as it
// arrives, 103 Early Hints and trailers are relayed.
func TestMITMStreamsEarlyHintsAndTrailers(t *testing.T) {
	p, port, _ := mitmFixture(t)
	tc := mitmConn(t, p, port)
	defer tc.Close()
	br := bufio.NewReader(tc)
	start := time.Now()
	fmt.Fprintf(tc, "GET /slow HTTP/1.1\r\nHost: up.test:%d\r\n\r\n", port)
	tc.SetReadDeadline(time.Now().Add(10 * time.Second))
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatal(err)
	}
	head := time.Since(start)
	var b [33]byte
	if _, err := io.ReadFull(resp.Body, b[:]); err != nil || b[0] != 'a' {
		t.Fatalf("first part %q %v", b, err)
	}
	first := time.Since(start)
	io.Copy(io.Discard, resp.Body)
	if head > 300*time.Millisecond || first > 800*time.Millisecond {
		t.Fatalf("inside MITM the head came after %v and the first part after %v; the upstream sent them at once and after 400 ms", head, first)
	}

	fmt.Fprintf(tc, "GET /hints HTTP/1.1\r\nHost: up.test:%d\r\n\r\n", port)
	line, _ := br.ReadString('\n')
	if !strings.HasPrefix(line, "HTTP/1.1 103") {
		t.Fatalf("inside MITM: %q, want the 103 first", line)
	}
	readHead(br)
	resp, err = http.ReadResponse(br, nil)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != 200 || string(body) != "final" {
		t.Fatalf("after the 103: %d %q", resp.StatusCode, body)
	}

	fmt.Fprintf(tc, "GET /trailers HTTP/1.1\r\nHost: up.test:%d\r\n\r\n", port)
	resp, err = http.ReadResponse(br, nil)
	if err != nil {
		t.Fatal(err)
	}
	body, _ = io.ReadAll(resp.Body)
	if string(body) != "body" || resp.Trailer.Get("Grpc-Status") != "0" {
		t.Fatalf("trailers inside MITM: body %q trailer %v", body, resp.Trailer)
	}
}

// The one forwarding path also carries bodies through the parent proxy:
// an upload through network.upstream_proxy reaches the pinned address with
// its body intact (absolute-form with the pinned address, Host the name).
func TestUploadThroughParentProxy(t *testing.T) {
	public := StartUpstream(t, false)
	const pinned = "93.184.216.34"
	parent := startTestParent(t, nil, map[string]string{pinned: fmt.Sprintf("127.0.0.1:%d", public.Port)}, "")
	p := WriteProxyConfig(t, ProxyConfig{
		Domains: [][2]string{{"rebind.test", "allow"}},
		Hosts:   map[string][]string{"rebind.test": {pinned}},
	})
	withUpstreamProxy(t, p, parent.Addr)
	p.Start(t)
	body := make([]byte, 300<<10)
	rand.Read(body)
	for _, chunked := range []bool{false, true} {
		var r io.Reader = bytes.NewReader(body)
		if chunked {
			r = io.MultiReader(r) // unknown length: sent chunked
		}
		req, _ := http.NewRequest("POST", fmt.Sprintf("http://rebind.test:%d/echo", public.Port), r)
		resp, err := p.HTTPClient(false).Do(req)
		if err != nil {
			t.Fatal(err)
		}
		got, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 || !bytes.Equal(got, body) {
			t.Fatalf("upload through the parent (chunked %t): %d, %d of %d bytes back", chunked, resp.StatusCode, len(got), len(body))
		}
	}
	targets, _ := parent.seen()
	for _, tg := range targets {
		if tg != fmt.Sprintf("%s:%d", pinned, public.Port) {
			t.Fatalf("the parent was asked for %q", tg)
		}
	}
}
