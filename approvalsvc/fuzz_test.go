package approvalsvc

import (
	"bytes"
	"net/http"
	"net/http/httptest"
	"testing"
)

// FuzzControlRequest feeds arbitrary bodies to POST /v1/approvals. No human
// reviewer is reachable, so every valid request is decided at once (deny);
// the handler must never panic and never approve.
func FuzzControlRequest(f *testing.F) {
	for _, s := range []string{
		`{"session_id":"s","environment_id":"e","command":["ls"],"cwd":"/"}`,
		`{"command":["rm","-rf","/"],"sandbox_permissions":"require_escalated","additional_permissions":{"fs":["/"]},"tty":true}`,
		`{"command":[]}`, `{"command":"ls"}`, `[]`, `null`, `{"execution_id":"x","command":["a"]}`,
	} {
		f.Add([]byte(s))
	}
	svc, err := New(Options{Settings: Settings{Enabled: true, Policy: "on-request", Reviewer: "user"}, UserReviewer: false, HookEnv: []string{}})
	if err != nil {
		f.Fatal(err)
	}
	h := svc.ControlHandler()
	f.Fuzz(func(t *testing.T, body []byte) {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest(http.MethodPost, "/v1/approvals", bytes.NewReader(body)))
		if rec.Code != 200 && rec.Code != 400 {
			t.Fatalf("status %d", rec.Code)
		}
		if bytes.Contains(rec.Body.Bytes(), []byte(`"approved":true`)) {
			t.Fatalf("approved without a reviewer: %s", rec.Body.Bytes())
		}
	})
}

// FuzzDecisionBody feeds arbitrary bodies to the decision endpoint of an
// unknown approval: 400 or 404, never a panic.
func FuzzDecisionBody(f *testing.F) {
	for _, s := range []string{`{"decision":"allow_once"}`, `{"decision":"allow_always","host":"x"}`, `{}`, `{"decision":1}`} {
		f.Add([]byte(s))
	}
	svc, err := New(Options{Settings: Settings{Enabled: true}, HookEnv: []string{}})
	if err != nil {
		f.Fatal(err)
	}
	h := svc.APIHandler()
	f.Fuzz(func(t *testing.T, body []byte) {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest(http.MethodPost, "/api/approvals/apv_x/decision", bytes.NewReader(body)))
		if rec.Code != 400 && rec.Code != 404 {
			t.Fatalf("status %d", rec.Code)
		}
	})
}
