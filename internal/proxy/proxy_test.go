package proxy

import (
	"bufio"
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"os"
	"runtime"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/netproxy/netproxy/attribution"
	"github.com/netproxy/netproxy/credentials"
	"github.com/netproxy/netproxy/hostpolicy"
	"github.com/netproxy/netproxy/internal/config"
	"github.com/netproxy/netproxy/internal/observe"
	"github.com/netproxy/netproxy/mitm"
)

// stack is an in-process data path over the real engine and real sockets.
type stack struct {
	httpAddr, socksAddr string
	tracker             *Tracker
	httpP               *HTTPProxy
	socksP              *SOCKSProxy
	gates               []*Gate
	registry            *attribution.Registry
	engine              *hostpolicy.Engine
	core                *Core
	decisions           atomic.Int64
	cancel              context.CancelFunc
}

// testInstance is the Via instance of every test stack.
const testInstance = "f0f0f0f0f0f0f0f0"

func (s *stack) ObserveDecision(observe.DecisionEvent) { s.decisions.Add(1) }

const testPolicy = `
[network]
mode = "full"
allow_local_binding = true
[network.domains]
"up.test" = "allow"
"denied.test" = "deny"
[dns.hosts]
"up.test" = ["127.0.0.1"]
"denied.test" = ["127.0.0.1"]
[approvals]
enabled = false
`

func newBenchStack(b *testing.B) *stack {
	return newStack(b, testPolicy, Limits{}, "")
}

func newStack(t testing.TB, policyTOML string, limits Limits, parent string, decider ...hostpolicy.Decider) *stack {
	t.Helper()
	var d hostpolicy.Decider
	if len(decider) > 0 {
		d = decider[0]
	}
	return newStackWith(t, policyTOML, limits, stackParts{parent: parent, decider: d})
}

// stackParts are the optional parts of a test stack.
type stackParts struct {
	// requests are request rules added to the policy (config.Parse would
	// want [mitm] files for them).
	requests []hostpolicy.RequestRule
	parent   string
	decider  hostpolicy.Decider
	// resolver replaces the config's [dns] resolver (fuzz stacks must not
	// send generated names to a real DNS server).
	resolver hostpolicy.Resolver
	// allowLocal replaces the dialer's allow_local_binding source; every
	// dial attempt consults it first, so a test can watch the attempts.
	allowLocal func() bool
	// sink, when set, sees every decision as well.
	sink observe.DecisionSink
	// mitm, when set, intercepts limited-mode CONNECT.
	mitm *mitm.Interceptor
	// creds, when set, is the credential broker.
	creds *credentials.Broker
	// ends, when set, receives the access records (access.go).
	ends observe.ConnectionEndSink
	// maxConns, when set, replaces the tracker's limit of 100 connections.
	maxConns int
}

func newStackWith(t testing.TB, policyTOML string, limits Limits, parts stackParts) *stack {
	t.Helper()
	cfg, err := config.Parse([]byte(policyTOML), "test.toml")
	if err != nil {
		t.Fatal(err)
	}
	o, err := config.PolicyOptions(cfg)
	if err != nil {
		t.Fatal(err)
	}
	o.Resolver = parts.resolver
	o.MITM = parts.mitm != nil
	o.Requests = append(o.Requests, parts.requests...)
	pol, err := hostpolicy.Build(o)
	if err != nil {
		t.Fatal(err)
	}
	eng := hostpolicy.NewEngine(pol, parts.decider)
	allowLocal := parts.allowLocal
	if allowLocal == nil {
		allowLocal = eng.AllowLocalBinding
	}
	s := &stack{tracker: NewTracker(cmp.Or(parts.maxConns, 100), nil), registry: attribution.NewRegistry(), engine: eng}
	var sink observe.DecisionSink = s
	if parts.sink != nil {
		sink = observe.Fanout{s, parts.sink}
	}
	core := &Core{
		Pipeline:   eng,
		Dialer:     &Dialer{ConnectTimeout: 2 * time.Second, Parent: parts.parent, AllowLocalBinding: allowLocal, Resolver: eng.Resolver()},
		Executions: s.registry,
		Sink:       sink,
		Tracker:    s.tracker,
		Limits:     limits,
		MITM:       parts.mitm,
		Instance:   testInstance,
	}
	core.Credentials = parts.creds // the credential broker
	core.Ends = parts.ends
	// Every test's tunnels park after a short quiet spell, so the parked
	// path is exercised by all of them.
	parker, err := NewParker()
	if err != nil {
		t.Fatal(err)
	}
	parker.After = 100 * time.Millisecond
	core.Parker = parker
	t.Cleanup(func() { parker.Close() })
	s.core = core
	s.httpP, s.socksP = NewHTTP(core), NewSOCKS(core)
	ctx, cancel := context.WithCancel(context.Background())
	s.cancel = cancel
	for _, name := range []string{"http", "socks5"} {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		g := NewGate(ln, GateConfig{Name: name, Tracker: s.tracker, Registry: s.registry, FirstByte: limits.withDefaults().HeaderTimeout})
		s.gates = append(s.gates, g)
		if name == "http" {
			s.httpAddr = ln.Addr().String()
			go s.httpP.Serve(ctx, g)
		} else {
			s.socksAddr = ln.Addr().String()
			go s.socksP.Serve(ctx, g)
		}
	}
	t.Cleanup(s.stop)
	return s
}

func (s *stack) stop() {
	for _, g := range s.gates {
		g.Close()
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	s.tracker.Shutdown(ctx)
	for _, g := range s.gates {
		g.Wait()
	}
	s.httpP.Wait()
	s.socksP.Wait()
	s.httpP.CloseIdle()
	s.cancel()
}

// upstream is an origin on 127.0.0.1 with a slow endpoint.
func upstream(t *testing.T) (*httptest.Server, int) {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/slow":
			time.Sleep(300 * time.Millisecond)
		case "/echo":
			io.Copy(w, r.Body)
			return
		}
		io.WriteString(w, "hello")
	}))
	t.Cleanup(srv.Close)
	return srv, srv.Listener.Addr().(*net.TCPAddr).Port
}

func openFDs(t *testing.T) int {
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Fatal(err)
	}
	return len(ents)
}

// TestNoLeakWhenClientsVanish drops clients at every stage — before the
// first byte, mid-frame, mid-head, mid-body, mid-handshake, while the
// upstream is answering, inside tunnels — and checks that every goroutine
// and descriptor the proxy opened for them is gone.
func TestNoLeakWhenClientsVanish(t *testing.T) {
	up, port := upstream(t)
	s := newStack(t, testPolicy, Limits{HeaderTimeout: 2 * time.Second, IdleTimeout: 5 * time.Second}, "")
	// Warm up lazily started runtime goroutines before taking the baseline.
	httpGet(t, s.httpAddr, fmt.Sprintf("http://up.test:%d/", port))
	s.httpP.CloseIdle()
	up.CloseClientConnections()
	time.Sleep(100 * time.Millisecond)
	baseG, baseFD := runtime.NumGoroutine(), openFDs(t)

	dial := func(addr string) net.Conn {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	abort := func(c net.Conn) { // RST, like a killed client
		c.(*net.TCPConn).SetLinger(0)
		c.Close()
	}
	scenarios := map[string]func(){
		"before first byte": func() { abort(dial(s.httpAddr)) },
		"mid frame":         func() { c := dial(s.httpAddr); c.Write([]byte("\x00CDX")); abort(c) },
		"mid head": func() {
			c := dial(s.httpAddr)
			fmt.Fprintf(c, "GET http://up.test:%d/ HTTP/1.1\r\nHost: up", port)
			abort(c)
		},
		"mid body": func() {
			c := dial(s.httpAddr)
			fmt.Fprintf(c, "POST http://up.test:%d/echo HTTP/1.1\r\nHost: up.test:%d\r\nContent-Length: 1000\r\n\r\npartial", port, port)
			time.Sleep(20 * time.Millisecond)
			abort(c)
		},
		"while upstream answers": func() {
			c := dial(s.httpAddr)
			fmt.Fprintf(c, "GET http://up.test:%d/slow HTTP/1.1\r\nHost: up.test:%d\r\n\r\n", port, port)
			time.Sleep(20 * time.Millisecond)
			abort(c)
		},
		"socks mid handshake": func() { c := dial(s.socksAddr); c.Write([]byte{5, 1}); abort(c) },
		"socks mid request": func() {
			c := dial(s.socksAddr)
			c.Write([]byte{5, 1, 0, 5, 1, 0, 3, 7, 'u', 'p'})
			abort(c)
		},
		"inside CONNECT tunnel": func() {
			c := dial(s.httpAddr)
			fmt.Fprintf(c, "CONNECT up.test:%d HTTP/1.1\r\nHost: up.test\r\n\r\n", port)
			br := bufio.NewReader(c)
			if resp, err := http.ReadResponse(br, &http.Request{Method: "CONNECT"}); err != nil || resp.StatusCode != 200 {
				t.Errorf("CONNECT: %v %v", resp, err)
			}
			fmt.Fprintf(c, "GET /slow HTTP/1.1\r\nHost: up.test\r\n\r\n")
			abort(c)
		},
		"inside SOCKS tunnel": func() {
			c := dial(s.socksAddr)
			c.Write([]byte{5, 1, 0})
			io.ReadFull(c, make([]byte, 2))
			c.Write(append([]byte{5, 1, 0, 3, 7}, fmt.Sprintf("up.test%c%c", byte(port>>8), byte(port))...))
			io.ReadFull(c, make([]byte, 10))
			fmt.Fprintf(c, "GET /slow HTTP/1.1\r\nHost: up.test\r\n\r\n")
			abort(c)
		},
	}
	for name, run := range scenarios {
		for i := 0; i < 10; i++ {
			run()
		}
		_ = name
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		time.Sleep(200 * time.Millisecond)
		s.httpP.CloseIdle()
		up.CloseClientConnections()
		// The runtime pools splice pipes; a GC releases them.
		runtime.GC()
		runtime.GC()
		g, fd, open := runtime.NumGoroutine(), openFDs(t), s.tracker.Open()
		if g <= baseG+1 && fd <= baseFD && open == 0 {
			return
		}
		if time.Now().After(deadline) {
			buf := make([]byte, 1<<20)
			n := runtime.Stack(buf, true)
			t.Fatalf("leak: goroutines %d (baseline %d), fds %d (baseline %d: %v), open connections %d\n%s", g, baseG, fd, baseFD, fdTargets(), open, buf[:n])
		}
	}
}

func httpGet(t *testing.T, proxyAddr, target string) string {
	t.Helper()
	c, err := net.Dial("tcp", proxyAddr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	host := strings.TrimPrefix(target, "http://")
	host = host[:strings.Index(host, "/")]
	fmt.Fprintf(c, "GET %s HTTP/1.1\r\nHost: %s\r\nConnection: close\r\n\r\n", target, host)
	data, _ := io.ReadAll(c)
	return string(data)
}

func TestTunnelIdleTimeout(t *testing.T) {
	_, port := upstream(t)
	s := newStack(t, testPolicy, Limits{IdleTimeout: 300 * time.Millisecond}, "")
	c, err := net.Dial("tcp", s.httpAddr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	fmt.Fprintf(c, "CONNECT up.test:%d HTTP/1.1\r\nHost: up.test\r\n\r\n", port)
	br := bufio.NewReader(c)
	if resp, err := http.ReadResponse(br, &http.Request{Method: "CONNECT"}); err != nil || resp.StatusCode != 200 {
		t.Fatalf("CONNECT: %v %v", resp, err)
	}
	// Traffic keeps it open past the idle period.
	var lastAct time.Time
	for i := 0; i < 3; i++ {
		fmt.Fprintf(c, "GET / HTTP/1.1\r\nHost: up.test\r\n\r\n")
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			t.Fatalf("request %d in the tunnel: %v", i, err)
		}
		io.ReadAll(resp.Body)
		lastAct = time.Now()
		time.Sleep(150 * time.Millisecond)
	}
	start := lastAct
	c.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := br.ReadByte(); err == nil {
		t.Fatal("idle tunnel sent data")
	}
	if d := time.Since(start); d < 250*time.Millisecond || d > 900*time.Millisecond {
		t.Fatalf("idle tunnel closed after %s, want about 300ms", d)
	}
}

func TestTunnelCarriesLargeTransferBothWays(t *testing.T) {
	_, port := upstream(t)
	s := newStack(t, testPolicy, Limits{}, "")
	c, err := net.Dial("tcp", s.httpAddr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	body := strings.Repeat("0123456789abcdef", 1<<16) // 1 MiB
	// The CONNECT and the first tunneled bytes in one write: early data.
	fmt.Fprintf(c, "CONNECT up.test:%d HTTP/1.1\r\nHost: up.test\r\n\r\nPOST /echo HTTP/1.1\r\nHost: up.test\r\nContent-Length: %d\r\n\r\n%s", port, len(body), body)
	br := bufio.NewReader(c)
	if resp, err := http.ReadResponse(br, &http.Request{Method: "CONNECT"}); err != nil || resp.StatusCode != 200 {
		t.Fatalf("CONNECT: %v %v", resp, err)
	}
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatal(err)
	}
	got, _ := io.ReadAll(resp.Body)
	if string(got) != body {
		t.Fatalf("echo through the tunnel: %d bytes, want %d", len(got), len(body))
	}
}

func TestDialerRechecksAddresses(t *testing.T) {
	local := false
	d := &Dialer{ConnectTimeout: time.Second, AllowLocalBinding: func() bool { return local }}
	lo := netip.MustParseAddr("127.0.0.1")
	if _, err := d.DialTarget(context.Background(), Target{Host: "x.test", Port: 9, Addrs: []netip.Addr{lo}}); !errors.Is(err, ErrNonPublic) {
		t.Fatalf("non-public pinned address: %v", err)
	}
	mapped := netip.MustParseAddr("::ffff:10.0.0.1")
	if _, err := d.DialTarget(context.Background(), Target{Host: "x.test", Port: 9, Addrs: []netip.Addr{mapped}}); !errors.Is(err, ErrNonPublic) {
		t.Fatalf("IPv4-mapped private address: %v", err)
	}
	if _, err := d.DialTarget(context.Background(), Target{Host: "x.test", Port: 9}); !errors.Is(err, ErrNoAddresses) {
		t.Fatalf("no pinned address: %v", err)
	}
	ln, _ := net.Listen("tcp", "127.0.0.1:0")
	defer ln.Close()
	port := uint16(ln.Addr().(*net.TCPAddr).Port)
	c, err := d.DialTarget(context.Background(), Target{Host: "127.0.0.1", Port: port, Addrs: []netip.Addr{lo}, LocalLiteral: true})
	if err != nil {
		t.Fatalf("allow-listed local literal: %v", err)
	}
	c.Close()
	local = true
	c, err = d.DialTarget(context.Background(), Target{Host: "127.0.0.1", Port: port})
	if err != nil {
		t.Fatalf("allow_local_binding: %v", err)
	}
	c.Close()
	if _, err := d.DialContext(context.Background(), "tcp", "127.0.0.1:1"); !errors.Is(err, ErrNoTarget) {
		t.Fatalf("transport dial without a decision: %v", err)
	}
}

func TestDialReplyCodes(t *testing.T) {
	cases := []struct {
		err  error
		want byte
	}{
		{fmt.Errorf("%w 10.0.0.1", ErrNonPublic), socksNotAllowed},
		{&net.OpError{Op: "dial", Err: os.NewSyscallError("connect", syscall.ECONNREFUSED)}, socksConnectionRefused},
		{context.DeadlineExceeded, socksTTLExpired},
		{&net.OpError{Op: "dial", Err: os.NewSyscallError("connect", syscall.EHOSTUNREACH)}, socksHostUnreachable},
		{&net.DNSError{Err: "no such host", Name: "x"}, socksHostUnreachable},
	}
	for _, c := range cases {
		if got := dialReply(c.err); got != c.want {
			t.Errorf("dialReply(%v) = 0x%02x, want 0x%02x", c.err, got, c.want)
		}
	}
}

// recordingParent answers one absolute-form request per connection with
// "hello" and records its request line and Host header.
func recordingParent(t *testing.T) (addr string, seen chan [2]string) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	seen = make(chan [2]string, 4)
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			br := bufio.NewReader(c)
			line, _ := br.ReadString('\n')
			host := ""
			for {
				h, err := br.ReadString('\n')
				if err != nil || h == "\r\n" {
					break
				}
				if k, v, ok := strings.Cut(h, ":"); ok && strings.EqualFold(k, "host") {
					host = strings.TrimSpace(v)
				}
			}
			seen <- [2]string{strings.TrimSpace(line), host}
			io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Length: 5\r\nConnection: close\r\n\r\nhello")
			c.Close()
		}
	}()
	return ln.Addr().String(), seen
}

func TestThroughParentProxy(t *testing.T) {
	_, port := upstream(t)
	// Plain HTTP: the parent gets the pinned address in absolute form and
	// the name in Host (SPEC §3.5).
	rec, seen := recordingParent(t)
	child := newStack(t, testPolicy, Limits{}, rec)
	out := httpGet(t, child.httpAddr, fmt.Sprintf("http://up.test:%d/p?q=1", port))
	if !strings.HasSuffix(out, "hello") {
		t.Fatalf("plain HTTP through the parent: %q", out)
	}
	got := <-seen
	if want := fmt.Sprintf("GET http://127.0.0.1:%d/p?q=1 HTTP/1.1", port); got[0] != want || got[1] != fmt.Sprintf("up.test:%d", port) {
		t.Fatalf("parent saw %q Host %q, want %q Host up.test:%d", got[0], got[1], want, port)
	}
	// CONNECT through a netproxy parent: it is asked for the pinned
	// address, which its own policy must allow.
	parent := newStack(t, strings.Replace(testPolicy, "[network.domains]\n", "[network.domains]\n\"127.0.0.1\" = \"allow\"\n", 1), Limits{}, "")
	child = newStack(t, testPolicy, Limits{}, parent.httpAddr)
	c, err := net.Dial("tcp", child.httpAddr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	fmt.Fprintf(c, "CONNECT up.test:%d HTTP/1.1\r\nHost: up.test\r\n\r\nGET / HTTP/1.1\r\nHost: up.test\r\nConnection: close\r\n\r\n", port)
	br := bufio.NewReader(c)
	if resp, err := http.ReadResponse(br, &http.Request{Method: "CONNECT"}); err != nil || resp.StatusCode != 200 {
		t.Fatalf("CONNECT through the parent: %v %v", resp, err)
	}
	data, _ := io.ReadAll(br)
	if !strings.HasSuffix(string(data), "hello") {
		t.Fatalf("tunnel through the parent: %q", data)
	}
	if n := parent.decisions.Load(); n != 1 {
		t.Fatalf("parent saw %d requests, want 1", n)
	}
}

func TestRequestLimitsAndFraming(t *testing.T) {
	_, port := upstream(t)
	s := newStack(t, testPolicy, Limits{MaxHeaderBytes: 2048}, "")
	big := fmt.Sprintf("GET http://up.test:%d/ HTTP/1.1\r\nHost: up.test:%d\r\nX-Big: %s\r\n\r\n", port, port, strings.Repeat("a", 8192))
	c, _ := net.Dial("tcp", s.httpAddr)
	c.Write([]byte(big))
	data, _ := io.ReadAll(c)
	c.Close()
	if !strings.HasPrefix(string(data), "HTTP/1.1 431") {
		t.Fatalf("oversized head: %q", data)
	}

	// Expect: 100-continue: the proxy tells the client to send the body.
	c, _ = net.Dial("tcp", s.httpAddr)
	defer c.Close()
	fmt.Fprintf(c, "POST http://up.test:%d/echo HTTP/1.1\r\nHost: up.test:%d\r\nContent-Length: 4\r\nExpect: 100-continue\r\n\r\n", port, port)
	br := bufio.NewReader(c)
	c.SetReadDeadline(time.Now().Add(5 * time.Second))
	line, err := br.ReadString('\n')
	if err != nil || !strings.HasPrefix(line, "HTTP/1.1 100") {
		t.Fatalf("want 100 Continue first, got %q %v", line, err)
	}
	br.ReadString('\n')
	c.Write([]byte("ping"))
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	if string(body) != "ping" {
		t.Fatalf("echo %q", body)
	}

	// HTTP/1.0 without keep-alive: the response ends the connection.
	c2, _ := net.Dial("tcp", s.httpAddr)
	defer c2.Close()
	fmt.Fprintf(c2, "GET http://up.test:%d/ HTTP/1.0\r\n\r\n", port)
	c2.SetReadDeadline(time.Now().Add(5 * time.Second))
	data, err = io.ReadAll(c2)
	if err != nil || !strings.HasSuffix(string(data), "hello") {
		t.Fatalf("HTTP/1.0: %q %v", data, err)
	}
}

func fdTargets() []string {
	ents, _ := os.ReadDir("/proc/self/fd")
	var out []string
	for _, e := range ents {
		l, _ := os.Readlink("/proc/self/fd/" + e.Name())
		out = append(out, l)
	}
	return out
}

func TestTunnelWithoutIdleTimeoutOutlivesBusyWindow(t *testing.T) {
	_, port := upstream(t)
	// A Tunnel with Idle 0 never times out, even after the busy window.
	ln, _ := net.Listen("tcp", "127.0.0.1:0")
	defer ln.Close()
	go func() {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		up, err := net.Dial("tcp", fmt.Sprintf("127.0.0.1:%d", port))
		if err != nil {
			return
		}
		(&Tunnel{Client: c.(*net.TCPConn), Upstream: up.(*net.TCPConn)}).Run()
	}()
	c, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	time.Sleep(busyWindow + 300*time.Millisecond)
	fmt.Fprintf(c, "GET / HTTP/1.1\r\nHost: up.test\r\nConnection: close\r\n\r\n")
	c.SetReadDeadline(time.Now().Add(5 * time.Second))
	data, _ := io.ReadAll(c)
	if !strings.HasSuffix(string(data), "hello") {
		t.Fatalf("tunnel idle past the busy window stopped working: %q", data)
	}
}

// blockingDecider holds every review until the request's context ends.
type blockingDecider struct{ cancelled chan string }

func (b blockingDecider) Decide(ctx context.Context, req hostpolicy.Request, base hostpolicy.Decision) hostpolicy.Decision {
	<-ctx.Done()
	b.cancelled <- string(req.Protocol)
	base.Verdict = hostpolicy.Deny
	return base
}

// TestVanishedClientCancelsReview: a client that leaves while its request
// waits for a review cancels the review's context (HTTP, CONNECT, SOCKS5).
func TestVanishedClientCancelsReview(t *testing.T) {
	dec := blockingDecider{cancelled: make(chan string, 3)}
	s := newStack(t, testPolicy, Limits{}, "", dec)

	for _, send := range []struct {
		addr, data string
	}{
		{s.httpAddr, "GET http://other.test/ HTTP/1.1\r\nHost: other.test\r\n\r\n"},
		{s.httpAddr, "CONNECT other.test:443 HTTP/1.1\r\nHost: other.test\r\n\r\n"},
		{s.socksAddr, "\x05\x01\x00\x05\x01\x00\x03\x0aother.test\x01\xbb"},
	} {
		c, err := net.Dial("tcp", send.addr)
		if err != nil {
			t.Fatal(err)
		}
		c.Write([]byte(send.data))
		time.Sleep(300 * time.Millisecond)
		c.Close()
		select {
		case p := <-dec.cancelled:
			t.Logf("review of a %s request cancelled", p)
		case <-time.After(3 * time.Second):
			t.Fatalf("review for %q not cancelled after the client left", send.data[:20])
		}
	}
}

// TestVanishedClientStopsSlowUpstream: a client that leaves while the
// upstream has not answered releases the upstream connection.
func TestVanishedClientStopsSlowUpstream(t *testing.T) {
	released := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-r.Context().Done(): // the proxy closed its upstream connection
			close(released)
		case <-time.After(10 * time.Second):
		}
	}))
	defer srv.Close()
	port := srv.Listener.Addr().(*net.TCPAddr).Port
	s := newStack(t, testPolicy, Limits{}, "")
	c, err := net.Dial("tcp", s.httpAddr)
	if err != nil {
		t.Fatal(err)
	}
	fmt.Fprintf(c, "GET http://up.test:%d/ HTTP/1.1\r\nHost: up.test:%d\r\n\r\n", port, port)
	time.Sleep(300 * time.Millisecond)
	c.Close()
	select {
	case <-released:
	case <-time.After(5 * time.Second):
		t.Fatal("the upstream request outlived the client")
	}
}
