package test

// Issue 11 item 7 (SPEC §7.3): the admin listener answers only requests
// whose Host is a loopback literal, localhost or a name in
// admin.allowed_hosts (421 otherwise: DNS rebinding from a reviewer's
// browser), and a generated admin token is written to a 0600 file, not to a
// non-terminal stdout.

import (
	"fmt"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// withAdminKeys adds keys to the harness's [admin] table.
func withAdminKeys(t *testing.T, p *Proxy, keys string) {
	t.Helper()
	b, err := os.ReadFile(p.ConfigPath)
	if err != nil {
		t.Fatal(err)
	}
	line := fmt.Sprintf("token_env = %q\n", adminTokenEnv)
	if !strings.Contains(string(b), line) {
		t.Fatalf("harness config has no %q", line)
	}
	if err := os.WriteFile(p.ConfigPath, []byte(strings.Replace(string(b), line, line+keys, 1)), 0o644); err != nil {
		t.Fatal(err)
	}
}

func TestAdminHostCheck(t *testing.T) {
	c := StdConfig()
	c.Approvals = true
	p := WriteProxyConfig(t, c)
	withAdminKeys(t, p, "allowed_hosts = [\"np.internal.test\"]\n")
	p.Start(t)
	_, port, _ := strings.Cut(p.Admin, ":")

	// curl -w prints the status; -H/--resolve set the Host header the way
	// a rebinding browser would send it.
	status := func(args ...string) (string, string) {
		t.Helper()
		r := Curl(t, append([]string{"-o", "-", "-w", "\n%{http_code}"}, args...)...)
		i := strings.LastIndex(r.Stdout, "\n")
		return r.Stdout[i+1:], r.Stdout[:i]
	}
	auth := []string{"-H", "Authorization: Bearer " + p.Token}
	paths := []string{"/metrics", "/healthz", "/readyz", "/", "/api/approvals?status=pending", "/api/blocked", "/api/executions"}
	for _, path := range paths {
		for _, bad := range [][]string{
			{"--resolve", "rebind.attacker.test:" + port + ":127.0.0.1", "http://rebind.attacker.test:" + port + path},
			{"-H", "Host: rebind.attacker.test:" + port, "http://" + p.Admin + path},
			{"-H", "Host: localhost.attacker.test", "http://" + p.Admin + path},
			{"-H", "Host: 10.1.2.3:" + port, "http://" + p.Admin + path},
		} {
			code, body := status(append(append([]string{}, auth...), bad...)...)
			if code != "421" {
				t.Errorf("%v: %s, want 421", bad, code)
			}
			if strings.Contains(body, "attacker") || strings.Contains(body, "netproxy_") || strings.Contains(body, p.Token) {
				t.Errorf("%v: 421 body leaks: %.80q", bad, body)
			}
		}
		for _, good := range [][]string{
			{"http://" + p.Admin + path},
			{"--resolve", "localhost:" + port + ":127.0.0.1", "http://localhost:" + port + path},
			{"--resolve", "np.internal.test:" + port + ":127.0.0.1", "http://np.internal.test:" + port + path},
			{"-H", "Host: [::1]:" + port, "http://" + p.Admin + path},
		} {
			if code, _ := status(append(append([]string{}, auth...), good...)...); code == "421" {
				t.Errorf("%v: 421 for an allowed Host", good)
			}
		}
	}
	// SSE too.
	if code, _ := status(append(auth, "-m", "2", "-H", "Host: rebind.attacker.test", "http://"+p.Admin+"/api/events")...); code != "421" {
		t.Errorf("/api/events with a foreign Host: %s", code)
	}
}

func TestAdminGeneratedTokenGoesToFile(t *testing.T) {
	c := StdConfig()
	c.Approvals = true
	p := WriteProxyConfig(t, c)
	p.Token = "" // the variable is set but empty: serve generates a token
	p.Start(t)
	out := p.Output.String()
	path := filepath.Join(p.Home, "admin-token")
	if strings.Contains(out, "#token=") {
		t.Fatalf("a generated token was printed to a non-terminal stdout:\n%s", out)
	}
	if !strings.Contains(out, "wrote it to "+path+" (mode 0600)") {
		t.Fatalf("the printed line does not name %s:\n%s", path, out)
	}
	st, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if st.Mode().Perm() != 0o600 {
		t.Fatalf("%s mode %v, want 0600", path, st.Mode().Perm())
	}
	b, _ := os.ReadFile(path)
	token := strings.TrimSpace(string(b))
	if !regexp.MustCompile(`^[0-9a-f]{32,}$`).MatchString(token) {
		t.Fatalf("token file holds %d bytes, not a hex token", len(b))
	}
	if strings.Contains(out, token) {
		t.Fatal("the generated token reached stdout/stderr")
	}
	if a, _ := os.ReadFile(p.Audit); strings.Contains(string(a), token) {
		t.Fatal("the generated token reached the audit log")
	}
	if code, _ := p.AdminRequest(t, "GET", "/api/approvals?status=pending", token); code != 200 {
		t.Fatalf("the token from the file does not open /api: %d", code)
	}
	if code, _ := p.AdminRequest(t, "GET", "/api/approvals?status=pending", ""); code != 401 {
		t.Fatalf("/api without a token: %d", code)
	}
	client := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	resp, err := client.Get("http://" + p.Admin + "/login?token=" + url.QueryEscape(token))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusSeeOther {
		t.Fatalf("login with the file's token: %d", resp.StatusCode)
	}
	// No temporary file is left beside it.
	ents, _ := os.ReadDir(p.Home)
	for _, e := range ents {
		if strings.HasPrefix(e.Name(), ".admin-token") {
			t.Fatalf("temporary file %s left in NETPROXY_HOME", e.Name())
		}
	}
}

// A token from admin.token_env is never written to the file.
func TestAdminConfiguredTokenWritesNoFile(t *testing.T) {
	p := StartProxy(t, StdConfig())
	if _, err := os.Stat(filepath.Join(p.Home, "admin-token")); !os.IsNotExist(err) {
		t.Fatalf("admin-token written although the token came from $%s: %v", adminTokenEnv, err)
	}
	if strings.Contains(p.Output.String(), p.Token) {
		t.Fatal("the configured token was printed")
	}
}
