package test

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
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

// setNetworkEnabled rewrites the proxy's config file with network.enabled.
func setNetworkEnabled(t *testing.T, p *Proxy, orig []byte, enabled bool) {
	t.Helper()
	updated := strings.Replace(string(orig), "[network]\n", fmt.Sprintf("[network]\nenabled = %t\n", enabled), 1)
	if updated == string(orig) {
		t.Fatal("the config has no [network] table to edit")
	}
	if err := os.WriteFile(p.ConfigPath, []byte(updated), 0o644); err != nil {
		t.Fatal(err)
	}
}

// openTunnel opens a CONNECT tunnel to up.test and proves it works with one
// request inside it; the tunnel stays open for the caller.
func openTunnel(t *testing.T, p *Proxy, up *Upstream) net.Conn {
	t.Helper()
	c, err := net.DialTimeout("tcp", p.HTTP, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	c.SetDeadline(time.Now().Add(10 * time.Second))
	fmt.Fprintf(c, "CONNECT up.test:%d HTTP/1.1\r\nHost: up.test:%d\r\n\r\n", up.Port, up.Port)
	br := bufio.NewReader(c)
	resp, err := http.ReadResponse(br, &http.Request{Method: "CONNECT"})
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("CONNECT: %v %v", resp, err)
	}
	tunnelRequest(t, c, br)
	return c
}

// tunnelRequest sends one keep-alive GET /hello inside an open tunnel.
func tunnelRequest(t *testing.T, c net.Conn, br *bufio.Reader) {
	t.Helper()
	io.WriteString(c, "GET /hello HTTP/1.1\r\nHost: up.test\r\n\r\n")
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatalf("request inside the tunnel: %v", err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if string(body) != Hello {
		t.Fatalf("inside the tunnel: %d %q", resp.StatusCode, body)
	}
}

// waitClosed reports whether the peer closes c within d.
func waitClosed(c net.Conn, d time.Duration) bool {
	c.SetReadDeadline(time.Now().Add(d))
	_, err := io.Copy(io.Discard, c)
	var ne net.Error
	return !(errors.As(err, &ne) && ne.Timeout())
}

// curlProxy runs curl through the proxy's HTTP listener and returns the
// status, the x-proxy-error header and the body.
func curlProxy(t *testing.T, p *Proxy, args ...string) (status int, xerr, body string) {
	t.Helper()
	headers := t.TempDir() + "/headers"
	res := Curl(t, append([]string{"-x", "http://" + p.HTTP, "-D", headers}, args...)...)
	if res.Exit != 0 {
		t.Fatalf("curl %v: exit %d: %s", args, res.Exit, res.Stderr)
	}
	h, _ := os.ReadFile(headers)
	for _, line := range strings.Split(string(h), "\r\n") {
		if strings.HasPrefix(line, "HTTP/") {
			fmt.Sscanf(line, "HTTP/1.1 %d", &status)
		}
		if k, v, ok := strings.Cut(line, ":"); ok && strings.EqualFold(k, "x-proxy-error") {
			xerr = strings.TrimSpace(v)
		}
	}
	return status, xerr, res.Stdout
}

// TestKillSwitch is the operator's story of network.enabled: a running
// netproxy passes an allow-listed request; the config is rewritten with
// enabled = false and SIGHUP'd; the same requests — curl through the HTTP
// listener, CONNECT, SOCKS5 — are refused with 503 / 0x02 without reaching
// the upstream, the tunnels already open are cut, audit, /api/blocked and
// metrics say proxy_disabled; POST /api/reload with enabled = true turns
// egress back on, on the same listeners.
func TestKillSwitch(t *testing.T) {
	up := StartUpstream(t, false)
	p := StartProxy(t, StdConfig())
	orig, err := os.ReadFile(p.ConfigPath)
	if err != nil {
		t.Fatal(err)
	}
	url := up.URL("up.test", "/hello")

	if st, _, body := curlProxy(t, p, url); st != 200 || body != Hello {
		t.Fatalf("enabled: curl %d %q", st, body)
	}
	if rep, _ := SocksConnect(t, p.SOCKS, nil, 0x01, "up.test", up.Port); rep != 0 {
		t.Fatalf("enabled: SOCKS reply %d", rep)
	}
	tunnel := openTunnel(t, p, up)
	socksTunnel := func() net.Conn {
		rep, c := SocksConnect(t, p.SOCKS, nil, 0x01, "up.test", up.Port)
		if rep != 0 {
			t.Fatalf("SOCKS tunnel reply %d", rep)
		}
		c.SetDeadline(time.Now().Add(10 * time.Second))
		tunnelRequest(t, c, bufio.NewReader(c))
		return c
	}()

	// Throw the switch with SIGHUP.
	setNetworkEnabled(t, p, orig, false)
	p.Signal(syscall.SIGHUP)
	var st int
	var xerr, body string
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		if st, xerr, body = curlProxy(t, p, url); st == 503 || time.Now().After(deadline) {
			break
		}
	}
	if st != 503 || body != "network proxy is disabled" || xerr != "blocked-by-policy" {
		t.Fatalf("disabled: curl %d x-proxy-error %q body %q\n%s", st, xerr, body, p.Output.String())
	}
	hits := up.Hits()

	// The same request again, a POST with a body, a HEAD, and a CONNECT.
	if st, _, body := curlProxy(t, p, url); st != 503 || body != "network proxy is disabled" {
		t.Fatalf("disabled again: %d %q", st, body)
	}
	if st, _, body := curlProxy(t, p, "--data-binary", "payload", up.URL("up.test", "/echo")); st != 503 || body != "network proxy is disabled" {
		t.Fatalf("disabled POST: %d %q", st, body)
	}
	// curl -I prints the head on stdout; nothing may follow it.
	if st, _, out := curlProxy(t, p, "-I", url); st != 503 || !strings.HasSuffix(out, "\r\n\r\n") || strings.Contains(out, "network proxy is disabled") {
		t.Fatalf("disabled HEAD: %d %q", st, out)
	}
	out, _ := RawExchange(t, p.HTTP, []byte(fmt.Sprintf("CONNECT up.test:%d HTTP/1.1\r\nHost: up.test:%d\r\n\r\n", up.Port, up.Port)), 5*time.Second)
	if !strings.HasPrefix(out, "HTTP/1.1 503 ") || !strings.HasSuffix(out, "\r\n\r\nnetwork proxy is disabled") ||
		!strings.Contains(strings.ToLower(out), "content-type: text/plain") {
		t.Fatalf("disabled CONNECT: %q", out)
	}
	if rep, _ := SocksConnect(t, p.SOCKS, nil, 0x01, "up.test", up.Port); rep != 0x02 {
		t.Fatalf("disabled: SOCKS reply %d, want 2 (not allowed by ruleset)", rep)
	}
	if n := up.Hits() - hits; n != 0 {
		t.Fatalf("the upstream saw %d requests while the proxy was disabled", n)
	}
	// The tunnels opened before the switch are cut.
	if !waitClosed(tunnel, 5*time.Second) {
		t.Error("a CONNECT tunnel opened before the kill switch is still open")
	}
	if !waitClosed(socksTunnel, 5*time.Second) {
		t.Error("a SOCKS5 tunnel opened before the kill switch is still open")
	}

	// Every front end recorded it like any block.
	if v := metricValue(t, p, "netproxy_requests_total", `{decision="deny",protocol="http",reason="proxy_disabled",source="proxy_state"}`); v < 4 {
		t.Errorf("requests_total{http,proxy_disabled} = %v, want ≥ 4", v)
	}
	for _, proto := range []string{"https", "socks5-tcp"} {
		if v := metricValue(t, p, "netproxy_requests_total", fmt.Sprintf(`{decision="deny",protocol=%q,reason="proxy_disabled",source="proxy_state"}`, proto)); v != 1 {
			t.Errorf("requests_total{%s,proxy_disabled} = %v, want 1", proto, v)
		}
	}
	code, blocked := p.AdminRequest(t, "GET", "/api/blocked", p.Token)
	var bl struct {
		Blocked []struct{ Host, Reason, Source, Decision, Protocol string }
	}
	if code != 200 || json.Unmarshal([]byte(blocked), &bl) != nil {
		t.Fatalf("/api/blocked: %d %s", code, blocked)
	}
	n := 0
	for _, b := range bl.Blocked {
		if b.Reason == "proxy_disabled" && b.Source == "proxy_state" && b.Decision == "deny" && b.Host == "up.test" {
			n++
		}
	}
	if n < 6 {
		t.Errorf("/api/blocked lists %d proxy_disabled blocks, want ≥ 6:\n%s", n, blocked)
	}
	auditN := 0
	for deadline := time.Now().Add(3 * time.Second); auditN < 6 && time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		auditN = 0
		data, _ := os.ReadFile(p.Audit)
		for _, line := range bytes.Split(data, []byte("\n")) {
			var m map[string]any
			if json.Unmarshal(line, &m) == nil && m["event"] == "network_decision" && m["reason"] == "proxy_disabled" && m["source"] == "proxy_state" {
				auditN++
			}
		}
	}
	if auditN < 6 {
		t.Errorf("audit has %d proxy_disabled lines, want ≥ 6", auditN)
	}

	// Flip it back with the admin API: synchronous, the listeners unchanged.
	setNetworkEnabled(t, p, orig, true)
	if code, body := p.AdminRequest(t, "POST", "/api/reload", p.Token); code != 200 {
		t.Fatalf("reload: %d %s", code, body)
	}
	if st, _, body := curlProxy(t, p, url); st != 200 || body != Hello {
		t.Fatalf("enabled again: curl %d %q", st, body)
	}
	if rep, _ := SocksConnect(t, p.SOCKS, nil, 0x01, "up.test", up.Port); rep != 0 {
		t.Fatalf("enabled again: SOCKS reply %d", rep)
	}
	openTunnel(t, p, up)
	if !strings.Contains(p.Output.String(), "network.enabled = false") {
		t.Errorf("the switch was not logged:\n%s", p.Output.String())
	}
}
