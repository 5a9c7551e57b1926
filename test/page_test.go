package test

// Issue 26 item 4, the page and the CLI, against the real binaries: the
// signed-out page shows no approval state it cannot know, an exec approval
// card (asked by a real `execwrap run`) shows why, the tool call's
// justification and the proposed amendment with help texts that describe
// what each decision does to a command, `netproxy approvals` finds the
// admin token serve wrote, and serve summarises its policy at start.

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
)

// browserTab starts a headless Chromium tab (120 s budget) whose console
// errors are collected; extra adds browser flags (e.g. a proxy).
func browserTab(t *testing.T, extra ...chromedp.ExecAllocatorOption) (context.Context, *browserConsole) {
	t.Helper()
	opts := []chromedp.ExecAllocatorOption{
		chromedp.ExecPath(browserChromium(t)),
		chromedp.Headless,
		chromedp.NoSandbox,
		chromedp.DisableGPU,
		chromedp.NoFirstRun,
		chromedp.NoDefaultBrowserCheck,
		chromedp.Flag("disable-quic", true),
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true),
		chromedp.Flag("disable-dev-shm-usage", true),
		chromedp.UserDataDir(t.TempDir()),
		chromedp.WindowSize(1366, 900),
	}
	opts = append(opts, extra...)
	allocCtx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	t.Cleanup(cancelAlloc)
	ctx, cancelTab := chromedp.NewContext(allocCtx)
	t.Cleanup(cancelTab)
	ctx, cancelTimeout := context.WithTimeout(ctx, 120*time.Second)
	t.Cleanup(cancelTimeout)
	// Start the browser and subscribe to the console before a page loads.
	if err := chromedp.Do(ctx, chromedp.EmulateViewport(1366, 900)); err != nil {
		t.Fatalf("starting chromium: %v", err)
	}
	console := &browserConsole{}
	console.watch(ctx)
	return ctx, console
}

// pageVisibleText is what a person sees: innerText leaves out every
// element that is not rendered (display: none).
func pageVisibleText(t *testing.T, ctx context.Context) string {
	t.Helper()
	s, err := chromedp.Run(ctx, chromedp.Evaluate[string](`document.body.innerText`))
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// pageWaitPending waits until n approvals are pending (admin API).
func pageWaitPending(t *testing.T, p *Proxy, n int) []browserApproval {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for {
		got := browserApprovals(t, p, "pending")
		if len(got) == n {
			return got
		}
		if time.Now().After(deadline) {
			t.Fatalf("pending approvals: %+v, want %d", got, n)
		}
		time.Sleep(30 * time.Millisecond)
	}
}

// Signed out, with an approval pending, the page shows the sign-in form
// and nothing else: no empty list ("Nothing is waiting for you") and no
// count ("0 pending") it cannot know.
func TestBrowserSignedOutHidesApprovals(t *testing.T) {
	up := StartUpstream(t, false)
	np := StartProxy(t, ProxyConfig{AllowLocal: true, Hosts: map[string][]string{"alpha.test": {"127.0.0.1"}}, Approvals: true})
	waiting := browserProxyGet(np, up.URL("alpha.test", "/hello"))
	pageWaitPending(t, np, 1)

	ctx, console := browserTab(t)
	if err := browserStep(ctx,
		chromedp.Navigate("http://"+np.Admin+"/"),
		chromedp.WaitVisible(chromedp.ID("login-token")),
		chromedp.Poll[chromedp.Void](`document.getElementById("conn").textContent === "signed out"`),
	); err != nil {
		t.Fatalf("loading the signed-out page: %v", err)
	}
	display, err := chromedp.Run(ctx, chromedp.Evaluate[string](`getComputedStyle(document.getElementById("app")).display`))
	if err != nil {
		t.Fatal(err)
	}
	if display != "none" {
		t.Errorf("signed out, the approvals section is rendered (display %q)", display)
	}
	text := pageVisibleText(t, ctx)
	for _, bad := range []string{"Nothing is waiting", "0 pending", "Pending approvals", "Recently blocked"} {
		if strings.Contains(text, bad) {
			t.Errorf("signed out, the page shows %q:\n%s", bad, text)
		}
	}
	if !strings.Contains(text, "Sign in") || !strings.Contains(text, "sign in to see pending approvals") {
		t.Errorf("signed out, the page does not ask to sign in:\n%s", text)
	}
	shot, err := chromedp.Run(ctx, chromedp.CaptureScreenshot())
	if err != nil {
		t.Fatal(err)
	}
	browserSaveArtifact(t, "signed-out.png", shot)

	// Signing in shows the pending approval and its count.
	if err := browserStep(ctx,
		chromedp.SendKeys(chromedp.ID("login-token"), np.Token),
		chromedp.Click(chromedp.CSS(`#login-form button[type="submit"]`)),
		chromedp.WaitVisible(chromedp.CSS("article.card")),
		chromedp.Poll[chromedp.Void](`document.getElementById("pending-count").textContent === "1 pending"`),
	); err != nil {
		t.Fatalf("signing in: %v\n%s", err, pageVisibleText(t, ctx))
	}
	if text := pageVisibleText(t, ctx); strings.Contains(text, "Nothing is waiting") {
		t.Errorf("signed in with an approval pending, the page says nothing is waiting:\n%s", text)
	}
	browserDecide(t, np, pageWaitPending(t, np, 1)[0].ID, "deny")
	if r := browserAwait(t, waiting, 15*time.Second, "the denied request"); r.status != 403 {
		t.Fatalf("denied request: %+v", r)
	}
	// Signing out hides the lists again.
	if err := browserStep(ctx,
		chromedp.Click(chromedp.ID("logout")),
		chromedp.WaitVisible(chromedp.ID("login-token")),
	); err != nil {
		t.Fatal(err)
	}
	if text := pageVisibleText(t, ctx); strings.Contains(text, "Nothing is waiting") || strings.Contains(text, "pending approvals\n") && strings.Contains(text, "0 pending") {
		t.Errorf("after signing out the page still shows the lists:\n%s", text)
	}
	// Signed out, GET /api/session answers 401 by design: Chromium logs
	// that response as a console error. Any other error fails the test.
	var errs []string
	for _, e := range console.Errors() {
		if !strings.Contains(e, "status of 401 (Unauthorized)") {
			errs = append(errs, e)
		}
	}
	if len(errs) > 0 {
		t.Fatalf("the page logged JavaScript errors:\n%s", strings.Join(errs, "\n"))
	}
}

// An exec approval asked by a real `execwrap run` (a forced rm the
// heuristics flag, from a tool call with a justification) shows the
// reason, the justification, the proposed prefix rule and the help texts
// of a command's decisions; "Always allow" saves the rule.
func TestBrowserExecApprovalCard(t *testing.T) {
	np := StartProxy(t, ProxyConfig{AllowLocal: true, Approvals: true})
	work := t.TempDir()
	victim := filepath.Join(work, "build")
	if err := os.MkdirAll(victim, 0o755); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(ExecwrapBin(t), "run", "--control", np.Control, "--network", "none",
		"--approval-policy", "on-request", "--cwd", work,
		"--tool", "shell_command", "--args", `{"command":"rm -rf build","justification":"clean the build output before the release"}`)
	cmd.Dir = work
	cmd.Env = np.Env()
	out := &SyncBuffer{}
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	t.Cleanup(func() {
		if cmd.ProcessState == nil {
			cmd.Process.Kill()
			<-done
		}
	})
	pending := pageWaitPending(t, np, 1)

	ctx, console := browserTab(t)
	if err := browserStep(ctx,
		chromedp.Navigate("http://"+np.Admin+"/#token="+np.Token),
		chromedp.WaitVisible(chromedp.CSS("article.card")),
		chromedp.Poll[chromedp.Void](`document.getElementById("conn").textContent === "live"`),
	); err != nil {
		t.Fatalf("loading the page: %v\nconsole errors: %v", err, console.Errors())
	}
	card, err := chromedp.Run(ctx, chromedp.Evaluate[string](`document.querySelector("article.card").innerText`))
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"rm -rf build", "exec", work,
		"dangerous: forced_rm",                      // the reason execwrap check gives
		"clean the build output before the release", // the tool call's justification
		`prefix_rule(pattern=["rm", "-rf", "build"], decision="allow")`,
		"Run this command this one time",                         // allow_once, for a command
		"rest of the session",                                    // allow_session
		"commands starting with rm -rf build run without asking", // allow_always saves the prefix rule
		"outside the sandbox",                                    // ...and such commands bypass it
		"refused without asking for the rest of the session",     // deny_always
	} {
		if !strings.Contains(card, want) {
			t.Errorf("exec card lacks %q:\n%s", want, card)
		}
	}
	if reason, _ := chromedp.Run(ctx, chromedp.Evaluate[string](`document.querySelector("article.card .f-reason").textContent`)); reason == "—" || reason == "" {
		t.Errorf("exec card has no reason: %q", reason)
	}
	for _, network := range []string{"allow list", "port and protocol"} {
		if strings.Contains(card, network) {
			t.Errorf("exec card says %q (a network card's text):\n%s", network, card)
		}
	}
	shot, err := chromedp.Run(ctx, chromedp.CaptureScreenshot())
	if err != nil {
		t.Fatal(err)
	}
	browserSaveArtifact(t, "exec-card.png", shot)

	// The CLI shows the same context.
	show := NetproxyCmd(t, np, "approvals", "--admin", "http://"+np.Admin, "show", pending[0].ID)
	show.Env = append(show.Env, "NETPROXY_ADMIN_TOKEN="+np.Token)
	so, err := show.CombinedOutput()
	if err != nil {
		t.Fatalf("approvals show: %v\n%s", err, so)
	}
	for _, want := range []string{"dangerous: forced_rm", "justification:", "clean the build output before the release",
		`amendment:`, `prefix_rule(pattern=["rm", "-rf", "build"], decision="allow")`} {
		if !strings.Contains(string(so), want) {
			t.Errorf("approvals show lacks %q:\n%s", want, so)
		}
	}

	// "Always allow" runs the command and saves the proposed rule.
	if err := browserStep(ctx, chromedp.Click(chromedp.CSS(`article.card button[data-decision="allow_always"]`))); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("execwrap run after allow_always: %v\n%s", err, out.String())
		}
	case <-time.After(60 * time.Second):
		t.Fatalf("execwrap run never ended after allow_always:\n%s", out.String())
	}
	if _, err := os.Stat(victim); !os.IsNotExist(err) {
		t.Fatalf("the approved rm did not run: %v\n%s", err, out.String())
	}
	rules, err := os.ReadFile(filepath.Join(np.Home, "rules", "default.rules"))
	if err != nil || !regexp.MustCompile(`prefix_rule\(pattern=\["rm", ?"-rf", ?"build"\], decision="allow"\)`).Match(rules) {
		t.Fatalf("allow_always saved no prefix rule: %v\n%s", err, rules)
	}
	if errs := console.Errors(); len(errs) > 0 {
		t.Fatalf("the page logged JavaScript errors:\n%s", strings.Join(errs, "\n"))
	}
}

// pageStartupOutput is serve's output once it logged "netproxy serving"
// (the listeners answer before the start-up lines are all written).
func pageStartupOutput(t *testing.T, p *Proxy) string {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !strings.Contains(p.Output.String(), "netproxy serving") {
		if time.Now().After(deadline) {
			t.Fatalf("serve never logged that it is serving:\n%s", p.Output.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
	return p.Output.String()
}

// pageCLI runs `netproxy approvals` against p with NETPROXY_ADMIN_TOKEN
// unset: the token must come from $NETPROXY_HOME/admin-token.
func pageCLI(t *testing.T, p *Proxy, args ...string) (int, string) {
	t.Helper()
	cmd := NetproxyCmd(t, p, append([]string{"approvals", "--admin", "http://" + p.Admin}, args...)...)
	env := cmd.Env[:0:0]
	for _, kv := range cmd.Env {
		if !strings.HasPrefix(kv, "NETPROXY_ADMIN_TOKEN=") {
			env = append(env, kv)
		}
	}
	cmd.Env = env
	out, _ := cmd.CombinedOutput()
	return cmd.ProcessState.ExitCode(), string(out)
}

// serve prints a summary of its policy at start, and with a generated
// token (stdout not a terminal) `netproxy approvals` works with no token
// variable, from the file serve wrote.
func TestServePolicySummaryAndTokenFile(t *testing.T) {
	up := StartUpstream(t, false)
	c := StdConfig()
	c.Approvals = true
	p := WriteProxyConfig(t, c)
	p.Token = "" // the variable is set but empty: serve generates a token
	p.Start(t)
	out := pageStartupOutput(t, p)
	for _, want := range []string{
		"netproxy: policy: 2 allow entries, 2 deny entries, mode full\n",
		"netproxy: unlisted hosts wait for approval for up to 30 s (approvals page or `netproxy approvals`); no decision denies; a request is told \"pending\" after 25 s and retries\n",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("serve's start-up output lacks %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, "nothing is allowed") {
		t.Errorf("with two allow entries serve says nothing is allowed:\n%s", out)
	}

	waiting := browserProxyGet(p, up.URL("other.test", "/hello"))
	var id string
	deadline := time.Now().Add(15 * time.Second)
	for id == "" {
		code, list := pageCLI(t, p, "list")
		if code != 0 {
			t.Fatalf("approvals list with the token file only: exit %d\n%s", code, list)
		}
		for _, line := range strings.Split(list, "\n") {
			if f := strings.Fields(line); len(f) > 4 && strings.HasPrefix(f[3], "other.test:") {
				id = f[0]
			}
		}
		if id == "" && time.Now().After(deadline) {
			t.Fatalf("approvals list never showed other.test:\n%s", list)
		}
		time.Sleep(50 * time.Millisecond)
	}
	if code, o := pageCLI(t, p, "decide", id, "allow_once"); code != 0 {
		t.Fatalf("approvals decide with the token file only: exit %d\n%s", code, o)
	}
	if r := browserAwait(t, waiting, 15*time.Second, "the request allowed from the CLI"); r.err != nil || r.status != 200 || r.body != Hello {
		t.Fatalf("allowed request: %+v", r)
	}

	// A wrong token file is named in the error.
	if err := os.WriteFile(filepath.Join(p.Home, "admin-token"), []byte("0123456789abcdef\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if code, o := pageCLI(t, p, "list"); code != 1 || !strings.Contains(o, "admin token from "+filepath.Join(p.Home, "admin-token")+" rejected") {
		t.Fatalf("stale token file: exit %d\n%s", code, o)
	}

	// With approvals off, serve says unlisted hosts are blocked.
	q := StartProxy(t, ProxyConfig{AllowLocal: true})
	qout := pageStartupOutput(t, q)
	if want := "netproxy: unlisted hosts are blocked (approvals.enabled = false)\n"; !strings.Contains(qout, want) {
		t.Errorf("serve with approvals off lacks %q:\n%s", want, qout)
	}
	if want := "nothing is allowed until it is listed in [network.domains] or approved"; !strings.Contains(qout, want) {
		t.Errorf("serve with empty lists lacks %q:\n%s", want, qout)
	}
}

// The README's sample configuration is valid and means what the README
// says: a listed host passes the lists, a denied one is refused, and any
// other host waits for approval (nothing is allowed until listed or
// approved).
func TestSampleConfig(t *testing.T) {
	sample := filepath.Join(repoRoot(), "configs", "sample.toml")
	p := WriteProxyConfig(t, ProxyConfig{}) // only for its NETPROXY_HOME
	run := func(args ...string) (int, string, string) {
		cmd := NetproxyCmd(t, p, args...)
		var stdout, stderr strings.Builder
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		cmd.Run()
		return cmd.ProcessState.ExitCode(), stdout.String(), stderr.String()
	}
	if code, out, errs := run("config", "validate", sample); code != 0 || !strings.Contains(out, "OK") || errs != "" {
		t.Fatalf("config validate %s: exit %d\n%s%s", sample, code, out, errs)
	}
	for _, tc := range []struct {
		host     string
		code     int
		decision string
	}{
		{"example.com:443", 11, `"decision": "ask"`},
		{"pastebin.com:443", 10, `"reason": "denied"`},
	} {
		if code, out, errs := run("check", "--config", sample, "--json", tc.host); code != tc.code || !strings.Contains(out, tc.decision) {
			t.Errorf("check %s with the sample: exit %d (want %d)\n%s%s", tc.host, code, tc.code, out, errs)
		}
	}
	readme, err := os.ReadFile(filepath.Join(repoRoot(), "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"netproxy serve --config configs/sample.toml", "Nothing is allowed until it is listed or approved"} {
		if !strings.Contains(string(readme), want) {
			t.Errorf("README.md lacks %q", want)
		}
	}
}
