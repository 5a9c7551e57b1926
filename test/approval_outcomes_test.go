package test

// Issue 26 item 1, SPEC §3.7 and §5: a client whose request the approval
// service took part in is told the outcome (x-proxy-approval,
// x-proxy-approval-id, the JSON body's "approval", Retry-After for
// pending); it waits at most approvals.client_wait (or its
// x-proxy-approval-wait) while the review stays open; a retry joins the
// review or gets its result; an allow_once decided after every requester
// left admits one identical retry. Real clients: curl, Python, Go's
// http.Client, a SOCKS5 client and headless Chromium.

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/cdproto/cdp"
	"github.com/chromedp/cdproto/network"
	"github.com/chromedp/chromedp"
)

// outcomeConfig is the approvals fixture: alpha/bravo/charlie.test resolve
// to 127.0.0.1 and are in no list; approvals (extra: more [approvals] keys)
// by a user with client_wait 2s.
func outcomeConfig(extra string) ProxyConfig {
	cfg := StdConfig()
	cfg.Approvals = true
	for _, h := range []string{"alpha.test", "bravo.test", "charlie.test", "page.test"} {
		cfg.Hosts[h] = []string{"127.0.0.1"}
	}
	cfg.Domains = append(cfg.Domains, [2]string{"page.test", "allow"})
	// Extra lands right after the [approvals] table: these keys are its own.
	if !strings.Contains(extra, "client_wait") {
		extra = "client_wait = \"2s\"\n" + extra
	}
	cfg.Extra = extra
	return cfg
}

// outcomeProxy starts the fixture; timeout replaces approvals.timeout
// ("" keeps the harness's 30s).
func outcomeProxy(t *testing.T, extra, timeout string) *Proxy {
	t.Helper()
	p := WriteProxyConfig(t, outcomeConfig(extra))
	if timeout != "" {
		b, err := os.ReadFile(p.ConfigPath)
		if err != nil {
			t.Fatal(err)
		}
		s := strings.Replace(string(b), "timeout = \"30s\"", "timeout = "+strconv.Quote(timeout), 1)
		if err := os.WriteFile(p.ConfigPath, []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	p.Start(t)
	return p
}

// outcomeBody is the JSON block body's approval object.
type outcomeBody struct {
	Reason, Decision, Source, Cause string
	Approval                        *struct {
		ID        string `json:"id"`
		Outcome   string `json:"outcome"`
		Retryable bool   `json:"retryable"`
	}
}

// outcomeAnswer is one answer as a client saw it.
type outcomeAnswer struct {
	status  int
	header  http.Header
	body    string
	elapsed time.Duration
}

func (a outcomeAnswer) parsed(t *testing.T) outcomeBody {
	t.Helper()
	var b outcomeBody
	if err := json.Unmarshal([]byte(a.body), &b); err != nil {
		t.Fatalf("block body is not JSON: %v\n%s", err, a.body)
	}
	return b
}

// expectOutcome checks the headers and body of a block the approval
// service took part in (SPEC §3.7).
func expectOutcome(t *testing.T, what string, a outcomeAnswer, outcome string) string {
	t.Helper()
	if a.status != 403 {
		t.Fatalf("%s: status %d, want 403\n%s", what, a.status, a.body)
	}
	if got := a.header.Get("X-Proxy-Approval"); got != outcome {
		t.Fatalf("%s: x-proxy-approval %q, want %q (headers %v)", what, got, outcome, a.header)
	}
	id := a.header.Get("X-Proxy-Approval-Id")
	ra := a.header.Get("Retry-After")
	b := a.parsed(t)
	if b.Approval == nil || b.Approval.Outcome != outcome || b.Approval.ID != id || b.Approval.Retryable != (outcome == "pending") {
		t.Fatalf("%s: body approval %+v, want outcome %s id %q retryable %t\n%s", what, b.Approval, outcome, id, outcome == "pending", a.body)
	}
	switch outcome {
	case "pending":
		if ra != "5" || b.Decision != "ask" || b.Source != "decider" || b.Reason != "not_allowed" || !strings.HasPrefix(id, "apv_") {
			t.Fatalf("%s: pending: retry-after %q, body %s, id %q", what, ra, a.body, id)
		}
	default:
		if ra != "" {
			t.Fatalf("%s: %s sends Retry-After %q", what, outcome, ra)
		}
		if b.Decision != "deny" || b.Source != "decider" {
			t.Fatalf("%s: %s body %s", what, outcome, a.body)
		}
	}
	return id
}

// curlAnswer runs curl -i through the proxy and parses its answer.
func curlAnswer(t *testing.T, p *Proxy, args ...string) outcomeAnswer {
	t.Helper()
	start := time.Now()
	r := Curl(t, append([]string{"-i", "-x", "http://" + p.HTTP}, args...)...)
	el := time.Since(start)
	if r.Exit != 0 {
		t.Fatalf("curl %v: exit %d %s", args, r.Exit, r.Stderr)
	}
	resp, err := http.ReadResponse(bufio.NewReader(strings.NewReader(r.Stdout)), nil)
	if err != nil {
		t.Fatalf("curl output: %v\n%s", err, r.Stdout)
	}
	body := r.Stdout[strings.Index(r.Stdout, "\r\n\r\n")+4:]
	return outcomeAnswer{status: resp.StatusCode, header: resp.Header, body: body, elapsed: el}
}

// outcomePending returns the pending approval for host (failing unless
// exactly one).
func outcomePending(t *testing.T, p *Proxy, host string) browserApproval {
	t.Helper()
	var found []browserApproval
	for _, a := range browserApprovals(t, p, "pending") {
		if a.Host == host {
			found = append(found, a)
		}
	}
	if len(found) != 1 {
		t.Fatalf("pending approvals for %s: %+v", host, found)
	}
	return found[0]
}

func TestApprovalOutcomeCurl(t *testing.T) {
	up := StartUpstream(t, false)
	tlsUp := StartUpstream(t, true)
	p := outcomeProxy(t, "", "")
	u := up.URL("alpha.test", "/hello")

	// The first request waits client_wait (2s), then is told pending.
	a := curlAnswer(t, p, u)
	id := expectOutcome(t, "first request", a, "pending")
	if a.elapsed < 1500*time.Millisecond || a.elapsed > 10*time.Second {
		t.Fatalf("first request answered after %s, want about client_wait (2s)", a.elapsed)
	}
	// The review stays open, shown with nobody waiting.
	pa := outcomePending(t, p, "alpha.test")
	if pa.ID != id || pa.Waiting == nil || *pa.Waiting != 0 {
		t.Fatalf("pending approval %+v (waiting %v), want id %s waiting 0", pa, pa.Waiting, id)
	}
	cli := func(args ...string) string {
		cmd := NetproxyCmd(t, p, append([]string{"approvals", "--admin", "http://" + p.Admin}, args...)...)
		cmd.Env = append(cmd.Env, "NETPROXY_ADMIN_TOKEN="+p.Token)
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("netproxy approvals %v: %v\n%s", args, err, out)
		}
		return string(out)
	}
	if out := cli("show", id); !regexp.MustCompile(`(?m)^waiting:\s+0$`).MatchString(out) {
		t.Fatalf("netproxy approvals show does not say waiting: 0:\n%s", out)
	}
	if out := cli("list"); !regexp.MustCompile(`WAITING(.|\n)*alpha\.test:\d+\s+http\s+0\s`).MatchString(out) {
		t.Fatalf("netproxy approvals list does not show waiting 0:\n%s", out)
	}

	// x-proxy-approval-wait: 0 answers at once and joins the open review.
	a = curlAnswer(t, p, "-H", "x-proxy-approval-wait: 0", u)
	if id2 := expectOutcome(t, "poll with wait 0", a, "pending"); id2 != id {
		t.Fatalf("the retry opened review %s instead of joining %s", id2, id)
	}
	if a.elapsed > time.Second {
		t.Fatalf("wait 0 answered after %s", a.elapsed)
	}
	// A value that is not whole seconds is refused, naming the header.
	r := Curl(t, "-x", "http://"+p.HTTP, "-H", "x-proxy-approval-wait: soon", "-w", "\n%{http_code}", u)
	if !strings.HasSuffix(r.Stdout, "\n400") || !strings.Contains(r.Stdout, "x-proxy-approval-wait") {
		t.Fatalf("bad x-proxy-approval-wait: %q", r.Stdout)
	}

	// allow_once decided after everyone left admits exactly one retry.
	browserDecide(t, p, id, "allow_once")
	a = curlAnswer(t, p, u)
	if a.status != 200 || a.body != Hello || up.Hits() != 1 {
		t.Fatalf("retry after allow_once: %d %q (hits %d)", a.status, a.body, up.Hits())
	}
	a = curlAnswer(t, p, "-H", "x-proxy-approval-wait: 0", u)
	if id3 := expectOutcome(t, "second retry after allow_once", a, "pending"); id3 == id {
		t.Fatal("allow_once admitted a second request")
	}
	if up.Hits() != 1 {
		t.Fatalf("upstream hits %d after the second retry", up.Hits())
	}

	// CONNECT: the same headers on the 403 (curl -v shows them).
	r = Curl(t, "-v", "-k", "-x", "http://"+p.HTTP, "--proxy-header", "x-proxy-approval-wait: 0", tlsUp.URL("bravo.test", "/hello"))
	lower := strings.ToLower(r.Stderr)
	for _, want := range []string{"< http/1.1 403", "< x-proxy-approval: pending", "< x-proxy-approval-id: apv_", "< retry-after: 5"} {
		if !strings.Contains(lower, want) {
			t.Fatalf("CONNECT answer lacks %q:\n%s", want, r.Stderr)
		}
	}
	if r.Exit == 0 {
		t.Fatal("curl succeeded through a pending CONNECT")
	}
}

func TestApprovalOutcomePython(t *testing.T) {
	py, err := exec.LookPath("python3")
	if err != nil {
		t.Fatal("python3 is required (scripts/install-test-deps.sh)")
	}
	up := StartUpstream(t, false)
	p := outcomeProxy(t, "", "")
	script := `import json, sys, urllib.request, urllib.error
opener = urllib.request.build_opener(urllib.request.ProxyHandler({"http": sys.argv[1]}))
req = urllib.request.Request(sys.argv[2], headers={"x-proxy-approval-wait": "0"})
try:
    r = opener.open(req, timeout=10)
    print(json.dumps({"status": r.status, "text": r.read().decode()}))
except urllib.error.HTTPError as e:
    body = json.loads(e.read())
    print(json.dumps({"status": e.code, "approval": e.headers.get("x-proxy-approval"),
        "id": e.headers.get("x-proxy-approval-id"), "retry_after": e.headers.get("retry-after"),
        "outcome": body["approval"]["outcome"], "retryable": body["approval"]["retryable"]}))
`
	run := func() map[string]any {
		out, err := exec.Command(py, "-c", script, "http://"+p.HTTP, up.URL("alpha.test", "/hello")).CombinedOutput()
		var v map[string]any
		if err != nil || json.Unmarshal(out, &v) != nil {
			t.Fatalf("python: %v\n%s", err, out)
		}
		return v
	}
	v := run()
	if v["status"] != 403.0 || v["approval"] != "pending" || v["retry_after"] != "5" || v["outcome"] != "pending" || v["retryable"] != true {
		t.Fatalf("python saw %v", v)
	}
	id, _ := v["id"].(string)
	browserDecide(t, p, id, "allow_session")
	if v = run(); v["status"] != 200.0 || v["text"] != Hello {
		t.Fatalf("python after allow_session: %v", v)
	}
}

// goGetOutcome is one Go http.Client request through the proxy.
func goGetOutcome(t *testing.T, p *Proxy, u, wait string) outcomeAnswer {
	t.Helper()
	req, _ := http.NewRequest("GET", u, nil)
	if wait != "" {
		req.Header.Set("X-Proxy-Approval-Wait", wait)
	}
	start := time.Now()
	resp, err := p.HTTPClient(false).Do(req)
	if err != nil {
		t.Fatalf("GET %s: %v", u, err)
	}
	defer resp.Body.Close()
	var b strings.Builder
	bufio.NewReader(resp.Body).WriteTo(&b)
	return outcomeAnswer{status: resp.StatusCode, header: resp.Header, body: b.String(), elapsed: time.Since(start)}
}

func TestApprovalOutcomeGoClientDenied(t *testing.T) {
	up := StartUpstream(t, false)
	p := outcomeProxy(t, "", "")
	u := up.URL("alpha.test", "/hello")
	id := expectOutcome(t, "Go client", goGetOutcome(t, p, u, "0"), "pending")
	browserDecide(t, p, id, "deny")
	// The requester had left: its retry gets the reviewer's answer...
	a := goGetOutcome(t, p, u, "0")
	if got := expectOutcome(t, "retry after deny", a, "denied"); got != id {
		t.Fatalf("denied answer names %q, want %s", got, id)
	}
	if b := a.parsed(t); b.Reason != "not_allowed" || b.Cause != "reviewer" {
		t.Fatalf("denied body %s", a.body)
	}
	// ...once: the next request asks again.
	if got := expectOutcome(t, "next request", goGetOutcome(t, p, u, "0"), "pending"); got == id {
		t.Fatal("the deny was given twice")
	}
	// A requester that waits gets the decision itself.
	ch := make(chan outcomeAnswer, 1)
	go func() { ch <- goGetOutcome(t, p, up.URL("bravo.test", "/hello"), "") }()
	deadline := time.Now().Add(5 * time.Second)
	for {
		if l := browserApprovals(t, p, "pending"); len(l) == 2 {
			for _, x := range l {
				if x.Host == "bravo.test" {
					if x.Waiting == nil || *x.Waiting != 1 {
						t.Fatalf("a waiting requester shows as waiting %v", x.Waiting)
					}
					browserDecide(t, p, x.ID, "deny")
				}
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the bravo.test review never appeared")
		}
		time.Sleep(20 * time.Millisecond)
	}
	expectOutcome(t, "waiting requester denied", <-ch, "denied")
	if up.Hits() != 0 {
		t.Fatalf("upstream hits %d", up.Hits())
	}
}

func TestApprovalOutcomeOverloaded(t *testing.T) {
	up := StartUpstream(t, false)
	p := outcomeProxy(t, "max_pending = 1\nmax_pending_per_session = 1\n", "")
	expectOutcome(t, "first review", goGetOutcome(t, p, up.URL("alpha.test", "/hello"), "0"), "pending")
	a := goGetOutcome(t, p, up.URL("bravo.test", "/hello"), "")
	expectOutcome(t, "one review too many", a, "overloaded")
	if b := a.parsed(t); b.Reason != "approvals_overloaded" || a.header.Get("X-Proxy-Approval-Id") != "" {
		t.Fatalf("overloaded: %s %v", a.body, a.header)
	}
	if a.elapsed > time.Second {
		t.Fatalf("overloaded answered after %s, want at once", a.elapsed)
	}
}

func TestApprovalOutcomeTimedOut(t *testing.T) {
	up := StartUpstream(t, false)
	// client_wait longer than the review: the requester sees the timeout.
	p := outcomeProxy(t, "client_wait = \"25s\"\n", "3s")
	b, _ := os.ReadFile(p.ConfigPath)
	if !strings.Contains(string(b), `timeout = "3s"`) {
		t.Fatalf("config: %s", b)
	}
	u := up.URL("alpha.test", "/hello")
	a := goGetOutcome(t, p, u, "10")
	id := expectOutcome(t, "waiting through the timeout", a, "timed_out")
	if a.elapsed < 2500*time.Millisecond {
		t.Fatalf("timed out after %s", a.elapsed)
	}
	// The decided list says timeout, and names no reviewer who decided.
	found := false
	for _, x := range browserApprovals(t, p, "decided") {
		if x.ID == id {
			found = true
			if x.Decision != "timeout" || x.Reviewer != "" {
				t.Fatalf("timed-out approval shows decision %q reviewer %q", x.Decision, x.Reviewer)
			}
		}
	}
	if !found {
		t.Fatalf("approval %s not among the decided", id)
	}
	// A review whose requester left times out; its retry is told so.
	id = expectOutcome(t, "left before the timeout", goGetOutcome(t, p, u, "0"), "pending")
	time.Sleep(3500 * time.Millisecond)
	if got := expectOutcome(t, "retry after the timeout", goGetOutcome(t, p, u, "0"), "timed_out"); got != id {
		t.Fatalf("timed_out names %q, want %s", got, id)
	}
	if up.Hits() != 0 {
		t.Fatalf("upstream hits %d", up.Hits())
	}
}

// SOCKS5 has no headers: a pending review answers 0x02 after client_wait,
// and the review stays open; an allow_once decided then admits one retry.
func TestApprovalOutcomeSOCKS5(t *testing.T) {
	up := StartUpstream(t, false)
	p := outcomeProxy(t, "", "")
	start := time.Now()
	rep, _ := SocksConnect(t, p.SOCKS, nil, 0x01, "charlie.test", up.Port)
	if el := time.Since(start); rep != 0x02 || el > 10*time.Second {
		t.Fatalf("SOCKS5 reply 0x%02x after %s, want 0x02 after client_wait", rep, el)
	}
	pa := outcomePending(t, p, "charlie.test")
	if pa.Protocol != "socks5-tcp" || pa.Waiting == nil || *pa.Waiting != 0 {
		t.Fatalf("SOCKS5 review %+v waiting %v", pa, pa.Waiting)
	}
	browserDecide(t, p, pa.ID, "allow_once")
	if rep, _ := SocksConnect(t, p.SOCKS, nil, 0x01, "charlie.test", up.Port); rep != 0x00 {
		t.Fatalf("SOCKS5 retry after allow_once: 0x%02x", rep)
	}
}

// x-proxy-approval-wait is hop-by-hop: no upstream sees it, plain or
// intercepted.
func TestApprovalWaitHeaderNeverForwarded(t *testing.T) {
	up := StartUpstream(t, false)
	p := outcomeProxy(t, "", "")
	a := curlAnswer(t, p, "-H", "x-proxy-approval-wait: 3", up.URL("up.test", "/hello"))
	if a.status != 200 || up.Hits() != 1 {
		t.Fatalf("plain: %d %q", a.status, a.body)
	}
	if v := up.LastHeaders().Values("X-Proxy-Approval-Wait"); len(v) != 0 {
		t.Fatalf("the plain upstream saw x-proxy-approval-wait %q", v)
	}

	tlsUp := StartUpstream(t, true)
	cfg := StdConfig()
	cfg.Mode = "limited"
	cfg.Extra = "[mitm]\nenabled = true\nca_cert = \"ca.pem\"\nca_key = \"ca-key.pem\"\nupstream_ca = \"upstream.pem\"\n"
	mp := WriteProxyConfig(t, cfg)
	writeMITMFiles(t, mp.Dir, tlsUp)
	mp.Start(t)
	r := Curl(t, "-x", "http://"+mp.HTTP, "--cacert", filepath.Join(mp.Dir, "ca.pem"), "-H", "x-proxy-approval-wait: 3", tlsUp.URL("up.test", "/hello"))
	if r.Exit != 0 || r.Stdout != Hello || tlsUp.Hits() != 1 {
		t.Fatalf("intercepted: exit %d %q %s", r.Exit, r.Stdout, r.Stderr)
	}
	if v := tlsUp.LastHeaders().Values("X-Proxy-Approval-Wait"); len(v) != 0 {
		t.Fatalf("the intercepted upstream saw x-proxy-approval-wait %q", v)
	}
}

// outcomeEvents hands every event of kind ev to record, under mu, until
// ctx ends.
func outcomeEvents[E any](ctx context.Context, mu *sync.Mutex, ev cdp.Event[E], record func(E)) {
	events := chromedp.Events(ctx, ev)
	go func() {
		for e, err := range events {
			if err != nil {
				return
			}
			mu.Lock()
			record(e)
			mu.Unlock()
		}
	}()
}

// Chromium: a page whose subresource needs approval fails fast and
// explained (the 403 carries x-proxy-approval: pending), well before the
// browser's own 30 s limit; once approved, a reload loads it.
func TestBrowserApprovalOutcome(t *testing.T) {
	mux := http.NewServeMux()
	var port int
	mux.HandleFunc("/page", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/html")
		fmt.Fprintf(w, `<!doctype html><title>outcome</title><body><p id="s">waiting</p>
<script>window.subDone = false;</script>
<script src="http://alpha.test:%d/sub.js" onload="window.subDone='loaded'" onerror="window.subDone='failed'"></script>
</body>`, port)
	})
	mux.HandleFunc("/sub.js", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/javascript")
		fmt.Fprint(w, `window.subLoaded = true;`)
	})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port = ln.Addr().(*net.TCPAddr).Port
	srv := &http.Server{Handler: mux}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })

	p := outcomeProxy(t, "", "")
	ctx, console := browserTab(t, chromedp.ProxyServer("http://"+p.HTTP))
	// What Chromium received on the wire, per request: a cross-origin JSON
	// answer to a script is blocked by ORB before the page sees it, so the
	// raw answer (responseReceivedExtraInfo) is what proves the headers.
	var mu sync.Mutex
	urls := map[network.RequestID]string{}
	raw := map[network.RequestID]*network.EventResponseReceivedExtraInfo{}
	var failed []string
	ectx, stopEvents := context.WithCancel(ctx)
	defer stopEvents()
	outcomeEvents(ectx, &mu, network.RequestWillBeSent, func(ev network.EventRequestWillBeSent) { urls[ev.RequestID] = ev.Request.URL })
	outcomeEvents(ectx, &mu, network.ResponseReceivedExtraInfo, func(ev network.EventResponseReceivedExtraInfo) { raw[ev.RequestID] = &ev })
	outcomeEvents(ectx, &mu, network.LoadingFailed, func(ev network.EventLoadingFailed) { failed = append(failed, ev.ErrorText) })
	pageURL := fmt.Sprintf("http://page.test:%d/page", port)
	start := time.Now()
	if err := browserStep(ctx, chromedp.Navigate(pageURL), chromedp.Poll[chromedp.Void](`window.subDone !== false`)); err != nil {
		t.Fatalf("loading the page: %v", err)
	}
	el := time.Since(start)
	done, _ := chromedp.Run(ctx, chromedp.Evaluate[string](`String(window.subDone)`))
	if done != "failed" || el > 10*time.Second {
		t.Fatalf("subresource %s after %s, want failed well under 30s", done, el)
	}
	// What Chromium received for the subresource: the explained 403.
	var sub *network.EventResponseReceivedExtraInfo
	deadline := time.Now().Add(5 * time.Second)
	for sub == nil && time.Now().Before(deadline) {
		mu.Lock()
		for id, ev := range raw {
			if strings.Contains(urls[id], "alpha.test") {
				sub = ev
			}
		}
		mu.Unlock()
		time.Sleep(20 * time.Millisecond)
	}
	mu.Lock()
	failures := fmt.Sprint(failed)
	mu.Unlock()
	if sub == nil {
		t.Fatalf("Chromium received no answer for the subresource (failures %s)", failures)
	}
	hdr := http.Header{}
	for k, v := range sub.Headers {
		hdr.Set(k, fmt.Sprint(v))
	}
	if sub.StatusCode != 403 || hdr.Get("X-Proxy-Approval") != "pending" || hdr.Get("Retry-After") != "5" {
		t.Fatalf("Chromium's subresource answer: %d %v", sub.StatusCode, hdr)
	}
	t.Logf("subresource failed after %s (%s) with 403 x-proxy-approval: pending", el, failures)
	pa := outcomePending(t, p, "alpha.test")
	if pa.ID != hdr.Get("X-Proxy-Approval-Id") {
		t.Fatalf("pending %s, header names %s", pa.ID, hdr.Get("X-Proxy-Approval-Id"))
	}
	// The reviewer's page (same browser; loopback bypasses the proxy) shows
	// that nobody waits on the review — live: a request that joins shows
	// up, and goes again when it is told pending.
	page := ctx
	// Chromium's own background requests are reviewed too: find the card.
	card := `article.card[data-id="` + pa.ID + `"]`
	cardSays := func(want string) {
		t.Helper()
		js := `(document.querySelector(` + strconv.Quote(card+" .f-waiting") + `)||{}).textContent?.startsWith(` + strconv.Quote(want) + `)`
		if err := browserStep(page, chromedp.Poll[chromedp.Void](js)); err != nil {
			got, _ := chromedp.Run(page, chromedp.Evaluate[string](`String((document.querySelector(`+strconv.Quote(card)+`)||{}).textContent)`))
			t.Fatalf("the card's Waiting says %q, want %q: %v\nconsole: %v", got, want, err, console.Errors())
		}
	}
	if err := browserStep(page, chromedp.Navigate("http://"+p.Admin+"/#token="+p.Token), chromedp.WaitVisible(chromedp.CSS(card))); err != nil {
		t.Fatalf("approvals page: %v", err)
	}
	cardSays("nobody")
	joined := make(chan outcomeAnswer, 1)
	go func() { joined <- goGetOutcome(t, p, fmt.Sprintf("http://alpha.test:%d/sub.js", port), "") }()
	cardSays("1 request is waiting")
	expectOutcome(t, "a request that joined", <-joined, "pending")
	cardSays("nobody")
	shot, err := chromedp.Run(page, chromedp.Screenshot(chromedp.CSS(card)))
	if err != nil {
		t.Fatal(err)
	}
	browserSaveArtifact(t, "approvals-page-nobody-waiting.png", shot)

	browserDecide(t, p, pa.ID, "allow_session")
	if err := browserStep(ctx, chromedp.Navigate(pageURL), chromedp.Poll[chromedp.Void](`window.subDone !== false`)); err != nil {
		t.Fatalf("loading the page again: %v", err)
	}
	if v, _ := chromedp.Run(ctx, chromedp.Evaluate[bool](`window.subLoaded === true`)); !v {
		done, _ := chromedp.Run(ctx, chromedp.Evaluate[string](`String(window.subDone)`))
		t.Fatalf("after approval the reload did not load the subresource (%s)", done)
	}
	_ = console
}
