package hostpolicy

import (
	"context"
	"testing"
)

// An authenticated client's narrower policy is a scope under its session
// id: it applies to the client's requests only (never to an execution's,
// nor another session's), a session policy adds to it, and a block by it
// is policy_denied at level client.
func TestScopesClients(t *testing.T) {
	s := NewScopes("default")
	kicks := 0
	s.Subscribe(func() { kicks++ })
	cs, err := BuildScope(LevelClient, ScopeSpec{Deny: []string{"x.test"}})
	if err != nil {
		t.Fatal(err)
	}
	s.SetClients(map[string]*Scope{"client:ci": cs})
	if got := s.For("", "client:ci"); len(got) != 1 || got[0].Level() != LevelClient {
		t.Fatalf("client scopes: %v", got)
	}
	if s.For("", "client:dev") != nil || s.For("", "") != nil || s.For("e1", "client:ci") != nil {
		t.Fatal("a client's policy applied to someone else")
	}
	ss, _ := BuildScope(LevelSession, ScopeSpec{Deny: []string{"y.test"}})
	s.SetSession("client:ci", ss)
	if got := s.For("", "client:ci"); len(got) != 2 || got[0].Level() != LevelClient || got[1].Level() != LevelSession {
		t.Fatalf("client + session scopes: %v", got)
	}
	e := NewEngine(mustCompile(t, map[string]string{"x.test": "allow"}, false), nil)
	rq := Request{Host: "x.test", Port: 80, Protocol: ProtoHTTP, Method: "GET", SessionID: "client:ci"}
	d := e.Run(context.Background(), rq, RunOptions{ScopeSource: s})
	if d.Reason != ReasonPolicyDenied || d.Level != LevelClient || d.Message() != "Blocked by this client's network policy." {
		t.Fatalf("client deny: %s level %q %q", d.Reason, d.Level, d.Message())
	}
	rq.SessionID = "default"
	if d := e.Run(context.Background(), rq, RunOptions{ScopeSource: s}); d.Reason == ReasonPolicyDenied {
		t.Fatalf("the default session got the client's policy: %s", d.Reason)
	}
	s.SetClients(nil)
	if got := s.For("", "client:ci"); len(got) != 1 || got[0].Level() != LevelSession {
		t.Fatalf("after the clients were removed: %v", got)
	}
	if kicks != 3 {
		t.Fatalf("subscribers told %d times, want 3", kicks)
	}
}

func TestProxyAuthDecisionText(t *testing.T) {
	d := Decision{Verdict: Deny, Reason: ReasonProxyAuthRequired, Source: SourceProxyState, Cause: CauseProxyAuthFailed}
	if d.Message() != ProxyAuthMessage || d.BlockCause() != CauseProxyAuthFailed || d.XProxyError() != "blocked-by-policy" {
		t.Fatalf("%q %q %q", d.Message(), d.BlockCause(), d.XProxyError())
	}
}
