package webui

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/netproxy/netproxy/attribution"
	"github.com/netproxy/netproxy/internal/admin"
)

const testToken = "s3cret-admin-token-for-tests"

// uiServer is a real admin.Server with the UI mounted and one extra
// state-changing API route that counts calls, served over real sockets.
type uiServer struct {
	*httptest.Server
	hub    *Hub
	reg    *attribution.Registry
	posts  atomic.Int64
	clock  atomic.Int64 // unix seconds added to the real clock
	client *http.Client
}

func newUIServer(t *testing.T, token string) *uiServer {
	t.Helper()
	s := &uiServer{hub: NewHub(HubOptions{Heartbeat: time.Second}), reg: attribution.NewRegistry()}
	now := func() time.Time { return time.Now().Add(time.Duration(s.clock.Load()) * time.Second) }
	auth := NewAuth(token, time.Hour, now)
	adm := admin.New(token)
	ui := New(Options{Auth: auth, Hub: s.hub, Executions: WatchRegistry(s.reg, s.hub)})
	ui.Mount(adm)
	adm.HandleAPI("POST /api/approvals/{id}/decision", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.posts.Add(1)
		w.WriteHeader(http.StatusNoContent)
	}))
	s.Server = httptest.NewServer(adm)
	t.Cleanup(func() { s.hub.Close(); s.Server.Close() })
	s.client = &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	return s
}

type reqOpt func(*http.Request)

func withHeader(k, v string) reqOpt { return func(r *http.Request) { r.Header.Set(k, v) } }
func withCookie(c *http.Cookie) reqOpt {
	return func(r *http.Request) { r.AddCookie(c) }
}

func (s *uiServer) do(t *testing.T, method, path, body string, opts ...reqOpt) *http.Response {
	t.Helper()
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, err := http.NewRequest(method, s.URL+path, rd)
	if err != nil {
		t.Fatal(err)
	}
	for _, o := range opts {
		o(req)
	}
	resp, err := s.client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { resp.Body.Close() })
	return resp
}

func (s *uiServer) login(t *testing.T) *http.Cookie {
	t.Helper()
	resp := s.do(t, "GET", "/login?token="+url.QueryEscape(testToken), "")
	if resp.StatusCode != http.StatusSeeOther || resp.Header.Get("Location") != "/" {
		t.Fatalf("login: %d location %q", resp.StatusCode, resp.Header.Get("Location"))
	}
	for _, c := range resp.Cookies() {
		if c.Name == SessionCookie {
			return c
		}
	}
	t.Fatal("login set no session cookie")
	return nil
}

func (s *uiServer) csrf(t *testing.T, c *http.Cookie) string {
	t.Helper()
	resp := s.do(t, "GET", "/api/session", "", withCookie(c))
	if resp.StatusCode != 200 {
		t.Fatalf("/api/session with cookie: %d", resp.StatusCode)
	}
	var v struct {
		CSRF string `json:"csrf_token"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&v); err != nil || v.CSRF == "" {
		t.Fatalf("/api/session: %v %+v", err, v)
	}
	return v.CSRF
}

func TestPageServedWithoutCredentials(t *testing.T) {
	s := newUIServer(t, testToken)
	resp := s.do(t, "GET", "/", "")
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != 200 || !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/html") {
		t.Fatalf("GET /: %d %q", resp.StatusCode, resp.Header.Get("Content-Type"))
	}
	for _, want := range []string{"Allow for session", "Allow once", "Always allow", "Always deny", `src="/assets/app.js"`} {
		if !strings.Contains(string(body), want) {
			t.Errorf("page lacks %q", want)
		}
	}
	if csp := resp.Header.Get("Content-Security-Policy"); !strings.Contains(csp, "script-src 'self'") || !strings.Contains(csp, "frame-ancestors 'none'") {
		t.Errorf("CSP %q", csp)
	}
	if strings.Contains(string(body), "http://") || strings.Contains(string(body), "https://") {
		t.Error("page references an external URL")
	}
	for path, ct := range map[string]string{"/assets/app.js": "javascript", "/assets/app.css": "text/css"} {
		r := s.do(t, "GET", path, "")
		b, _ := io.ReadAll(r.Body)
		if r.StatusCode != 200 || !strings.Contains(r.Header.Get("Content-Type"), ct) || len(b) == 0 {
			t.Errorf("%s: %d %q", path, r.StatusCode, r.Header.Get("Content-Type"))
		}
		if strings.Contains(string(b), "https://") || strings.Contains(string(b), "http://") {
			t.Errorf("%s references an external URL", path)
		}
	}
	if r := s.do(t, "GET", "/nope", ""); r.StatusCode != 404 {
		t.Errorf("GET /nope: %d", r.StatusCode)
	}
}

func TestAPIRequiresCredentials(t *testing.T) {
	s := newUIServer(t, testToken)
	for _, path := range []string{"/api/session", "/api/events", "/api/executions"} {
		if r := s.do(t, "GET", path, ""); r.StatusCode != 401 {
			t.Errorf("%s without credentials: %d", path, r.StatusCode)
		}
		if r := s.do(t, "GET", path, "", withHeader("Authorization", "Bearer wrong")); r.StatusCode != 401 {
			t.Errorf("%s with a wrong bearer: %d", path, r.StatusCode)
		}
	}
	if r := s.do(t, "POST", "/api/approvals/x/decision", `{"decision":"deny"}`); r.StatusCode != 401 {
		t.Errorf("decision without credentials: %d", r.StatusCode)
	}
	if r := s.do(t, "GET", "/api/executions", "", withHeader("Authorization", "Bearer "+testToken)); r.StatusCode != 200 {
		t.Errorf("executions with the bearer: %d", r.StatusCode)
	}
	// Bearer clients need no CSRF header.
	if r := s.do(t, "POST", "/api/approvals/x/decision", `{"decision":"deny"}`, withHeader("Authorization", "Bearer "+testToken)); r.StatusCode != 204 {
		t.Errorf("decision with the bearer: %d", r.StatusCode)
	}
}

func TestLoginSetsSafeCookie(t *testing.T) {
	s := newUIServer(t, testToken)
	r := s.do(t, "GET", "/login?token=wrong", "")
	if r.StatusCode != 401 || len(r.Cookies()) != 0 {
		t.Fatalf("wrong token login: %d cookies %v", r.StatusCode, r.Cookies())
	}
	r = s.do(t, "GET", "/login?token="+testToken, "")
	raw := r.Header.Get("Set-Cookie")
	for _, want := range []string{"HttpOnly", "SameSite=Strict", "Path=/", "Max-Age="} {
		if !strings.Contains(raw, want) {
			t.Errorf("Set-Cookie %q lacks %s", raw, want)
		}
	}
	if strings.Contains(raw, testToken) {
		t.Fatal("the cookie carries the token itself")
	}
	if r.Header.Get("Location") != "/" {
		t.Fatalf("login redirects to %q, want / (no token in the URL)", r.Header.Get("Location"))
	}
	// Form login from the page.
	r = s.do(t, "POST", "/login", "token="+testToken, withHeader("Content-Type", "application/x-www-form-urlencoded"), withHeader("Origin", s.URL))
	if r.StatusCode != http.StatusSeeOther || len(r.Cookies()) != 1 {
		t.Fatalf("form login: %d %v", r.StatusCode, r.Cookies())
	}
	r = s.do(t, "POST", "/login", "token="+testToken, withHeader("Content-Type", "application/x-www-form-urlencoded"), withHeader("Origin", "http://evil.example"))
	if r.StatusCode != http.StatusForbidden || len(r.Cookies()) != 0 {
		t.Fatalf("cross-origin form login: %d %v", r.StatusCode, r.Cookies())
	}
	// The page is served with Referrer-Policy: no-referrer, so a browser's
	// form POST from it carries "Origin: null"; Sec-Fetch-Site then tells
	// the page's own form from a sandboxed frame or a data: URL elsewhere.
	form := withHeader("Content-Type", "application/x-www-form-urlencoded")
	for _, tc := range []struct {
		site string
		want int
	}{{"same-origin", http.StatusSeeOther}, {"cross-site", http.StatusForbidden}, {"same-site", http.StatusForbidden}, {"", http.StatusForbidden}} {
		opts := []reqOpt{form, withHeader("Origin", "null")}
		if tc.site != "" {
			opts = append(opts, withHeader("Sec-Fetch-Site", tc.site))
		}
		r = s.do(t, "POST", "/login", "token="+testToken, opts...)
		if r.StatusCode != tc.want {
			t.Fatalf("form login with Origin: null, Sec-Fetch-Site %q: %d, want %d", tc.site, r.StatusCode, tc.want)
		}
	}
}

func TestCookieAuthAndCSRF(t *testing.T) {
	s := newUIServer(t, testToken)
	c := s.login(t)
	csrf := s.csrf(t, c)
	if r := s.do(t, "GET", "/api/executions", "", withCookie(c)); r.StatusCode != 200 {
		t.Fatalf("GET with cookie: %d", r.StatusCode)
	}
	post := func(opts ...reqOpt) int {
		return s.do(t, "POST", "/api/approvals/a1/decision", `{"decision":"deny"}`, append([]reqOpt{withCookie(c)}, opts...)...).StatusCode
	}
	cases := []struct {
		name string
		opts []reqOpt
		want int
	}{
		{"no csrf header", nil, 403},
		{"wrong csrf header", []reqOpt{withHeader(CSRFHeader, "x"+csrf)}, 403},
		{"cross origin", []reqOpt{withHeader(CSRFHeader, csrf), withHeader("Origin", "http://evil.example")}, 403},
		{"origin other port", []reqOpt{withHeader(CSRFHeader, csrf), withHeader("Origin", "http://127.0.0.1:1")}, 403},
		{"cross site fetch", []reqOpt{withHeader(CSRFHeader, csrf), withHeader("Sec-Fetch-Site", "cross-site")}, 403},
		{"wrong bearer beats cookie", []reqOpt{withHeader(CSRFHeader, csrf), withHeader("Authorization", "Bearer nope")}, 401},
		{"same origin with csrf", []reqOpt{withHeader(CSRFHeader, csrf), withHeader("Origin", s.URL), withHeader("Sec-Fetch-Site", "same-origin")}, 204},
		{"no origin with csrf", []reqOpt{withHeader(CSRFHeader, csrf)}, 204},
	}
	for _, tc := range cases {
		if got := post(tc.opts...); got != tc.want {
			t.Errorf("%s: %d, want %d", tc.name, got, tc.want)
		}
	}
	if got := s.posts.Load(); got != 2 {
		t.Errorf("handler ran %d times, want 2", got)
	}
	// Another session's CSRF token does not fit this cookie.
	c2 := s.login(t)
	if got := post(withHeader(CSRFHeader, s.csrf(t, c2))); got != 403 && c2.Value != c.Value {
		t.Errorf("csrf of another session: %d, want 403", got)
	}
}

func TestCookieRejectedWhenTamperedForeignOrExpired(t *testing.T) {
	s := newUIServer(t, testToken)
	c := s.login(t)
	tampered := *c
	tampered.Value = c.Value[:len(c.Value)-2] + "AA"
	if r := s.do(t, "GET", "/api/executions", "", withCookie(&tampered)); r.StatusCode != 401 {
		t.Errorf("tampered cookie: %d", r.StatusCode)
	}
	// A cookie minted for another token (e.g. before a restart) is refused.
	other := newUIServer(t, "another-token")
	oc := other.do(t, "GET", "/login?token=another-token", "").Cookies()[0]
	if r := s.do(t, "GET", "/api/executions", "", withCookie(oc)); r.StatusCode != 401 {
		t.Errorf("foreign cookie: %d", r.StatusCode)
	}
	// Extending the expiry in the cookie breaks its MAC.
	parts := strings.Split(c.Value, ".")
	parts[1] = "99999999999"
	forged := *c
	forged.Value = strings.Join(parts, ".")
	if r := s.do(t, "GET", "/api/executions", "", withCookie(&forged)); r.StatusCode != 401 {
		t.Errorf("forged expiry: %d", r.StatusCode)
	}
	s.clock.Store(int64(2 * time.Hour / time.Second))
	if r := s.do(t, "GET", "/api/executions", "", withCookie(c)); r.StatusCode != 401 {
		t.Errorf("expired cookie: %d", r.StatusCode)
	}
}

func TestNoTokenLocksEverything(t *testing.T) {
	s := newUIServer(t, "")
	if r := s.do(t, "GET", "/login?token=", ""); r.StatusCode != 401 || len(r.Cookies()) != 0 {
		t.Fatalf("login with empty token: %d", r.StatusCode)
	}
	if r := s.do(t, "GET", "/api/executions", "", withHeader("Authorization", "Bearer ")); r.StatusCode != 401 {
		t.Fatalf("empty bearer: %d", r.StatusCode)
	}
	if r := s.do(t, "GET", "/", ""); r.StatusCode != 200 {
		t.Fatalf("page: %d", r.StatusCode)
	}
}

func TestLogoutClearsCookie(t *testing.T) {
	s := newUIServer(t, testToken)
	c := s.login(t)
	if r := s.do(t, "POST", "/logout", "", withCookie(c)); r.StatusCode != 403 {
		t.Fatalf("logout without csrf: %d", r.StatusCode)
	}
	r := s.do(t, "POST", "/logout", "", withCookie(c), withHeader(CSRFHeader, s.csrf(t, c)))
	if r.StatusCode != 204 || !strings.Contains(r.Header.Get("Set-Cookie"), "Max-Age=0") {
		t.Fatalf("logout: %d %q", r.StatusCode, r.Header.Get("Set-Cookie"))
	}
}

func TestExecutionsListAndEvents(t *testing.T) {
	s := newUIServer(t, testToken)
	bearer := withHeader("Authorization", "Bearer "+testToken)
	events := s.do(t, "GET", "/api/events", "", bearer)
	if events.StatusCode != 200 {
		t.Fatalf("events: %d", events.StatusCode)
	}
	waitSubscribers(t, s.hub, 1)
	exec, _, err := s.reg.Register(attribution.ExecutionSpec{SessionID: "s1", EnvironmentID: "e1", Command: []string{"curl", "https://x.test"}, Cwd: "/work"})
	if err != nil {
		t.Fatal(err)
	}
	r := s.do(t, "GET", "/api/executions", "", bearer)
	var list struct{ Executions []Execution }
	if err := json.NewDecoder(r.Body).Decode(&list); err != nil || len(list.Executions) != 1 || list.Executions[0].ID != exec.ID || list.Executions[0].Cwd != "/work" {
		t.Fatalf("executions: %v %+v", err, list)
	}
	s.reg.Revoke(exec.ID)
	rd := NewSSEReader(events.Body)
	for _, want := range []string{EventExecutionStarted, EventExecutionEnded} {
		ev, err := rd.Next()
		if err != nil || ev.Name != want || !strings.Contains(string(ev.Data), exec.ID) {
			t.Fatalf("want %s: %q %s %v", want, ev.Name, ev.Data, err)
		}
	}
}

func TestAuthorizeDirect(t *testing.T) {
	a := NewAuth(testToken, 0, nil)
	req := httptest.NewRequest("GET", "/api/x", nil)
	req.Header.Set("Authorization", "bearer "+testToken) // scheme is case-insensitive
	if err := a.Authorize(req); err != nil {
		t.Fatalf("lowercase bearer: %v", err)
	}
	req.Header.Set("Authorization", "Basic "+testToken)
	if err := a.Authorize(req); err == nil {
		t.Fatal("Basic scheme accepted")
	}
	if tok, err := GenerateToken(); err != nil || len(tok) < 40 {
		t.Fatalf("GenerateToken: %q %v", tok, err)
	}
}

func BenchmarkAuthorizeCookie(b *testing.B) {
	a := NewAuth(testToken, 0, nil)
	v, _, _ := a.newSession()
	req := httptest.NewRequest("POST", "/api/approvals/x/decision", nil)
	req.AddCookie(&http.Cookie{Name: SessionCookie, Value: v})
	req.Header.Set(CSRFHeader, a.CSRFToken(v))
	b.ReportAllocs()
	for i := 0; i < b.N; i++ {
		if err := a.Authorize(req); err != nil {
			b.Fatal(err)
		}
	}
}

func FuzzSessionCookie(f *testing.F) {
	a := NewAuth(testToken, time.Hour, nil)
	// Deterministic, so every fuzz worker process knows the one valid value.
	exp, nonce := "4102444800", "AAAAAAAAAAAAAAAAAAAAAA"
	v := "v1." + exp + "." + nonce + "." + a.mac("session", exp, nonce)
	if !a.validSession(v) {
		f.Fatal("hand-made cookie not accepted")
	}
	f.Add(v)
	f.Add("v1.1.2.3")
	f.Add("v1...")
	f.Add("")
	f.Fuzz(func(t *testing.T, value string) {
		ok := a.validSession(value)
		if ok && value != v {
			// Only cookies this Auth minted may pass; the fuzzer cannot forge a MAC.
			t.Fatalf("accepted a cookie it never minted: %q", value)
		}
		req := httptest.NewRequest("POST", "/api/x", nil)
		req.AddCookie(&http.Cookie{Name: SessionCookie, Value: value})
		req.Header.Set(CSRFHeader, value)
		req.Header.Set("Origin", value)
		_ = a.Authorize(req)
	})
}
