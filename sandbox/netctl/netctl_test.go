package netctl

import (
	"context"
	"errors"
	"net/http"
	"path/filepath"
	"testing"
	"time"

	"github.com/netproxy/netproxy/attribution"
)

// startControl serves the real control API (attribution.ControlServer) on
// a unix socket.
func startControl(t *testing.T, approvals http.Handler) (*attribution.Registry, *Client) {
	t.Helper()
	reg := attribution.NewRegistry()
	srv := attribution.NewControlServer(reg, attribution.ProxyInfo{HTTP: "127.0.0.1:3128", SOCKS5: "127.0.0.1:1080"}, approvals)
	path := filepath.Join(t.TempDir(), "control.sock")
	ln, err := attribution.ListenUnix(path)
	if err != nil {
		t.Fatal(err)
	}
	go srv.Serve(ln)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		srv.Shutdown(ctx)
	})
	return reg, New(path)
}

func TestRegisterEventsUnregister(t *testing.T) {
	reg, c := startControl(t, nil)
	ctx := context.Background()
	r, err := c.Register(ctx, attribution.ExecutionSpec{SessionID: "s", EnvironmentID: "e", Command: []string{"true"}, Cwd: "/"})
	if err != nil {
		t.Fatal(err)
	}
	if r.HTTPProxy != "127.0.0.1:3128" || r.SOCKS5Proxy != "127.0.0.1:1080" || len(r.Token) < 16 {
		t.Fatalf("registration %+v", r)
	}
	if e, ok := reg.ByToken(r.Token); !ok || e.ID != r.ExecutionID {
		t.Fatal("the registry does not know the token")
	}
	events, err := c.Events(ctx, r.ExecutionID)
	if err != nil {
		t.Fatal(err)
	}
	reg.Publish(r.ExecutionID, attribution.Event{Type: attribution.EventNetworkDecision, Host: "x.test", Port: 80, Decision: "deny", Reason: "denied"})
	if err := c.Unregister(ctx, r.ExecutionID); err != nil {
		t.Fatal(err)
	}
	var got []attribution.Event
	for ev := range events {
		got = append(got, ev)
	}
	if len(got) != 2 || got[0].Host != "x.test" || got[1].Type != attribution.EventExecutionEnded {
		t.Fatalf("events %+v", got)
	}
	if _, ok := reg.ByToken(r.Token); ok {
		t.Fatal("token still valid after unregister")
	}
	var se *StatusError
	if err := c.Unregister(ctx, r.ExecutionID); !errors.As(err, &se) || se.Status != http.StatusNotFound {
		t.Fatalf("second unregister: %v", err)
	}
}

func TestApprovalDisabledIs503(t *testing.T) {
	_, c := startControl(t, nil)
	_, err := c.RequestApproval(context.Background(), ApprovalRequest{SessionID: "s", EnvironmentID: "e", Command: []string{"x"}, Cwd: "/"})
	var se *StatusError
	if !errors.As(err, &se) || se.Status != http.StatusServiceUnavailable {
		t.Fatalf("err = %v", err)
	}
}

func TestApprovalAnswer(t *testing.T) {
	_, c := startControl(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.Write([]byte(`{"id":"a1","decision":"allow_once","approved":true,"reviewer":"user"}`))
	}))
	a, err := c.RequestApproval(context.Background(), ApprovalRequest{Command: []string{"x"}})
	if err != nil || !a.Approved || a.Decision != "allow_once" {
		t.Fatalf("%+v %v", a, err)
	}
}

func TestUnreachableSocketNamesTheFix(t *testing.T) {
	c := New(filepath.Join(t.TempDir(), "missing.sock"))
	_, err := c.Register(context.Background(), attribution.ExecutionSpec{})
	if err == nil || !errors.Is(err, err) || !contains(err.Error(), "netproxy serve") {
		t.Fatalf("err = %v", err)
	}
}

func contains(s, sub string) bool {
	for i := 0; i+len(sub) <= len(s); i++ {
		if s[i:i+len(sub)] == sub {
			return true
		}
	}
	return false
}
