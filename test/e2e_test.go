package test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"
)

func get(t *testing.T, c *http.Client, method, u string, body io.Reader) (*http.Response, string) {
	t.Helper()
	req, err := http.NewRequest(method, u, body)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := c.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, u, err)
	}
	defer resp.Body.Close()
	data, _ := io.ReadAll(resp.Body)
	return resp, string(data)
}

func checkBlocked(t *testing.T, resp *http.Response, body, host string, port int, reason, source, xerr, msg string) {
	t.Helper()
	if resp.StatusCode != 403 {
		t.Fatalf("status %d (%s), want 403", resp.StatusCode, body)
	}
	if ct := resp.Header.Get("Content-Type"); ct != "application/json" {
		t.Errorf("content-type %q", ct)
	}
	if x := resp.Header.Get("X-Proxy-Error"); x != xerr {
		t.Errorf("x-proxy-error %q, want %q", x, xerr)
	}
	var m map[string]any
	if err := json.Unmarshal([]byte(body), &m); err != nil {
		t.Fatalf("body %q: %v", body, err)
	}
	want := map[string]any{"status": "blocked", "host": host, "port": float64(port), "reason": reason,
		"decision": "deny", "source": source, "protocol": "http", "message": msg}
	for k, v := range want {
		if m[k] != v {
			t.Errorf("body %s = %v, want %v", k, m[k], v)
		}
	}
}

func TestHTTPAllowedDeniedNotAllowed(t *testing.T) {
	up := StartUpstream(t, false)
	p := StartProxy(t, StdConfig())
	c := p.HTTPClient(false)

	resp, body := get(t, c, "GET", up.URL("up.test", "/hello"), nil)
	if resp.StatusCode != 200 || body != Hello || resp.Header.Get("X-Proxy-Error") != "" {
		t.Fatalf("allowed: %d %q", resp.StatusCode, body)
	}
	resp, body = get(t, c, "GET", up.URL("denied.test", "/hello?secret=1"), nil)
	checkBlocked(t, resp, body, "denied.test", up.Port, "denied", "baseline_policy", "blocked-by-denylist", "Domain denied by the sandbox policy.")
	resp, body = get(t, c, "GET", up.URL("other.test", "/hello"), nil)
	checkBlocked(t, resp, body, "other.test", up.Port, "not_allowed", "baseline_policy", "blocked-by-allowlist", "Domain not in allowlist.")
	if up.Hits() != 1 {
		t.Fatalf("upstream hits %d, want 1 (blocked requests must not reach it)", up.Hits())
	}

	// The same with curl -x.
	r := Curl(t, "-x", "http://"+p.HTTP, up.URL("up.test", "/hello"))
	if r.Exit != 0 || r.Stdout != Hello {
		t.Fatalf("curl allowed: %+v", r)
	}
	r = Curl(t, "-o", "/dev/null", "-w", "%{http_code}", "-x", "http://"+p.HTTP, up.URL("denied.test", "/"))
	if r.Stdout != "403" {
		t.Fatalf("curl denied: %+v", r)
	}
	if !strings.Contains(p.Output.String(), "HTTP proxy on "+p.HTTP) || !strings.Contains(p.Output.String(), "approvals page http://"+p.Admin+"/") {
		t.Fatalf("serve did not print its listeners:\n%s", p.Output.String())
	}
}

func TestHTTPNotAllowedLocal(t *testing.T) {
	up := StartUpstream(t, false)
	cfg := StdConfig()
	cfg.AllowLocal = false
	cfg.Domains = append(cfg.Domains, [2]string{"127.0.0.1", "allow"})
	p := StartProxy(t, cfg)
	c := p.HTTPClient(false)

	resp, body := get(t, c, "GET", up.URL("up.test", "/hello"), nil)
	checkBlocked(t, resp, body, "up.test", up.Port, "not_allowed_local", "baseline_policy", "blocked-by-allowlist", "Sandbox policy blocks local/private network addresses.")
	resp, body = get(t, c, "GET", up.URL("127.0.0.2", "/hello"), nil)
	checkBlocked(t, resp, body, "127.0.0.2", up.Port, "not_allowed_local", "baseline_policy", "blocked-by-allowlist", "Sandbox policy blocks local/private network addresses.")
	if up.Hits() != 0 {
		t.Fatalf("upstream reached %d times", up.Hits())
	}
	resp, body = get(t, c, "GET", up.URL("127.0.0.1", "/hello"), nil)
	if resp.StatusCode != 200 || body != Hello {
		t.Fatalf("exact local literal: %d %q", resp.StatusCode, body)
	}
}

func TestConnectToTLSUpstream(t *testing.T) {
	tlsUp := StartUpstream(t, true)
	p := StartProxy(t, StdConfig())
	resp, body := get(t, p.HTTPClient(false), "GET", tlsUp.URL("up.test", "/big"), nil)
	if resp.StatusCode != 200 || body != string(BigBody) {
		t.Fatalf("CONNECT + TLS: %d, %d bytes", resp.StatusCode, len(body))
	}
	r := Curl(t, "-k", "-x", "http://"+p.HTTP, tlsUp.URL("up.test", "/hello"))
	if r.Exit != 0 || r.Stdout != Hello {
		t.Fatalf("curl -k -x: %+v", r)
	}
	out, _ := RawExchange(t, p.HTTP, []byte(fmt.Sprintf("CONNECT denied.test:%d HTTP/1.1\r\nHost: denied.test\r\n\r\n", tlsUp.Port)), 5*time.Second)
	if !strings.HasPrefix(out, "HTTP/1.1 403") || !strings.Contains(out, "X-Proxy-Error: blocked-by-denylist") ||
		!strings.Contains(out, "Content-Type: text/plain") || !strings.HasSuffix(out, "Domain denied by the sandbox policy.") {
		t.Fatalf("blocked CONNECT answer:\n%s", out)
	}
	if tlsUp.Hits() != 2 {
		t.Fatalf("TLS upstream hits %d, want 2", tlsUp.Hits())
	}
}

func TestSOCKS5(t *testing.T) {
	up := StartUpstream(t, false)
	p := StartProxy(t, StdConfig())
	r := Curl(t, "--socks5-hostname", p.SOCKS, up.URL("up.test", "/hello"))
	if r.Exit != 0 || r.Stdout != Hello {
		t.Fatalf("curl --socks5-hostname allowed: %+v", r)
	}
	r = Curl(t, "--socks5-hostname", p.SOCKS, up.URL("denied.test", "/hello"))
	if r.Exit == 0 {
		t.Fatalf("curl --socks5-hostname denied succeeded: %+v", r)
	}
	for host, want := range map[string]int{"denied.test": 0x02, "other.test": 0x02, "x.evil.invalid": 0x02} {
		if rep, _ := SocksConnect(t, p.SOCKS, nil, 0x01, host, up.Port); rep != want {
			t.Errorf("SOCKS5 CONNECT %s: reply 0x%02x, want 0x%02x", host, rep, want)
		}
	}
	if rep, _ := SocksConnect(t, p.SOCKS, nil, 0x02, "up.test", up.Port); rep != 0x07 {
		t.Errorf("BIND: reply 0x%02x, want 0x07", rep)
	}
	closed := FreePort(t)
	if rep, _ := SocksConnect(t, p.SOCKS, nil, 0x01, "closed.test", closed); rep != 0x05 {
		t.Errorf("CONNECT to a closed port: reply 0x%02x, want 0x05 (connection refused)", rep)
	}
	if up.Hits() != 1 {
		t.Fatalf("upstream hits %d, want 1", up.Hits())
	}
}

func TestLimitedMode(t *testing.T) {
	up := StartUpstream(t, false)
	cfg := StdConfig()
	cfg.Mode = "limited"
	p := StartProxy(t, cfg)
	c := p.HTTPClient(false)
	if resp, body := get(t, c, "GET", up.URL("up.test", "/hello"), nil); resp.StatusCode != 200 || body != Hello {
		t.Fatalf("limited GET: %d", resp.StatusCode)
	}
	resp, body := get(t, c, "POST", up.URL("up.test", "/echo"), strings.NewReader("x"))
	checkBlocked(t, resp, body, "up.test", up.Port, "method_not_allowed", "mode_guard", "blocked-by-method-policy", "Method not allowed in limited mode.")
	resp, body = get(t, c, "POST", up.URL("denied.test", "/echo"), strings.NewReader("x"))
	checkBlocked(t, resp, body, "denied.test", up.Port, "denied", "baseline_policy", "blocked-by-denylist", "Domain denied by the sandbox policy.")
	out, _ := RawExchange(t, p.HTTP, []byte(fmt.Sprintf("CONNECT up.test:%d HTTP/1.1\r\nHost: up.test\r\n\r\n", up.Port)), 5*time.Second)
	if !strings.HasPrefix(out, "HTTP/1.1 403") || !strings.Contains(out, "blocked-by-mitm-required") {
		t.Fatalf("limited CONNECT:\n%s", out)
	}
	if rep, _ := SocksConnect(t, p.SOCKS, nil, 0x01, "up.test", up.Port); rep != 0x02 {
		t.Fatalf("limited SOCKS5: 0x%02x, want 0x02", rep)
	}
	if up.Hits() != 1 {
		t.Fatalf("upstream hits %d, want 1", up.Hits())
	}
}

func plainGET(host string, port int) string {
	return fmt.Sprintf("GET http://%s:%d/hello HTTP/1.1\r\nHost: %s:%d\r\nConnection: close\r\n\r\n", host, port, host, port)
}

func TestAttributionFrames(t *testing.T) {
	up := StartUpstream(t, false)
	p := StartProxy(t, StdConfig())
	reg := p.Register(t, "s1", "e1")
	if reg.HTTPProxy != p.HTTP || reg.SOCKS5Proxy != p.SOCKS {
		t.Fatalf("registration proxies %+v", reg)
	}

	// Events stream first, so the decisions below land on it.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, "GET", "http://netproxy/v1/executions/"+reg.ExecutionID+"/events", nil)
	evResp, err := p.ControlClient().Do(req)
	if err != nil || evResp.StatusCode != 200 {
		t.Fatalf("events stream: %v %v", evResp, err)
	}
	defer evResp.Body.Close()

	known := append(Frame(reg.Token), plainGET("up.test", up.Port)...)
	if out, _ := RawExchange(t, p.HTTP, known, 5*time.Second); !strings.HasSuffix(out, Hello) {
		t.Fatalf("framed request with a known token: %q", out)
	}
	denied := append(Frame(reg.Token), plainGET("denied.test", up.Port)...)
	if out, _ := RawExchange(t, p.HTTP, denied, 5*time.Second); !strings.HasPrefix(out, "HTTP/1.1 403") {
		t.Fatalf("framed denied request: %q", out)
	}
	rep, conn := SocksConnect(t, p.SOCKS, Frame(reg.Token), 0x01, "up.test", up.Port)
	if rep != 0 {
		t.Fatalf("framed SOCKS5: 0x%02x", rep)
	}
	fmt.Fprintf(conn, "GET /hello HTTP/1.1\r\nHost: up.test\r\nConnection: close\r\n\r\n")
	if data, _ := io.ReadAll(conn); !strings.HasSuffix(string(data), Hello) {
		t.Fatalf("framed SOCKS5 tunnel: %q", data)
	}

	sc := bufio.NewScanner(evResp.Body)
	var seen []string
	for len(seen) < 3 && sc.Scan() {
		var ev map[string]any
		if err := json.Unmarshal(sc.Bytes(), &ev); err != nil {
			t.Fatalf("NDJSON line %q: %v", sc.Text(), err)
		}
		if ev["type"] != "network_decision" {
			t.Fatalf("event %v", ev)
		}
		seen = append(seen, fmt.Sprintf("%v/%v/%v", ev["host"], ev["decision"], ev["protocol"]))
	}
	want := []string{"up.test/allow/http", "denied.test/deny/http", "up.test/allow/socks5-tcp"}
	if strings.Join(seen, " ") != strings.Join(want, " ") {
		t.Fatalf("events %v, want %v", seen, want)
	}

	unknown := append(Frame("not-a-registered-token-0123456789"), plainGET("up.test", up.Port)...)
	if out, _ := RawExchange(t, p.HTTP, unknown, 5*time.Second); out != "" {
		t.Fatalf("unknown token got a reply: %q", out)
	}
	p.Revoke(t, reg.ExecutionID)
	if out, _ := RawExchange(t, p.HTTP, known, 5*time.Second); out != "" {
		t.Fatalf("revoked token got a reply: %q", out)
	}
	if !sc.Scan() || !strings.Contains(sc.Text(), "execution_ended") {
		t.Fatalf("stream end: %q", sc.Text())
	}
	if up.Hits() != 2 {
		t.Fatalf("upstream hits %d, want 2", up.Hits())
	}
	data, _ := os.ReadFile(p.Audit)
	if strings.Contains(string(data), reg.Token) || strings.Contains(p.Output.String(), reg.Token) {
		t.Fatal("the token leaked into the audit or the log")
	}
}

func TestAttributionRequired(t *testing.T) {
	up := StartUpstream(t, false)
	cfg := StdConfig()
	cfg.Required = true
	p := StartProxy(t, cfg)
	if out, _ := RawExchange(t, p.HTTP, []byte(plainGET("up.test", up.Port)), 5*time.Second); out != "" {
		t.Fatalf("unframed with attribution.required got %q", out)
	}
	if out, _ := RawExchange(t, p.SOCKS, []byte{5, 1, 0}, 5*time.Second); out != "" {
		t.Fatalf("unframed SOCKS5 with attribution.required got %q", out)
	}
	reg := p.Register(t, "s", "e")
	if out, _ := RawExchange(t, p.HTTP, append(Frame(reg.Token), plainGET("up.test", up.Port)...), 5*time.Second); !strings.HasSuffix(out, Hello) {
		t.Fatalf("framed with attribution.required: %q", out)
	}
}

func TestHostHeaderMismatchAndMissingHost(t *testing.T) {
	up := StartUpstream(t, false)
	p := StartProxy(t, StdConfig())
	req := fmt.Sprintf("GET http://up.test:%d/hello HTTP/1.1\r\nHost: other.test:%d\r\n\r\n", up.Port, up.Port)
	out, _ := RawExchange(t, p.HTTP, []byte(req), 5*time.Second)
	if !strings.HasPrefix(out, "HTTP/1.1 400") || !strings.Contains(out, "Host header does not match request target") {
		t.Fatalf("mismatch: %q", out)
	}
	// A Host without the port matches only the default port.
	req = fmt.Sprintf("GET http://up.test:%d/hello HTTP/1.1\r\nHost: up.test\r\n\r\n", up.Port)
	if out, _ = RawExchange(t, p.HTTP, []byte(req), 5*time.Second); !strings.HasPrefix(out, "HTTP/1.1 400") {
		t.Fatalf("Host without the non-default port: %q", out)
	}
	if out, _ = RawExchange(t, p.HTTP, []byte("GET /hello HTTP/1.0\r\n\r\n"), 5*time.Second); !strings.HasPrefix(out, "HTTP/1.1 400") {
		t.Fatalf("missing host: %q", out)
	}
	if out, _ = RawExchange(t, p.HTTP, []byte("CONNECT :443 HTTP/1.1\r\nHost: :443\r\n\r\n"), 5*time.Second); !strings.HasPrefix(out, "HTTP/1.1 400") {
		t.Fatalf("CONNECT without host: %q", out)
	}
	if up.Hits() != 0 {
		t.Fatalf("upstream reached %d times", up.Hits())
	}
}

func TestSlowHeaderClientIsCut(t *testing.T) {
	up := StartUpstream(t, false)
	cfg := StdConfig()
	cfg.Extra = "[limits]\nheader_timeout = \"1s\"\n"
	p := StartProxy(t, cfg)
	c, err := net.Dial("tcp", p.HTTP)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	start := time.Now()
	head := plainGET("up.test", up.Port)
	// One byte every 200 ms: the head would take far longer than 1 s.
	go func() {
		for i := 0; i < len(head); i++ {
			if _, err := c.Write([]byte{head[i]}); err != nil {
				return
			}
			time.Sleep(200 * time.Millisecond)
		}
	}()
	c.SetReadDeadline(time.Now().Add(10 * time.Second))
	data, _ := io.ReadAll(c)
	took := time.Since(start)
	if took > 4*time.Second {
		t.Fatalf("slow client kept for %s, header_timeout is 1s", took)
	}
	if len(data) != 0 {
		t.Fatalf("slow client got %q", data)
	}
	if up.Hits() != 0 {
		t.Fatal("slow request reached the upstream")
	}
}

func TestHopByHopHeadersStripped(t *testing.T) {
	up := StartUpstream(t, false)
	p := StartProxy(t, StdConfig())
	req := fmt.Sprintf("GET http://up.test:%d/chunked HTTP/1.1\r\nHost: up.test:%d\r\nConnection: X-Secret\r\nX-Secret: s\r\n"+
		"Proxy-Authorization: Basic c2VjcmV0\r\nProxy-Connection: keep-alive\r\nX-Keep: yes\r\n\r\n", up.Port, up.Port)
	c, err := net.Dial("tcp", p.HTTP)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.Write([]byte(req))
	br := bufio.NewReader(c)
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	if string(body) != "part0;part1;part2;" {
		t.Fatalf("chunked body %q", body)
	}
	for _, h := range []string{"X-Hop", "Keep-Alive"} {
		if v := resp.Header.Get(h); v != "" {
			t.Errorf("response header %s=%q reached the client", h, v)
		}
	}
	got := up.LastHeaders()
	for _, h := range []string{"X-Secret", "Proxy-Authorization", "Proxy-Connection", "Connection"} {
		if v := got.Get(h); v != "" {
			t.Errorf("request header %s=%q reached the upstream", h, v)
		}
	}
	if got.Get("X-Keep") != "yes" {
		t.Error("an end-to-end header was dropped")
	}
	// The client connection stays open for the next request.
	fmt.Fprintf(c, "GET http://up.test:%d/hello HTTP/1.1\r\nHost: up.test:%d\r\n\r\n", up.Port, up.Port)
	resp, err = http.ReadResponse(br, nil)
	if err != nil {
		t.Fatalf("second request on the kept-alive client connection: %v", err)
	}
	body, _ = io.ReadAll(resp.Body)
	if string(body) != Hello {
		t.Fatalf("second response %q", body)
	}
}

func metricValue(t *testing.T, p *Proxy, name, labels string) float64 {
	t.Helper()
	_, text := p.AdminRequest(t, "GET", "/metrics", "")
	for _, line := range strings.Split(text, "\n") {
		if strings.HasPrefix(line, name+labels+" ") || (labels == "" && strings.HasPrefix(line, name+" ")) {
			var v float64
			fmt.Sscan(strings.TrimSpace(line[strings.LastIndex(line, " "):]), &v)
			return v
		}
	}
	return -1
}

func TestKeepAliveReusesConnections(t *testing.T) {
	up := StartUpstream(t, false)
	p := StartProxy(t, StdConfig())
	c := p.HTTPClient(true)
	for i := 0; i < 20; i++ {
		if resp, body := get(t, c, "GET", up.URL("up.test", "/hello"), nil); resp.StatusCode != 200 || body != Hello {
			t.Fatalf("request %d: %d", i, resp.StatusCode)
		}
	}
	if v := metricValue(t, p, "netproxy_connections_total", `{listener="http"}`); v != 1 {
		t.Fatalf("client connections for 20 keep-alive requests: %v, want 1", v)
	}
	if v := metricValue(t, p, "netproxy_bytes_total", `{direction="down",protocol="http"}`); v != float64(20*len(Hello)) {
		t.Fatalf("bytes_total down/http = %v, want %d", v, 20*len(Hello))
	}
}

func TestReloadKeepsPolicyOnBadFile(t *testing.T) {
	up := StartUpstream(t, false)
	cfg := StdConfig()
	p := StartProxy(t, cfg)
	c := p.HTTPClient(false)
	if resp, _ := get(t, c, "GET", up.URL("other.test", "/hello"), nil); resp.StatusCode != 403 {
		t.Fatalf("before reload: %d", resp.StatusCode)
	}
	orig, _ := os.ReadFile(p.ConfigPath)
	updated := strings.Replace(string(orig), "[network.domains]\n", "[network.domains]\n\"other.test\" = \"allow\"\n", 1)
	os.WriteFile(p.ConfigPath, []byte(updated), 0o644)
	p.Signal(syscall.SIGHUP)
	deadline := time.Now().Add(5 * time.Second)
	for {
		resp, _ := get(t, c, "GET", up.URL("other.test", "/hello"), nil)
		if resp.StatusCode == 200 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("SIGHUP did not reload the policy")
		}
		time.Sleep(100 * time.Millisecond)
	}
	os.WriteFile(p.ConfigPath, []byte(updated+"\n[bogus]\nkey = 1\n"), 0o644)
	if code, _ := p.AdminRequest(t, "POST", "/api/reload", ""); code != 401 {
		t.Fatalf("reload without the token: %d", code)
	}
	if code, body := p.AdminRequest(t, "POST", "/api/reload", p.Token); code != 422 || !strings.Contains(body, "bogus") {
		t.Fatalf("reload of a bad file: %d %s", code, body)
	}
	if resp, _ := get(t, c, "GET", up.URL("other.test", "/hello"), nil); resp.StatusCode != 200 {
		t.Fatalf("a bad reload dropped the previous policy: %d", resp.StatusCode)
	}
	if v := metricValue(t, p, "netproxy_policy_reloads_total", `{result="error"}`); v < 1 {
		t.Fatalf("failed reload not counted: %v", v)
	}
	os.WriteFile(p.ConfigPath, orig, 0o644)
	if code, _ := p.AdminRequest(t, "POST", "/api/reload", p.Token); code != 200 {
		t.Fatalf("reload: %d", code)
	}
	if resp, _ := get(t, c, "GET", up.URL("other.test", "/hello"), nil); resp.StatusCode != 403 {
		t.Fatalf("after reload back: %d", resp.StatusCode)
	}
	if code, _ := p.AdminRequest(t, "GET", "/readyz", ""); code != 200 {
		t.Fatalf("readyz %d", code)
	}
}

func TestPortInUseExitsNonZero(t *testing.T) {
	p := WriteProxyConfig(t, StdConfig())
	ln, err := net.Listen("tcp", p.HTTP)
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	cmd := NetproxyCmd(t, p, "serve", "--config", p.ConfigPath)
	out, err := cmd.CombinedOutput()
	if err == nil {
		t.Fatalf("serve with a taken port exited 0:\n%s", out)
	}
	if !strings.Contains(string(out), "listen.http") || !strings.Contains(string(out), "already in use") {
		t.Fatalf("unclear message:\n%s", out)
	}
}

func TestGracefulShutdownDrainsTunnels(t *testing.T) {
	up := StartUpstream(t, false)
	p := StartProxy(t, StdConfig())
	c, err := net.Dial("tcp", p.HTTP)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	fmt.Fprintf(c, "CONNECT up.test:%d HTTP/1.1\r\nHost: up.test\r\n\r\n", up.Port)
	br := bufio.NewReader(c)
	resp, err := http.ReadResponse(br, &http.Request{Method: "CONNECT"})
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("CONNECT: %v %v", resp, err)
	}
	p.Signal(syscall.SIGTERM)
	// New connections are refused once the listeners close.
	deadline := time.Now().Add(3 * time.Second)
	for {
		nc, err := net.DialTimeout("tcp", p.HTTP, time.Second)
		if err != nil {
			break
		}
		nc.Close()
		if time.Now().After(deadline) {
			t.Fatal("listener still accepting after SIGTERM")
		}
		time.Sleep(50 * time.Millisecond)
	}
	// The open tunnel still works during the drain.
	fmt.Fprintf(c, "GET /hello HTTP/1.1\r\nHost: up.test\r\nConnection: close\r\n\r\n")
	data, _ := io.ReadAll(br)
	if !strings.HasSuffix(string(data), Hello) {
		t.Fatalf("tunnel during drain: %q", data)
	}
	c.Close()
	if code := p.WaitExit(t, 10*time.Second); code != 0 {
		t.Fatalf("exit code %d after SIGTERM", code)
	}
}

func TestMaxConnectionsRefusesExcess(t *testing.T) {
	cfg := StdConfig()
	cfg.Extra = "[limits]\nmax_connections = 2\n"
	p := StartProxy(t, cfg)
	var held []net.Conn
	for i := 0; i < 2; i++ {
		c, err := net.Dial("tcp", p.HTTP)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		held = append(held, c)
	}
	time.Sleep(200 * time.Millisecond)
	c, err := net.Dial("tcp", p.SOCKS)
	if err != nil {
		return // refused outright is fine too
	}
	defer c.Close()
	start := time.Now()
	c.SetReadDeadline(time.Now().Add(5 * time.Second))
	n, _ := c.Read(make([]byte, 1))
	if n != 0 || time.Since(start) > 2*time.Second {
		t.Fatalf("connection over the limit was not closed at once (read %d after %s)", n, time.Since(start))
	}
	// Closing one frees a slot.
	held[0].Close()
	time.Sleep(200 * time.Millisecond)
	up := StartUpstream(t, false)
	if rep, _ := SocksConnect(t, p.SOCKS, nil, 0x01, "up.test", up.Port); rep != 0 {
		t.Fatalf("after a slot freed: reply 0x%02x", rep)
	}
}
