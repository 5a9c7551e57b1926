package attribution

import (
	"crypto/sha256"
	"testing"
)

func TestAdoptAttributesTokenAndRevokes(t *testing.T) {
	a, b := NewRegistry(), NewRegistry()
	e, tok, err := a.Register(ExecutionSpec{SessionID: "s", EnvironmentID: "env", Command: []string{"curl"}})
	if err != nil {
		t.Fatal(err)
	}
	key, ok := a.TokenKey(e.ID)
	if !ok || key != sha256.Sum256([]byte(tok)) {
		t.Fatal("token key")
	}
	var ended []string
	b.OnChange(func(kind string, x Execution) {
		if kind == ExecutionEnded {
			ended = append(ended, x.ID)
		}
	})
	if !b.Adopt(e, key) || b.Adopt(e, key) {
		t.Fatal("adopt once")
	}
	if got, ok := b.ByToken(tok); !ok || got.ID != e.ID {
		t.Fatal("adopted token not attributed")
	}
	if !b.Revoke(e.ID) || len(ended) != 1 {
		t.Fatal("revoke adopted")
	}
	if _, ok := b.ByToken(tok); ok {
		t.Fatal("token still valid after revoke")
	}
}

func TestMissResolverReadsThrough(t *testing.T) {
	a, b := NewRegistry(), NewRegistry()
	e, tok, _ := a.Register(ExecutionSpec{SessionID: "s", EnvironmentID: "env"})
	key, _ := a.TokenKey(e.ID)
	asked := 0
	b.SetMissResolver(func(k [32]byte) bool {
		asked++
		return k == key && b.Adopt(e, k)
	})
	if got, ok := b.ByToken(tok); !ok || got.ID != e.ID || asked != 1 {
		t.Fatalf("read-through: %v %v asked %d", got, ok, asked)
	}
	if _, ok := b.ByToken(tok); !ok || asked != 1 {
		t.Fatalf("a held token asked the resolver again (%d)", asked)
	}
	if _, ok := b.ByToken("unknown"); ok || asked != 2 {
		t.Fatalf("unknown token: %v asked %d", ok, asked)
	}
}
