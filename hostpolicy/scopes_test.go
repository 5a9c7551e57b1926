package hostpolicy

import (
	"context"
	"testing"
)

func TestScopesForExecutionAndSession(t *testing.T) {
	s := NewScopes("default")
	kicks := 0
	s.Subscribe(func() { kicks++ })
	if s.For("e1", "s1") != nil {
		t.Fatal("scopes without any policy")
	}
	ex, err := BuildScope(LevelExecution, ScopeSpec{Allow: []string{"up.test"}})
	if err != nil {
		t.Fatal(err)
	}
	s.SetExecution("e1", ex)
	sc, _ := BuildScope(LevelSession, ScopeSpec{Deny: []string{"x.test"}})
	s.SetSession("s1", sc)
	if got := s.For("e1", "s1"); len(got) != 2 || got[0].Level() != "session" || got[1].Level() != "execution" {
		t.Fatalf("For = %v", got)
	}
	// The pipeline asks the store (RunOptions.ScopeSource).
	e := NewEngine(mustCompile(t, map[string]string{"x.test": "allow", "up.test": "allow"}, false), nil)
	rq := Request{Host: "x.test", Port: 443, Protocol: ProtoHTTPS, Method: "CONNECT", ExecutionID: "e1", SessionID: "s1"}
	if d := e.Run(context.Background(), rq, RunOptions{ScopeSource: s}); d.Reason != ReasonPolicyDenied || d.Level != LevelSession {
		t.Fatalf("session deny through the store: %s level %q", d.Reason, d.Level)
	}
	s.SetExecution("e1", nil)
	if got := s.For("e1", "s1"); len(got) != 1 {
		t.Fatalf("after end: %v", got)
	}
	// Unattributed requests belong to the default session.
	s.SetSession("default", sc)
	if got := s.For("", ""); len(got) != 1 {
		t.Fatalf("default session: %v", got)
	}
	if kicks != 2 {
		t.Fatalf("kicks %d", kicks)
	}
}
