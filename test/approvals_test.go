package test

// End-to-end tests of the approval service through the real netproxy
// binary: real listeners, a real HTTP client through the proxy, real hook
// processes and real (loopback) Guardian endpoints.

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// apprProxy wraps the shared harness's Proxy with approval helpers.
type apprProxy struct {
	*Proxy
	t *testing.T
}

// apprHosts are the unlisted names the approval tests use; all resolve to
// 127.0.0.1 (the local guard is off, as in StdConfig).
var apprHosts = []string{"alpha.test", "bravo.test", "hookallow.test", "hookdeny.test", "gallow.test", "gdeny.test", "gslow.test", "ggarbage.test"}

// apprStart starts a proxy whose [approvals] table is approvalsTOML (plus
// extra TOML such as [guardian]); home "" means a fresh NETPROXY_HOME.
func apprStart(t *testing.T, approvalsTOML, extra, home string) *apprProxy {
	t.Helper()
	c := StdConfig()
	for _, h := range apprHosts {
		c.Hosts[h] = []string{"127.0.0.1"}
	}
	c.Extra = extra
	p := WriteProxyConfig(t, c)
	b, err := os.ReadFile(p.ConfigPath)
	if err != nil {
		t.Fatal(err)
	}
	const disabled = "[approvals]\nenabled = false\n"
	if !strings.Contains(string(b), disabled) {
		t.Fatalf("harness config changed shape; cannot place [approvals]:\n%s", b)
	}
	if err := os.WriteFile(p.ConfigPath, []byte(strings.Replace(string(b), disabled, approvalsTOML, 1)), 0o644); err != nil {
		t.Fatal(err)
	}
	if home != "" {
		p.Home = home
	}
	p.Start(t)
	return &apprProxy{Proxy: p, t: t}
}

type apprReply struct {
	status int
	body   string
	err    error
}

// get fetches u through the proxy.
func (p *apprProxy) get(u string) apprReply {
	c := p.HTTPClient(false)
	c.Timeout = 30 * time.Second
	resp, err := c.Get(u)
	if err != nil {
		return apprReply{err: err}
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return apprReply{status: resp.StatusCode, body: string(b)}
}

func (p *apprProxy) goGet(u string) <-chan apprReply {
	ch := make(chan apprReply, 1)
	go func() { ch <- p.get(u) }()
	return ch
}

func (p *apprProxy) api(method, path, body string) (int, []byte) {
	p.t.Helper()
	req, _ := http.NewRequest(method, "http://"+p.Admin+path, strings.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+p.Token)
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		p.t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, b
}

type apprPending struct {
	ID, Host string
	Port     int
}

func (p *apprProxy) pending() []apprPending {
	p.t.Helper()
	code, b := p.api("GET", "/api/approvals?status=pending", "")
	if code != 200 {
		p.t.Fatalf("pending list: %d %s", code, b)
	}
	var out struct{ Approvals []apprPending }
	if err := json.Unmarshal(b, &out); err != nil {
		p.t.Fatal(err)
	}
	return out.Approvals
}

func (p *apprProxy) waitPending(host string) apprPending {
	p.t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		for _, a := range p.pending() {
			if a.Host == host {
				return a
			}
		}
		time.Sleep(20 * time.Millisecond)
	}
	p.t.Fatalf("no pending approval for %s", host)
	return apprPending{}
}

func (p *apprProxy) decide(id, decision string) {
	p.t.Helper()
	if code, b := p.api("POST", "/api/approvals/"+id+"/decision", fmt.Sprintf(`{"decision":%q}`, decision)); code != 200 {
		p.t.Fatalf("decision: %d %s", code, b)
	}
}

func apprAwait(t *testing.T, ch <-chan apprReply) apprReply {
	t.Helper()
	select {
	case r := <-ch:
		return r
	case <-time.After(20 * time.Second):
		t.Fatal("request still blocked")
		return apprReply{}
	}
}

func apprExpect(t *testing.T, what string, r apprReply, status int) {
	t.Helper()
	if r.err != nil || r.status != status {
		t.Fatalf("%s: got %d %v %q, want %d", what, r.status, r.err, r.body, status)
	}
}

func TestApprovalsEndToEnd(t *testing.T) {
	u1, u2 := StartUpstream(t, false), StartUpstream(t, false)
	up, up2 := u1.Port, u2.Port
	userCfg := "[approvals]\nenabled = true\nreviewer = \"user\"\npolicy = \"on-request\"\ntimeout = \"2s\"\n"

	t.Run("user", func(t *testing.T) {
		p := apprStart(t, userCfg, "", "")
		alpha := fmt.Sprintf("http://alpha.test:%d/x", up)
		ch := p.goGet(alpha)
		a := p.waitPending("alpha.test")
		select {
		case r := <-ch:
			t.Fatalf("request completed while pending: %+v", r)
		case <-time.After(300 * time.Millisecond):
		}
		p.decide(a.ID, "allow_session")
		r := apprAwait(t, ch)
		apprExpect(t, "released request", r, 200)
		if r.body != "upstream GET /x" {
			t.Fatalf("body %q", r.body)
		}
		// The session cache serves the next request: no pending entry.
		apprExpect(t, "cached request", p.get(alpha), 200)
		if n := len(p.pending()); n != 0 {
			t.Fatalf("%d pending after a cached request", n)
		}
		// Another port asks again; deny → 403 and the upstream is not hit.
		before := u1.Hits()
		ch = p.goGet(fmt.Sprintf("http://alpha.test:%d/x", up2))
		a = p.waitPending("alpha.test")
		if a.Port != up2 {
			t.Fatalf("pending port %d, want %d", a.Port, up2)
		}
		p.decide(a.ID, "deny")
		r = apprAwait(t, ch)
		apprExpect(t, "denied request", r, 403)
		var blocked map[string]any
		json.Unmarshal([]byte(r.body), &blocked)
		if blocked["reason"] != "not_allowed" || blocked["source"] != "decider" || blocked["decision"] != "deny" {
			t.Fatalf("deny body %v", blocked)
		}
		// Timeout (2 s) → 403, entry gone.
		start := time.Now()
		r = p.get(fmt.Sprintf("http://bravo.test:%d/x", up))
		apprExpect(t, "timed-out request", r, 403)
		if el := time.Since(start); el < 1500*time.Millisecond {
			t.Fatalf("answered after %v, before the review timeout", el)
		}
		if n := len(p.pending()); n != 0 {
			t.Fatalf("%d pending after timeout", n)
		}
		if u1.Hits() != before {
			t.Fatal("a denied request reached the upstream")
		}
		// Concurrent waiters share one review.
		var chans []<-chan apprReply
		for range 20 {
			chans = append(chans, p.goGet(fmt.Sprintf("http://bravo.test:%d/y", up2)))
		}
		a = p.waitPending("bravo.test")
		time.Sleep(500 * time.Millisecond)
		if n := len(p.pending()); n != 1 {
			t.Fatalf("%d pending entries for 20 concurrent requests", n)
		}
		p.decide(a.ID, "allow_once")
		for _, ch := range chans {
			apprExpect(t, "concurrent waiter", apprAwait(t, ch), 200)
		}
		// A denied host never becomes pending.
		apprExpect(t, "deny-listed host", p.get(fmt.Sprintf("http://denied.test:%d/x", up)), 403)
		if n := len(p.pending()); n != 0 {
			t.Fatal("deny-listed host became pending")
		}
	})

	t.Run("hooks", func(t *testing.T) {
		hook := filepath.Join(t.TempDir(), "hook.sh")
		os.WriteFile(hook, []byte(`#!/bin/sh
in=$(cat)
case "$in" in
  *'"host":"hookallow.test"'*) echo '{"decision":"allow","message":"hook says yes"}' ;;
  *'"host":"hookdeny.test"'*) echo '{"decision":"deny","message":"hook says no"}' ;;
  *) echo '{"decision":"none"}' ;;
esac
`), 0o755)
		p := apprStart(t, userCfg+fmt.Sprintf("[[approvals.hooks]]\ncommand = [%q]\ntimeout = \"5s\"\n", hook), "", "")
		apprExpect(t, "hook allow", p.get(fmt.Sprintf("http://hookallow.test:%d/", up)), 200)
		apprExpect(t, "hook deny", p.get(fmt.Sprintf("http://hookdeny.test:%d/", up)), 403)
		if n := len(p.pending()); n != 0 {
			t.Fatalf("hook-decided requests created %d pending entries", n)
		}
		// Undecided by the hook → the user.
		ch := p.goGet(fmt.Sprintf("http://alpha.test:%d/", up))
		a := p.waitPending("alpha.test")
		p.decide(a.ID, "deny")
		apprExpect(t, "user after hook none", apprAwait(t, ch), 403)
	})

	t.Run("webhook", func(t *testing.T) {
		var calls atomic.Int64
		g := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			calls.Add(1)
			var req struct {
				Host    string   `json:"host"`
				Command []string `json:"command"`
			}
			json.NewDecoder(r.Body).Decode(&req)
			switch req.Host {
			case "gallow.test":
				io.WriteString(w, `{"decision":"allow","rationale":"fine","risk":"low"}`)
			case "gdeny.test":
				io.WriteString(w, `{"decision":"deny","rationale":"exfiltration risk","risk":"high"}`)
			case "gslow.test":
				select {
				case <-r.Context().Done():
				case <-time.After(10 * time.Second):
				}
			default:
				io.WriteString(w, `sure, why not`)
			}
		}))
		defer g.Close()
		cfg := fmt.Sprintf("[approvals]\nenabled = true\nreviewer = \"guardian\"\npolicy = \"on-request\"\n[guardian]\nbackend = \"webhook\"\nurl = %q\ntimeout = \"1s\"\n", g.URL+"/review")
		p := apprStart(t, cfg, "", "")
		apprExpect(t, "guardian allow", p.get(fmt.Sprintf("http://gallow.test:%d/", up)), 200)
		apprExpect(t, "guardian deny", p.get(fmt.Sprintf("http://gdeny.test:%d/", up)), 403)
		start := time.Now()
		apprExpect(t, "guardian timeout", p.get(fmt.Sprintf("http://gslow.test:%d/", up)), 403)
		if el := time.Since(start); el > 5*time.Second {
			t.Fatalf("guardian timeout took %v", el)
		}
		apprExpect(t, "guardian garbage", p.get(fmt.Sprintf("http://ggarbage.test:%d/", up)), 403)
		if calls.Load() != 4 {
			t.Fatalf("guardian called %d times, want 4", calls.Load())
		}
		// Every Guardian review is listed among decided approvals with its outcome.
		_, b := p.api("GET", "/api/approvals?status=decided", "")
		for _, want := range []string{`"decision":"allow_once"`, `"decision":"deny"`, `"decision":"timeout"`, `"decision":"error"`, `"reviewer":"guardian"`} {
			if !strings.Contains(string(b), want) {
				t.Errorf("decided list lacks %s: %s", want, b)
			}
		}
	})

	t.Run("openai", func(t *testing.T) {
		var prompts []string
		var mu sync.Mutex
		g := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.URL.Path != "/v1/chat/completions" || r.Header.Get("Authorization") != "Bearer sk-e2e" {
				http.Error(w, "unauthorized", 401)
				return
			}
			var req struct {
				Model    string
				Messages []struct{ Role, Content string }
			}
			json.NewDecoder(r.Body).Decode(&req)
			user := req.Messages[len(req.Messages)-1].Content
			mu.Lock()
			prompts = append(prompts, user)
			mu.Unlock()
			content := `{"decision":"deny","risk":"high","rationale":"unknown"}`
			if strings.Contains(user, `"host":"gallow.test"`) {
				content = "```json\n{\"decision\":\"allow\",\"risk\":\"low\",\"rationale\":\"fine\"}\n```"
			}
			json.NewEncoder(w).Encode(map[string]any{"choices": []any{map[string]any{"message": map[string]any{"role": "assistant", "content": content}}}})
		}))
		defer g.Close()
		t.Setenv("APPR_E2E_OPENAI_KEY", "sk-e2e")
		cfg := fmt.Sprintf("[approvals]\nenabled = true\nreviewer = \"guardian\"\npolicy = \"on-request\"\n[guardian]\nbackend = \"openai\"\nurl = %q\nmodel = \"judge\"\napi_key_env = \"APPR_E2E_OPENAI_KEY\"\ntimeout = \"2s\"\n", g.URL+"/v1")
		p := apprStart(t, cfg, "", "")
		apprExpect(t, "openai allow", p.get(fmt.Sprintf("http://gallow.test:%d/", up)), 200)
		apprExpect(t, "openai deny", p.get(fmt.Sprintf("http://gdeny.test:%d/", up)), 403)
		mu.Lock()
		defer mu.Unlock()
		if len(prompts) != 2 || !strings.Contains(prompts[0], `"port":`) || !strings.Contains(prompts[0], "<request-data>") {
			t.Fatalf("prompts: %q", prompts)
		}
	})

	t.Run("starlark", func(t *testing.T) {
		dir := t.TempDir()
		os.WriteFile(filepath.Join(dir, "g.star"), []byte(`
def review(request):
    if request["host"] == "gallow.test":
        return {"decision": "allow", "rationale": "ok", "risk": "low"}
    return {"decision": "deny", "rationale": "no", "risk": "high"}
`), 0o644)
		cfg := fmt.Sprintf("[approvals]\nenabled = true\nreviewer = \"guardian\"\npolicy = \"on-request\"\n[guardian]\nbackend = \"starlark\"\nscript = %q\n", filepath.Join(dir, "g.star"))
		p := apprStart(t, cfg, "", "")
		apprExpect(t, "starlark allow", p.get(fmt.Sprintf("http://gallow.test:%d/", up)), 200)
		apprExpect(t, "starlark deny", p.get(fmt.Sprintf("http://gdeny.test:%d/", up)), 403)
	})

	t.Run("persist", func(t *testing.T) {
		p := apprStart(t, userCfg, "", "")
		ch := p.goGet(fmt.Sprintf("http://alpha.test:%d/", up))
		a := p.waitPending("alpha.test")
		p.decide(a.ID, "allow_always")
		apprExpect(t, "allow_always", apprAwait(t, ch), 200)
		rules, err := os.ReadFile(filepath.Join(p.Home, "rules", "default.rules"))
		if err != nil || !strings.Contains(string(rules), `network_rule(host="alpha.test", protocol="http", decision="allow"`) {
			t.Fatalf("rules file: %s %v", rules, err)
		}
		// A new process with the same NETPROXY_HOME loads the rule: no prompt.
		p2 := apprStart(t, userCfg, "", p.Home)
		apprExpect(t, "after restart", p2.get(fmt.Sprintf("http://alpha.test:%d/", up2)), 200)
	})
}

// Exec approvals through the control socket use the same queue and the
// session cache keyed by the approval identity.
func TestApprovalsExecThroughControlSocket(t *testing.T) {
	p := apprStart(t, "[approvals]\nenabled = true\nreviewer = \"user\"\npolicy = \"on-request\"\ntimeout = \"10s\"\n", "", "")
	ask := func() <-chan apprReply {
		return execAsk(p.Proxy, `{"session_id":"s1","environment_id":"env1","command":["git","push"],"cwd":"/work","sandbox_permissions":"require_escalated","reason":"network needed","proposed_amendment":["git","push"]}`)
	}
	ch := ask()
	var id string
	deadline := time.Now().Add(10 * time.Second)
	for id == "" && time.Now().Before(deadline) {
		_, b := p.api("GET", "/api/approvals?status=pending", "")
		var out struct {
			Approvals []struct{ ID, Kind, Cwd string }
		}
		json.Unmarshal(b, &out)
		for _, a := range out.Approvals {
			if a.Kind == "exec" && a.Cwd == "/work" {
				id = a.ID
			}
		}
		time.Sleep(20 * time.Millisecond)
	}
	if id == "" {
		t.Fatal("no pending exec approval")
	}
	p.decide(id, "allow_session")
	r := apprAwait(t, ch)
	if r.status != 200 || !strings.Contains(r.body, `"approved":true`) || !strings.Contains(r.body, `"decision":"allow_session"`) {
		t.Fatalf("exec approval answer: %d %s", r.status, r.body)
	}
	r = apprAwait(t, ask())
	if r.status != 200 || !strings.Contains(r.body, `"reviewer":"cache"`) {
		t.Fatalf("second exec approval should hit the session cache: %d %s", r.status, r.body)
	}
}

// A framed request is owned by its execution: the pending approval names
// it, and a user denial reaches the execution's event stream as
// denied_by_user.
func TestApprovalsOwnerToldDeniedByUser(t *testing.T) {
	p := apprStart(t, "[approvals]\nenabled = true\nreviewer = \"user\"\npolicy = \"on-request\"\ntimeout = \"10s\"\n", "", "")
	up := StartUpstream(t, false)
	reg := p.Register(t, "sess-1", "env-1")

	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, "GET", "http://netproxy/v1/executions/"+reg.ExecutionID+"/events", nil)
	evResp, err := p.ControlClient().Do(req)
	if err != nil || evResp.StatusCode != 200 {
		t.Fatalf("events stream: %v %v", evResp, err)
	}
	defer evResp.Body.Close()
	events := make(chan map[string]any, 16)
	go func() {
		dec := json.NewDecoder(evResp.Body)
		for {
			var ev map[string]any
			if dec.Decode(&ev) != nil {
				close(events)
				return
			}
			events <- ev
		}
	}()

	// A framed plain-HTTP request to an unlisted host.
	done := make(chan apprReply, 1)
	go func() {
		conn, err := net.DialTimeout("tcp", p.HTTP, 5*time.Second)
		if err != nil {
			done <- apprReply{err: err}
			return
		}
		defer conn.Close()
		conn.SetDeadline(time.Now().Add(20 * time.Second))
		fmt.Fprintf(conn, "%sGET http://alpha.test:%d/hello HTTP/1.1\r\nHost: alpha.test:%d\r\nConnection: close\r\n\r\n", Frame(reg.Token), up.Port, up.Port)
		resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
		if err != nil {
			done <- apprReply{err: err}
			return
		}
		resp.Body.Close()
		done <- apprReply{status: resp.StatusCode}
	}()
	var id string
	deadline := time.Now().Add(10 * time.Second)
	for id == "" && time.Now().Before(deadline) {
		_, b := p.api("GET", "/api/approvals?status=pending", "")
		var out struct {
			Approvals []struct {
				ID, Host    string
				ExecutionID string `json:"execution_id"`
			}
		}
		json.Unmarshal(b, &out)
		for _, a := range out.Approvals {
			if a.Host == "alpha.test" {
				if a.ExecutionID != reg.ExecutionID {
					t.Fatalf("pending approval not owned by the execution: %s", b)
				}
				id = a.ID
			}
		}
		time.Sleep(20 * time.Millisecond)
	}
	if id == "" {
		t.Fatal("no pending approval for the framed request")
	}
	p.decide(id, "deny")
	apprExpect(t, "framed denied request", apprAwait(t, done), 403)
	for {
		select {
		case ev, ok := <-events:
			if !ok {
				t.Fatal("event stream ended without denied_by_user")
			}
			if ev["type"] == "denied_by_user" {
				if ev["host"] != "alpha.test" || ev["approval_id"] != id {
					t.Fatalf("denied_by_user event %v", ev)
				}
				return
			}
		case <-ctx.Done():
			t.Fatal("no denied_by_user event")
		}
	}
}
