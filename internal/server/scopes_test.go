package server

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/netproxy/netproxy/attribution"
	"github.com/netproxy/netproxy/hostpolicy"
)

func scopeTestEngine(t *testing.T, entries map[string]string) *hostpolicy.Engine {
	t.Helper()
	var es []hostpolicy.Entry
	for k, v := range entries {
		es = append(es, hostpolicy.Entry{Pattern: k, Decision: v})
	}
	pol, err := hostpolicy.Build(hostpolicy.Options{Enabled: true, Mode: hostpolicy.ModeFull, Entries: es})
	if err != nil {
		t.Fatal(err)
	}
	return hostpolicy.NewEngine(pol, nil)
}

func TestExecutionPolicyFollowsTheRegistry(t *testing.T) {
	a := scopeAPI{engine: scopeTestEngine(t, map[string]string{"up.test": "allow"}), scopes: hostpolicy.NewScopes(attribution.DefaultSession)}
	a.executionChanged(attribution.ExecutionStarted, attribution.Execution{ID: "e1", Network: &attribution.NetworkPolicy{Allow: []string{"up.test"}}})
	// A policy that somehow does not compile fails closed.
	a.executionChanged(attribution.ExecutionStarted, attribution.Execution{ID: "e2", Network: &attribution.NetworkPolicy{Allow: []string{"a/b"}}})
	if got := a.scopes.For("e1", ""); len(got) != 1 || got[0].Level() != hostpolicy.LevelExecution {
		t.Fatalf("For(e1) = %v", got)
	}
	rq := hostpolicy.Request{Host: "up.test", Port: 443, Protocol: hostpolicy.ProtoHTTPS, Method: "CONNECT"}
	if d := a.engine.EvaluateScoped(context.Background(), rq, a.scopes.For("e2", "")); d.Reason != hostpolicy.ReasonPolicyDenied {
		t.Fatalf("uncompilable execution policy did not fail closed: %s", d.Reason)
	}
	a.executionChanged(attribution.ExecutionEnded, attribution.Execution{ID: "e1"})
	if got := a.scopes.For("e1", ""); got != nil {
		t.Fatalf("after end: %v", got)
	}
}

func TestSessionNetworkAPI(t *testing.T) {
	a := scopeAPI{engine: scopeTestEngine(t, map[string]string{"up.test": "allow", "bad.test": "deny"}), scopes: hostpolicy.NewScopes(attribution.DefaultSession)}
	mux := http.NewServeMux()
	for _, m := range []string{"GET", "PUT", "DELETE"} {
		mux.Handle(m+" /v1/sessions/{id}/network", a.sessionNetwork())
	}
	do := func(method, body string) (int, string) {
		rec := httptest.NewRecorder()
		mux.ServeHTTP(rec, httptest.NewRequest(method, "/v1/sessions/s1/network", strings.NewReader(body)))
		return rec.Code, rec.Body.String()
	}
	if c, b := do("PUT", `{"allow":["bad.test"],"mode":"limited"}`); c != 200 || !strings.Contains(b, "no effect") {
		t.Fatalf("PUT: %d %s", c, b)
	}
	if c, b := do("GET", ""); c != 200 || !strings.Contains(b, `"mode":"limited"`) {
		t.Fatalf("GET: %d %s", c, b)
	}
	for _, bad := range []string{`{"allow":["a/b"]}`, `{"allow":"x"}`, `{"nope":1}`, `{} {}`} {
		if c, _ := do("PUT", bad); c != 400 {
			t.Fatalf("PUT %s: %d", bad, c)
		}
	}
	if c, _ := do("DELETE", ""); c != 204 {
		t.Fatalf("DELETE: %d", c)
	}
	if c, _ := do("GET", ""); c != 404 {
		t.Fatalf("GET after DELETE: %d", c)
	}
}
