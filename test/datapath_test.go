package test

// End-to-end tests of issue 11's data-path items: a parent proxy gets the
// pinned address (SPEC §3.5), netproxy never dials itself and detects Via
// loops (§3.5), and changes reach open connections (§3.9, §4.2).

import (
	"bufio"
	"bytes"
	"crypto/tls"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// testParent is an HTTP parent proxy that resolves names itself: names are
// looked up in resolve (a rebinding name points at 127.0.0.1 there), and an
// IP target is dialed at ipRoute[ip] when listed (standing in for a public
// address the test cannot reach). With loopTo set it forwards every plain
// request, head unchanged, to that proxy instead (a loop through a parent).
type testParent struct {
	Addr    string
	resolve map[string]string
	ipRoute map[string]string
	loopTo  string

	mu      sync.Mutex
	targets []string // CONNECT authorities and absolute-form hosts seen
	hosts   []string // Host headers of absolute-form requests
}

func startTestParent(t *testing.T, resolve, ipRoute map[string]string, loopTo string) *testParent {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &testParent{Addr: ln.Addr().String(), resolve: resolve, ipRoute: ipRoute, loopTo: loopTo}
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go p.serve(c)
		}
	}()
	t.Cleanup(func() { ln.Close() })
	return p
}

func (p *testParent) seen() (targets, hosts []string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]string(nil), p.targets...), append([]string(nil), p.hosts...)
}

// dialAddr is where the parent connects for host:port: its own lookup.
func (p *testParent) dialAddr(host, port string) string {
	if r, ok := p.ipRoute[host]; ok {
		return r
	}
	if ip, ok := p.resolve[host]; ok {
		return net.JoinHostPort(ip, port)
	}
	return net.JoinHostPort(host, port)
}

func (p *testParent) serve(c net.Conn) {
	defer c.Close()
	c.SetDeadline(time.Now().Add(20 * time.Second))
	br := bufio.NewReader(c)
	var head []string
	for {
		line, err := br.ReadString('\n')
		if err != nil {
			return
		}
		line = strings.TrimRight(line, "\r\n")
		if line == "" {
			break
		}
		head = append(head, line)
	}
	if len(head) == 0 {
		return
	}
	f := strings.Fields(head[0])
	if len(f) != 3 {
		return
	}
	hostHdr := ""
	for _, h := range head[1:] {
		if k, v, ok := strings.Cut(h, ":"); ok && strings.EqualFold(k, "host") {
			hostHdr = strings.TrimSpace(v)
		}
	}
	var up net.Conn
	var err error
	if f[0] == "CONNECT" {
		p.mu.Lock()
		p.targets = append(p.targets, f[1])
		p.mu.Unlock()
		if p.loopTo != "" {
			// Hand the CONNECT itself back to the proxy, head unchanged.
			if up, err = net.DialTimeout("tcp", p.loopTo, 5*time.Second); err != nil {
				return
			}
			up.Write([]byte(strings.Join(head, "\r\n") + "\r\n\r\n"))
		} else {
			host, port, _ := net.SplitHostPort(f[1])
			if up, err = net.DialTimeout("tcp", p.dialAddr(host, port), 5*time.Second); err != nil {
				io.WriteString(c, "HTTP/1.1 502 Bad Gateway\r\nContent-Length: 0\r\n\r\n")
				return
			}
			io.WriteString(c, "HTTP/1.1 200 Connection established\r\n\r\n")
		}
	} else {
		u, perr := url.Parse(f[1])
		if perr != nil || u.Host == "" {
			return
		}
		p.mu.Lock()
		p.targets = append(p.targets, u.Host)
		p.hosts = append(p.hosts, hostHdr)
		p.mu.Unlock()
		addr := p.loopTo
		if addr == "" {
			port := u.Port()
			if port == "" {
				port = "80"
			}
			addr = p.dialAddr(u.Hostname(), port)
		}
		if up, err = net.DialTimeout("tcp", addr, 5*time.Second); err != nil {
			io.WriteString(c, "HTTP/1.1 502 Bad Gateway\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")
			return
		}
		var b bytes.Buffer
		if p.loopTo == "" {
			fmt.Fprintf(&b, "%s %s %s\r\n", f[0], u.RequestURI(), f[2])
		} else {
			b.WriteString(head[0] + "\r\n")
		}
		for _, h := range head[1:] {
			b.WriteString(h + "\r\n")
		}
		b.WriteString("\r\n")
		up.Write(b.Bytes())
	}
	defer up.Close()
	up.SetDeadline(time.Now().Add(20 * time.Second))
	go func() {
		if n := br.Buffered(); n > 0 {
			buf, _ := br.Peek(n)
			up.Write(buf)
		}
		io.Copy(up, c)
		up.(*net.TCPConn).CloseWrite()
	}()
	io.Copy(c, up)
}

// withUpstreamProxy puts network.upstream_proxy into p's config file.
func withUpstreamProxy(t *testing.T, p *Proxy, parent string) {
	t.Helper()
	b, err := os.ReadFile(p.ConfigPath)
	if err != nil {
		t.Fatal(err)
	}
	s := strings.Replace(string(b), "[network]\n", fmt.Sprintf("[network]\nupstream_proxy = %q\n", "http://"+parent), 1)
	if err := os.WriteFile(p.ConfigPath, []byte(s), 0o644); err != nil {
		t.Fatal(err)
	}
}

// TestParentProxyGetsPinnedAddress is issue 11 item 2: rebind.test is
// allow-listed and pinned to a public address, but the parent proxy's own
// resolver points it at 127.0.0.1, where a loopback-only service listens.
// netproxy must hand the parent the pinned address (CONNECT 93.184.216.34:P;
// absolute-form http://93.184.216.34:P/path with Host rebind.test:P), so the
// loopback service is never reached through the parent.
func TestParentProxyGetsPinnedAddress(t *testing.T) {
	secret := StartUpstream(t, false) // the loopback target of the rebinding name
	public := StartUpstream(t, false) // what the pinned public address reaches
	const pinned = "93.184.216.34"
	parent := startTestParent(t,
		map[string]string{"rebind.test": "127.0.0.1"},
		map[string]string{pinned: fmt.Sprintf("127.0.0.1:%d", public.Port)}, "")
	p := WriteProxyConfig(t, ProxyConfig{
		Domains: [][2]string{{"rebind.test", "allow"}},
		Hosts:   map[string][]string{"rebind.test": {pinned}},
	})
	withUpstreamProxy(t, p, parent.Addr)
	p.Start(t)
	port := secret.Port
	authority := fmt.Sprintf("rebind.test:%d", port)

	for i := 0; i < 4; i++ {
		c, err := net.DialTimeout("tcp", p.HTTP, 5*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		c.SetDeadline(time.Now().Add(10 * time.Second))
		fmt.Fprintf(c, "CONNECT %s HTTP/1.1\r\nHost: %s\r\n\r\n", authority, authority)
		br := bufio.NewReader(c)
		resp, err := http.ReadResponse(br, &http.Request{Method: "CONNECT"})
		if err != nil || resp.StatusCode != 200 {
			c.Close()
			t.Fatalf("CONNECT %d: %v %v", i, resp, err)
		}
		tunnelRequest(t, c, br)
		c.Close()
	}
	if n := secret.Hits(); n != 0 {
		t.Fatalf("the loopback service was reached %d times through the parent (CONNECT)", n)
	}
	if n := public.Hits(); n != 4 {
		t.Fatalf("the pinned address got %d requests, want 4", n)
	}
	targets, _ := parent.seen()
	want := fmt.Sprintf("%s:%d", pinned, port)
	for _, tg := range targets {
		if tg != want {
			t.Fatalf("the parent was asked for %q, want the pinned %q (all: %v)", tg, want, targets)
		}
	}

	// Plain HTTP: absolute form with the pinned address, Host the name.
	st, _, body := curlProxy(t, p, "http://"+authority+"/hello")
	if st != 200 || body != Hello {
		t.Fatalf("plain HTTP through the parent: %d %q", st, body)
	}
	if n := secret.Hits(); n != 0 {
		t.Fatalf("the loopback service was reached %d times through the parent (plain HTTP)", n)
	}
	targets, hosts := parent.seen()
	if last := targets[len(targets)-1]; last != want {
		t.Fatalf("absolute-form target %q, want %q", last, want)
	}
	if len(hosts) != 1 || hosts[0] != authority {
		t.Fatalf("Host headers seen by the parent %v, want [%s]", hosts, authority)
	}
}

// auditLines returns the audit lines whose event is ev.
func auditLines(t *testing.T, p *Proxy, ev string) []map[string]any {
	t.Helper()
	data, _ := os.ReadFile(p.Audit)
	var out []map[string]any
	for _, line := range bytes.Split(data, []byte("\n")) {
		var m map[string]any
		if json.Unmarshal(line, &m) == nil && m["event"] == ev {
			out = append(out, m)
		}
	}
	return out
}

// waitAudit waits until at least n lines of event ev satisfy keep.
func waitAudit(t *testing.T, p *Proxy, ev string, n int, keep func(map[string]any) bool) []map[string]any {
	t.Helper()
	var got []map[string]any
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		got = got[:0]
		for _, m := range auditLines(t, p, ev) {
			if keep(m) {
				got = append(got, m)
			}
		}
		if len(got) >= n {
			return got
		}
	}
	t.Fatalf("audit: %d %s lines match, want %d", len(got), ev, n)
	return nil
}

// TestNeverConnectsToItsOwnListeners is issue 11 item 3(a): with
// 127.0.0.1 allow-listed exactly, a framed execution's CONNECT (and SOCKS5
// CONNECT) to one of netproxy's own listeners used to be tunnelled into an
// unattributed connection; it is refused as not_allowed_local.
func TestNeverConnectsToItsOwnListeners(t *testing.T) {
	p := StartProxy(t, ProxyConfig{Domains: [][2]string{{"127.0.0.1", "allow"}}})
	reg := p.Register(t, "s-self", "e-self")
	for _, target := range []string{p.HTTP, p.SOCKS, p.Admin} {
		_, port, _ := net.SplitHostPort(target)
		req := fmt.Sprintf("CONNECT 127.0.0.1:%s HTTP/1.1\r\nHost: 127.0.0.1:%s\r\n\r\n", port, port)
		out, _ := RawExchange(t, p.HTTP, append(Frame(reg.Token), req...), 5*time.Second)
		if !strings.HasPrefix(out, "HTTP/1.1 403 ") || !strings.Contains(strings.ToLower(out), "x-proxy-error: blocked-by-allowlist") ||
			!strings.HasSuffix(out, "Sandbox policy blocks local/private network addresses.") {
			t.Fatalf("CONNECT to own listener %s: %q", target, out)
		}
		pn, _ := strconv.Atoi(port)
		if rep, _ := SocksConnect(t, p.SOCKS, Frame(reg.Token), 0x01, "127.0.0.1", pn); rep != 0x02 {
			t.Fatalf("SOCKS5 CONNECT to own listener %s: reply %d, want 2", target, rep)
		}
	}
	waitAudit(t, p, "network_decision", 6, func(m map[string]any) bool {
		return m["reason"] == "not_allowed_local" && m["execution_id"] == reg.ExecutionID
	})
}

var viaRE = regexp.MustCompile(`^1\.1 netproxy-[0-9a-f]{16}$`)

// fdCount counts the open descriptors of pid.
func fdCount(t *testing.T, pid int) int {
	t.Helper()
	ents, err := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid))
	if err != nil {
		t.Fatal(err)
	}
	return len(ents)
}

// TestRequestToItselfDoesNotLoop is issue 11 item 3(b): with
// allow_local_binding on and 127.0.0.1 allow-listed, "GET /" with
// "Host: 127.0.0.1:<proxy port>" made netproxy forward to itself until it
// ran out of connection slots and starved every other client. Now it is
// refused at once (not_allowed_local), as is a name that resolves to the
// proxy; other clients keep being served and descriptors stay flat.
func TestRequestToItselfDoesNotLoop(t *testing.T) {
	up := StartUpstream(t, false)
	c := StdConfig()
	c.Domains = append(c.Domains, [2]string{"127.0.0.1", "allow"}, [2]string{"self.test", "allow"})
	c.Hosts["self.test"] = []string{"127.0.0.1"}
	c.Extra = "[limits]\nmax_connections = 256\n"
	p := StartProxy(t, c)
	pid := p.Cmd.Process.Pid
	_, pport, _ := net.SplitHostPort(p.HTTP)

	served := func() time.Duration {
		start := time.Now()
		if st, _, body := curlProxy(t, p, up.URL("up.test", "/hello")); st != 200 || body != Hello {
			t.Fatalf("another client: %d %q", st, body)
		}
		return time.Since(start)
	}
	served()
	// Every forwarded plain-HTTP request carries this instance's Via.
	if via := up.LastHeaders().Get("Via"); !viaRE.MatchString(via) {
		t.Fatalf("the upstream saw Via %q, want 1.1 netproxy-<16 hex>", via)
	}
	before := fdCount(t, pid)

	var wg sync.WaitGroup
	var bad atomic.Int32
	var firstBad atomic.Value
	for i := 0; i < 20; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			req := fmt.Sprintf("GET / HTTP/1.1\r\nHost: 127.0.0.1:%s\r\n\r\n", pport)
			if i%2 == 1 {
				req = fmt.Sprintf("GET http://self.test:%s/ HTTP/1.1\r\nHost: self.test:%s\r\n\r\n", pport, pport)
			}
			c, err := net.DialTimeout("tcp", p.HTTP, 5*time.Second)
			if err != nil {
				bad.Add(1)
				return
			}
			defer c.Close()
			c.SetDeadline(time.Now().Add(5 * time.Second))
			io.WriteString(c, req)
			resp, err := http.ReadResponse(bufio.NewReader(c), nil)
			if err != nil {
				bad.Add(1)
				firstBad.CompareAndSwap(nil, err.Error())
				return
			}
			b, _ := io.ReadAll(resp.Body)
			if resp.StatusCode != 403 || !strings.Contains(string(b), `"reason":"not_allowed_local"`) {
				bad.Add(1)
				firstBad.CompareAndSwap(nil, fmt.Sprintf("%d %s", resp.StatusCode, b))
			}
		}(i)
	}
	var worst time.Duration
	for i := 0; i < 10; i++ {
		if d := served(); d > worst {
			worst = d
		}
	}
	wg.Wait()
	if n := bad.Load(); n != 0 {
		t.Fatalf("%d of 20 requests to the proxy itself were not refused with 403 not_allowed_local (first: %v)", n, firstBad.Load())
	}
	if worst > 2*time.Second {
		t.Fatalf("other clients waited up to %s while requests to the proxy itself ran", worst)
	}
	time.Sleep(200 * time.Millisecond)
	after := fdCount(t, pid)
	t.Logf("descriptors before %d, after %d; slowest other client %s", before, after, worst)
	if after > before+10 {
		t.Fatalf("descriptors grew from %d to %d", before, after)
	}
}

// TestViaLoopThroughParentIs508 sends a request around a loop that only
// Via can see: the parent proxy forwards everything back to netproxy. The
// second pass carries netproxy's own Via token and is answered 508
// proxy_loop (blocked-by-policy), counted and audited.
func TestViaLoopThroughParentIs508(t *testing.T) {
	up := StartUpstream(t, false)
	p := WriteProxyConfig(t, StdConfig())
	parent := startTestParent(t, nil, nil, p.HTTP)
	withUpstreamProxy(t, p, parent.Addr)
	p.Start(t)

	headers := t.TempDir() + "/h"
	res := Curl(t, "-x", "http://"+p.HTTP, "-D", headers, up.URL("up.test", "/hello"))
	h, _ := os.ReadFile(headers)
	if res.Exit != 0 || !strings.HasPrefix(string(h), "HTTP/1.1 508 ") || !strings.Contains(strings.ToLower(string(h)), "x-proxy-error: blocked-by-policy") {
		t.Fatalf("loop: exit %d %s\n%s%s", res.Exit, res.Stderr, h, res.Stdout)
	}
	var body map[string]any
	if err := json.Unmarshal([]byte(res.Stdout), &body); err != nil || body["reason"] != "proxy_loop" || body["status"] != "blocked" || body["protocol"] != "http" {
		t.Fatalf("508 body %q", res.Stdout)
	}
	if up.Hits() != 0 {
		t.Fatalf("the upstream was reached")
	}
	if targets, _ := parent.seen(); len(targets) != 1 {
		t.Fatalf("the request went around the loop %d times, want once", len(targets))
	}
	if v := metricValue(t, p, "netproxy_requests_total", `{decision="deny",protocol="http",reason="proxy_loop",source="proxy_state"}`); v != 1 {
		t.Fatalf("requests_total{proxy_loop} = %v, want 1", v)
	}
	waitAudit(t, p, "network_decision", 1, func(m map[string]any) bool { return m["reason"] == "proxy_loop" })
	// Every forwarded request carries the Via of this instance.
	if st, _, _ := curlProxy(t, p, "-H", "Via: 1.1 other-proxy", up.URL("up.test", "/hello")); st != 508 {
		t.Fatalf("with another Via first: %d, want 508 (the loop is still ours)", st)
	}
	// A CONNECT handed back by the parent is a loop too (it carries our
	// Via): the second pass is refused, the first answered 502.
	before, _ := parent.seen()
	out, _ := RawExchange(t, p.HTTP, []byte(fmt.Sprintf("CONNECT up.test:%d HTTP/1.1\r\nHost: up.test:%d\r\n\r\n", up.Port, up.Port)), 5*time.Second)
	if !strings.HasPrefix(out, "HTTP/1.1 502 ") {
		t.Fatalf("CONNECT around the loop: %q", out)
	}
	if after, _ := parent.seen(); len(after) != len(before)+1 {
		t.Fatalf("the CONNECT went around the loop %d times, want once", len(after)-len(before))
	}
	waitAudit(t, p, "network_decision", 1, func(m map[string]any) bool { return m["reason"] == "proxy_loop" && m["protocol"] == "https" })
}

// framedTunnel opens a CONNECT (proto "https") or SOCKS5 tunnel to
// host:port after prefix (an attribution frame or nothing) and proves it
// with one request inside.
func framedTunnel(t *testing.T, p *Proxy, proto string, prefix []byte, host string, port int) (net.Conn, *bufio.Reader) {
	t.Helper()
	if proto == "socks5" {
		rep, c := SocksConnect(t, p.SOCKS, prefix, 0x01, host, port)
		if rep != 0 {
			t.Fatalf("SOCKS5 %s: reply %d", host, rep)
		}
		br := bufio.NewReader(c)
		c.SetDeadline(time.Now().Add(10 * time.Second))
		tunnelRequest(t, c, br)
		c.SetDeadline(time.Time{})
		return c, br
	}
	c, err := net.DialTimeout("tcp", p.HTTP, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	c.SetDeadline(time.Now().Add(10 * time.Second))
	c.Write(prefix)
	fmt.Fprintf(c, "CONNECT %s:%d HTTP/1.1\r\nHost: %s:%d\r\n\r\n", host, port, host, port)
	br := bufio.NewReader(c)
	resp, err := http.ReadResponse(br, &http.Request{Method: "CONNECT"})
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("CONNECT %s: %v %v", host, resp, err)
	}
	tunnelRequest(t, c, br)
	c.SetDeadline(time.Time{})
	return c, br
}

// stillServes reports whether one more request inside the tunnel works.
func stillServes(c net.Conn, br *bufio.Reader) bool {
	c.SetDeadline(time.Now().Add(5 * time.Second))
	defer c.SetDeadline(time.Time{})
	if _, err := io.WriteString(c, "GET /hello HTTP/1.1\r\nHost: up.test\r\n\r\n"); err != nil {
		return false
	}
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		return false
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	return string(b) == Hello
}

// TestRevocationClosesOpenTunnels is issue 11 item 4: after DELETE
// /v1/executions/{id}, that execution's open CONNECT and SOCKS5 tunnels
// used to keep reaching the upstream. They are closed within 1 s (and only
// theirs), audited as connection_closed execution_ended and counted; the
// token stops working at once.
func TestRevocationClosesOpenTunnels(t *testing.T) {
	up := StartUpstream(t, false)
	p := StartProxy(t, StdConfig())
	a := p.Register(t, "s-a", "e-a")
	b := p.Register(t, "s-b", "e-b")
	ac, abr := framedTunnel(t, p, "https", Frame(a.Token), "up.test", up.Port)
	as, asbr := framedTunnel(t, p, "socks5", Frame(a.Token), "up.test", up.Port)
	bc, bbr := framedTunnel(t, p, "https", Frame(b.Token), "up.test", up.Port)
	bs, bsbr := framedTunnel(t, p, "socks5", Frame(b.Token), "up.test", up.Port)
	// And an idle keep-alive plain-HTTP connection of the same execution.
	ak, err := net.DialTimeout("tcp", p.HTTP, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer ak.Close()
	ak.SetDeadline(time.Now().Add(10 * time.Second))
	ak.Write(Frame(a.Token))
	fmt.Fprintf(ak, "GET http://up.test:%d/hello HTTP/1.1\r\nHost: up.test:%d\r\n\r\n", up.Port, up.Port)
	if resp, err := http.ReadResponse(bufio.NewReader(ak), nil); err != nil || resp.StatusCode != 200 {
		t.Fatalf("keep-alive request: %v %v", resp, err)
	} else {
		io.ReadAll(resp.Body)
	}

	start := time.Now()
	p.Revoke(t, a.ExecutionID)
	for _, c := range []net.Conn{ac, as, ak} {
		if !waitClosed(c, time.Second-time.Since(start)) {
			t.Fatal("a tunnel of the revoked execution is still open 1 s after DELETE")
		}
	}
	hits := up.Hits()
	if stillServes(ac, abr) || stillServes(as, asbr) {
		t.Fatal("a request reached the upstream through a revoked execution's tunnel")
	}
	if up.Hits() != hits {
		t.Fatal("the upstream saw a request after the revocation")
	}
	if !stillServes(bc, bbr) || !stillServes(bs, bsbr) {
		t.Fatal("another execution's tunnels were closed too")
	}
	// The token is dead: a new framed connection is closed without a reply.
	if out, _ := RawExchange(t, p.HTTP, append(Frame(a.Token), plainGET("up.test", up.Port)...), 3*time.Second); out != "" {
		t.Fatalf("a revoked token still served: %q", out)
	}
	lines := waitAudit(t, p, "connection_closed", 3, func(m map[string]any) bool {
		return m["reason"] == "execution_ended" && m["execution_id"] == a.ExecutionID
	})
	if len(lines) != 3 {
		t.Fatalf("connection_closed lines for the revoked execution: %d, want 3", len(lines))
	}
	if v := metricValue(t, p, "netproxy_connections_closed_total", `{reason="execution_ended"}`); v != 3 {
		t.Fatalf("connections_closed_total{execution_ended} = %v, want 3", v)
	}
}

// rewriteDomains appends entries to the config's [network.domains] table.
func rewriteDomains(t *testing.T, p *Proxy, entries ...[2]string) {
	t.Helper()
	b, err := os.ReadFile(p.ConfigPath)
	if err != nil {
		t.Fatal(err)
	}
	var add strings.Builder
	for _, e := range entries {
		fmt.Fprintf(&add, "%q = %q\n", e[0], e[1])
	}
	s := string(b)
	// A later key replaces an earlier one: drop the old spelling first.
	for _, e := range entries {
		for _, d := range []string{"allow", "deny"} {
			s = strings.Replace(s, fmt.Sprintf("%q = %q\n", e[0], d), "", 1)
		}
	}
	s = strings.Replace(s, "[network.domains]\n", "[network.domains]\n"+add.String(), 1)
	if err := os.WriteFile(p.ConfigPath, []byte(s), 0o644); err != nil {
		t.Fatal(err)
	}
}

// TestReloadDenyClosesMatchingTunnels: a reload that adds a deny closes
// the open tunnels (CONNECT and SOCKS5) to that host within 1 s, audited
// as connection_closed denied; tunnels to other hosts stay.
// keepGoneProxy starts an upstream and a proxy that allows keep.test and
// gone.test (both on the upstream): the fixture of the reload tests, which
// deny gone.test and watch what happens to tunnels to each.
func keepGoneProxy(t *testing.T) (*Upstream, *Proxy) {
	t.Helper()
	up := StartUpstream(t, false)
	c := StdConfig()
	c.Domains = append(c.Domains, [2]string{"keep.test", "allow"}, [2]string{"gone.test", "allow"})
	c.Hosts["keep.test"] = []string{"127.0.0.1"}
	c.Hosts["gone.test"] = []string{"127.0.0.1"}
	return up, StartProxy(t, c)
}

func TestReloadDenyClosesMatchingTunnels(t *testing.T) {
	up, p := keepGoneProxy(t)
	gc, _ := framedTunnel(t, p, "https", nil, "gone.test", up.Port)
	gs, _ := framedTunnel(t, p, "socks5", nil, "gone.test", up.Port)
	kc, kbr := framedTunnel(t, p, "https", nil, "keep.test", up.Port)

	rewriteDomains(t, p, [2]string{"gone.test", "deny"})
	start := time.Now()
	if code, body := p.AdminRequest(t, "POST", "/api/reload", p.Token); code != 200 {
		t.Fatalf("reload: %d %s", code, body)
	}
	for _, c := range []net.Conn{gc, gs} {
		if !waitClosed(c, time.Second-time.Since(start)) {
			t.Fatal("a tunnel to a now-denied host is still open 1 s after the reload")
		}
	}
	if !stillServes(kc, kbr) {
		t.Fatal("a tunnel to a host still allowed was closed")
	}
	waitAudit(t, p, "connection_closed", 2, func(m map[string]any) bool {
		return m["reason"] == "denied" && m["host"] == "gone.test"
	})
	if v := metricValue(t, p, "netproxy_connections_closed_total", `{reason="denied"}`); v != 2 {
		t.Fatalf("connections_closed_total{denied} = %v, want 2", v)
	}
}

// TestDenyAlwaysClosesOpenTunnel: a tunnel allowed by a reviewer
// (allow_session) is closed when a later review of the same host ends in
// deny_always (the live deny list changed under it).
func TestDenyAlwaysClosesOpenTunnel(t *testing.T) {
	up := StartUpstream(t, false)
	p := apprStart(t, "[approvals]\nenabled = true\nreviewer = \"user\"\npolicy = \"on-request\"\ntimeout = \"30s\"\n", "", "")
	done := make(chan net.Conn, 1)
	go func() {
		c, err := net.DialTimeout("tcp", p.HTTP, 5*time.Second)
		if err != nil {
			done <- nil
			return
		}
		c.SetDeadline(time.Now().Add(20 * time.Second))
		fmt.Fprintf(c, "CONNECT alpha.test:%d HTTP/1.1\r\nHost: alpha.test:%d\r\n\r\n", up.Port, up.Port)
		done <- c
	}()
	p.decide(p.waitPending("alpha.test").ID, "allow_session")
	c := <-done
	if c == nil {
		t.Fatal("dial failed")
	}
	defer c.Close()
	br := bufio.NewReader(c)
	if resp, err := http.ReadResponse(br, &http.Request{Method: "CONNECT"}); err != nil || resp.StatusCode != 200 {
		t.Fatalf("CONNECT after allow_session: %v %v", resp, err)
	}
	if !stillServes(c, br) {
		t.Fatal("the approved tunnel does not work")
	}
	// A plain-HTTP request to the same host is a new review (another
	// protocol); the reviewer answers deny_always.
	ch := p.goGet(up.URL("alpha.test", "/hello"))
	id := ""
	for deadline := time.Now().Add(10 * time.Second); id == "" && time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		for _, a := range p.pending() {
			if a.Host == "alpha.test" {
				id = a.ID
			}
		}
	}
	if id == "" {
		t.Fatal("no second review")
	}
	start := time.Now()
	p.decide(id, "deny_always")
	apprExpect(t, "deny_always", apprAwait(t, ch), 403)
	if !waitClosed(c, time.Second-time.Since(start)+200*time.Millisecond) {
		t.Fatal("the tunnel to a host denied with deny_always is still open")
	}
	waitAudit(t, p.Proxy, "connection_closed", 1, func(m map[string]any) bool {
		return m["reason"] == "denied" && m["host"] == "alpha.test"
	})
}

// startEcho starts a TCP echo server on 127.0.0.1 (a cheap tunnel target).
func startEcho(t *testing.T) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var conns []net.Conn
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
			go func() { io.Copy(c, c); c.Close() }()
		}
	}()
	t.Cleanup(func() {
		ln.Close()
		mu.Lock()
		for _, c := range conns {
			c.Close()
		}
		mu.Unlock()
	})
	return ln.Addr().(*net.TCPAddr).Port
}

// TestReloadClosesExactlyTheDeniedHalfOf1000Tunnels is Deliver 2's scale
// test: 1 000 open CONNECT tunnels to 100 hosts; a reload that denies 50
// of the hosts closes exactly the 500 tunnels to them within 1 s, and the
// other 500 keep working.
func TestReloadClosesExactlyTheDeniedHalfOf1000Tunnels(t *testing.T) {
	const hosts, perHost = 100, 10
	echo := startEcho(t)
	c := ProxyConfig{AllowLocal: true, Hosts: map[string][]string{}}
	name := func(i int) string { return fmt.Sprintf("h%03d.test", i) }
	for i := 0; i < hosts; i++ {
		c.Domains = append(c.Domains, [2]string{name(i), "allow"})
		c.Hosts[name(i)] = []string{"127.0.0.1"}
	}
	p := StartProxy(t, c)

	type tun struct {
		host   int
		conn   net.Conn
		closed chan time.Time
	}
	tuns := make([]*tun, hosts*perHost)
	var wg sync.WaitGroup
	errs := make(chan error, len(tuns))
	work := make(chan int)
	for w := 0; w < 8; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range work {
				h := i % hosts
				conn, err := net.DialTimeout("tcp", p.HTTP, 5*time.Second)
				if err != nil {
					errs <- err
					continue
				}
				conn.SetDeadline(time.Now().Add(10 * time.Second))
				fmt.Fprintf(conn, "CONNECT %s:%d HTTP/1.1\r\nHost: %s:%d\r\n\r\n", name(h), echo, name(h), echo)
				br := bufio.NewReader(conn)
				resp, err := http.ReadResponse(br, &http.Request{Method: "CONNECT"})
				if err != nil || resp.StatusCode != 200 {
					errs <- fmt.Errorf("CONNECT %s: %v %v", name(h), resp, err)
					conn.Close()
					continue
				}
				io.WriteString(conn, "ping")
				var b [4]byte
				if _, err := io.ReadFull(br, b[:]); err != nil || string(b[:]) != "ping" {
					errs <- fmt.Errorf("echo through %s: %v", name(h), err)
					conn.Close()
					continue
				}
				conn.SetDeadline(time.Time{})
				tu := &tun{host: h, conn: conn, closed: make(chan time.Time, 1)}
				tuns[i] = tu
				go func() {
					io.Copy(io.Discard, br)
					tu.closed <- time.Now()
				}()
			}
		}()
	}
	for i := range tuns {
		work <- i
	}
	close(work)
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		for _, tu := range tuns {
			tu.conn.Close()
		}
	})

	var deny [][2]string
	for i := 0; i < hosts; i += 2 {
		deny = append(deny, [2]string{name(i), "deny"})
	}
	rewriteDomains(t, p, deny...)
	start := time.Now()
	if code, body := p.AdminRequest(t, "POST", "/api/reload", p.Token); code != 200 {
		t.Fatalf("reload: %d %s", code, body)
	}
	var last time.Time
	for _, tu := range tuns {
		if tu.host%2 != 0 {
			continue
		}
		select {
		case at := <-tu.closed:
			if at.After(last) {
				last = at
			}
		case <-time.After(time.Until(start.Add(time.Second))):
			t.Fatalf("a tunnel to denied %s is still open 1 s after the reload", name(tu.host))
		}
	}
	t.Logf("500 tunnels to denied hosts closed %s after the reload began", last.Sub(start))
	time.Sleep(200 * time.Millisecond)
	for _, tu := range tuns {
		if tu.host%2 == 0 {
			continue
		}
		select {
		case <-tu.closed:
			t.Fatalf("a tunnel to %s (still allowed) was closed", name(tu.host))
		default:
		}
	}
	// The survivors still carry bytes.
	for _, tu := range tuns[:20] {
		if tu.host%2 == 1 {
			if _, err := io.WriteString(tu.conn, "more"); err != nil {
				t.Fatal(err)
			}
		}
	}
	if v := metricValue(t, p, "netproxy_connections_closed_total", `{reason="denied"}`); v != 500 {
		t.Fatalf("connections_closed_total{denied} = %v, want 500", v)
	}
}

// TestReloadDenyClosesMITMTunnel: an intercepted limited-mode CONNECT is
// an open connection too; a reload that denies its host closes it.
func TestReloadDenyClosesMITMTunnel(t *testing.T) {
	up := StartUpstream(t, true)
	cfg := StdConfig()
	cfg.Mode = "limited"
	cfg.Extra = "[mitm]\nenabled = true\nca_cert = \"ca.pem\"\nca_key = \"ca-key.pem\"\nupstream_ca = \"upstream.pem\"\n"
	p := WriteProxyConfig(t, cfg)
	writeMITMFiles(t, p.Dir, up)
	p.Start(t)
	roots := mitmRoots(t, p)

	raw, err := net.DialTimeout("tcp", p.HTTP, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer raw.Close()
	raw.SetDeadline(time.Now().Add(10 * time.Second))
	fmt.Fprintf(raw, "CONNECT up.test:%d HTTP/1.1\r\nHost: up.test:%d\r\n\r\n", up.Port, up.Port)
	br := bufio.NewReader(raw)
	if resp, err := http.ReadResponse(br, &http.Request{Method: "CONNECT"}); err != nil || resp.StatusCode != 200 {
		t.Fatalf("CONNECT: %v %v", resp, err)
	}
	tc := tls.Client(raw, &tls.Config{RootCAs: roots, ServerName: "up.test"})
	if err := tc.Handshake(); err != nil {
		t.Fatalf("TLS inside the intercepted tunnel: %v", err)
	}
	tbr := bufio.NewReader(tc)
	fmt.Fprintf(tc, "GET /hello HTTP/1.1\r\nHost: up.test:%d\r\n\r\n", up.Port)
	resp, err := http.ReadResponse(tbr, nil)
	if err != nil {
		t.Fatal(err)
	}
	if b, _ := io.ReadAll(resp.Body); resp.StatusCode != 200 || string(b) != Hello {
		t.Fatalf("inside the intercepted tunnel: %d %q", resp.StatusCode, b)
	}
	rewriteDomains(t, p, [2]string{"up.test", "deny"})
	start := time.Now()
	if code, body := p.AdminRequest(t, "POST", "/api/reload", p.Token); code != 200 {
		t.Fatalf("reload: %d %s", code, body)
	}
	if !waitClosed(tc, time.Second-time.Since(start)) {
		t.Fatal("the intercepted tunnel to a now-denied host is still open 1 s after the reload")
	}
	waitAudit(t, p, "connection_closed", 1, func(m map[string]any) bool {
		return m["reason"] == "denied" && m["host"] == "up.test" && m["protocol"] == "https"
	})
}
