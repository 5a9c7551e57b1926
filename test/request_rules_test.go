package test

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/http/cgi"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// Request rules (SPEC §3.10) end to end: curl over plain HTTP and through
// interception (HTTP/1.1 and HTTP/2), the dodges of the path, the audit;
// and real git against git http-backend in limited mode (§3.8).

const rulesMITM = "[mitm]\nenabled = true\nca_cert = \"ca.pem\"\nca_key = \"ca-key.pem\"\nupstream_ca = \"upstream.pem\"\n\n"

const pushMessage = "netproxy: agents may read repositories here, not push."

// gitRulesTOML is configs/examples/git-readonly.toml's rules for host.
func gitRulesTOML(host string) string {
	return fmt.Sprintf(`[[network.requests]]
hosts = [%[1]q]
methods = ["POST"]
paths = ["/**/git-receive-pack"]
action = "deny"
message = %[2]q

[[network.requests]]
hosts = [%[1]q]
methods = ["POST"]
paths = ["/**/git-upload-pack"]
action = "allow"
`, host, pushMessage)
}

func startRulesProxy(t *testing.T, up *Upstream, mode, rules string) (*Proxy, string) {
	t.Helper()
	cfg := StdConfig()
	cfg.Mode = mode
	cfg.Extra = rulesMITM + rules
	p := WriteProxyConfig(t, cfg)
	writeMITMFiles(t, p.Dir, up)
	p.Start(t)
	return p, filepath.Join(p.Dir, "ca.pem")
}

type blockJSON struct {
	Reason, Source, Protocol, Message, Decision string
	Rule                                        *int
}

func parseBlock(t *testing.T, body string) blockJSON {
	t.Helper()
	var b blockJSON
	if err := json.Unmarshal([]byte(body), &b); err != nil {
		t.Fatalf("block body %q: %v", body, err)
	}
	return b
}

// TestRequestRulesCurl: full mode; the host has rules, so its HTTPS is
// intercepted although limited mode is off. Every dodge of the denied path
// is blocked before the upstream sees it, over plain HTTP and inside the
// tunnel (HTTP/1.1 and HTTP/2); other paths pass.
func TestRequestRulesCurl(t *testing.T) {
	plain := StartUpstream(t, false)
	up := StartUpstream(t, true)
	p, ca := startRulesProxy(t, up, "full", gitRulesTOML("up.test"))

	dodges := []string{
		"/o/r/git-receive-pack", "/a/../o/r/git-receive-pack", "//o//r/git-receive-pack",
		"/o%2Fr/git-receive-pack", "/x/%2e%2e/o/r/git-receive-pack", "/o/r/git-receive-pack?x=1",
		"/o/r/git-receive-pack;p=1", "/o/r/git-receive-pack%00", "/o%5Cr/git-receive-pack",
	}
	for _, tc := range []struct {
		name string
		url  func(path string) string
		args []string
		prot string
		hits func() int64
	}{
		{"plain", func(path string) string { return plain.URL("up.test", path) }, nil, "http", plain.Hits},
		{"https-h1", func(path string) string { return up.URL("up.test", path) }, []string{"--cacert", ca, "--http1.1"}, "https", up.Hits},
		{"https-h2", func(path string) string { return up.URL("up.test", path) }, []string{"--cacert", ca, "--http2"}, "https", up.Hits},
	} {
		for _, path := range dodges {
			before := tc.hits()
			args := append([]string{"-x", "http://" + p.HTTP, "--path-as-is", "-X", "POST", "-d", "x", "-D", "-", "-w", "\n%{http_code}"}, tc.args...)
			r := Curl(t, append(args, tc.url(path))...)
			if r.Exit != 0 || !strings.HasSuffix(r.Stdout, "\n403") {
				t.Errorf("%s POST %s: exit %d stdout %q stderr %s", tc.name, path, r.Exit, r.Stdout, r.Stderr)
				continue
			}
			if !strings.Contains(strings.ToLower(r.Stdout), "x-proxy-error: blocked-by-request-rule") {
				t.Errorf("%s POST %s: no x-proxy-error: %q", tc.name, path, r.Stdout)
			}
			body := r.Stdout[strings.Index(r.Stdout, "{") : strings.LastIndex(r.Stdout, "}")+1]
			b := parseBlock(t, body)
			if b.Reason != "request_denied" || b.Source != "baseline_policy" || b.Protocol != tc.prot {
				t.Errorf("%s POST %s: %+v", tc.name, path, b)
			}
			normal := !strings.ContainsAny(path, ";\\") && !strings.Contains(path, "%00") && !strings.Contains(path, "%5C")
			if normal && (b.Rule == nil || *b.Rule != 0 || b.Message != pushMessage) {
				t.Errorf("%s POST %s: rule %v message %q", tc.name, path, b.Rule, b.Message)
			}
			if tc.hits() != before {
				t.Errorf("%s POST %s reached the upstream", tc.name, path)
			}
		}
		// Another path and another method pass (full mode).
		r := Curl(t, append(append([]string{"-x", "http://" + p.HTTP, "-X", "POST", "-d", "x"}, tc.args...), tc.url("/o/r/other"))...)
		if r.Exit != 0 || r.Stdout != "upstream POST /o/r/other" {
			t.Errorf("%s POST /o/r/other: exit %d %q %s", tc.name, r.Exit, r.Stdout, r.Stderr)
		}
		r = Curl(t, append(append([]string{"-x", "http://" + p.HTTP}, tc.args...), tc.url("/o/r/git-receive-pack"))...)
		if r.Exit != 0 || r.Stdout != "upstream GET /o/r/git-receive-pack" {
			t.Errorf("%s GET receive-pack: exit %d %q %s", tc.name, r.Exit, r.Stdout, r.Stderr)
		}
	}
	// The audit names the rule, never the path or the query.
	deadline := time.Now().Add(5 * time.Second)
	for {
		b, _ := os.ReadFile(p.Audit)
		s := string(b)
		if strings.Contains(s, `"reason":"request_denied"`) && strings.Contains(s, `"rule":0`) {
			if strings.Contains(s, "git-receive-pack") || strings.Contains(s, "x=1") {
				t.Fatalf("the audit holds a path or query:\n%s", s)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no request_denied line with its rule in the audit:\n%s", s)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// startGitServer serves the bare repositories under root with git
// http-backend over HTTPS (names up.test, 127.0.0.1), push enabled: only
// the proxy's rule may refuse a push.
func startGitServer(t *testing.T, root string) *Upstream {
	t.Helper()
	backend := "/usr/lib/git-core/git-http-backend"
	if _, err := os.Stat(backend); err != nil {
		t.Fatalf("git http-backend is required (Debian package git): %v", err)
	}
	h := &cgi.Handler{Path: backend, Env: []string{"GIT_PROJECT_ROOT=" + root, "GIT_HTTP_EXPORT_ALL=1", "REMOTE_USER=e2e"}}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second}
	go srv.Serve(tls.NewListener(ln, &tls.Config{Certificates: []tls.Certificate{selfSigned(t)}}))
	t.Cleanup(func() { srv.Close() })
	return &Upstream{TLS: true, Port: ln.Addr().(*net.TCPAddr).Port}
}

func runGit(t *testing.T, dir string, env []string, args ...string) (string, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, "git", args...)
	cmd.Dir = dir
	cmd.Env = env
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	return out.String(), err
}

// TestRequestRulesGitLimitedMode: the git-readonly example. In limited
// mode, through interception, a real `git clone` and `git fetch` work (the
// allow rule is the mode guard's exception for POST git-upload-pack) and a
// `git push` fails with the proxy's 403 (git prints no RPC error body).
func TestRequestRulesGitLimitedMode(t *testing.T) {
	if _, err := exec.LookPath("git"); err != nil {
		t.Fatal("git is required")
	}
	root := t.TempDir()
	home := t.TempDir()
	baseEnv := []string{"PATH=" + os.Getenv("PATH"), "HOME=" + home, "GIT_TERMINAL_PROMPT=0", "GIT_CONFIG_NOSYSTEM=1",
		"GIT_AUTHOR_NAME=e2e", "GIT_AUTHOR_EMAIL=e2e@test", "GIT_COMMITTER_NAME=e2e", "GIT_COMMITTER_EMAIL=e2e@test"}
	// A bare repository with one commit, push over HTTP enabled.
	bare := filepath.Join(root, "o", "r.git")
	seed := t.TempDir()
	for _, args := range [][]string{
		{"init", "-q", "--bare", "-b", "main", bare}, {"-C", bare, "config", "http.receivepack", "true"},
		{"init", "-q", "-b", "main", seed}, {"-C", seed, "commit", "-q", "--allow-empty", "-m", "first"},
		{"-C", seed, "push", "-q", bare, "main"},
	} {
		if out, err := runGit(t, root, baseEnv, args...); err != nil {
			t.Fatalf("git %v: %v\n%s", args, err, out)
		}
	}
	gs := startGitServer(t, root)
	p, ca := startRulesProxy(t, gs, "limited", gitRulesTOML("up.test"))
	env := append(baseEnv, "HTTPS_PROXY=http://"+p.HTTP, "GIT_SSL_CAINFO="+ca)
	url := gs.URL("up.test", "/o/r.git")
	work := t.TempDir()

	out, err := runGit(t, work, env, "clone", url, "clone")
	if err != nil {
		t.Fatalf("git clone in limited mode: %v\n%s\n%s", err, out, p.Output.String())
	}
	clone := filepath.Join(work, "clone")
	if out, err := runGit(t, clone, env, "fetch", "origin"); err != nil {
		t.Fatalf("git fetch: %v\n%s", err, out)
	}
	if out, err := runGit(t, clone, env, "commit", "-q", "--allow-empty", "-m", "second"); err != nil {
		t.Fatalf("commit: %v\n%s", err, out)
	}
	out, err = runGit(t, clone, env, "push", "origin", "HEAD:main")
	if err == nil {
		t.Fatalf("git push passed in limited mode:\n%s", out)
	}
	// git prints no body of a failed RPC POST (remote-curl.c post_rpc:
	// "RPC failed; HTTP 403"); it shows a text/plain body only for the
	// info/refs GET, which carries the service in its query, which the
	// rules never match (SPEC §3.10). So git shows the 403, and the rule's
	// message is in the block body and the audit.
	if !strings.Contains(out, "HTTP 403") {
		t.Fatalf("git push's stderr does not show the proxy's 403:\n%s", out)
	}
	// The repository did not move.
	if log, _ := runGit(t, root, baseEnv, "-C", bare, "log", "--oneline"); strings.Contains(log, "second") {
		t.Fatalf("the push reached the repository:\n%s", log)
	}
	t.Logf("git push stderr:\n%s", out)
}
