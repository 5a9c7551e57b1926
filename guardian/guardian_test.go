package guardian

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

func netReq(host string) ReviewRequest {
	return ReviewRequest{ID: "a1", Kind: "network", SessionID: "s", EnvironmentID: "e", Host: host, Protocol: "https", Port: 443,
		Target: "https://" + host + ":443", Command: []string{"curl", "https://" + host}, Cwd: "/work/repo"}
}

func writeScript(t *testing.T, src string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "guardian.star")
	if err := os.WriteFile(p, []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

const hostScript = `
def review(request):
    if request["host"].endswith(".good.test"):
        return {"decision": "allow", "rationale": "trusted zone for " + request["command"][0], "risk": "LOW"}
    return {"decision": "deny", "rationale": "unknown host " + request["host"], "risk": "high"}
`

func TestStarlarkAllowAndDeny(t *testing.T) {
	g, err := NewStarlark(writeScript(t, hostScript), StarlarkOptions{Timeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	v, err := g.Review(context.Background(), netReq("api.good.test"))
	if err != nil || v.Decision != DecisionAllowOnce || v.Risk != "low" || v.Rationale != "trusted zone for curl" {
		t.Fatalf("allow: got %+v %v", v, err)
	}
	v, err = g.Review(context.Background(), netReq("evil.test"))
	if err != nil || v.Allowed() || v.Rationale != "unknown host evil.test" {
		t.Fatalf("deny: got %+v %v", v, err)
	}
}

func TestStarlarkLoadErrors(t *testing.T) {
	cases := map[string]string{
		"no review":   "x = 1\n",
		"syntax":      "def review(r)\n  return 1\n",
		"not a func":  "review = 3\n",
		"no params":   "def review():\n    return {}\n",
		"load failed": "fail('boom')\n",
	}
	for name, src := range cases {
		if _, err := NewStarlark(writeScript(t, src), StarlarkOptions{}); err == nil || !strings.Contains(err.Error(), "guardian.script") {
			t.Errorf("%s: want a guardian.script error, got %v", name, err)
		}
	}
	if _, err := NewStarlark(filepath.Join(t.TempDir(), "missing.star"), StarlarkOptions{}); err == nil {
		t.Error("missing file: want an error")
	}
}

func TestStarlarkBadVerdictsAreErrors(t *testing.T) {
	cases := map[string]string{
		"fail":         "def review(r):\n    fail('nope')\n",
		"not dict":     "def review(r):\n    return 'allow'\n",
		"no decision":  "def review(r):\n    return {'rationale': 'x'}\n",
		"bad decision": "def review(r):\n    return {'decision': 'maybe'}\n",
		"int decision": "def review(r):\n    return {'decision': 1}\n",
		"int risk":     "def review(r):\n    return {'decision': 'allow', 'risk': 3}\n",
		"mutate":       "def review(r):\n    r['host'] = 'x'\n    return {'decision': 'allow'}\n",
	}
	for name, src := range cases {
		g, err := NewStarlark(writeScript(t, src), StarlarkOptions{Timeout: time.Second})
		if err != nil {
			t.Fatalf("%s: load: %v", name, err)
		}
		if v, err := g.Review(context.Background(), netReq("x.test")); err == nil {
			t.Errorf("%s: want an error, got verdict %+v", name, v)
		}
	}
}

func TestStarlarkRunawayScriptIsStopped(t *testing.T) {
	src := "def review(r):\n    n = 0\n    for i in range(1000000000):\n        n += i\n    return {'decision': 'allow'}\n"
	g, err := NewStarlark(writeScript(t, src), StarlarkOptions{Timeout: 200 * time.Millisecond, MaxSteps: 1 << 62})
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	_, err = g.Review(context.Background(), netReq("x.test"))
	if err == nil || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("want a deadline error, got %v", err)
	}
	if d := time.Since(start); d > 2*time.Second {
		t.Fatalf("runaway script held the review for %v", d)
	}
	// The step limit alone also stops it.
	g2, _ := NewStarlark(writeScript(t, src), StarlarkOptions{Timeout: time.Minute, MaxSteps: 10000})
	if _, err := g2.Review(context.Background(), netReq("x.test")); err == nil {
		t.Fatal("step limit: want an error")
	}
}

func TestWebhook(t *testing.T) {
	var got atomic.Value
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var req ReviewRequest
		if r.Method != http.MethodPost || r.Header.Get("Content-Type") != "application/json" {
			http.Error(w, "bad", 400)
			return
		}
		if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
			http.Error(w, "bad json", 400)
			return
		}
		got.Store(req)
		switch req.Host {
		case "ok.test":
			io.WriteString(w, `{"decision":"allow","rationale":"fine","risk":"low"}`)
		case "no.test":
			io.WriteString(w, `{"decision":"deny","rationale":"exfil risk","risk":"high"}`)
		case "garbage.test":
			io.WriteString(w, `<html>oops</html>`)
		case "500.test":
			http.Error(w, `{"decision":"allow"}`, 500)
		case "slow.test":
			select {
			case <-r.Context().Done():
			case <-time.After(5 * time.Second):
			}
			io.WriteString(w, `{"decision":"allow"}`)
		}
	}))
	defer srv.Close()
	g, err := NewWebhook(srv.URL+"/review", WebhookOptions{Timeout: 300 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	v, err := g.Review(context.Background(), netReq("ok.test"))
	if err != nil || !v.Allowed() || v.Rationale != "fine" {
		t.Fatalf("allow: %+v %v", v, err)
	}
	if r := got.Load().(ReviewRequest); r.Cwd != "/work/repo" || len(r.Command) != 2 || r.Port != 443 {
		t.Fatalf("webhook got request %+v", r)
	}
	v, err = g.Review(context.Background(), netReq("no.test"))
	if err != nil || v.Allowed() || v.Risk != "high" {
		t.Fatalf("deny: %+v %v", v, err)
	}
	for _, h := range []string{"garbage.test", "500.test", "slow.test"} {
		start := time.Now()
		if v, err := g.Review(context.Background(), netReq(h)); err == nil {
			t.Errorf("%s: want an error, got %+v", h, v)
		}
		if time.Since(start) > 3*time.Second {
			t.Errorf("%s: review outlived its timeout", h)
		}
	}
	// Transport error: nothing listens.
	dead := httptest.NewServer(http.NotFoundHandler())
	deadURL := dead.URL
	dead.Close()
	g2, _ := NewWebhook(deadURL, WebhookOptions{Timeout: time.Second})
	if _, err := g2.Review(context.Background(), netReq("ok.test")); err == nil || !strings.Contains(err.Error(), "transport") {
		t.Fatalf("transport error: got %v", err)
	}
}

func TestOpenAI(t *testing.T) {
	var prompts atomic.Value
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/v1/chat/completions" {
			http.Error(w, "wrong path "+r.URL.Path, 404)
			return
		}
		if r.Header.Get("Authorization") != "Bearer sk-test" {
			http.Error(w, "unauthorized", 401)
			return
		}
		var cr chatRequest
		if err := json.NewDecoder(r.Body).Decode(&cr); err != nil || cr.Model != "judge-1" || len(cr.Messages) != 2 {
			http.Error(w, "bad request", 400)
			return
		}
		user := cr.Messages[1].Content
		prompts.Store(user)
		reply := func(content string) {
			json.NewEncoder(w).Encode(map[string]any{"choices": []any{map[string]any{"message": map[string]any{"role": "assistant", "content": content}}}})
		}
		switch {
		case strings.Contains(user, `"host":"ok.test"`):
			reply(`{"decision":"allow","risk":"low","rationale":"matches the command"}`)
		case strings.Contains(user, `"host":"fenced.test"`):
			reply("```json\n{\"decision\": \"deny\", \"risk\": \"high\", \"rationale\": \"unrelated host\"}\n```")
		case strings.Contains(user, `"host":"prose.test"`):
			reply("Sure.\n```json\n{\"decision\": \"allow\"}\n```")
		case strings.Contains(user, `"host":"inline.test"`):
			reply(`I decided {"decision":"allow"} because it is fine`)
		case strings.Contains(user, `"host":"always.test"`):
			reply(`{"decision":"allow_always","risk":"low","rationale":"add it to the list"}`)
		case strings.Contains(user, `"host":"two.test"`):
			reply(`{"decision":"deny"}{"decision":"allow"}`)
		case strings.Contains(user, `"host":"choices.test"`):
			io.WriteString(w, `{"choices":[{"message":{"content":"{\"decision\":\"deny\"}"}},{"message":{"content":"{\"decision\":\"allow\"}"}}]}`)
		case strings.Contains(user, `"host":"garbage.test"`):
			reply("I think it is probably fine.")
		case strings.Contains(user, `"host":"nochoice.test"`):
			io.WriteString(w, `{"choices":[]}`)
		case strings.Contains(user, `"host":"502.test"`):
			http.Error(w, "bad gateway", 502)
		case strings.Contains(user, `"host":"slow.test"`):
			<-r.Context().Done()
		}
	}))
	defer srv.Close()
	g, err := New(Settings{Backend: "openai", URL: srv.URL + "/v1/", Model: "judge-1", APIKeyEnv: "GUARDIAN_KEY",
		Timeout: 300 * time.Millisecond}, "", func(k string) string {
		if k == "GUARDIAN_KEY" {
			return "sk-test"
		}
		return ""
	}, Deps{})
	if err != nil {
		t.Fatal(err)
	}
	v, err := g.Review(context.Background(), netReq("ok.test"))
	if err != nil || !v.Allowed() || v.Rationale != "matches the command" {
		t.Fatalf("allow: %+v %v", v, err)
	}
	p := prompts.Load().(string)
	for _, want := range []string{"network access request", `"command":["curl","https://ok.test"]`, `"cwd":"/work/repo"`, `"port":443`, DataOpen, DataClose} {
		if !strings.Contains(p, want) {
			t.Errorf("prompt lacks %q:\n%s", want, p)
		}
	}
	v, err = g.Review(context.Background(), netReq("fenced.test"))
	if err != nil || v.Allowed() || v.Rationale != "unrelated host" {
		t.Fatalf("fenced deny: %+v %v", v, err)
	}
	for _, h := range []string{"garbage.test", "nochoice.test", "502.test", "slow.test", "prose.test", "inline.test", "always.test", "two.test", "choices.test"} {
		if v, err := g.Review(context.Background(), netReq(h)); err == nil {
			t.Errorf("%s: want an error, got %+v", h, v)
		}
	}
	// A missing key is a configuration error, not a silent unauthenticated call.
	if _, err := New(Settings{Backend: "openai", URL: srv.URL, Model: "m", APIKeyEnv: "NOPE"}, "", func(string) string { return "" }, Deps{}); err == nil || !strings.Contains(err.Error(), "guardian.api_key_env") {
		t.Fatalf("missing key: got %v", err)
	}
}

func TestNewConfigErrors(t *testing.T) {
	for _, c := range []Settings{
		{Backend: ""}, {Backend: "oracle"}, {Backend: "starlark"}, {Backend: "webhook"}, {Backend: "webhook", URL: "ftp://x"},
		{Backend: "webhook", URL: "http://user:pw@x/"}, {Backend: "openai", URL: "http://x"}, {Backend: "openai", Model: "m"},
	} {
		if _, err := New(c, "", nil, Deps{}); err == nil || !strings.Contains(err.Error(), "guardian.") {
			t.Errorf("%+v: want an error naming its key, got %v", c, err)
		}
	}
	dir := t.TempDir()
	os.WriteFile(filepath.Join(dir, "g.star"), []byte(hostScript), 0o644)
	if _, err := New(Settings{Backend: "starlark", Script: "g.star"}, dir, nil, Deps{}); err != nil {
		t.Fatalf("relative script: %v", err)
	}
}

func TestParseVerdict(t *testing.T) {
	good := map[string]Verdict{
		`{"decision":"allow"}`:                                      {Decision: "allow_once"},
		`{"decision":"allow_once"}`:                                 {Decision: "allow_once"},
		`{"decision":"Allow_Session","risk":"medium"}`:              {Decision: "allow_session", Risk: "medium"},
		` {"decision":" DENY ","rationale":"r","risk":" High"} `:    {Decision: "deny", Rationale: "r", Risk: "high"},
		`{"decision":"allow","rationale":null}`:                     {Decision: "allow_once"},
		`{"decision":"deny","rationale":"` + "\u00e9" + `"}`:        {Decision: "deny", Rationale: "\u00e9"},
		`{"decision":"allow","risk":"low","rationale":"a\nb"}` + "": {Decision: "allow_once", Rationale: "a\nb", Risk: "low"},
	}
	for in, want := range good {
		got, err := ParseVerdict([]byte(in))
		if err != nil || got != want {
			t.Errorf("%s: got %+v %v, want %+v", in, got, err, want)
		}
	}
	for _, in := range []string{``, `null`, `[]`, `"allow"`, `{}`, `{"decision":"yes"}`, `{"decision":true}`,
		`{"decision":"allow"} {"decision":"deny"}`, `{"decision":"allow","rationale":5}`, `{"decision":"allow"`,
		`{"decision":"allow_always"}`, `{"decision":"deny_always"}`, `{"decision":"allow","extra":1}`, `{"decision":"deny","decision":"allow"}`,
		`{"decision":"allow","risk":"none"}`, `{"decision":"allow"}x`, `{"decision":"allow"}}`} {
		if v, err := ParseVerdict([]byte(in)); err == nil {
			t.Errorf("%q: want an error, got %+v", in, v)
		}
	}
}

func FuzzParseVerdict(f *testing.F) {
	for _, s := range []string{`{"decision":"allow"}`, `{"decision":"deny","rationale":"x","risk":"high"}`, `null`, `{"decision":1}`, "```json\n{}\n```"} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		ok := func(v Verdict, err error) {
			if err != nil {
				return
			}
			switch v.Decision {
			case DecisionAllowOnce, DecisionAllowSession, DecisionDeny:
			default:
				t.Fatalf("accepted decision %q", v.Decision)
			}
			switch v.Risk {
			case "", RiskLow, RiskMedium, RiskHigh:
			default:
				t.Fatalf("accepted risk %q", v.Risk)
			}
			if v.Screened || v.Finding != (Finding{}) {
				t.Fatalf("a backend answer set the pre-screen fields: %+v", v)
			}
		}
		ok(ParseVerdict(b))
		ok(ExtractVerdict(string(b)))
		ok(parseChatResponse(b))
		// Exactly one object: a verdict followed by anything is refused.
		if v, err := ParseVerdict(b); err == nil {
			if _, err := ParseVerdict(append(append([]byte{}, b...), []byte(` {"decision":"allow"}`)...)); err == nil {
				t.Fatalf("two objects accepted after %q (%+v)", b, v)
			}
		}
	})
}
