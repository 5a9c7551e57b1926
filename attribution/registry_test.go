package attribution

import (
	"sync"
	"testing"
)

func TestRegistryLifecycle(t *testing.T) {
	r := NewRegistry()
	var mu sync.Mutex
	var changes []string
	r.OnChange(func(kind string, e Execution) {
		mu.Lock()
		changes = append(changes, kind+":"+e.ID)
		mu.Unlock()
	})
	e, tok, err := r.Register(ExecutionSpec{SessionID: "s", EnvironmentID: "e", Command: []string{"ls"}})
	if err != nil {
		t.Fatal(err)
	}
	if len(tok) < 22 {
		t.Fatalf("token too short for 128 bits: %d chars", len(tok))
	}
	if got, ok := r.ByToken(tok); !ok || got.ID != e.ID {
		t.Fatalf("ByToken = %v %t", got, ok)
	}
	if _, ok := r.ByToken(tok + "x"); ok {
		t.Fatal("a wrong token matched")
	}
	e2, tok2, _ := r.Register(ExecutionSpec{SessionID: "s", EnvironmentID: "f"})
	if e2.ID == e.ID || tok2 == tok {
		t.Fatal("ids or tokens repeat")
	}
	if n := len(r.ActiveInSession("s")); n != 2 {
		t.Fatalf("ActiveInSession = %d, want 2", n)
	}
	if a := r.ActiveInEnvironment("f"); len(a) != 1 || a[0].ID != e2.ID {
		t.Fatalf("ActiveInEnvironment = %v", a)
	}
	ch, cancel, ok := r.Subscribe(e.ID)
	if !ok {
		t.Fatal("Subscribe on an active execution failed")
	}
	defer cancel()
	r.Publish(e.ID, Event{Type: EventNetworkDecision, Host: "h"})
	if ev := <-ch; ev.Host != "h" || ev.Time.IsZero() {
		t.Fatalf("event %+v", ev)
	}
	if !r.Revoke(e.ID) || r.Revoke(e.ID) {
		t.Fatal("Revoke should succeed once")
	}
	if ev := <-ch; ev.Type != EventExecutionEnded {
		t.Fatalf("after revoke got %+v, want execution_ended", ev)
	}
	if _, open := <-ch; open {
		t.Fatal("stream still open after revoke")
	}
	if _, ok := r.ByToken(tok); ok {
		t.Fatal("revoked token still accepted")
	}
	if _, ok := r.Get(e.ID); ok {
		t.Fatal("revoked execution still active")
	}
	if _, _, ok := r.Subscribe(e.ID); ok {
		t.Fatal("Subscribe on an ended execution succeeded")
	}
	mu.Lock()
	defer mu.Unlock()
	if len(changes) != 3 || changes[2] != ExecutionEnded+":"+e.ID {
		t.Fatalf("changes %v", changes)
	}
}

func TestRegistryRejectsIncompleteSpec(t *testing.T) {
	r := NewRegistry()
	if _, _, err := r.Register(ExecutionSpec{EnvironmentID: "e"}); err == nil {
		t.Fatal("missing session_id accepted")
	}
	if _, _, err := r.Register(ExecutionSpec{SessionID: "s"}); err == nil {
		t.Fatal("missing environment_id accepted")
	}
}

func TestPublishNeverBlocks(t *testing.T) {
	r := NewRegistry()
	e, _, _ := r.Register(ExecutionSpec{SessionID: "s", EnvironmentID: "e"})
	_, cancel, _ := r.Subscribe(e.ID)
	defer cancel()
	for i := 0; i < subscriberBuffer*3; i++ {
		r.Publish(e.ID, Event{Type: EventNetworkDecision})
	}
}

func TestSubscribeCancelConcurrentWithRevoke(t *testing.T) {
	r := NewRegistry()
	e, _, _ := r.Register(ExecutionSpec{SessionID: "s", EnvironmentID: "e"})
	var wg sync.WaitGroup
	for i := 0; i < 50; i++ {
		_, cancel, _ := r.Subscribe(e.ID)
		wg.Add(1)
		go func() { defer wg.Done(); cancel(); cancel() }()
	}
	r.Revoke(e.ID)
	wg.Wait()
}
