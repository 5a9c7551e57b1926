package proxy

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/netproxy/netproxy/hostpolicy"
	"github.com/netproxy/netproxy/internal/config"
	"github.com/netproxy/netproxy/internal/observe"
)

func TestSelfAddrs(t *testing.T) {
	tcp := func(s string) net.Addr { return net.TCPAddrFromAddrPort(netip.MustParseAddrPort(s)) }
	_ = tcp
	s := hostpolicy.NewSelfAddrs(func() []netip.Addr { return []netip.Addr{netip.MustParseAddr("192.0.2.10")} },
		netip.MustParseAddrPort("127.0.0.1:3128"), netip.MustParseAddrPort("0.0.0.0:1080"), netip.MustParseAddrPort("[::]:9000"))
	cases := []struct {
		addr string
		port uint16
		want bool
	}{
		{"127.0.0.1", 3128, true},
		{"::ffff:127.0.0.1", 3128, true}, // mapped spelling of the same socket
		{"127.0.0.2", 3128, false},       // a bind on 127.0.0.1 is that address only
		{"0.0.0.0", 3128, true},          // connecting to 0.0.0.0 reaches this host
		{"127.0.0.1", 3129, false},
		{"127.9.9.9", 1080, true},  // wildcard: every loopback address
		{"192.0.2.10", 1080, true}, // wildcard: every interface address
		{"192.0.2.11", 1080, false},
		{"::1", 9000, true},
		{"192.0.2.10", 9000, true}, // :: is dual-stack
		{"93.184.216.34", 1080, false},
	}
	for _, c := range cases {
		if got := s.Contains(netip.MustParseAddr(c.addr), c.port); got != c.want {
			t.Errorf("Contains(%s, %d) = %v, want %v", c.addr, c.port, got, c.want)
		}
	}
	var nilSet *SelfAddrs
	if nilSet.ContainsAny([]netip.Addr{netip.MustParseAddr("127.0.0.1")}, 3128) {
		t.Error("a nil set contains nothing")
	}
}

func TestViaToken(t *testing.T) {
	v := newVia("abc123")
	h := http.Header{}
	if v.looped(h) {
		t.Fatal("no Via is no loop")
	}
	v.add(h)
	if got := h.Get("Via"); got != "1.1 netproxy-abc123" {
		t.Fatalf("Via %q", got)
	}
	if !v.looped(h) {
		t.Fatal("our own Via is a loop")
	}
	other := http.Header{"Via": {"1.0 squid, 1.1 netproxy-ffff"}}
	if v.looped(other) {
		t.Fatal("another instance's Via is no loop")
	}
	v.add(other)
	if got := other.Values("Via"); len(got) != 2 || got[1] != "1.1 netproxy-abc123" {
		t.Fatalf("appended Via %q", got)
	}
	if w := newVia("abc123"); w.value[0] != "1.1 netproxy-abc123" || len(w.value) != 1 {
		t.Fatal("the shared Via value was modified")
	}
}

type closedSink struct {
	mu  sync.Mutex
	evs []observe.ConnectionClosedEvent
}

func (s *closedSink) ConnectionClosed(e observe.ConnectionClosedEvent) {
	s.mu.Lock()
	s.evs = append(s.evs, e)
	s.mu.Unlock()
}

// rechecker is a Pipeline over a fixed set of denied hosts.
type rechecker struct {
	mu     sync.Mutex
	denied map[string]bool
}

func (r *rechecker) Run(_ context.Context, req hostpolicy.Request, _ hostpolicy.RunOptions) hostpolicy.Decision {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.denied[req.Host] {
		return hostpolicy.Decision{Verdict: hostpolicy.Deny, Reason: hostpolicy.ReasonDenied}
	}
	return hostpolicy.Decision{Verdict: hostpolicy.Allow}
}

// tcpPair returns a connected TCP socket whose peer is closed at once (a
// valid descriptor for a registered Conn; nothing is read from it).
func tcpPair(t testing.TB, ln net.Listener) *net.TCPConn {
	c, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	return c.(*net.TCPConn)
}

func closingListener(t testing.TB) net.Listener {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			c.Close()
		}
	}()
	return ln
}

// register admits a fake connection into tr with a published flow.
func register(t testing.TB, tr *Tracker, ln net.Listener, host string, exec string) *Conn {
	c := &Conn{TCPConn: tcpPair(t, ln), Listener: "http", tracker: tr, client: "127.0.0.1:1"}
	if exec != "" {
		c.Attributed, c.Exec.ID = true, exec
	}
	tr.acquire()
	tr.add(c)
	if host != "" {
		c.flow.Store(&flow{host: host, port: 443, addrs: []netip.Addr{netip.MustParseAddr("93.184.216.34")}, proto: codeOf(hostpolicy.ProtoHTTPS)})
	}
	return c
}

func TestRecheckOpenClosesOnlyDenied(t *testing.T) {
	ln := closingListener(t)
	defer ln.Close()
	tr := NewTracker(0, nil)
	rc := &rechecker{denied: map[string]bool{}}
	sink := &closedSink{}
	core := &Core{Tracker: tr, Pipeline: rc, Closed: sink}
	a := register(t, tr, ln, "a.test", "")
	b := register(t, tr, ln, "b.test", "")
	idle := register(t, tr, ln, "", "") // keep-alive with no request yet
	if n := core.RecheckOpen(); n != 0 {
		t.Fatalf("closed %d with nothing denied", n)
	}
	rc.mu.Lock()
	rc.denied["b.test"] = true
	rc.mu.Unlock()
	if n := core.RecheckOpen(); n != 1 || !b.closed.Load() || a.closed.Load() || idle.closed.Load() {
		t.Fatalf("closed %d; a %v b %v idle %v", n, a.closed.Load(), b.closed.Load(), idle.closed.Load())
	}
	if n := core.RecheckOpen(); n != 0 {
		t.Fatalf("closed %d again", n)
	}
	if len(sink.evs) != 1 || sink.evs[0].Reason != CloseDenied || sink.evs[0].Host != "b.test" || sink.evs[0].Protocol != hostpolicy.ProtoHTTPS {
		t.Fatalf("events %+v", sink.evs)
	}
	if n := core.CloseAllFor(CloseProxyDisabled); n != 2 {
		t.Fatalf("kill switch closed %d, want 2", n)
	}
}

func TestCloseExecutionClosesOnlyItsConnections(t *testing.T) {
	ln := closingListener(t)
	defer ln.Close()
	tr := NewTracker(0, nil)
	sink := &closedSink{}
	core := &Core{Tracker: tr, Closed: sink}
	x1 := register(t, tr, ln, "a.test", "exec_x")
	x2 := register(t, tr, ln, "", "exec_x")
	y := register(t, tr, ln, "a.test", "exec_y")
	u := register(t, tr, ln, "a.test", "")
	if n := core.CloseExecution("exec_x"); n != 2 || !x1.closed.Load() || !x2.closed.Load() || y.closed.Load() || u.closed.Load() {
		t.Fatalf("closed %d", n)
	}
	for _, e := range sink.evs {
		if e.Reason != CloseExecutionEnded || e.ExecutionID != "exec_x" {
			t.Fatalf("event %+v", e)
		}
	}
}

// A request decided before a walk began but bound after the walk passed
// it re-checks itself (the generation changed under it).
func TestBindAfterAChangeRechecksItself(t *testing.T) {
	ln := closingListener(t)
	defer ln.Close()
	tr := NewTracker(0, nil)
	rc := &rechecker{denied: map[string]bool{}}
	core := &Core{Tracker: tr, Pipeline: rc}
	c := register(t, tr, ln, "", "")
	gen := c.generation()
	// The policy changes and the walk runs while the request is decided.
	rc.mu.Lock()
	rc.denied["late.test"] = true
	rc.mu.Unlock()
	core.RecheckOpen()
	d := hostpolicy.Decision{Verdict: hostpolicy.Allow, Host: "late.test", Port: 80, Addrs: []netip.Addr{netip.MustParseAddr("93.184.216.34")}}
	if core.bindPlain(c, &d, gen) || !c.closed.Load() {
		t.Fatal("a request bound after the walk escaped the new deny")
	}
	c2 := register(t, tr, ln, "", "")
	gen = c2.generation()
	d.Host = "fine.test"
	if !core.bindPlain(c2, &d, gen) {
		t.Fatal("an unchanged generation needs no re-check")
	}
	// Same target again: no new flow is published.
	f := c2.flow.Load()
	if !core.bindPlain(c2, &d, gen) || c2.flow.Load() != f {
		t.Fatal("the same target published a new flow")
	}
}

// BenchmarkReloadRecheck10kTunnels is a reload of a 100 000-pattern policy
// (compile, swap) followed by the re-check of 10 000 open tunnels, 5 000 of
// whose hosts the new policy denies (SPEC §3.9: within 1 s).
func BenchmarkReloadRecheck10kTunnels(b *testing.B) {
	const tunnels, patterns = 10000, 100000
	dir := b.TempDir()
	var allow, deny strings.Builder
	for i := 0; i < patterns/2; i++ {
		fmt.Fprintf(&allow, "t%05d.example\n*.w%05d.example\n", i, i)
	}
	for i := 0; i < tunnels; i += 2 {
		fmt.Fprintf(&deny, "t%05d.example\n", i)
	}
	os.WriteFile(filepath.Join(dir, "allow.txt"), []byte(allow.String()), 0o644)
	os.WriteFile(filepath.Join(dir, "deny.txt"), []byte(deny.String()), 0o644)
	base := "[network]\nmode = \"full\"\n[[network.domain_files]]\npath = \"allow.txt\"\ndecision = \"allow\"\n"
	os.WriteFile(filepath.Join(dir, "before.toml"), []byte(base), 0o644)
	os.WriteFile(filepath.Join(dir, "after.toml"), []byte(base+"[[network.domain_files]]\npath = \"deny.txt\"\ndecision = \"deny\"\n"), 0o644)
	compile := func(name string) *hostpolicy.Snapshot {
		cfg, err := config.Load(filepath.Join(dir, name))
		if err != nil {
			b.Fatal(err)
		}
		return buildSnapshot(b, cfg)
	}
	eng := hostpolicy.NewEngine(compile("before.toml"), nil)
	ln := closingListener(b)
	defer ln.Close()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		b.StopTimer()
		eng.Swap(compile("before.toml"))
		tr := NewTracker(0, nil)
		core := &Core{Tracker: tr, Pipeline: eng}
		for j := 0; j < tunnels; j++ {
			register(b, tr, ln, "", "").flow.Store(&flow{host: fmt.Sprintf("t%05d.example", j), port: 443,
				addrs: []netip.Addr{netip.MustParseAddr("93.184.216.34")}, proto: codeOf(hostpolicy.ProtoHTTPS)})
		}
		b.StartTimer()
		start := time.Now()
		eng.Swap(compile("after.toml"))
		walk := time.Now()
		n := core.RecheckOpen()
		b.ReportMetric(float64(time.Since(start).Microseconds())/1000, "reload+recheck-ms")
		b.ReportMetric(float64(time.Since(walk).Microseconds())/1000, "recheck-ms")
		b.StopTimer()
		if n != tunnels/2 {
			b.Fatalf("closed %d, want %d", n, tunnels/2)
		}
		core.CloseAllFor(CloseProxyDisabled)
		b.StartTimer()
	}
}

// BenchmarkBindPlainSameTarget is what the registry adds to a keep-alive
// request: two generation loads and a comparison with the last target (no
// lock, no allocation).
func BenchmarkBindPlainSameTarget(b *testing.B) {
	ln := closingListener(b)
	defer ln.Close()
	tr := NewTracker(0, nil)
	core := &Core{Tracker: tr, Pipeline: &rechecker{}}
	c := register(b, tr, ln, "", "")
	d := hostpolicy.Decision{Verdict: hostpolicy.Allow, Host: "up.test", Port: 80, Addrs: []netip.Addr{netip.MustParseAddr("93.184.216.34")}}
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			if !core.bindPlain(c, &d, c.generation()) {
				b.Fatal("closed")
			}
		}
	})
}

// Requests and tunnels run while the policy flips between allowing and
// denying their host and the open connections are re-checked each time
// (run with -race). After the last flip to deny, nothing to the host is
// left open.
func TestRecheckWhileServing(t *testing.T) {
	_, port := upstream(t)
	s := newStack(t, testPolicy, Limits{}, "")
	cfgFor := func(deny bool) *hostpolicy.Snapshot {
		pol := testPolicy
		if deny {
			pol = strings.Replace(pol, `"up.test" = "allow"`, `"up.test" = "deny"`, 1)
		}
		cfg, err := config.Parse([]byte(pol), "test.toml")
		if err != nil {
			t.Fatal(err)
		}
		return buildSnapshot(t, cfg)
	}
	allowP, denyP := cfgFor(false), cfgFor(true)
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for w := 0; w < 4; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				c, err := net.Dial("tcp", s.httpAddr)
				if err != nil {
					return
				}
				c.SetDeadline(time.Now().Add(5 * time.Second))
				if w%2 == 0 {
					fmt.Fprintf(c, "GET http://up.test:%d/ HTTP/1.1\r\nHost: up.test:%d\r\n\r\nGET http://up.test:%d/ HTTP/1.1\r\nHost: up.test:%d\r\n\r\n", port, port, port, port)
				} else {
					fmt.Fprintf(c, "CONNECT up.test:%d HTTP/1.1\r\nHost: up.test\r\n\r\nGET / HTTP/1.1\r\nHost: up.test\r\n\r\n", port)
				}
				buf := make([]byte, 4096)
				for {
					if _, err := c.Read(buf); err != nil {
						break
					}
				}
				c.Close()
			}
		}(w)
	}
	for i := 0; i < 40; i++ {
		if i%2 == 0 {
			s.engine.Swap(denyP)
		} else {
			s.engine.Swap(allowP)
		}
		s.core.RecheckOpen()
		time.Sleep(5 * time.Millisecond)
	}
	s.engine.Swap(denyP)
	s.core.RecheckOpen()
	// A request bound during the walk re-checks itself as it binds.
	time.Sleep(50 * time.Millisecond)
	for _, c := range s.tracker.begin() {
		if f := c.flow.Load(); f != nil && f.host == "up.test" && !c.closed.Load() {
			t.Errorf("a connection to the denied up.test is still open (%s)", protoCodes[f.proto])
		}
	}
	close(stop)
	wg.Wait()
}

// buildSnapshot compiles cfg's policy the way serve does.
func buildSnapshot(tb testing.TB, cfg *config.Config) *hostpolicy.Snapshot {
	tb.Helper()
	o, err := config.PolicyOptions(cfg)
	if err != nil {
		tb.Fatal(err)
	}
	snap, err := hostpolicy.Build(o)
	if err != nil {
		tb.Fatal(err)
	}
	return snap
}
