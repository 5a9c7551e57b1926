package proxy

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/netproxy/netproxy/hostpolicy"
	"github.com/netproxy/netproxy/internal/config"
	"github.com/netproxy/netproxy/internal/observe"
)

// recordingSink keeps every decision event.
type recordingSink struct {
	mu     sync.Mutex
	events []observe.DecisionEvent
}

func (r *recordingSink) ObserveDecision(e observe.DecisionEvent) {
	r.mu.Lock()
	r.events = append(r.events, e)
	r.mu.Unlock()
}

func (r *recordingSink) take() []observe.DecisionEvent {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := r.events
	r.events = nil
	return out
}

// countingUpstream is an origin that counts the requests reaching it.
func countingUpstream(t *testing.T) (hits *atomic.Int64, port int) {
	t.Helper()
	hits = &atomic.Int64{}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hits.Add(1)
		io.Copy(io.Discard, r.Body)
		io.WriteString(w, "hello")
	}))
	t.Cleanup(srv.Close)
	return hits, srv.Listener.Addr().(*net.TCPAddr).Port
}

// setEnabled swaps the stack's policy for testPolicy with network.enabled.
func (s *stack) setEnabled(t *testing.T, enabled bool) {
	t.Helper()
	cfg, err := config.Parse([]byte(testPolicy), "test.toml")
	if err != nil {
		t.Fatal(err)
	}
	cfg.Network.Enabled = enabled
	o, err := config.PolicyOptions(cfg)
	if err != nil {
		t.Fatal(err)
	}
	pol, err := hostpolicy.Build(o)
	if err != nil {
		t.Fatal(err)
	}
	s.engine.Swap(pol)
}

// roundTrip sends raw on a fresh connection and reads one response.
func roundTrip(t *testing.T, addr, raw, method string) (*http.Response, string) {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(5 * time.Second))
	io.WriteString(c, raw)
	resp, err := http.ReadResponse(bufio.NewReader(c), &http.Request{Method: method})
	if err != nil {
		t.Fatalf("reading the answer to %q: %v", raw, err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	return resp, string(body)
}

// tunnelGet sends a CONNECT and, inside the tunnel, a GET; it returns
// everything the connection carried back.
func tunnelGet(t *testing.T, addr, connect string) string {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(5 * time.Second))
	io.WriteString(c, connect+"GET / HTTP/1.1\r\nHost: up.test\r\nConnection: close\r\n\r\n")
	out, _ := io.ReadAll(c)
	return string(out)
}

// socksReply runs a SOCKS5 CONNECT to host:port and returns the reply code.
func socksReply(t *testing.T, addr, host string, port int) byte {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(5 * time.Second))
	msg := []byte{0x05, 0x01, 0x00, 0x05, 0x01, 0x00, 0x03, byte(len(host))}
	msg = append(msg, host...)
	msg = append(msg, byte(port>>8), byte(port))
	c.Write(msg)
	var hdr [4]byte
	if _, err := io.ReadFull(c, hdr[:2]); err != nil || hdr[0] != 5 || hdr[1] != 0 {
		t.Fatalf("method selection: % x %v", hdr[:2], err)
	}
	if _, err := io.ReadFull(c, hdr[:]); err != nil {
		t.Fatalf("SOCKS reply: %v", err)
	}
	return hdr[1]
}

func wantDisabled503(t *testing.T, what string, resp *http.Response, body string, head bool) {
	t.Helper()
	if resp.StatusCode != http.StatusServiceUnavailable {
		t.Fatalf("%s: status %d, want 503", what, resp.StatusCode)
	}
	if ct := resp.Header.Get("Content-Type"); !strings.HasPrefix(ct, "text/plain") {
		t.Errorf("%s: content-type %q, want text/plain", what, ct)
	}
	if xe := resp.Header.Get("X-Proxy-Error"); xe != "blocked-by-policy" {
		t.Errorf("%s: x-proxy-error %q, want blocked-by-policy", what, xe)
	}
	want := "network proxy is disabled"
	if head {
		want = ""
		if resp.ContentLength != int64(len("network proxy is disabled")) {
			t.Errorf("%s: HEAD content-length %d", what, resp.ContentLength)
		}
	}
	if body != want {
		t.Errorf("%s: body %q, want %q", what, body, want)
	}
}

// TestKillSwitch: with network.enabled = false every front end blocks an
// allow-listed target with proxy_disabled — plain HTTP (without and with a
// body), HEAD, CONNECT with 503, SOCKS5 with 0x02 — the upstream is
// never reached, the sinks see deny/proxy_disabled/proxy_state, and
// turning it back on lets the same requests through, on the same listeners.
func TestKillSwitch(t *testing.T) {
	hits, port := countingUpstream(t)
	sink := &recordingSink{}
	s := newStackWith(t, testPolicy, Limits{}, stackParts{sink: sink})
	target := fmt.Sprintf("up.test:%d", port)
	get := fmt.Sprintf("GET http://%s/ HTTP/1.1\r\nHost: %s\r\nConnection: close\r\n\r\n", target, target)
	post := fmt.Sprintf("POST http://%s/ HTTP/1.1\r\nHost: %s\r\nContent-Length: 5\r\nConnection: close\r\n\r\nhello", target, target)
	connect := fmt.Sprintf("CONNECT %s HTTP/1.1\r\nHost: %s\r\n\r\n", target, target)

	allowedAll := func(phase string) {
		t.Helper()
		before := hits.Load()
		if resp, body := roundTrip(t, s.httpAddr, get, "GET"); resp.StatusCode != 200 || body != "hello" {
			t.Fatalf("%s: GET %d %q", phase, resp.StatusCode, body)
		}
		if resp, body := roundTrip(t, s.httpAddr, post, "POST"); resp.StatusCode != 200 || body != "hello" {
			t.Fatalf("%s: POST %d %q", phase, resp.StatusCode, body)
		}
		if out := tunnelGet(t, s.httpAddr, connect); !strings.HasSuffix(out, "hello") {
			t.Fatalf("%s: GET through CONNECT: %q", phase, out)
		}
		if code := socksReply(t, s.socksAddr, "up.test", port); code != socksSucceeded {
			t.Fatalf("%s: SOCKS reply 0x%02x", phase, code)
		}
		if got := hits.Load() - before; got != 3 {
			t.Fatalf("%s: upstream saw %d requests, want 3", phase, got)
		}
		for _, e := range sink.take() {
			if !e.Decision.Allowed() {
				t.Fatalf("%s: %s blocked: %+v", phase, e.Request.Protocol, e.Decision)
			}
		}
	}
	allowedAll("enabled")

	s.setEnabled(t, false)
	before := hits.Load()
	resp, body := roundTrip(t, s.httpAddr, get, "GET")
	wantDisabled503(t, "GET (no body)", resp, body, false)
	resp, body = roundTrip(t, s.httpAddr, post, "POST")
	wantDisabled503(t, "POST (body path)", resp, body, false)
	resp, body = roundTrip(t, s.httpAddr, connect, "CONNECT")
	wantDisabled503(t, "CONNECT", resp, body, false)
	if !resp.Close {
		t.Error("CONNECT: a refused CONNECT must close the connection")
	}

	// HEAD: no body, and the connection stays usable — the next answer on
	// it starts where the HEAD answer ended.
	c, err := net.Dial("tcp", s.httpAddr)
	if err != nil {
		t.Fatal(err)
	}
	c.SetDeadline(time.Now().Add(5 * time.Second))
	fmt.Fprintf(c, "HEAD http://%s/ HTTP/1.1\r\nHost: %s\r\n\r\nGET http://%s/ HTTP/1.1\r\nHost: %s\r\nConnection: close\r\n\r\n", target, target, target, target)
	br := bufio.NewReader(c)
	for _, m := range []string{"HEAD", "GET"} {
		resp, err := http.ReadResponse(br, &http.Request{Method: m})
		if err != nil {
			t.Fatalf("%s on a kept connection: %v", m, err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		wantDisabled503(t, m+" (kept connection)", resp, string(b), m == "HEAD")
	}
	c.Close()

	if code := socksReply(t, s.socksAddr, "up.test", port); code != socksNotAllowed {
		t.Fatalf("SOCKS reply 0x%02x, want 0x02 (not allowed by ruleset)", code)
	}
	if n := hits.Load() - before; n != 0 {
		t.Fatalf("the upstream saw %d requests while the proxy was disabled", n)
	}
	protos := map[hostpolicy.Protocol]int{}
	for _, e := range sink.take() {
		d := e.Decision
		if d.Verdict != hostpolicy.Deny || d.Reason != hostpolicy.ReasonProxyDisabled || d.Source != hostpolicy.SourceProxyState {
			t.Errorf("%s event: %s %q %q, want deny proxy_disabled proxy_state", e.Request.Protocol, d.Verdict, d.Reason, d.Source)
		}
		if d.Host != "up.test" || int(d.Port) != port {
			t.Errorf("%s event names %s:%d", e.Request.Protocol, d.Host, d.Port)
		}
		protos[e.Request.Protocol]++
	}
	if protos[hostpolicy.ProtoHTTP] != 4 || protos[hostpolicy.ProtoHTTPS] != 1 || protos[hostpolicy.ProtoSOCKS5] != 1 {
		t.Errorf("events by protocol %v, want http 4, https 1, socks5-tcp 1", protos)
	}

	// The check comes after the request's own validity: a CONNECT without
	// an authority is still a 400, an absolute-form request whose Host
	// disagrees still the mismatch 400.
	if resp, body := roundTrip(t, s.httpAddr, "CONNECT :443 HTTP/1.1\r\nHost: :443\r\n\r\n", "CONNECT"); resp.StatusCode != http.StatusBadRequest || !strings.Contains(body, "missing authority") {
		t.Errorf("CONNECT without a host: %d %q, want 400 missing authority", resp.StatusCode, body)
	}
	mismatch := fmt.Sprintf("GET http://%s/ HTTP/1.1\r\nHost: other.test\r\n\r\n", target)
	if resp, body := roundTrip(t, s.httpAddr, mismatch, "GET"); resp.StatusCode != http.StatusBadRequest || !strings.Contains(body, "Host header does not match") {
		t.Errorf("Host mismatch: %d %q, want 400", resp.StatusCode, body)
	}

	s.setEnabled(t, true)
	allowedAll("enabled again")
}

// TestCloseAllCutsTunnelsKeepsListening: Tracker.CloseAll (what the kill
// switch runs on reload) ends open tunnels and keep-alive connections,
// frees their slots, and the listeners keep accepting.
func TestCloseAllCutsTunnelsKeepsListening(t *testing.T) {
	_, port := countingUpstream(t)
	s := newStack(t, testPolicy, Limits{}, "")
	target := fmt.Sprintf("up.test:%d", port)

	tunnel, err := net.Dial("tcp", s.httpAddr)
	if err != nil {
		t.Fatal(err)
	}
	defer tunnel.Close()
	tunnel.SetDeadline(time.Now().Add(5 * time.Second))
	fmt.Fprintf(tunnel, "CONNECT %s HTTP/1.1\r\nHost: %s\r\n\r\n", target, target)
	br := bufio.NewReader(tunnel)
	if resp, err := http.ReadResponse(br, &http.Request{Method: "CONNECT"}); err != nil || resp.StatusCode != 200 {
		t.Fatalf("CONNECT: %v %v", resp, err)
	}
	keep, err := net.Dial("tcp", s.httpAddr)
	if err != nil {
		t.Fatal(err)
	}
	defer keep.Close()
	keep.SetDeadline(time.Now().Add(5 * time.Second))
	fmt.Fprintf(keep, "GET http://%s/ HTTP/1.1\r\nHost: %s\r\n\r\n", target, target)
	kbr := bufio.NewReader(keep)
	resp, err := http.ReadResponse(kbr, nil)
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("keep-alive GET: %v %v", resp, err)
	}
	io.ReadAll(resp.Body)

	if n := s.tracker.CloseAll(); n != 2 {
		t.Errorf("CloseAll closed %d connections, want 2", n)
	}
	for _, c := range []struct {
		name string
		r    io.Reader
	}{{"tunnel", br}, {"keep-alive", kbr}} {
		if _, err := io.ReadAll(c.r); err != nil {
			t.Errorf("%s: not closed by CloseAll: %v", c.name, err)
		}
	}
	for end := time.Now().Add(3 * time.Second); s.tracker.Open() != 0; time.Sleep(5 * time.Millisecond) {
		if time.Now().After(end) {
			t.Fatalf("%d connection slots still held", s.tracker.Open())
		}
	}
	if out := tunnelGet(t, s.httpAddr, fmt.Sprintf("CONNECT %s HTTP/1.1\r\nHost: %s\r\n\r\n", target, target)); !strings.HasSuffix(out, "hello") {
		t.Fatalf("the listener stopped accepting: %q", out)
	}
}
