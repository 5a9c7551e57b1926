package test

import (
	"archive/zip"
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"crypto/tls"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

// Client identity (SPEC §4.4) end to end: proxy authentication with real
// clients (curl over HTTP, CONNECT and SOCKS5; git; pip; Python requests
// and urllib), 407 / SOCKS5 status 1 on a wrong or missing secret, each
// client its own session (narrower policy, approvals, budgets, audit
// `client`), identity per request on a keep-alive connection, the header
// never forwarded (plain, CONNECT, interception), and reload.

const (
	paCISecret  = "ci-s3cret-Zq9x"
	paDevSecret = "dev-s3cret-Wp4y"
	paWrong     = "wr0ng-guess-77"
	paCIEnv     = "E2E_PA_CI_SECRET"
)

// paOpts shapes a proxy-auth fixture.
type paOpts struct {
	required  bool
	approvals string // an [approvals] table replacing the disabled one ("" keeps it off)
	mode      string
	extra     string // more TOML (e.g. [mitm], [budgets])
	hosts     []string
}

// paClientsTOML: "ci" with secret_env, "dev" with secret_file and a
// narrower policy that denies closed.test (allowed host-wide).
func paClientsTOML(required bool) string {
	return fmt.Sprintf(`[proxy_auth]
required = %t

[[proxy_auth.clients]]
name = "ci"
secret_env = %q

[[proxy_auth.clients]]
name = "dev"
secret_file = "dev.secret"
deny = ["closed.test"]
`, required, paCIEnv)
}

// paStart starts a proxy with the two clients; the ci secret is in
// netproxy's environment, dev's in a file beside the config.
func paStart(t *testing.T, o paOpts) *Proxy {
	t.Helper()
	t.Setenv(paCIEnv, paCISecret) // passed on to netproxy by Proxy.Env
	c := StdConfig()
	c.Mode = o.mode
	for _, h := range o.hosts {
		c.Hosts[h] = []string{"127.0.0.1"}
	}
	c.Extra = paClientsTOML(o.required) + "\n" + o.extra
	p := WriteProxyConfig(t, c)
	if err := os.WriteFile(filepath.Join(p.Dir, "dev.secret"), []byte(paDevSecret+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if o.approvals != "" {
		b, _ := os.ReadFile(p.ConfigPath)
		const off = "[approvals]\nenabled = false\n"
		if !strings.Contains(string(b), off) {
			t.Fatalf("harness config changed shape:\n%s", b)
		}
		os.WriteFile(p.ConfigPath, []byte(strings.Replace(string(b), off, o.approvals, 1)), 0o644)
	}
	if strings.Contains(o.extra, "[mitm]") {
		return p // the caller writes the MITM files and starts it
	}
	p.Start(t)
	return p
}

func basic(user, pass string) string {
	return "Basic " + base64.StdEncoding.EncodeToString([]byte(user+":"+pass))
}

// paAudit returns the audit's lines as objects.
func paAudit(t *testing.T, p *Proxy) []map[string]any {
	t.Helper()
	b, _ := os.ReadFile(p.Audit)
	var out []map[string]any
	for _, l := range strings.Split(string(b), "\n") {
		if strings.TrimSpace(l) == "" {
			continue
		}
		var m map[string]any
		if err := json.Unmarshal([]byte(l), &m); err != nil {
			t.Fatalf("audit line %q: %v", l, err)
		}
		out = append(out, m)
	}
	return out
}

// paWaitAudit waits until n lines match ok and returns them.
func paWaitAudit(t *testing.T, p *Proxy, n int, what string, ok func(map[string]any) bool) []map[string]any {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		var hits []map[string]any
		for _, l := range paAudit(t, p) {
			if l["event"] == "network_decision" && ok(l) {
				hits = append(hits, l)
			}
		}
		if len(hits) >= n {
			return hits
		}
		if time.Now().After(deadline) {
			b, _ := os.ReadFile(p.Audit)
			t.Fatalf("audit: want %d line(s) %s, got %d:\n%s", n, what, len(hits), b)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// paNoSecret fails when any secret, or its Basic encoding, is in the
// audit or netproxy's output.
func paNoSecret(t *testing.T, p *Proxy) {
	t.Helper()
	audit, _ := os.ReadFile(p.Audit)
	for _, where := range []struct{ name, text string }{{"audit", string(audit)}, {"log", p.Output.String()}} {
		for _, s := range []string{paCISecret, paDevSecret, paWrong, basic("ci", paCISecret)[6:], basic("ci", paWrong)[6:], basic("dev", paDevSecret)[6:]} {
			if strings.Contains(where.text, s) {
				t.Errorf("the %s holds a secret or its Basic encoding (%q)", where.name, s)
			}
		}
	}
}

func isPeer(v any) bool {
	s, _ := v.(string)
	return strings.HasPrefix(s, "127.0.0.1:")
}

// TestProxyAuthCurl: curl --proxy-user on plain HTTP and CONNECT, and
// socks5h://user:pass@; a wrong secret or unknown name gets 407 (SOCKS5:
// status 1); the header never reaches the upstream; the narrower policy
// of a client; audit and metrics; no secret anywhere.
func TestProxyAuthCurl(t *testing.T) {
	up := StartUpstream(t, false)
	tlsUp := StartUpstream(t, true)
	p := paStart(t, paOpts{})
	x := "http://" + p.HTTP

	// Plain HTTP with the right secret: served, the header stripped.
	r := Curl(t, "-x", x, "--proxy-user", "ci:"+paCISecret, up.URL("up.test", "/hello"))
	if r.Exit != 0 || r.Stdout != Hello {
		t.Fatalf("curl --proxy-user ci: exit %d %q %s", r.Exit, r.Stdout, r.Stderr)
	}
	if v := up.LastHeaders().Get("Proxy-Authorization"); v != "" {
		t.Fatalf("the upstream received Proxy-Authorization %q", v)
	}
	// A wrong secret and an unknown name: 407 with the challenge, the
	// upstream never asked.
	before := up.Hits()
	for _, cred := range []string{"ci:" + paWrong, "nobody:" + paWrong, "dev:" + paCISecret} {
		r = Curl(t, "-x", x, "--proxy-user", cred, "-D", "-", "-w", "\n%{http_code}", up.URL("up.test", "/hello"))
		if r.Exit != 0 || !strings.HasSuffix(r.Stdout, "\n407") {
			t.Fatalf("curl --proxy-user %s: exit %d %q %s", strings.SplitN(cred, ":", 2)[0], r.Exit, r.Stdout, r.Stderr)
		}
		if !strings.Contains(r.Stdout, "Proxy-Authenticate: Basic realm=\"netproxy\"") {
			t.Fatalf("407 without the Basic challenge: %q", r.Stdout)
		}
		if !strings.Contains(r.Stdout, `"reason":"proxy_auth_required"`) {
			t.Fatalf("407 body without reason proxy_auth_required: %q", r.Stdout)
		}
	}
	if up.Hits() != before {
		t.Fatal("a request with a wrong secret reached the upstream")
	}

	// CONNECT with the right secret; a wrong one gets 407 on the CONNECT.
	r = Curl(t, "-k", "-x", x, "--proxy-user", "ci:"+paCISecret, tlsUp.URL("up.test", "/hello"))
	if r.Exit != 0 || r.Stdout != Hello {
		t.Fatalf("CONNECT with --proxy-user: exit %d %q %s", r.Exit, r.Stdout, r.Stderr)
	}
	if v := tlsUp.LastHeaders().Get("Proxy-Authorization"); v != "" {
		t.Fatalf("the TLS upstream received Proxy-Authorization %q", v)
	}
	before = tlsUp.Hits()
	r = Curl(t, "-k", "-x", x, "--proxy-user", "ci:"+paWrong, "-w", "%{http_connect}", tlsUp.URL("up.test", "/hello"))
	if r.Exit == 0 || !strings.Contains(r.Stdout, "407") {
		t.Fatalf("CONNECT with a wrong secret: exit %d %q %s", r.Exit, r.Stdout, r.Stderr)
	}
	if tlsUp.Hits() != before {
		t.Fatal("a CONNECT with a wrong secret reached the upstream")
	}

	// SOCKS5: RFC 1929 username/password.
	r = Curl(t, "-x", "socks5h://ci:"+paCISecret+"@"+p.SOCKS, up.URL("up.test", "/hello"))
	if r.Exit != 0 || r.Stdout != Hello {
		t.Fatalf("socks5h://ci:…@: exit %d %q %s", r.Exit, r.Stdout, r.Stderr)
	}
	before = up.Hits()
	r = Curl(t, "-x", "socks5h://ci:"+paWrong+"@"+p.SOCKS, up.URL("up.test", "/hello"))
	if r.Exit == 0 || up.Hits() != before {
		t.Fatalf("socks5h with a wrong secret: exit %d %q %s", r.Exit, r.Stdout, r.Stderr)
	}
	// Unauthenticated clients still work (required = false), over both.
	r = Curl(t, "-x", x, up.URL("up.test", "/hello"))
	if r.Exit != 0 || r.Stdout != Hello {
		t.Fatalf("unauthenticated: exit %d %q %s", r.Exit, r.Stdout, r.Stderr)
	}
	r = Curl(t, "-x", "socks5h://"+p.SOCKS, up.URL("up.test", "/hello"))
	if r.Exit != 0 || r.Stdout != Hello {
		t.Fatalf("unauthenticated SOCKS5: exit %d %q %s", r.Exit, r.Stdout, r.Stderr)
	}

	// dev's narrower policy denies closed.test, allowed host-wide: a
	// block by it is policy_denied; ci and the anonymous client pass.
	r = Curl(t, "-x", x, "--proxy-user", "dev:"+paDevSecret, "-w", "\n%{http_code}", up.URL("closed.test", "/x"))
	if !strings.HasSuffix(r.Stdout, "\n403") || !strings.Contains(r.Stdout, `"reason":"policy_denied"`) {
		t.Fatalf("dev to closed.test: %q", r.Stdout)
	}
	r = Curl(t, "-x", "socks5h://dev:"+paDevSecret+"@"+p.SOCKS, up.URL("closed.test", "/x"))
	if r.Exit == 0 {
		t.Fatalf("dev over SOCKS5 to closed.test passed: %q", r.Stdout)
	}
	r = Curl(t, "-x", x, "--proxy-user", "ci:"+paCISecret, up.URL("closed.test", "/x"))
	if r.Stdout != "upstream GET /x" {
		t.Fatalf("ci to closed.test: %q %s", r.Stdout, r.Stderr)
	}

	// The audit: an authenticated client's lines carry its name and its
	// own session; the others keep the peer address and the default
	// session; the refusals are proxy_auth_required, without the secret.
	paWaitAudit(t, p, 3, "of ci (http, https, socks5)", func(l map[string]any) bool {
		return l["client"] == "ci" && l["session_id"] == "client:ci" && l["host"] == "up.test" && l["decision"] == "allow"
	})
	paWaitAudit(t, p, 2, "of dev blocked by its own policy", func(l map[string]any) bool {
		return l["client"] == "dev" && l["session_id"] == "client:dev" && l["host"] == "closed.test" && l["reason"] == "policy_denied"
	})
	paWaitAudit(t, p, 2, "unauthenticated", func(l map[string]any) bool {
		return isPeer(l["client"]) && l["session_id"] == "default" && l["decision"] == "allow"
	})
	refused := paWaitAudit(t, p, 5, "proxy_auth_required (3 http, 1 https, 1 socks5)", func(l map[string]any) bool {
		return l["reason"] == "proxy_auth_required"
	})
	for _, l := range refused {
		if !isPeer(l["client"]) || l["decision"] != "deny" {
			t.Errorf("a refused authentication's line: %v", l)
		}
	}
	if v := metricValue(t, p, "netproxy_proxy_auth_total", `{result="failed"}`); v < 5 {
		t.Errorf("netproxy_proxy_auth_total{result=\"failed\"} = %v, want ≥ 5", v)
	}
	if v := metricValue(t, p, "netproxy_proxy_auth_total", `{result="ok"}`); v < 5 {
		t.Errorf("netproxy_proxy_auth_total{result=\"ok\"} = %v, want ≥ 5", v)
	}
	paNoSecret(t, p)
}

// TestProxyAuthRequired: with required = true an unauthenticated request
// gets 407 (HTTP and CONNECT) and a SOCKS5 client offering no
// username/password gets 0xFF; offered both, username/password wins; a
// wrong secret gets status 1 and the connection closes. An attribution
// frame identifies the execution and wins, and a Proxy-Authorization it
// carries is still stripped.
func TestProxyAuthRequired(t *testing.T) {
	up := StartUpstream(t, false)
	tlsUp := StartUpstream(t, true)
	p := paStart(t, paOpts{required: true})
	x := "http://" + p.HTTP

	r := Curl(t, "-x", x, "-D", "-", "-w", "\n%{http_code}", up.URL("up.test", "/hello"))
	if !strings.HasSuffix(r.Stdout, "\n407") || !strings.Contains(r.Stdout, "Proxy-Authenticate: Basic realm=\"netproxy\"") {
		t.Fatalf("unauthenticated plain request: %q", r.Stdout)
	}
	r = Curl(t, "-k", "-x", x, "-w", "%{http_connect}", tlsUp.URL("up.test", "/hello"))
	if r.Exit == 0 || !strings.Contains(r.Stdout, "407") {
		t.Fatalf("unauthenticated CONNECT: exit %d %q", r.Exit, r.Stdout)
	}
	r = Curl(t, "-x", "socks5h://"+p.SOCKS, up.URL("up.test", "/hello"))
	if r.Exit == 0 {
		t.Fatalf("unauthenticated SOCKS5 passed: %q", r.Stdout)
	}
	if _, m := SocksGreet(t, p.SOCKS, nil, 0x00); m != 0xFF {
		t.Fatalf("SOCKS5 offering only no-auth: method 0x%02x, want 0xFF", m)
	}
	c, m := SocksGreet(t, p.SOCKS, nil, 0x00, 0x02)
	if m != 0x02 {
		t.Fatalf("SOCKS5 offering both: method 0x%02x, want 0x02", m)
	}
	c.Write(append(append([]byte{0x01, 2}, "ci"...), append([]byte{byte(len(paWrong))}, paWrong...)...))
	var st [2]byte
	if _, err := io.ReadFull(c, st[:]); err != nil || st != [2]byte{0x01, 0x01} {
		t.Fatalf("RFC 1929 with a wrong secret: %x %v, want 01 01", st, err)
	}
	if n, err := c.Read(make([]byte, 1)); n != 0 || err == nil {
		t.Fatal("the connection stayed open after a failed authentication")
	}
	// The right credentials pass everywhere.
	for _, args := range [][]string{
		{"-x", x, "--proxy-user", "ci:" + paCISecret, up.URL("up.test", "/hello")},
		{"-k", "-x", x, "--proxy-user", "dev:" + paDevSecret, tlsUp.URL("up.test", "/hello")},
		{"-x", "socks5h://dev:" + paDevSecret + "@" + p.SOCKS, up.URL("up.test", "/hello")},
	} {
		if r := Curl(t, args...); r.Exit != 0 || r.Stdout != Hello {
			t.Fatalf("curl %v: exit %d %q %s", args[:2], r.Exit, r.Stdout, r.Stderr)
		}
	}
	// A framed execution needs no proxy authentication, and a
	// Proxy-Authorization it sends is not forwarded nor makes it a client.
	reg := p.Register(t, "s1", "e1")
	req := fmt.Sprintf("GET http://up.test:%d/hello HTTP/1.1\r\nHost: up.test:%d\r\nProxy-Authorization: %s\r\nConnection: close\r\n\r\n", up.Port, up.Port, basic("ci", paCISecret))
	if out, _ := RawExchange(t, p.HTTP, append(Frame(reg.Token), req...), 5*time.Second); !strings.HasSuffix(out, Hello) {
		t.Fatalf("framed request under required = true: %q", out)
	}
	if v := up.LastHeaders().Get("Proxy-Authorization"); v != "" {
		t.Fatalf("a framed request's Proxy-Authorization reached the upstream: %q", v)
	}
	paWaitAudit(t, p, 1, "of the framed execution", func(l map[string]any) bool {
		return l["execution_id"] == reg.ExecutionID && l["session_id"] == "s1" && isPeer(l["client"]) && l["decision"] == "allow"
	})
	paWaitAudit(t, p, 3, "unauthenticated refusals", func(l map[string]any) bool {
		return l["reason"] == "proxy_auth_required" && isPeer(l["client"])
	})
	paNoSecret(t, p)
}

// paSend writes one request on a raw keep-alive connection and reads the
// answer.
func paSend(t *testing.T, c net.Conn, br *bufio.Reader, host string, port int, auth string) (int, string) {
	t.Helper()
	var b strings.Builder
	fmt.Fprintf(&b, "GET http://%s:%d/k HTTP/1.1\r\nHost: %s:%d\r\n", host, port, host, port)
	if auth != "" {
		fmt.Fprintf(&b, "Proxy-Authorization: %s\r\n", auth)
	}
	b.WriteString("\r\n")
	if _, err := io.WriteString(c, b.String()); err != nil {
		t.Fatal(err)
	}
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatalf("reading the answer: %v", err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	return resp.StatusCode, string(body)
}

// TestProxyAuthKeepAlive: identity is per request. On one keep-alive
// connection, requests as ci, dev, nobody, a wrong secret and ci again
// are each judged as their own identity: none inherits the first's
// session or narrower policy.
func TestProxyAuthKeepAlive(t *testing.T) {
	up := StartUpstream(t, false)
	p := paStart(t, paOpts{})
	c, err := net.DialTimeout("tcp", p.HTTP, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(20 * time.Second))
	br := bufio.NewReader(c)
	steps := []struct {
		who, auth string
		status    int
	}{
		{"ci", basic("ci", paCISecret), 200},
		{"dev", basic("dev", paDevSecret), 403}, // dev's policy denies closed.test
		{"anonymous", "", 200},
		{"a wrong secret", basic("ci", paWrong), 407},
		{"ci again", basic("ci", paCISecret), 200},
		{"dev again", basic("dev", paDevSecret), 403},
	}
	for _, s := range steps {
		if code, body := paSend(t, c, br, "closed.test", up.Port, s.auth); code != s.status {
			t.Fatalf("%s on the kept-alive connection: %d %q, want %d", s.who, code, body, s.status)
		}
	}
	lines := paWaitAudit(t, p, len(steps), "for closed.test", func(l map[string]any) bool { return l["host"] == "closed.test" })
	want := []struct{ client, session, reason string }{
		{"ci", "client:ci", ""}, {"dev", "client:dev", "policy_denied"}, {"peer", "default", ""},
		{"peer", "default", "proxy_auth_required"}, {"ci", "client:ci", ""}, {"dev", "client:dev", "policy_denied"},
	}
	for i, w := range want {
		l := lines[i]
		client := l["client"]
		if w.client == "peer" && isPeer(client) {
			client = "peer"
		}
		reason, _ := l["reason"].(string)
		if client != w.client || l["session_id"] != w.session || reason != w.reason {
			t.Errorf("request %d (%s): client %v session %v reason %q; want %+v", i, steps[i].who, l["client"], l["session_id"], reason, w)
		}
	}
	paNoSecret(t, p)
}

// proxyClient is an HTTP client whose proxy URL carries user:pass ("" none).
func proxyClient(p *Proxy, user, pass string) *http.Client {
	pu := &url.URL{Scheme: "http", Host: p.HTTP}
	if user != "" {
		pu.User = url.UserPassword(user, pass)
	}
	return &http.Client{Timeout: 40 * time.Second, Transport: &http.Transport{
		Proxy: http.ProxyURL(pu), DisableKeepAlives: true, TLSClientConfig: &tls.Config{InsecureSkipVerify: true},
	}}
}

type paReply struct {
	status int
	body   string
	err    error
}

func paGet(c *http.Client, u string) <-chan paReply {
	ch := make(chan paReply, 1)
	go func() {
		resp, err := c.Get(u)
		if err != nil {
			ch <- paReply{err: err}
			return
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		ch <- paReply{status: resp.StatusCode, body: string(b)}
	}()
	return ch
}

func paAwait(t *testing.T, what string, ch <-chan paReply, status int) {
	t.Helper()
	select {
	case r := <-ch:
		if r.err != nil || r.status != status {
			t.Fatalf("%s: %d %v %q, want %d", what, r.status, r.err, r.body, status)
		}
	case <-time.After(30 * time.Second):
		t.Fatalf("%s: still waiting", what)
	}
}

// TestProxyAuthSessionIsolation: an allow_session given to one client
// covers it alone: another client and an unauthenticated one are
// reviewed again, each in its own session (session_id on the API).
func TestProxyAuthSessionIsolation(t *testing.T) {
	up := StartUpstream(t, false)
	p := &apprProxy{Proxy: paStart(t, paOpts{hosts: []string{"alpha.test"},
		approvals: "[approvals]\nenabled = true\nreviewer = \"user\"\npolicy = \"on-request\"\ntimeout = \"30s\"\n"}), t: t}
	target := up.URL("alpha.test", "/iso")
	sessionOf := func(id string) string {
		code, b := p.api("GET", "/api/approvals", "")
		if code != 200 {
			t.Fatalf("approvals: %d %s", code, b)
		}
		var out struct {
			Approvals []struct {
				ID        string `json:"id"`
				SessionID string `json:"session_id"`
			}
		}
		json.Unmarshal(b, &out)
		for _, a := range out.Approvals {
			if a.ID == id {
				return a.SessionID
			}
		}
		t.Fatalf("approval %s not listed: %s", id, b)
		return ""
	}

	ch := paGet(proxyClient(p.Proxy, "ci", paCISecret), target)
	a := p.waitPending("alpha.test")
	if s := sessionOf(a.ID); s != "client:ci" {
		t.Fatalf("ci's approval has session %q, want client:ci", s)
	}
	p.decide(a.ID, "allow_session")
	paAwait(t, "ci after allow_session", ch, 200)
	// ci again: its session's cache answers, no review.
	paAwait(t, "ci again", paGet(proxyClient(p.Proxy, "ci", paCISecret), target), 200)

	// dev and the anonymous client are asked about again, each in its own session.
	for _, c := range []struct{ who, user, pass, session string }{
		{"dev", "dev", paDevSecret, "client:dev"}, {"anonymous", "", "", "default"},
	} {
		ch := paGet(proxyClient(p.Proxy, c.user, c.pass), target)
		a := p.waitPending("alpha.test")
		if s := sessionOf(a.ID); s != c.session {
			t.Fatalf("%s's approval has session %q, want %s", c.who, s, c.session)
		}
		p.decide(a.ID, "deny")
		paAwait(t, c.who+" after deny", ch, 403)
	}
	// ci's allowance stands; the others' denials are theirs.
	paAwait(t, "ci after the others were denied", paGet(proxyClient(p.Proxy, "ci", paCISecret), target), 200)
	if n := len(p.pending()); n != 0 {
		t.Fatalf("%d approvals pending after ci's cached request", n)
	}
}

// TestProxyAuthBudgets: [budgets] apply to each authenticated client on
// its own (SPEC §3.12): ci uses up its requests, dev still has its own.
func TestProxyAuthBudgets(t *testing.T) {
	up := StartUpstream(t, false)
	p := paStart(t, paOpts{extra: "[budgets]\nrequests = 2\n"})
	ci, dev := proxyClient(p, "ci", paCISecret), proxyClient(p, "dev", paDevSecret)
	for i := 0; i < 2; i++ {
		paAwait(t, "ci within its budget", paGet(ci, up.URL("up.test", "/b")), 200)
	}
	resp, err := ci.Get(up.URL("up.test", "/b"))
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 403 || !strings.Contains(string(b), `"reason":"budget_exceeded"`) {
		t.Fatalf("ci past its budget: %d %s", resp.StatusCode, b)
	}
	paAwait(t, "dev (its own budget)", paGet(dev, up.URL("up.test", "/b")), 200)
	paAwait(t, "dev (its own budget)", paGet(dev, up.URL("up.test", "/b")), 200)
	paAwait(t, "dev past its budget", paGet(dev, up.URL("up.test", "/b")), 403)
}

// TestProxyAuthInterception: inside an intercepted tunnel (limited mode,
// MITM), a Proxy-Authorization the client sends is not forwarded either,
// and the inner requests are the client's.
func TestProxyAuthInterception(t *testing.T) {
	up := StartUpstream(t, true)
	p := paStart(t, paOpts{mode: "limited", extra: rulesMITM})
	writeMITMFiles(t, p.Dir, up)
	p.Start(t)
	c := proxyClient(p, "ci", paCISecret)
	req, _ := http.NewRequest("GET", up.URL("up.test", "/hello"), nil)
	req.Header.Set("Proxy-Authorization", basic("ci", paCISecret))
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || string(b) != Hello {
		t.Fatalf("intercepted GET as ci: %d %q\n%s", resp.StatusCode, b, p.Output.String())
	}
	if v := up.LastHeaders().Get("Proxy-Authorization"); v != "" {
		t.Fatalf("Proxy-Authorization inside the tunnel reached the upstream: %q", v)
	}
	paWaitAudit(t, p, 2, "of ci (the CONNECT and its inner GET)", func(l map[string]any) bool {
		return l["client"] == "ci" && l["session_id"] == "client:ci" && l["decision"] == "allow"
	})
	// A wrong secret on the CONNECT: 407, no tunnel.
	if _, err := proxyClient(p, "ci", paWrong).Get(up.URL("up.test", "/hello")); err == nil || !strings.Contains(err.Error(), "Proxy Authentication Required") {
		t.Fatalf("intercepted CONNECT with a wrong secret: %v", err)
	}
	paNoSecret(t, p)
}

// TestProxyAuthReload: a reload re-reads the secrets; a broken
// secret_file fails the reload, names its key, and the previous secrets
// keep working.
func TestProxyAuthReload(t *testing.T) {
	up := StartUpstream(t, false)
	p := paStart(t, paOpts{})
	secretFile := filepath.Join(p.Dir, "dev.secret")
	dev := func(pass string) int {
		resp, err := proxyClient(p, "dev", pass).Get(up.URL("up.test", "/r"))
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	if code := dev(paDevSecret); code != 200 {
		t.Fatalf("dev before the reload: %d", code)
	}
	os.WriteFile(secretFile, []byte("\n"), 0o600)
	code, body := p.AdminRequest(t, "POST", "/api/reload", p.Token)
	if code != 422 || !strings.Contains(body, "proxy_auth.clients[1].secret_file") {
		t.Fatalf("reload with an empty secret_file: %d %s", code, body)
	}
	// The log line reaches us through serve's stderr pipe, after the API's answer.
	waitFor(t, 5*time.Second, func() bool {
		return strings.Contains(p.Output.String(), "proxy_auth.clients[1].secret_file")
	}, "the failed reload's log naming proxy_auth.clients[1].secret_file")
	if code := dev(paDevSecret); code != 200 {
		t.Fatalf("dev's previous secret after a failed reload: %d", code)
	}
	os.Remove(secretFile)
	if code, body := p.AdminRequest(t, "POST", "/api/reload", p.Token); code != 422 || !strings.Contains(body, "proxy_auth.clients[1].secret_file") {
		t.Fatalf("reload with a missing secret_file: %d %s", code, body)
	}
	const rotated = "dev-rotated-Kk2"
	os.WriteFile(secretFile, []byte(rotated+"\n"), 0o600)
	if code, body := p.AdminRequest(t, "POST", "/api/reload", p.Token); code != 200 {
		t.Fatalf("reload with a new secret: %d %s", code, body)
	}
	if code := dev(rotated); code != 200 {
		t.Fatalf("dev's new secret after the reload: %d", code)
	}
	if code := dev(paDevSecret); code != 407 {
		t.Fatalf("dev's old secret after the reload: %d, want 407", code)
	}
	if strings.Contains(p.Output.String(), rotated) {
		t.Fatal("the log holds the rotated secret")
	}
	paNoSecret(t, p)
}

// TestProxyAuthGit: git with http.proxy=http://name:secret@… clones over
// CONNECT from git http-backend; with required = true git's first,
// unauthenticated CONNECT gets the 407 challenge and it answers it.
func TestProxyAuthGit(t *testing.T) {
	if _, err := exec.LookPath("git"); err != nil {
		t.Fatal("git is required")
	}
	root, home := t.TempDir(), t.TempDir()
	env := []string{"PATH=" + os.Getenv("PATH"), "HOME=" + home, "GIT_TERMINAL_PROMPT=0", "GIT_CONFIG_NOSYSTEM=1",
		"GIT_AUTHOR_NAME=e2e", "GIT_AUTHOR_EMAIL=e2e@test", "GIT_COMMITTER_NAME=e2e", "GIT_COMMITTER_EMAIL=e2e@test"}
	bare, seed := filepath.Join(root, "o", "r.git"), t.TempDir()
	for _, args := range [][]string{
		{"init", "-q", "--bare", "-b", "main", bare}, {"init", "-q", "-b", "main", seed},
		{"-C", seed, "commit", "-q", "--allow-empty", "-m", "first"}, {"-C", seed, "push", "-q", bare, "main"},
	} {
		if out, err := runGit(t, root, env, args...); err != nil {
			t.Fatalf("git %v: %v\n%s", args, err, out)
		}
	}
	gs := startGitServer(t, root)
	p := paStart(t, paOpts{required: true})
	work := t.TempDir()
	proxyArg := "http.proxy=http://ci:" + paCISecret + "@" + p.HTTP
	if out, err := runGit(t, work, env, "-c", proxyArg, "-c", "http.sslVerify=false", "clone", gs.URL("up.test", "/o/r.git"), "clone"); err != nil {
		t.Fatalf("git clone with proxy credentials: %v\n%s\n%s", err, out, p.Output.String())
	}
	if log, _ := runGit(t, filepath.Join(work, "clone"), env, "log", "--oneline"); !strings.Contains(log, "first") {
		t.Fatalf("the clone lacks the commit: %q", log)
	}
	// A wrong secret fails the clone.
	bad := "http.proxy=http://ci:" + paWrong + "@" + p.HTTP
	if out, err := runGit(t, work, env, "-c", bad, "-c", "http.sslVerify=false", "clone", gs.URL("up.test", "/o/r.git"), "clone2"); err == nil {
		t.Fatalf("git clone with a wrong proxy secret passed:\n%s", out)
	}
	paWaitAudit(t, p, 1, "of ci's CONNECT", func(l map[string]any) bool {
		return l["client"] == "ci" && l["protocol"] == "https" && l["decision"] == "allow"
	})
	paNoSecret(t, p)
}

// wheel builds a minimal pure-Python wheel of demo_pkg 1.0.
func wheel(t *testing.T) []byte {
	t.Helper()
	var buf bytes.Buffer
	z := zip.NewWriter(&buf)
	files := map[string]string{
		"demo_pkg/__init__.py":                 "VALUE = 1\n",
		"demo_pkg-1.0.dist-info/METADATA":      "Metadata-Version: 2.1\nName: demo-pkg\nVersion: 1.0\n",
		"demo_pkg-1.0.dist-info/WHEEL":         "Wheel-Version: 1.0\nGenerator: e2e\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
		"demo_pkg-1.0.dist-info/top_level.txt": "demo_pkg\n",
	}
	var record strings.Builder
	for _, name := range []string{"demo_pkg/__init__.py", "demo_pkg-1.0.dist-info/METADATA", "demo_pkg-1.0.dist-info/WHEEL", "demo_pkg-1.0.dist-info/top_level.txt"} {
		w, _ := z.Create(name)
		io.WriteString(w, files[name])
		sum := sha256.Sum256([]byte(files[name]))
		fmt.Fprintf(&record, "%s,sha256=%s,%d\n", name, base64.RawURLEncoding.EncodeToString(sum[:]), len(files[name]))
	}
	record.WriteString("demo_pkg-1.0.dist-info/RECORD,,\n")
	w, _ := z.Create("demo_pkg-1.0.dist-info/RECORD")
	io.WriteString(w, record.String())
	if err := z.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// simpleIndex serves a PEP 503 simple index with demo-pkg 1.0 on plain
// HTTP and records any Proxy-Authorization it receives.
type simpleIndex struct {
	port   int
	mu     sync.Mutex
	leaked []string
	hits   int
}

func startSimpleIndex(t *testing.T) *simpleIndex {
	t.Helper()
	whl := wheel(t)
	sum := sha256.Sum256(whl)
	const file = "demo_pkg-1.0-py3-none-any.whl"
	si := &simpleIndex{}
	mux := http.NewServeMux()
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		si.mu.Lock()
		si.hits++
		if v := r.Header.Get("Proxy-Authorization"); v != "" {
			si.leaked = append(si.leaked, v)
		}
		si.mu.Unlock()
		switch r.URL.Path {
		case "/simple/demo-pkg/":
			fmt.Fprintf(w, "<!DOCTYPE html><html><body><a href=\"/files/%s#sha256=%s\">%s</a></body></html>\n", file, hex.EncodeToString(sum[:]), file)
		case "/files/" + file:
			w.Write(whl)
		default:
			http.NotFound(w, r)
		}
	})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	si.port = ln.Addr().(*net.TCPAddr).Port
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	return si
}

const paPython = `
import sys, requests, urllib.request, urllib.error, warnings
warnings.filterwarnings("ignore")
proxy, url, surl = sys.argv[1:4]
r = requests.get(url, proxies={"http": proxy, "https": proxy}, timeout=15)
print("requests-http", r.status_code, r.text)
try:
    r = requests.get(surl, proxies={"http": proxy, "https": proxy}, timeout=15, verify=False)
    print("requests-https", r.status_code, r.text)
except requests.exceptions.ProxyError as e:
    print("requests-https proxy-error", "407" in str(e))
op = urllib.request.build_opener(urllib.request.ProxyHandler({"http": proxy}))
try:
    print("urllib-http", 200, op.open(url, timeout=15).read().decode())
except urllib.error.HTTPError as e:
    print("urllib-http", e.code)
`

// TestProxyAuthPipAndPython: pip download through the proxy with
// credentials from a local simple index (PyPI is out of reach), and
// Python requests and urllib with proxy credentials; a wrong secret gets
// 407 in each; the index never sees the header.
func TestProxyAuthPipAndPython(t *testing.T) {
	py := "/usr/bin/python3"
	if _, err := os.Stat(py); err != nil {
		t.Fatal("python3 is required at /usr/bin/python3 (scripts/install-test-deps.sh)")
	}
	for _, mod := range []string{"pip", "requests"} {
		if out, err := exec.Command(py, "-c", "import "+mod).CombinedOutput(); err != nil {
			t.Fatalf("python3 module %s is required (scripts/install-test-deps.sh): %v %s", mod, err, out)
		}
	}
	up := StartUpstream(t, false)
	tlsUp := StartUpstream(t, true)
	si := startSimpleIndex(t)
	p := paStart(t, paOpts{})
	home := t.TempDir()
	env := []string{"PATH=" + os.Getenv("PATH"), "HOME=" + home, "PIP_CONFIG_FILE=/dev/null", "PIP_NO_CACHE_DIR=1", "PIP_DISABLE_PIP_VERSION_CHECK=1"}
	run := func(args ...string) (string, error) {
		ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
		defer cancel()
		cmd := exec.CommandContext(ctx, py, args...)
		cmd.Env = env
		out, err := cmd.CombinedOutput()
		return string(out), err
	}
	index := fmt.Sprintf("http://up.test:%d/simple/", si.port)
	dest := t.TempDir()
	out, err := run("-m", "pip", "download", "--no-deps", "-d", dest, "--index-url", index, "--trusted-host", "up.test",
		"--proxy", "http://ci:"+paCISecret+"@"+p.HTTP, "demo-pkg==1.0")
	if err != nil {
		t.Fatalf("pip download with proxy credentials: %v\n%s\n%s", err, out, p.Output.String())
	}
	if _, err := os.Stat(filepath.Join(dest, "demo_pkg-1.0-py3-none-any.whl")); err != nil {
		t.Fatalf("pip did not download the wheel: %v\n%s", err, out)
	}
	hitsBefore := si.hits
	out, err = run("-m", "pip", "download", "-vv", "--no-deps", "-d", t.TempDir(), "--index-url", index, "--trusted-host", "up.test",
		"--retries", "0", "--proxy", "http://ci:"+paWrong+"@"+p.HTTP, "demo-pkg==1.0")
	if err == nil || !strings.Contains(out, "407") {
		t.Fatalf("pip download with a wrong proxy secret: %v\n%s", err, out)
	}
	si.mu.Lock()
	if si.hits != hitsBefore || len(si.leaked) > 0 {
		t.Errorf("the index: %d hits with a wrong secret, Proxy-Authorization leaked %d times", si.hits-hitsBefore, len(si.leaked))
	}
	si.mu.Unlock()
	paWaitAudit(t, p, 2, "of pip as ci", func(l map[string]any) bool {
		return l["client"] == "ci" && l["port"] == float64(si.port) && l["decision"] == "allow"
	})

	// Python requests (HTTP and CONNECT) and urllib (HTTP).
	proxy := "http://dev:" + paDevSecret + "@" + p.HTTP
	out, err = run("-c", paPython, proxy, up.URL("up.test", "/hello"), tlsUp.URL("up.test", "/hello"))
	if err != nil {
		t.Fatalf("python: %v\n%s", err, out)
	}
	for _, want := range []string{"requests-http 200 " + Hello, "requests-https 200 " + Hello, "urllib-http 200 " + Hello} {
		if !strings.Contains(out, want) {
			t.Fatalf("python with proxy credentials: no %q in\n%s", want, out)
		}
	}
	if v := up.LastHeaders().Get("Proxy-Authorization"); v != "" {
		t.Fatalf("the upstream received Proxy-Authorization from Python: %q", v)
	}
	out, err = run("-c", paPython, "http://dev:"+paWrong+"@"+p.HTTP, up.URL("up.test", "/hello"), tlsUp.URL("up.test", "/hello"))
	if err != nil {
		t.Fatalf("python: %v\n%s", err, out)
	}
	for _, want := range []string{"requests-http 407", "requests-https proxy-error True", "urllib-http 407"} {
		if !strings.Contains(out, want) {
			t.Fatalf("python with a wrong secret: no %q in\n%s", want, out)
		}
	}
	paWaitAudit(t, p, 3, "of python as dev", func(l map[string]any) bool {
		return l["client"] == "dev" && l["session_id"] == "client:dev" && l["decision"] == "allow"
	})
	paNoSecret(t, p)
}
