package test

// End-to-end tests of `execwrap run`: the real execwrap binary, a real
// `netproxy serve`, real curl inside the sandbox.

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httputil"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// sbxResult is the subset of the SPEC 7.6 --json result the tests read.
type sbxResult struct {
	ExitCode    int             `json:"exit_code"`
	Signal      *string         `json:"signal"`
	TimedOut    bool            `json:"timed_out"`
	Stdout      string          `json:"stdout"`
	Stderr      string          `json:"stderr"`
	DurationMS  int64           `json:"duration_ms"`
	Requirement json.RawMessage `json:"requirement"`
	Sandbox     struct {
		Tier    string   `json:"tier"`
		Denied  bool     `json:"denied"`
		Signals []string `json:"signals"`
	} `json:"sandbox"`
	NetworkDenials []struct {
		Host, Protocol, Reason, Source, Decision string
		Port                                     int
	} `json:"network_denials"`
	Attempts []struct {
		Sandboxed   bool   `json:"sandboxed"`
		ExitCode    int    `json:"exit_code"`
		Denied      bool   `json:"denied"`
		ExecutionID string `json:"execution_id"`
	} `json:"attempts"`
	ExecutionID string `json:"execution_id"`
	Rejected    string `json:"rejected"`
}

// sbxRun runs `execwrap run --json ARGS` in dir and decodes the result.
func sbxRun(t *testing.T, env []string, dir string, args ...string) (sbxResult, int, string) {
	t.Helper()
	r, code, stderr, err := sbxExec(ExecwrapBin(t), env, dir, args...)
	if err != nil {
		t.Fatal(err)
	}
	return r, code, stderr
}

// sbxExec is sbxRun without the testing.T (safe in goroutines).
func sbxExec(bin string, env []string, dir string, args ...string) (sbxResult, int, string, error) {
	var r sbxResult
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, append([]string{"run", "--json"}, args...)...)
	cmd.Dir, cmd.Env = dir, env
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		return r, 0, errb.String(), fmt.Errorf("execwrap run: %v\nstderr: %s", err, errb.String())
	}
	if jerr := json.Unmarshal(out.Bytes(), &r); jerr != nil {
		return r, code, errb.String(), fmt.Errorf("execwrap run --json printed no result (%v)\nstdout: %s\nstderr: %s", jerr, out.String(), errb.String())
	}
	return r, code, errb.String(), nil
}

func sbxDir(t *testing.T) string {
	d, err := os.MkdirTemp("", "execwrap-e2e-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(d) })
	os.Chmod(d, 0o755)
	return d
}

// sbxAuditLines returns the audit's network_decision lines for host.
func sbxAuditLines(t *testing.T, p *Proxy, host string) []map[string]any {
	t.Helper()
	var lines []map[string]any
	deadline := time.Now().Add(3 * time.Second)
	for {
		lines = nil
		b, _ := os.ReadFile(p.Audit)
		sc := bufio.NewScanner(bytes.NewReader(b))
		for sc.Scan() {
			var m map[string]any
			if json.Unmarshal(sc.Bytes(), &m) == nil && m["event"] == "network_decision" && m["host"] == host {
				lines = append(lines, m)
			}
		}
		if len(lines) > 0 || time.Now().After(deadline) {
			return lines
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func TestSandboxRunThroughNetproxy(t *testing.T) {
	p := StartProxy(t, StdConfig())
	up := StartUpstream(t, false)
	dir := sbxDir(t)
	script := fmt.Sprintf(`
curl -sS -m 10 %s || exit 21
curl -sS -m 5 --noproxy '*' http://127.0.0.1:%d/hello >/dev/null 2>&1 && exit 22
curl -sS -m 5 --noproxy '*' http://%s/ >/dev/null 2>&1 && exit 23
curl -sS -m 5 -o /dev/null --socks5-hostname "${ALL_PROXY#socks5h://}" %s || exit 24
exit 0`, up.URL("up.test", "/hello"), up.Port, p.HTTP, up.URL("up.test", "/hello"))
	r, code, stderr := sbxRun(t, p.Env(), dir, "--control", p.Control, "--", "sh", "-c", script)
	if code != 0 || r.ExitCode != 0 {
		t.Fatalf("exit %d/%d (21 curl via proxy, 22 direct upstream reached, 23 netproxy reached directly, 24 socks5), stderr %s %s", code, r.ExitCode, r.Stderr, stderr)
	}
	if !strings.Contains(r.Stdout, Hello) {
		t.Fatalf("stdout %q lacks the upstream body", r.Stdout)
	}
	if up.Hits() != 2 {
		t.Fatalf("upstream hits = %d, want 2 (HTTP + SOCKS5 through netproxy, never direct)", up.Hits())
	}
	if r.Sandbox.Tier != "namespaces" || r.ExecutionID == "" {
		t.Fatalf("tier %q execution %q", r.Sandbox.Tier, r.ExecutionID)
	}
	lines := sbxAuditLines(t, p, "up.test")
	if len(lines) != 2 {
		t.Fatalf("audit has %d up.test lines, want 2", len(lines))
	}
	for _, l := range lines {
		if l["execution_id"] != r.ExecutionID {
			t.Fatalf("audit line execution_id %v, want %s: %v", l["execution_id"], r.ExecutionID, l)
		}
	}
	// Unregistered at exit.
	code2, body := controlGet(t, p, "/v1/executions/"+r.ExecutionID)
	if code2 != http.StatusNotFound {
		t.Fatalf("execution still active after exit: %d %s", code2, body)
	}
}

func controlGet(t *testing.T, p *Proxy, path string) (int, string) {
	t.Helper()
	resp, err := p.ControlClient().Get("http://control" + path)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

func TestSandboxRunDeniedHostIsANetworkDenial(t *testing.T) {
	p := StartProxy(t, StdConfig())
	up := StartUpstream(t, false)
	dir := sbxDir(t)
	r, code, _ := sbxRun(t, p.Env(), dir, "--control", p.Control, "--", "curl", "-sSf", "-m", "10", up.URL("denied.test", "/hello"))
	if code == 0 || r.ExitCode == 0 {
		t.Fatalf("curl to a denied host succeeded: %+v", r)
	}
	if len(r.NetworkDenials) != 1 || r.NetworkDenials[0].Host != "denied.test" || r.NetworkDenials[0].Reason != "denied" ||
		r.NetworkDenials[0].Port != up.Port {
		t.Fatalf("network_denials = %+v", r.NetworkDenials)
	}
	if !r.Sandbox.Denied || !slicesContains(r.Sandbox.Signals, "network:denied.test") {
		t.Fatalf("sandbox = %+v", r.Sandbox)
	}
	if len(r.Attempts) != 1 {
		t.Fatalf("a network denial must not be retried without the sandbox: %+v", r.Attempts)
	}
	if up.Hits() != 0 {
		t.Fatal("the denied request reached the upstream")
	}
}

func slicesContains(xs []string, x string) bool {
	for _, y := range xs {
		if y == x {
			return true
		}
	}
	return false
}

func TestSandboxRunWritesOutsideWorkdirFail(t *testing.T) {
	dir := sbxDir(t)
	marker := "/etc/execwrap-e2e-" + filepath.Base(dir)
	r, code, _ := sbxRun(t, os.Environ(), dir, "--network", "none", "--", "sh", "-c",
		"echo in > inside.txt && touch "+marker)
	if _, err := os.Stat(marker); err == nil {
		os.Remove(marker)
		t.Fatal("the sandbox wrote outside its workdir")
	}
	if code == 0 || !strings.Contains(r.Stderr, "Read-only file system") || !r.Sandbox.Denied {
		t.Fatalf("exit %d denied %v stderr %q", code, r.Sandbox.Denied, r.Stderr)
	}
	if b, err := os.ReadFile(filepath.Join(dir, "inside.txt")); err != nil || string(b) != "in\n" {
		t.Fatalf("workdir write lost: %q %v", b, err)
	}
}

// An allow rule bypasses the sandbox (skip{bypass_sandbox}), but an explicit
// --network none must still hold: the command sees only loopback
// (/proc/net follows the reader's network namespace; /sys/class/net would
// show the host's interfaces through the read-only sysfs).
func TestSandboxRunNetworkNoneSurvivesBypassingRule(t *testing.T) {
	dir := sbxDir(t)
	rules := t.TempDir()
	if err := os.WriteFile(filepath.Join(rules, "allow.rules"),
		[]byte("prefix_rule(pattern=[\"cat\", \"/proc/net/dev\"], decision=\"allow\")\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	r, code, _ := sbxRun(t, os.Environ(), dir, "--rules", rules, "--network", "none", "--", "cat", "/proc/net/dev")
	if code != 0 {
		t.Fatalf("exit %d stderr %q", code, r.Stderr)
	}
	var ifaces []string
	for _, line := range strings.Split(r.Stdout, "\n") {
		if name, _, ok := strings.Cut(line, ":"); ok && !strings.Contains(name, "|") {
			ifaces = append(ifaces, strings.TrimSpace(name))
		}
	}
	if len(ifaces) != 1 || ifaces[0] != "lo" {
		t.Fatalf("interfaces %q: --network none gave the command more than loopback", ifaces)
	}
	if !slices.Contains(r.Sandbox.Signals, "sandbox_kept_for_network_none") {
		t.Fatalf("signals %v: the bypass was not reported as overridden", r.Sandbox.Signals)
	}
}

// The remount attack of reference sandbox.md Part B §5c.
func TestSandboxRunRemountAttackFails(t *testing.T) {
	dir := sbxDir(t)
	marker := "/etc/execwrap-remount-" + filepath.Base(dir)
	r, _, _ := sbxRun(t, os.Environ(), dir, "--network", "none", "--", "sh", "-c",
		"mount -o remount,rw / ; mount -o remount,bind,rw / ; touch "+marker+"; grep CapEff /proc/self/status")
	if _, err := os.Stat(marker); err == nil {
		os.Remove(marker)
		t.Fatal("remount attack: the sandbox wrote to the host's /etc")
	}
	if !strings.Contains(r.Stdout, "CapEff:\t0000000000000000") {
		t.Fatalf("capabilities left: %q", r.Stdout)
	}
}

func TestSandboxRunTimeoutKillsGrandchildren(t *testing.T) {
	dir := sbxDir(t)
	start := time.Now()
	r, code, _ := sbxRun(t, os.Environ(), dir, "--network", "none", "--timeout", "3s", "--", "sh", "-c",
		`(sh -c 'while :; do date +%s%N > tick.new; mv -f tick.new tick; sleep 0.02; done' &) ; while [ ! -s tick ]; do sleep 0.01; done; sleep 60`)
	if !r.TimedOut || code != 124 || r.ExitCode != 124 {
		t.Fatalf("timed_out %v exit %d/%d", r.TimedOut, code, r.ExitCode)
	}
	if time.Since(start) > 15*time.Second {
		t.Fatalf("took %v", time.Since(start))
	}
	b1, _ := os.ReadFile(filepath.Join(dir, "tick"))
	time.Sleep(300 * time.Millisecond)
	b2, _ := os.ReadFile(filepath.Join(dir, "tick"))
	if len(b1) == 0 || !bytes.Equal(b1, b2) {
		t.Fatalf("grandchild ran=%v and survived=%v", len(b1) > 0, !bytes.Equal(b1, b2))
	}
}

func TestSandboxRunExitCodeAndSignal(t *testing.T) {
	dir := sbxDir(t)
	r, code, _ := sbxRun(t, os.Environ(), dir, "--network", "none", "--", "sh", "-c", "exit 7")
	if code != 7 || r.ExitCode != 7 || r.Signal != nil {
		t.Fatalf("exit %d/%d signal %v", code, r.ExitCode, r.Signal)
	}
	r, code, _ = sbxRun(t, os.Environ(), dir, "--network", "none", "--", "sh", "-c", "kill -KILL $$")
	if code != 137 || r.Signal == nil || *r.Signal != "SIGKILL" {
		t.Fatalf("exit %d signal %v", code, r.Signal)
	}
}

// tokenSpy relays the control API to netproxy and remembers every token
// netproxy hands out, so the test can look for it inside the sandbox.
type tokenSpy struct {
	path   string
	mu     sync.Mutex
	tokens []string
}

func startTokenSpy(t *testing.T, p *Proxy) *tokenSpy {
	s := &tokenSpy{path: filepath.Join(p.Dir, "spy.sock")}
	rp := &httputil.ReverseProxy{
		Rewrite: func(r *httputil.ProxyRequest) {
			r.Out.URL.Scheme, r.Out.URL.Host = "http", "control"
		},
		Transport: p.ControlClient().Transport,
		ModifyResponse: func(resp *http.Response) error {
			if resp.Request.Method != http.MethodPost || !strings.HasSuffix(resp.Request.URL.Path, "/v1/executions") {
				return nil
			}
			b, err := io.ReadAll(resp.Body)
			if err != nil {
				return err
			}
			var reg struct{ Token string }
			if json.Unmarshal(b, &reg) == nil && reg.Token != "" {
				s.mu.Lock()
				s.tokens = append(s.tokens, reg.Token)
				s.mu.Unlock()
			}
			resp.Body = io.NopCloser(bytes.NewReader(b))
			return nil
		},
		FlushInterval: -1,
	}
	ln, err := net.Listen("unix", s.path)
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: rp}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	return s
}

func TestSandboxRunTokenNeverEntersTheSandbox(t *testing.T) {
	p := StartProxy(t, StdConfig())
	up := StartUpstream(t, false)
	spy := startTokenSpy(t, p)
	dir := sbxDir(t)
	script := fmt.Sprintf(`curl -sS -m 10 -o /dev/null %s || exit 21
env; for f in /proc/[0-9]*/environ /proc/[0-9]*/cmdline /proc/[0-9]*/maps; do cat "$f" 2>/dev/null; echo; done
cat /proc/1/mem 2>/dev/null | head -c 100000 | od -c | head -5
exit 0`, up.URL("up.test", "/hello"))
	r, code, _ := sbxRun(t, p.Env(), dir, "--control", spy.path, "--", "sh", "-c", script)
	if code != 0 {
		t.Fatalf("exit %d stderr %s", code, r.Stderr)
	}
	spy.mu.Lock()
	tokens := append([]string(nil), spy.tokens...)
	spy.mu.Unlock()
	if len(tokens) != 1 {
		t.Fatalf("spy saw %d registrations", len(tokens))
	}
	if strings.Contains(r.Stdout, tokens[0]) || strings.Contains(r.Stderr, tokens[0]) {
		t.Fatal("the attribution token is visible inside the sandbox")
	}
	if !strings.Contains(r.Stdout, "http_proxy=http://127.0.0.1:3128") {
		t.Fatalf("the sandbox env lacks the proxy variables:\n%s", r.Stdout)
	}
	// The request did carry it: the audit has the execution id.
	if l := sbxAuditLines(t, p, "up.test"); len(l) != 1 || l[0]["execution_id"] != r.ExecutionID {
		t.Fatalf("audit lines %v", l)
	}
}

// TestSandboxRunUnprivileged runs execwrap as nobody (setpriv): the sandbox
// must work the same for an unprivileged user.
func TestSandboxRunUnprivileged(t *testing.T) {
	if os.Geteuid() != 0 {
		if os.Getenv("CI") != "" {
			t.Fatal("CI runs as root and must exercise the unprivileged run")
		}
		t.Skip("already unprivileged: the other tests cover this user")
	}
	setpriv, err := exec.LookPath("setpriv")
	if err != nil {
		t.Fatal("setpriv (util-linux) is required; run scripts/install-test-deps.sh")
	}
	bdir := sbxDir(t)
	bin := filepath.Join(bdir, "execwrap")
	b, err := os.ReadFile(ExecwrapBin(t))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(bin, b, 0o755); err != nil {
		t.Fatal(err)
	}
	dir := sbxDir(t)
	os.Chown(dir, 65534, 65534)
	marker := "/etc/execwrap-unpriv-" + filepath.Base(dir)
	cmd := exec.Command(setpriv, "--reuid=65534", "--regid=65534", "--clear-groups", "--", bin, "run", "--json",
		"--network", "none", "--timeout", "10s", "--", "sh", "-c",
		"echo ok > f && touch "+marker+"; id -u; grep CapEff /proc/self/status")
	cmd.Dir = dir
	cmd.Env = []string{"PATH=/usr/local/bin:/usr/bin:/bin", "HOME=" + dir, "NETPROXY_HOME=" + dir}
	out, _ := cmd.Output()
	var r sbxResult
	if err := json.Unmarshal(out, &r); err != nil {
		t.Fatalf("no result: %v %s", err, out)
	}
	if _, err := os.Stat(marker); err == nil {
		os.Remove(marker)
		t.Fatal("unprivileged sandbox wrote to /etc")
	}
	if !strings.Contains(r.Stdout, "65534\n") || !strings.Contains(r.Stdout, "CapEff:\t0000000000000000") || r.Sandbox.Tier != "namespaces" {
		t.Fatalf("result %+v", r)
	}
	st, err := os.Stat(filepath.Join(dir, "f"))
	if err != nil {
		t.Fatal(err)
	}
	if sys, ok := st.Sys().(*syscall.Stat_t); !ok || sys.Uid != 65534 {
		t.Fatalf("workdir file not owned by the real uid: %+v", st.Sys())
	}
}

// sbxPendingApproval waits for a pending approval of kind whose JSON
// mentions needle and returns its id.
func sbxPendingApproval(t *testing.T, p *Proxy, kind, needle string) string {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for time.Now().Before(deadline) {
		code, body := p.AdminRequest(t, http.MethodGet, "/api/approvals?status=pending", p.Token)
		if code == http.StatusOK {
			var list struct {
				Approvals []map[string]any `json:"approvals"`
			}
			if json.Unmarshal([]byte(body), &list) == nil {
				for _, a := range list.Approvals {
					raw, _ := json.Marshal(a)
					if a["kind"] == kind && strings.Contains(string(raw), needle) {
						return fmt.Sprint(a["id"])
					}
				}
			}
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Fatalf("no pending %s approval mentioning %q", kind, needle)
	return ""
}

func sbxDecide(t *testing.T, p *Proxy, id, decision string) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodPost, "http://"+p.Admin+"/api/approvals/"+id+"/decision",
		strings.NewReader(`{"decision":"`+decision+`"}`))
	req.Header.Set("Authorization", "Bearer "+p.Token)
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("decide %s %s: %d %s", id, decision, resp.StatusCode, b)
	}
}

type sbxAsync struct {
	r    sbxResult
	code int
	err  error
}

func sbxRunAsync(t *testing.T, env []string, dir string, args ...string) <-chan sbxAsync {
	bin := ExecwrapBin(t)
	ch := make(chan sbxAsync, 1)
	go func() {
		r, code, _, err := sbxExec(bin, env, dir, args...)
		ch <- sbxAsync{r, code, err}
	}()
	return ch
}

func sbxAwait(t *testing.T, ch <-chan sbxAsync) sbxAsync {
	t.Helper()
	got := <-ch
	if got.err != nil {
		t.Fatal(got.err)
	}
	return got
}

// An exec approval goes to netproxy (POST /v1/approvals), appears in the
// admin API, and its decision gates the run.
func TestSandboxRunExecApprovalThroughNetproxy(t *testing.T) {
	cfg := StdConfig()
	cfg.Approvals = true
	p := StartProxy(t, cfg)
	dir := sbxDir(t)
	ch := sbxRunAsync(t, p.Env(), dir, "--control", p.Control, "--network", "none", "--approval-policy", "untrusted",
		"--", "touch", "approved-file")
	sbxDecide(t, p, sbxPendingApproval(t, p, "exec", "approved-file"), "allow_once")
	got := sbxAwait(t, ch)
	if got.code != 0 || got.r.Sandbox.Tier != "namespaces" {
		t.Fatalf("approved run: exit %d result %+v", got.code, got.r)
	}
	if _, err := os.Stat(filepath.Join(dir, "approved-file")); err != nil {
		t.Fatal("the approved command did not run")
	}
	ch = sbxRunAsync(t, p.Env(), dir, "--control", p.Control, "--network", "none", "--approval-policy", "untrusted",
		"--", "touch", "denied-file")
	sbxDecide(t, p, sbxPendingApproval(t, p, "exec", "denied-file"), "deny")
	got = sbxAwait(t, ch)
	if got.code != 11 || got.r.Rejected == "" || len(got.r.Attempts) != 0 {
		t.Fatalf("denied run: exit %d result %+v", got.code, got.r)
	}
	if _, err := os.Stat(filepath.Join(dir, "denied-file")); err == nil {
		t.Fatal("a denied command ran")
	}
}

// A user's deny of a network approval reaches the execution as
// denied_by_user and terminates the command.
func TestSandboxRunDeniedByUserTerminates(t *testing.T) {
	cfg := StdConfig()
	cfg.Approvals = true
	p := StartProxy(t, cfg)
	up := StartUpstream(t, false)
	dir := sbxDir(t)
	start := time.Now()
	ch := sbxRunAsync(t, p.Env(), dir, "--control", p.Control, "--", "sh", "-c",
		"curl -sS -m 30 "+up.URL("other.test", "/hello")+"; sleep 60")
	sbxDecide(t, p, sbxPendingApproval(t, p, "network", "other.test"), "deny")
	got := sbxAwait(t, ch)
	if time.Since(start) > 30*time.Second {
		t.Fatalf("the command was not terminated (took %v)", time.Since(start))
	}
	if !slicesContains(got.r.Sandbox.Signals, "denied_by_user") || got.code == 0 {
		t.Fatalf("exit %d result %+v", got.code, got.r)
	}
	if up.Hits() != 0 {
		t.Fatal("the denied request reached the upstream")
	}
}

// Without netproxy, an approval is asked on the terminal; without a
// terminal it fails closed.
func TestSandboxRunTTYPromptAndFailClosed(t *testing.T) {
	script, err := exec.LookPath("script")
	if err != nil {
		t.Fatal("script (bsdutils) is required to give execwrap a terminal")
	}
	dir := sbxDir(t)
	bin := ExecwrapBin(t)
	missing := filepath.Join(dir, "no-netproxy.sock")
	for answer, wantFile := range map[string]bool{"y": true, "n": false} {
		file := "tty-" + answer
		cmd := exec.Command(script, "-qec", bin+" run --control "+missing+" --network none --approval-policy untrusted -- touch "+file, "/dev/null")
		cmd.Dir = dir
		stdin, _ := cmd.StdinPipe()
		var out SyncBuffer
		cmd.Stdout, cmd.Stderr = &out, &out
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		deadline := time.Now().Add(15 * time.Second)
		for !strings.Contains(out.String(), "[y/N]") && time.Now().Before(deadline) {
			time.Sleep(20 * time.Millisecond)
		}
		io.WriteString(stdin, answer+"\n")
		err := cmd.Wait()
		_, serr := os.Stat(filepath.Join(dir, file))
		if (serr == nil) != wantFile {
			t.Fatalf("answer %q: file exists=%v (err %v)\n%s", answer, serr == nil, err, out.String())
		}
	}
	r, code, _ := sbxRun(t, os.Environ(), dir, "--control", missing, "--network", "none", "--approval-policy", "untrusted", "--", "touch", "no-tty")
	if code != 11 || !strings.Contains(r.Rejected, "failing closed") {
		t.Fatalf("no terminal: exit %d rejected %q", code, r.Rejected)
	}
	if _, err := os.Stat(filepath.Join(dir, "no-tty")); err == nil {
		t.Fatal("ran without any approval")
	}
}

// Under untrusted, a sandbox denial after an approved first attempt is
// retried without the sandbox (reference §7: no second prompt); under
// on-request it is only reported.
func TestSandboxRunEscalatedRetry(t *testing.T) {
	cfg := StdConfig()
	cfg.Approvals = true
	p := StartProxy(t, cfg)
	dir := sbxDir(t)
	// Outside the workdir and not under /tmp (which is private inside).
	outside, err := os.MkdirTemp("/var/tmp", "execwrap-e2e-outside-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(outside) })
	target := filepath.Join(outside, "escalated.txt")
	// --network proxied: an explicit --network none would keep the sandbox
	// for the retry too (TestSandboxRunNetworkNoneSurvivesBypassingRule).
	ch := sbxRunAsync(t, p.Env(), dir, "--control", p.Control, "--network", "proxied", "--approval-policy", "untrusted",
		"--", "sh", "-c", "echo x > "+target)
	sbxDecide(t, p, sbxPendingApproval(t, p, "exec", "escalated.txt"), "allow_once")
	got := sbxAwait(t, ch)
	if got.code != 0 || len(got.r.Attempts) != 2 || !got.r.Attempts[0].Sandboxed || !got.r.Attempts[0].Denied || got.r.Attempts[1].Sandboxed {
		t.Fatalf("exit %d attempts %+v", got.code, got.r.Attempts)
	}
	if _, err := os.Stat(target); err != nil {
		t.Fatal("the escalated retry did not run")
	}
	os.Remove(target)
	r, code, _ := sbxRun(t, p.Env(), dir, "--control", p.Control, "--network", "none", "--approval-policy", "on-request",
		"--", "sh", "-c", "echo x > "+target)
	if code == 0 || len(r.Attempts) != 1 || !r.Sandbox.Denied {
		t.Fatalf("on-request: exit %d attempts %+v sandbox %+v", code, r.Attempts, r.Sandbox)
	}
	if _, err := os.Stat(target); err == nil {
		t.Fatal("on-request retried without the sandbox")
	}
}

func TestSandboxDoctor(t *testing.T) {
	cmd := exec.Command(ExecwrapBin(t), "doctor", "--json")
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("doctor: %v\n%s", err, out)
	}
	var rep struct {
		LandlockABI    int    `json:"landlock_abi"`
		AutoTier       string `json:"auto_tier"`
		NamespacesTier struct {
			OK    bool   `json:"ok"`
			Error string `json:"error"`
		} `json:"namespaces_tier"`
		Sysctls map[string]string `json:"sysctls"`
		Cgroups struct {
			OK     bool     `json:"ok"`
			Kill   bool     `json:"cgroup_kill"`
			Limits []string `json:"limits"`
		} `json:"cgroups"`
	}
	if err := json.Unmarshal(out, &rep); err != nil {
		t.Fatalf("doctor --json: %v\n%s", err, out)
	}
	if rep.AutoTier == "" || rep.Sysctls["user.max_user_namespaces"] == "" {
		t.Fatalf("doctor report incomplete: %s", out)
	}
	// On the CI machine (and this one) user namespaces work.
	if !rep.NamespacesTier.OK || rep.AutoTier != "namespaces" {
		t.Fatalf("namespaces tier: %+v, auto %s", rep.NamespacesTier, rep.AutoTier)
	}
	// As root on the CI machine a run gets its own cgroup, killable at once,
	// with both limits (the v1 pids/memory controllers of a hybrid host count).
	if os.Geteuid() == 0 && (!rep.Cgroups.OK || !rep.Cgroups.Kill || len(rep.Cgroups.Limits) != 2) {
		t.Fatalf("cgroups: %+v", rep.Cgroups)
	}
	text, err := exec.Command(ExecwrapBin(t), "doctor").Output()
	if err != nil || !strings.Contains(string(text), "execwrap run --tier auto uses") || !strings.Contains(string(text), "per-run cgroup") {
		t.Fatalf("doctor text: %v\n%s", err, text)
	}
}
