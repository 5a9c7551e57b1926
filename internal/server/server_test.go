package server

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/netproxy/netproxy/hostpolicy"
	"github.com/netproxy/netproxy/internal/config"
)

func writeConfig(t testing.TB, dir, extra string) string {
	t.Helper()
	body := fmt.Sprintf(`[listen]
http = "127.0.0.1:0"
socks5 = "127.0.0.1:0"
admin = "127.0.0.1:0"
[control]
socket = %q
[network]
allow_local_binding = true
[network.domains]
"up.test" = "allow"
[dns.hosts]
"up.test" = ["127.0.0.1"]
"other.test" = ["127.0.0.1"]
%s
`, filepath.Join(dir, "control.sock"), extra)
	path := filepath.Join(dir, "netproxy.toml")
	if err := os.WriteFile(path, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

func start(t *testing.T, extra string, opts Options) (*Server, string) {
	t.Helper()
	dir := t.TempDir()
	t.Setenv("NETPROXY_HOME", dir)
	path := writeConfig(t, dir, extra)
	cfg, err := config.Load(path)
	if err != nil {
		t.Fatal(err)
	}
	s, err := New(cfg, opts)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		s.Shutdown(ctx)
	})
	return s, path
}

func status(t *testing.T, s *Server, target string) int {
	t.Helper()
	pu, _ := url.Parse("http://" + s.Addrs().HTTP)
	c := &http.Client{Transport: &http.Transport{Proxy: http.ProxyURL(pu), DisableKeepAlives: true}, Timeout: 10 * time.Second}
	resp, err := c.Get(target)
	if err != nil {
		t.Fatal(err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.StatusCode
}

func TestServeReloadAndGeneratedToken(t *testing.T) {
	ln, _ := net.Listen("tcp", "127.0.0.1:0")
	defer ln.Close()
	go http.Serve(ln, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "ok") }))
	port := ln.Addr().(*net.TCPAddr).Port
	s, path := start(t, "[approvals]\nenabled = false\n[admin]\ntoken_env = \"NETPROXY_TEST_UNSET_TOKEN\"\n", Options{})
	if !s.AdminTokenGenerated() || len(s.AdminToken()) < 32 || !strings.Contains(s.ApprovalsURL(), s.AdminToken()) {
		t.Fatalf("generated token %q, url %q", s.AdminToken(), s.ApprovalsURL())
	}
	if got := status(t, s, fmt.Sprintf("http://up.test:%d/", port)); got != 200 {
		t.Fatalf("allowed: %d", got)
	}
	if got := status(t, s, fmt.Sprintf("http://other.test:%d/", port)); got != 403 {
		t.Fatalf("unlisted: %d", got)
	}
	data, _ := os.ReadFile(path)
	os.WriteFile(path, []byte(strings.Replace(string(data), `"up.test" = "allow"`, `"up.test" = "allow"`+"\n"+`"other.test" = "allow"`, 1)), 0o644)
	if err := s.Reload(); err != nil {
		t.Fatal(err)
	}
	if got := status(t, s, fmt.Sprintf("http://other.test:%d/", port)); got != 200 {
		t.Fatalf("after reload: %d", got)
	}
	os.WriteFile(path, []byte("[network]\nmode = \"sideways\"\n"), 0o644)
	if err := s.Reload(); err == nil {
		t.Fatal("a bad file reloaded")
	}
	if got := status(t, s, fmt.Sprintf("http://other.test:%d/", port)); got != 200 {
		t.Fatalf("after a failed reload: %d (the previous policy must stay)", got)
	}
}

type fixedDecider struct{ v hostpolicy.Verdict }

func (f fixedDecider) Decide(_ context.Context, _ hostpolicy.Request, base hostpolicy.Decision) hostpolicy.Decision {
	base.Verdict, base.Reason = f.v, hostpolicy.ReasonNone
	return base
}

func TestDeciderSlot(t *testing.T) {
	ln, _ := net.Listen("tcp", "127.0.0.1:0")
	defer ln.Close()
	go http.Serve(ln, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "ok") }))
	port := ln.Addr().(*net.TCPAddr).Port
	s, _ := start(t, "[approvals]\nenabled = true\n", Options{})
	// Approvals on, no reviewer installed yet: not_allowed fails closed.
	d := s.Engine().Evaluate(context.Background(), hostpolicy.Request{Host: "other.test", Port: uint16(port), Protocol: hostpolicy.ProtoHTTP, Method: "GET"})
	if d.Allowed() || d.Source != hostpolicy.SourceDecider {
		t.Fatalf("empty decider slot: %+v", d)
	}
	s.SetDecider(fixedDecider{hostpolicy.Allow})
	if got := status(t, s, fmt.Sprintf("http://other.test:%d/", port)); got != 200 {
		t.Fatalf("with an allowing decider: %d", got)
	}
}

func TestPortInUse(t *testing.T) {
	taken, _ := net.Listen("tcp", "127.0.0.1:0")
	defer taken.Close()
	dir := t.TempDir()
	t.Setenv("NETPROXY_HOME", dir)
	cfg, err := config.Load(writeConfig(t, dir, ""))
	if err != nil {
		t.Fatal(err)
	}
	cfg.Listen.SOCKS5 = taken.Addr().String()
	s, err := New(cfg, Options{})
	if err != nil {
		t.Fatal(err)
	}
	err = s.Start(context.Background())
	if err == nil || !strings.Contains(err.Error(), "listen.socks5") || !strings.Contains(err.Error(), "already in use") {
		t.Fatalf("Start with a taken port: %v", err)
	}
	// Nothing stays bound: the HTTP address can be listened on again.
	if _, err := os.Stat(cfg.Control.Socket); err == nil {
		t.Fatal("control socket left behind")
	}
}

func TestShutdownDoesNotWaitForSilentClients(t *testing.T) {
	dir := t.TempDir()
	t.Setenv("NETPROXY_HOME", dir)
	cfg, err := config.Load(writeConfig(t, dir, "[approvals]\nenabled = false\n"))
	if err != nil {
		t.Fatal(err)
	}
	s, err := New(cfg, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	silent, err := net.Dial("tcp", s.Addrs().HTTP)
	if err != nil {
		t.Fatal(err)
	}
	defer silent.Close()
	idle, err := net.Dial("tcp", s.Addrs().SOCKS5)
	if err != nil {
		t.Fatal(err)
	}
	defer idle.Close()
	time.Sleep(100 * time.Millisecond)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	start := time.Now()
	if err := s.Shutdown(ctx); err != nil {
		t.Fatalf("shutdown: %v", err)
	}
	if d := time.Since(start); d > 2*time.Second {
		t.Fatalf("shutdown took %s with silent clients connected", d)
	}
	if code := func() int {
		c, err := net.DialTimeout("tcp", s.Addrs().HTTP, time.Second)
		if err != nil {
			return 0
		}
		c.Close()
		return 1
	}(); code != 0 {
		t.Fatal("still accepting after shutdown")
	}
}

// SPEC §7.2: the policy reloads — [dns.hosts] included, since the static
// answers are what the local guard judges and the dialer pins.
func TestReloadReplacesStaticDNSAnswers(t *testing.T) {
	ln, _ := net.Listen("tcp", "127.0.0.1:0")
	defer ln.Close()
	go http.Serve(ln, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "ok") }))
	port := ln.Addr().(*net.TCPAddr).Port
	s, path := start(t, "[approvals]\nenabled = false\n", Options{})
	late := fmt.Sprintf("http://late.test:%d/", port)
	// Allow-listed but unresolvable (.test has no DNS); allow_local_binding
	// is on in this config, so the failure is the dial's 502.
	data, _ := os.ReadFile(path)
	os.WriteFile(path, []byte(strings.Replace(string(data), `"up.test" = "allow"`, `"up.test" = "allow"`+"\n"+`"late.test" = "allow"`, 1)), 0o644)
	if err := s.Reload(); err != nil {
		t.Fatal(err)
	}
	if got := status(t, s, late); got != 502 {
		t.Fatalf("allow-listed name with no answer: %d, want 502", got)
	}
	data, _ = os.ReadFile(path)
	os.WriteFile(path, []byte(strings.Replace(string(data), "[dns.hosts]", "[dns.hosts]\n"+`"late.test" = ["127.0.0.1"]`, 1)), 0o644)
	if err := s.Reload(); err != nil {
		t.Fatal(err)
	}
	if got := status(t, s, late); got != 200 {
		t.Fatalf("after adding its [dns.hosts] answer and reloading: %d, want 200", got)
	}
}
