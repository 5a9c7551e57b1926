package credentials

import (
	"errors"
	"net/http"
	"strings"
	"testing"
)

// memStore is a RemoteStore over a map (another replica's placeholders).
type memStore struct {
	owners  map[string]Bound
	lookups int
	asked   int
	down    bool
}

func (m *memStore) Publish(execID string, bodies map[string]string) {
	for b, c := range bodies {
		m.owners[b] = Bound{Exec: execID, Cred: c}
	}
}

func (m *memStore) Lookup(bodies []string) (map[string]Bound, error) {
	m.lookups++
	m.asked += len(bodies)
	if m.down {
		return nil, errors.New("down")
	}
	out := map[string]Bound{}
	for _, b := range bodies {
		if o, ok := m.owners[b]; ok {
			out[b] = o
		}
	}
	return out, nil
}

func TestRemotePlaceholders(t *testing.T) {
	store := &memStore{owners: map[string]Bound{}}
	a, b := newBroker(t, openAI()), newBroker(t, openAI())
	a.SetRemote(store)
	b.SetRemote(store)
	ph, _ := a.Mint("exec_a")
	body := ph[0].Value[len(openAI().PlaceholderPrefix):]
	if store.owners[body].Exec != "exec_a" {
		t.Fatalf("mint did not publish: %v", store.owners)
	}
	// Injected on B for A's execution; one lookup for every candidate of the request.
	h := http.Header{"Authorization": {"Bearer " + ph[0].Value}, "X-Other": {strings.Repeat("Z", 60)}}
	if act, _ := b.Rewrite("exec_a", "api.openai.com", h, "GET /?x="+ph[0].Value+" api.openai.com"); act != Injected || h.Get("Authorization") != "Bearer "+testSecret {
		t.Fatalf("B: %v %q", act, h.Get("Authorization"))
	}
	if store.lookups != 1 {
		t.Fatalf("%d lookups for one request, want 1", store.lookups)
	}
	// Toward another host, and from another execution: blocked.
	if act, name := b.Rewrite("exec_a", "paste.test", http.Header{}, "GET /?k="+ph[0].Value+" paste.test"); act != Block || name != "openai" {
		t.Fatalf("other host: %v %s", act, name)
	}
	if act, _ := b.Rewrite("exec_b", "api.openai.com", http.Header{"Authorization": {"Bearer " + ph[0].Value}}, "GET / api.openai.com"); act != Block {
		t.Fatalf("other execution: %v", act)
	}
	// No candidate: no lookup. Store down with a candidate: blocked.
	n := store.lookups
	if act, _ := b.Rewrite("exec_b", "paste.test", http.Header{"Accept": {"*/*"}}, "GET /short paste.test"); act != Pass || store.lookups != n {
		t.Fatalf("no candidate: %v, %d lookups", act, store.lookups-n)
	}
	store.down = true
	if act, name := b.Rewrite("exec_b", "paste.test", http.Header{}, "GET /?k="+strings.Repeat("Q", 48)+" paste.test"); act != Block || name != UnverifiedCredential {
		t.Fatalf("store down: %v %s", act, name)
	}
}
