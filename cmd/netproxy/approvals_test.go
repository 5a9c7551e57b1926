package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/netproxy/netproxy/approvalsvc"
	"github.com/netproxy/netproxy/hostpolicy"
	"github.com/netproxy/netproxy/internal/admin"
	"github.com/netproxy/netproxy/internal/webui"
)

const cliTestToken = "cli-test-token"

// testQueue is the real approval service behind the real admin router,
// UI and event hub, served over real sockets; approvals are created by
// real decider calls (as the proxy makes them) waiting in goroutines.
type testQueue struct {
	svc *approvalsvc.Service
	hub *webui.Hub
	srv *httptest.Server
	ctx context.Context

	mu      sync.Mutex
	results map[string]chan hostpolicy.Decision // by host
}

func newTestQueue(t *testing.T) *testQueue {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	svc, err := approvalsvc.New(approvalsvc.Options{
		Settings:     approvalsvc.Settings{Enabled: true, Reviewer: "user", Policy: "on-request", Timeout: time.Minute},
		UserReviewer: true,
	})
	if err != nil {
		t.Fatal(err)
	}
	q := &testQueue{svc: svc, hub: webui.NewHub(webui.HubOptions{Heartbeat: time.Second}), ctx: ctx, results: map[string]chan hostpolicy.Decision{}}
	adm := admin.New(cliTestToken)
	webui.New(webui.Options{Auth: webui.NewAuth(cliTestToken, 0, nil), Hub: q.hub}).Mount(adm)
	for _, p := range approvalsvc.APIPatterns {
		adm.HandleAPI(p, svc.APIHandler())
	}
	webui.RelayApprovals(ctx, svc, q.hub)
	q.srv = httptest.NewServer(adm)
	t.Cleanup(func() { cancel(); svc.Close(); q.hub.Close(); q.srv.Close() })
	return q
}

// add makes a request to host:port wait for review and returns its
// approval id once it is pending.
func (q *testQueue) add(t *testing.T, host string, port uint16) string {
	t.Helper()
	res := make(chan hostpolicy.Decision, 1)
	q.mu.Lock()
	q.results[host] = res
	q.mu.Unlock()
	go func() {
		req := hostpolicy.Request{Host: host, Port: port, Protocol: hostpolicy.ProtoHTTP, Method: "GET", Client: "127.0.0.1:5555"}
		base := hostpolicy.Decision{Verdict: hostpolicy.Deny, Reason: hostpolicy.ReasonNotAllowed, Source: hostpolicy.SourceBaseline, Host: host, Port: port}
		res <- q.svc.Decide(q.ctx, req, base)
	}()
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		for _, a := range q.svc.Approvals(approvalsvc.StatusPending) {
			if a.Host == host {
				return a.ID
			}
		}
		time.Sleep(5 * time.Millisecond)
	}
	t.Fatalf("no pending approval for %s", host)
	return ""
}

// decision returns the outcome of host's request once it is released.
func (q *testQueue) decision(t *testing.T, host string) hostpolicy.Decision {
	t.Helper()
	q.mu.Lock()
	res := q.results[host]
	q.mu.Unlock()
	select {
	case d := <-res:
		return d
	case <-time.After(10 * time.Second):
		t.Fatalf("request to %s never released", host)
		return hostpolicy.Decision{}
	}
}

// syncBuffer is a bytes.Buffer safe for a writer goroutine and a reader.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

func newCLI(stdin io.Reader, token string, tty bool) (*approvalsCLI, *syncBuffer, *syncBuffer) {
	out, errb := &syncBuffer{}, &syncBuffer{}
	return &approvalsCLI{
		stdin: stdin, stdout: out, stderr: errb, tty: tty, now: time.Now, retryDelay: 50 * time.Millisecond,
		getenv: func(k string) string {
			if k == adminTokenEnv {
				return token
			}
			return ""
		},
	}, out, errb
}

func runCLI(t *testing.T, token string, args ...string) (int, string, string) {
	t.Helper()
	cli, out, errb := newCLI(strings.NewReader(""), token, false)
	return runBuiltCLI(cli, out, errb, args...)
}

// runBuiltCLI runs cli (with a 20 s limit) and returns its exit code,
// stdout and stderr.
func runBuiltCLI(cli *approvalsCLI, out, errb *syncBuffer, args ...string) (int, string, string) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	code := cli.run(ctx, args)
	return code, out.String(), errb.String()
}

func TestApprovalsListShowDecide(t *testing.T) {
	q := newTestQueue(t)
	old := q.add(t, "alpha.test", 8080)
	time.Sleep(1100 * time.Millisecond) // distinct creation seconds for the ordering check
	recent := q.add(t, "bravo.test", 443)

	code, out, errs := runCLI(t, cliTestToken, "list", "--admin", q.srv.URL)
	if code != 0 {
		t.Fatalf("list: %d %s", code, errs)
	}
	for _, want := range []string{"ID", "AGE", "alpha.test:8080", "bravo.test:443", "network", "http", old, recent} {
		if !strings.Contains(out, want) {
			t.Fatalf("list output lacks %q:\n%s", want, out)
		}
	}
	if strings.Index(out, recent) > strings.Index(out, old) {
		t.Fatalf("list is not newest first:\n%s", out)
	}

	code, out, _ = runCLI(t, cliTestToken, "--admin="+q.srv.URL, "list", "--json")
	var parsed struct{ Approvals []approvalsvc.Approval }
	if code != 0 || json.Unmarshal([]byte(out), &parsed) != nil || len(parsed.Approvals) != 2 {
		t.Fatalf("list --json: %d %s", code, out)
	}

	code, out, _ = runCLI(t, cliTestToken, "--admin", q.srv.URL, "show", old)
	for _, want := range []string{"alpha.test:8080", "not_allowed", "pending", "default"} {
		if code != 0 || !strings.Contains(out, want) {
			t.Fatalf("show lacks %q (code %d):\n%s", want, code, out)
		}
	}
	if code, _, errs := runCLI(t, cliTestToken, "--admin", q.srv.URL, "show", "nope"); code != 1 || !strings.Contains(errs, "no approval with id") {
		t.Fatalf("show unknown: %d %s", code, errs)
	}

	code, out, errs = runCLI(t, cliTestToken, "--admin", q.srv.URL, "decide", old, "allow-session")
	if code != 0 || !strings.Contains(out, old+": allow_session") {
		t.Fatalf("decide: %d %q %q", code, out, errs)
	}
	if d := q.decision(t, "alpha.test"); !d.Allowed() {
		t.Fatalf("request after allow_session: %+v", d)
	}
	code, _, errs = runCLI(t, cliTestToken, "--admin", q.srv.URL, "decide", old, "deny")
	if code != 1 || !strings.Contains(errs, "not pending") {
		t.Fatalf("second decide: %d %s", code, errs)
	}
	code, _, _ = runCLI(t, cliTestToken, "--admin", q.srv.URL, "decide", recent, "deny")
	if d := q.decision(t, "bravo.test"); code != 0 || d.Allowed() {
		t.Fatalf("request after deny: %d %+v", code, d)
	}
	if code, out, _ := runCLI(t, cliTestToken, "--admin", q.srv.URL, "list"); code != 0 || !strings.Contains(out, "no pending approvals") {
		t.Fatalf("empty list: %d %s", code, out)
	}
}

func TestApprovalsUsageErrors(t *testing.T) {
	for _, args := range [][]string{
		{}, {"frobnicate"}, {"show"}, {"decide", "x"}, {"decide", "x", "maybe"}, {"list", "--bogus"}, {"list", "--admin"},
		{"--admin", "ftp://x", "list"},
	} {
		if code, _, errs := runCLI(t, cliTestToken, args...); code != 2 || errs == "" {
			t.Errorf("%v: exit %d, stderr %q", args, code, errs)
		}
	}
	if code, out, _ := runCLI(t, "", "--help"); code != 0 || !strings.Contains(out, "watch") {
		t.Errorf("--help: %d", code)
	}
	code, _, errs := runCLI(t, "", "list")
	if code != 2 || !strings.Contains(errs, "NETPROXY_ADMIN_TOKEN is not set") {
		t.Errorf("no token: %d %s", code, errs)
	}
}

func TestApprovalsClearErrors(t *testing.T) {
	q := newTestQueue(t)
	code, _, errs := runCLI(t, "wrong-token", "--admin", q.srv.URL, "list")
	if code != 1 || !strings.Contains(errs, "admin token rejected") || !strings.Contains(errs, "set NETPROXY_ADMIN_TOKEN to") {
		t.Fatalf("wrong token: %d %s", code, errs)
	}
	if strings.Contains(errs, "wrong-token") {
		t.Fatal("the error echoes the token")
	}
	// A port nothing listens on.
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	code, _, errs = runCLI(t, cliTestToken, "--admin", "http://"+addr, "list")
	if code != 1 || !strings.Contains(errs, "cannot reach the admin API at http://"+addr) || !strings.Contains(errs, "netproxy serve") {
		t.Fatalf("unreachable: %d %s", code, errs)
	}
	code, _, errs = runCLI(t, cliTestToken, "--admin", "http://"+addr, "watch")
	if code != 1 || !strings.Contains(errs, "cannot reach") {
		t.Fatalf("watch unreachable: %d %s", code, errs)
	}
}

// waitOutput waits until buf holds want.
func waitOutput(t *testing.T, buf *syncBuffer, want string) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !strings.Contains(buf.String(), want) {
		if time.Now().After(deadline) {
			t.Fatalf("output never showed %q; got:\n%s", want, buf.String())
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func startWatch(t *testing.T, q *testQueue, tty bool) (io.WriteCloser, *syncBuffer, *syncBuffer, func() int) {
	t.Helper()
	pr, pw := io.Pipe()
	cli, out, errb := newCLI(pr, cliTestToken, tty)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan int, 1)
	go func() { done <- cli.run(ctx, []string{"watch", "--admin", q.srv.URL}) }()
	stop := func() int {
		cancel()
		pw.Close()
		select {
		case code := <-done:
			return code
		case <-time.After(10 * time.Second):
			t.Fatal("watch did not stop on cancel")
			return -1
		}
	}
	t.Cleanup(func() { cancel(); pw.Close() })
	return pw, out, errb, stop
}

func TestApprovalsWatchLines(t *testing.T) {
	q := newTestQueue(t)
	before := q.add(t, "alpha.test", 80)
	stdin, out, errb, stop := startWatch(t, q, false)
	waitOutput(t, out, "approval "+before+": network alpha.test:80")
	waitOutput(t, out, `"ID DECISION"`)
	live := q.add(t, "bravo.test", 8443)
	waitOutput(t, out, "approval "+live+": network bravo.test:8443")
	fmt.Fprintln(stdin, live+" allow_once")
	waitOutput(t, out, "you decided "+live+": allow_once")
	if d := q.decision(t, "bravo.test"); !d.Allowed() {
		t.Fatalf("bravo after allow_once: %+v", d)
	}
	fmt.Fprintln(stdin, live+" maybe")
	waitOutput(t, errb, `unknown decision "maybe"`)
	fmt.Fprintln(stdin, live+" deny")
	waitOutput(t, errb, live+" is not pending any more")
	// Decided elsewhere: reported as such.
	if code, _, _ := runCLI(t, cliTestToken, "--admin", q.srv.URL, "decide", before, "deny"); code != 0 {
		t.Fatal("decide from another CLI failed")
	}
	waitOutput(t, out, "decided "+before+" alpha.test:80: deny")
	if code := stop(); code != 0 {
		t.Fatalf("watch exit %d: %s", code, errb.String())
	}
}

func TestApprovalsWatchPromptsOnTTY(t *testing.T) {
	q := newTestQueue(t)
	stdin, out, errb, stop := startWatch(t, q, true)
	waitOutput(t, out, "watching ")
	p1 := q.add(t, "alpha.test", 80)
	p2 := q.add(t, "bravo.test", 81)
	waitOutput(t, out, "decide "+p1+" alpha.test:80? "+watchPrompt)
	fmt.Fprintln(stdin, "x")
	waitOutput(t, out, `unknown answer "x"`)
	fmt.Fprintln(stdin, "s")
	waitOutput(t, out, "decide "+p2+" bravo.test:81?")
	if d := q.decision(t, "alpha.test"); !d.Allowed() || !strings.HasSuffix(d.Override, "allow_session") {
		t.Fatalf("p1 after s: %+v", d)
	}
	fmt.Fprintln(stdin, "") // skip
	waitOutput(t, out, "skipped "+p2+" (still pending)")
	p3 := q.add(t, "charlie.test", 82)
	waitOutput(t, out, "decide "+p3+" charlie.test:82?")
	fmt.Fprintln(stdin, "d")
	waitOutput(t, out, "you decided "+p3+": deny")
	if d := q.decision(t, "charlie.test"); d.Allowed() {
		t.Fatalf("p3 after d: %+v", d)
	}
	if code := stop(); code != 0 {
		t.Fatalf("watch exit %d: %s", code, errb.String())
	}
}

func TestApprovalsWatchReconnects(t *testing.T) {
	q := newTestQueue(t)
	_, out, errb, stop := startWatch(t, q, false)
	waitOutput(t, out, "watching ")
	// Drop the stream's connection (a restart or network blip); the
	// approval created meanwhile must show once the watcher is back.
	q.srv.CloseClientConnections()
	away := q.add(t, "alpha.test", 80)
	waitOutput(t, errb, "event stream ended")
	waitOutput(t, out, "approval "+away+": network alpha.test:80")
	after := q.add(t, "bravo.test", 80)
	waitOutput(t, out, "approval "+after+": network bravo.test:80")
	if n := strings.Count(out.String(), "approval "+away+":"); n != 1 {
		t.Fatalf("%s printed %d times", away, n)
	}
	if code := stop(); code != 0 {
		t.Fatalf("watch exit %d", code)
	}
}
