package test

// The approvals page in a real headless Chromium against the real netproxy
// binary: a proxied request shows up live as a pending approval, "Allow for
// session" releases it, the next request passes without a new approval, a
// decision made elsewhere disappears from every open page, and the page logs
// no JavaScript errors. A screenshot lands in test/artifacts/.

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
)

// browserResult is a proxied request's outcome (requests wait while their
// approval is pending, so they run in goroutines).
type browserResult struct {
	status int
	body   string
	err    error
}

func browserProxyGet(p *Proxy, target string) <-chan browserResult {
	out := make(chan browserResult, 1)
	go func() {
		client := p.HTTPClient(false)
		client.Timeout = 50 * time.Second
		resp, err := client.Get(target)
		if err != nil {
			out <- browserResult{err: err}
			return
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		out <- browserResult{status: resp.StatusCode, body: string(b)}
	}()
	return out
}

func browserAwait(t *testing.T, ch <-chan browserResult, d time.Duration, what string) browserResult {
	t.Helper()
	select {
	case r := <-ch:
		return r
	case <-time.After(d):
		t.Fatalf("%s: no answer within %s", what, d)
		return browserResult{}
	}
}

type browserApproval struct {
	ID, Host, Status, Decision, Reviewer, Protocol string
	Port                                           int
	// Waiting is how many requests wait on the review (SPEC §5).
	Waiting *int
}

// browserApprovals lists approvals through the admin API ("" for all).
func browserApprovals(t *testing.T, p *Proxy, status string) []browserApproval {
	t.Helper()
	path := "/api/approvals"
	if status != "" {
		path += "?status=" + status
	}
	code, body := p.AdminRequest(t, "GET", path, p.Token)
	var v struct{ Approvals []browserApproval }
	if code != 200 || json.Unmarshal([]byte(body), &v) != nil {
		t.Fatalf("GET %s: %d %s", path, code, body)
	}
	return v.Approvals
}

// browserDecide posts a decision with the bearer token (as the CLI does).
func browserDecide(t *testing.T, p *Proxy, id, decision string) {
	t.Helper()
	req, _ := http.NewRequest("POST", "http://"+p.Admin+"/api/approvals/"+id+"/decision", strings.NewReader(`{"decision":"`+decision+`"}`))
	req.Header.Set("Authorization", "Bearer "+p.Token)
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode/100 != 2 {
		t.Fatalf("deciding %s: %d", id, resp.StatusCode)
	}
}

// browserRegister registers an execution on the control socket and
// returns its id.
func browserRegister(t *testing.T, p *Proxy, spec string) string {
	t.Helper()
	resp, err := p.ControlClient().Post("http://netproxy/v1/executions", "application/json", strings.NewReader(spec))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var r struct {
		ExecutionID string `json:"execution_id"`
	}
	if resp.StatusCode != 201 || json.NewDecoder(resp.Body).Decode(&r) != nil || r.ExecutionID == "" {
		t.Fatalf("register: status %d", resp.StatusCode)
	}
	return r.ExecutionID
}

// browserRevoke ends an execution.
func browserRevoke(t *testing.T, p *Proxy, id string) {
	t.Helper()
	req, _ := http.NewRequest("DELETE", "http://netproxy/v1/executions/"+id, nil)
	resp, err := p.ControlClient().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 204 {
		t.Fatalf("DELETE execution: %d", resp.StatusCode)
	}
}

// browserChromium finds the browser binary; the test command installs it
// (scripts/install-test-deps.sh).
func browserChromium(t *testing.T) string {
	t.Helper()
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	t.Fatal("no chromium on PATH: run scripts/install-test-deps.sh as root (installs the Debian package chromium)")
	return ""
}

// browserConsole collects every console message and uncaught exception of
// a tab that is an error.
type browserConsole struct {
	mu     sync.Mutex
	errors []string
}

func (c *browserConsole) watch(ctx context.Context) {
	msgs := chromedp.Console(ctx)
	go func() {
		for m, err := range msgs {
			if err != nil {
				return
			}
			if m.IsException() || m.Type == chromedp.ConsoleError {
				c.mu.Lock()
				c.errors = append(c.errors, m.String())
				c.mu.Unlock()
			}
		}
	}()
}

func (c *browserConsole) Errors() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]string(nil), c.errors...)
}

func TestBrowserApprovalsPage(t *testing.T) {
	up := StartUpstream(t, false)
	// alpha.test and bravo.test resolve to the upstream's 127.0.0.1 and are
	// in no list: every request to them is an allow-list miss for review.
	np := StartProxy(t, ProxyConfig{
		AllowLocal: true,
		Hosts:      map[string][]string{"alpha.test": {"127.0.0.1"}, "bravo.test": {"127.0.0.1"}},
		Approvals:  true,
	})

	ctx, console := browserTab(t)

	// The link `netproxy serve` prints for a generated token carries it in
	// the fragment; the page trades it for the session cookie.
	pageURL := "http://" + np.Admin + "/#token=" + url.QueryEscape(np.Token)
	err := chromedp.Do(ctx,
		chromedp.Navigate(pageURL),
		chromedp.WaitVisible(chromedp.ID("app")),
		chromedp.WaitVisible(chromedp.ID("pending-empty")),
		chromedp.Poll[chromedp.Void](`document.getElementById("conn").textContent === "live"`),
	)
	if err != nil {
		t.Fatalf("loading the page: %v\nconsole errors: %v", err, console.Errors())
	}
	loc, _ := chromedp.Run(ctx, chromedp.Location())
	if strings.Contains(loc, "token") {
		t.Fatalf("the token stayed in the address bar: %s", loc)
	}
	emptyText, _ := chromedp.Run(ctx, chromedp.Text(chromedp.ID("pending-empty")))
	if !strings.Contains(emptyText, "Nothing is waiting") {
		t.Fatalf("empty state says %q", emptyText)
	}
	// A marker that a reload would wipe: the approval must arrive live.
	if err := browserStep(ctx, chromedp.Evaluate[chromedp.Void](`window.__noReload = 1`)); err != nil {
		t.Fatal(err)
	}

	// A registered execution in the default session owns unattributed
	// requests (SPEC §4.3): it shows up live, and its context on the card.
	reg := browserRegister(t, np, `{"session_id":"default","environment_id":"default","command":["curl","-sS","http://alpha.test/hello"],"cwd":"/work/project"}`)
	if err := browserStep(ctx, chromedp.Poll[chromedp.Void](`document.getElementById("exec-list").textContent.includes("curl -sS")`)); err != nil {
		t.Fatalf("the registered execution never appeared: %v", err)
	}

	// A request to a host outside the allow list waits for review...
	first := browserProxyGet(np, up.URL("alpha.test", "/hello"))
	card := chromedp.CSS(`article.card`)
	if err := browserStep(ctx, chromedp.WaitVisible(card)); err != nil {
		t.Fatalf("the pending approval never appeared: %v", err)
	}
	text, err := chromedp.Run(ctx, chromedp.Text(card))
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{fmt.Sprintf("alpha.test:%d", up.Port), "http", "Allow for session", "Always deny", "default",
		"curl -sS http://alpha.test/hello", "/work/project", reg} {
		if !strings.Contains(text, want) {
			t.Errorf("approval card lacks %q:\n%s", want, text)
		}
	}
	if v, err := chromedp.Run(ctx, chromedp.Evaluate[int](`window.__noReload || 0`)); err != nil || v != 1 {
		t.Fatalf("the page reloaded to show the approval (marker %d, %v)", v, err)
	}
	select {
	case r := <-first:
		t.Fatalf("the request was answered before any decision: %+v", r)
	default:
	}
	if up.Hits() != 0 {
		t.Fatal("the upstream was reached before the decision")
	}
	pending := browserApprovals(t, np, "pending")
	if len(pending) != 1 {
		t.Fatalf("pending approvals: %+v", pending)
	}

	// A second open page shows the same approval.
	ctx2, cancelTab2 := chromedp.NewContext(ctx)
	defer cancelTab2()
	console2 := &browserConsole{}
	if err := chromedp.Do(ctx2); err != nil {
		t.Fatal(err)
	}
	console2.watch(ctx2)
	if err := browserStep(ctx2, chromedp.Navigate("http://"+np.Admin+"/"), chromedp.WaitVisible(chromedp.CSS("article.card"))); err != nil {
		t.Fatalf("second page (cookie session): %v", err)
	}

	// Screenshot while the decision is on screen: what a reviewer sees.
	shot, err := chromedp.Run(ctx, chromedp.CaptureScreenshot())
	if err != nil {
		t.Fatal(err)
	}
	browserSaveArtifact(t, "approvals-page-pending.png", shot)

	// ...until the reviewer clicks "Allow for session".
	if err := browserStep(ctx, chromedp.Click(chromedp.CSS(`article.card button[data-decision="allow_session"]`))); err != nil {
		t.Fatal(err)
	}
	r := browserAwait(t, first, 15*time.Second, "the first request after Allow for session")
	if r.err != nil || r.status != 200 || r.body != Hello {
		t.Fatalf("first request: %+v", r)
	}
	// The card disappears from both pages.
	for i, c := range []context.Context{ctx, ctx2} {
		if err := browserStep(c, chromedp.WaitNotPresent(chromedp.CSS("article.card")), chromedp.WaitVisible(chromedp.ID("pending-empty"))); err != nil {
			t.Fatalf("page %d still shows the decided approval: %v", i+1, err)
		}
	}
	if err := browserStep(ctx, chromedp.Poll[chromedp.Void](`document.getElementById("decided-list").textContent.includes("allowed for session")`)); err != nil {
		t.Fatalf("recent decisions do not list the allow: %v", err)
	}

	// The same host, port and protocol passes again with no new approval.
	r = browserAwait(t, browserProxyGet(np, up.URL("alpha.test", "/hello")), 15*time.Second, "the second request")
	if r.err != nil || r.status != 200 {
		t.Fatalf("second request: %+v", r)
	}
	if up.Hits() != 2 {
		t.Fatalf("upstream hits %d, want 2", up.Hits())
	}
	if all := browserApprovals(t, np, ""); len(all) != 1 {
		t.Fatalf("the second request created a new approval: %+v", all)
	}
	if n, _ := chromedp.Run(ctx, chromedp.Evaluate[int](`document.querySelectorAll("article.card").length`)); n != 0 {
		t.Fatalf("%d cards on the page after the cached request", n)
	}

	// A decision made elsewhere (the API, as the CLI does) clears every page.
	second := browserProxyGet(np, up.URL("bravo.test", "/hello"))
	for i, c := range []context.Context{ctx, ctx2} {
		if err := browserStep(c, chromedp.WaitVisible(chromedp.CSS("article.card"))); err != nil {
			t.Fatalf("page %d never showed the bravo.test approval: %v", i+1, err)
		}
	}
	pending = browserApprovals(t, np, "pending")
	if len(pending) != 1 || pending[0].Host != "bravo.test" {
		t.Fatalf("pending: %+v", pending)
	}
	browserDecide(t, np, pending[0].ID, "deny")
	if r := browserAwait(t, second, 15*time.Second, "the denied request"); r.err != nil || r.status != 403 {
		t.Fatalf("denied request: %+v", r)
	}
	for i, c := range []context.Context{ctx, ctx2} {
		if err := browserStep(c, chromedp.WaitNotPresent(chromedp.CSS("article.card"))); err != nil {
			t.Fatalf("page %d still shows the approval denied elsewhere: %v", i+1, err)
		}
	}
	// The denied request is listed under recently blocked.
	if err := browserStep(ctx, chromedp.Poll[chromedp.Void](`document.getElementById("blocked-body").textContent.includes("bravo.test")`)); err != nil {
		t.Fatalf("recently blocked does not list bravo.test: %v", err)
	}

	// Ending the execution removes it from the page.
	browserRevoke(t, np, reg)
	if err := browserStep(ctx, chromedp.WaitVisible(chromedp.ID("exec-empty"))); err != nil {
		t.Fatalf("the ended execution stayed on the page: %v", err)
	}

	shot, err = chromedp.Run(ctx, chromedp.CaptureScreenshot())
	if err != nil {
		t.Fatal(err)
	}
	browserSaveArtifact(t, "approvals-page-after.png", shot)

	if errs := append(console.Errors(), console2.Errors()...); len(errs) > 0 {
		t.Fatalf("the page logged JavaScript errors:\n%s", strings.Join(errs, "\n"))
	}
}

// browserStep runs actions on a started tab with a 20 s limit, so a page
// that never shows what the test waits for fails fast.
func browserStep(ctx context.Context, actions ...chromedp.Action[chromedp.Void]) error {
	ctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	return chromedp.Do(ctx, actions...)
}

// browserSaveArtifact writes a test artifact under test/artifacts/.
func browserSaveArtifact(t *testing.T, name string, data []byte) {
	t.Helper()
	if err := os.MkdirAll("artifacts", 0o755); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join("artifacts", name)
	if err := os.WriteFile(path, data, 0o644); err != nil {
		t.Fatal(err)
	}
	t.Logf("saved %s", path)
}

// TestBrowserCLIReviewer drives `netproxy approvals` (the shell side of the
// reviewer UI) against a real `netproxy serve`.
func TestBrowserCLIReviewer(t *testing.T) {
	up := StartUpstream(t, false)
	np := StartProxy(t, ProxyConfig{AllowLocal: true, Hosts: map[string][]string{"alpha.test": {"127.0.0.1"}}, Approvals: true})
	admin := "http://" + np.Admin
	cli := func(token string, args ...string) (int, string) {
		cmd := NetproxyCmd(t, np, append([]string{"approvals", "--admin", admin}, args...)...)
		cmd.Env = append(cmd.Env, "NETPROXY_ADMIN_TOKEN="+token)
		out, _ := cmd.CombinedOutput()
		return cmd.ProcessState.ExitCode(), string(out)
	}
	if code, out := cli(np.Token, "list"); code != 0 || !strings.Contains(out, "no pending approvals") {
		t.Fatalf("list: %d %s", code, out)
	}
	if code, out := cli("wrong", "list"); code != 1 || !strings.Contains(out, "admin token rejected") || !strings.Contains(out, "NETPROXY_ADMIN_TOKEN") {
		t.Fatalf("wrong token: %d %s", code, out)
	}

	// watch prints the approval as it arrives and takes "ID DECISION" lines.
	cmd := NetproxyCmd(t, np, "approvals", "--admin", admin, "watch")
	cmd.Env = append(cmd.Env, "NETPROXY_ADMIN_TOKEN="+np.Token)
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	out := &SyncBuffer{}
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { cmd.Process.Kill(); cmd.Wait() }()
	waitFor := func(want string) {
		t.Helper()
		deadline := time.Now().Add(15 * time.Second)
		for !strings.Contains(out.String(), want) {
			if time.Now().After(deadline) {
				t.Fatalf("watch never printed %q:\n%s", want, out.String())
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	waitFor("watching " + admin)
	res := browserProxyGet(np, up.URL("alpha.test", "/hello"))
	waitFor(fmt.Sprintf("network alpha.test:%d (http)", up.Port))
	pending := browserApprovals(t, np, "pending")
	if len(pending) != 1 {
		t.Fatalf("pending: %+v", pending)
	}
	fmt.Fprintf(stdin, "%s allow_once\n", pending[0].ID)
	if r := browserAwait(t, res, 15*time.Second, "the request approved from watch"); r.err != nil || r.status != 200 || r.body != Hello {
		t.Fatalf("approved request: %+v", r)
	}
	waitFor("you decided " + pending[0].ID + ": allow_once")
	if code, out := cli(np.Token, "show", pending[0].ID); code != 0 || !strings.Contains(out, "allow_once") {
		t.Fatalf("show decided: %d %s", code, out)
	}
}

// TestBrowserGeneratedTokenLink: with no token configured and a terminal
// on stdout, serve generates one and prints the page link that signs in
// with it (without a terminal it goes to a file: TestAdminGeneratedTokenGoesToFile).
func TestBrowserGeneratedTokenLink(t *testing.T) {
	p := WriteProxyConfig(t, ProxyConfig{AllowLocal: true, Approvals: true})
	p.Token = "" // the token variable is set but empty: serve must generate one
	out := startOnTerminal(t, p)
	if _, err := os.Stat(filepath.Join(p.Home, "admin-token")); !os.IsNotExist(err) {
		t.Fatalf("on a terminal the token must not be written to a file: %v", err)
	}
	var link string
	for _, line := range strings.Split(out, "\n") {
		if i := strings.Index(line, "http://"+p.Admin+"/#token="); i >= 0 {
			link = strings.TrimSpace(line[i:])
		}
	}
	if link == "" {
		t.Fatalf("serve printed no approvals link with a token on a terminal:\n%s", out)
	}
	token := link[strings.Index(link, "#token=")+len("#token="):]
	if len(token) < 32 {
		t.Fatalf("generated token %d chars, want ≥ 32 (128 bits hex)", len(token))
	}
	if code, _ := p.AdminRequest(t, "GET", "/api/approvals?status=pending", token); code != 200 {
		t.Fatalf("the printed token does not open /api: %d", code)
	}
	if code, _ := p.AdminRequest(t, "GET", "/api/approvals?status=pending", ""); code != 401 {
		t.Fatalf("/api without a token: %d", code)
	}
	// The same token signs the page in through the login route.
	client := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	resp, err := client.Get("http://" + p.Admin + "/login?token=" + url.QueryEscape(token))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusSeeOther || resp.Header.Get("Location") != "/" || !strings.Contains(resp.Header.Get("Set-Cookie"), "HttpOnly") {
		t.Fatalf("login with the printed token: %d %q", resp.StatusCode, resp.Header.Get("Location"))
	}
}
