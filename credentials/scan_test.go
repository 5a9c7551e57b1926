package credentials

import (
	"net/http"
	"strings"
	"testing"
)

// Every form the scanner promises, in the request line, a header value, a
// header name (any case) and a trailer: found, and blocked toward another
// host.
func TestScanEveryForm(t *testing.T) {
	b := newBroker(t, openAI())
	ph, _ := b.Mint("exec_1")
	p := ph[0].Value
	body := p[3:]
	forms := map[string]string{
		"as is": p, "without prefix": body, "glued left": "Z" + p, "glued right": p + "Z",
		"glued both": "Z" + p + "Z", "body glued both": "Zq" + body + "9z", "in a long run": strings.Repeat("a", 100) + body + strings.Repeat("b", 100),
	}
	for name, v := range forms {
		for where, req := range map[string]struct {
			h    http.Header
			line string
		}{
			"line":   {http.Header{}, "GET /?k=" + v + " HTTP/1.1"},
			"value":  {http.Header{"X-Note": {"k:" + v + "!"}}, "GET / HTTP/1.1"},
			"name":   {http.Header{"X-" + v: {"1"}}, "GET / HTTP/1.1"},
			"folded": {http.Header{http.CanonicalHeaderKey("X-" + v): {"1"}}, "GET / HTTP/1.1"},
			"lower":  {http.Header{"x-" + strings.ToLower(v): {"1"}}, "GET / HTTP/1.1"},
		} {
			if a, cred := b.Rewrite("exec_1", "paste.example", req.h, req.line); a != Block || cred != "openai" {
				t.Errorf("%s in the %s: %v %q", name, where, a, cred)
			}
			if where == "line" {
				continue
			}
			if a, cred := b.CheckTrailer("exec_1", "paste.example", req.h); a != Block || cred != "openai" {
				t.Errorf("%s in a trailer %s: %v %q", name, where, a, cred)
			}
		}
	}
	// Lower-cased text in a value is not the placeholder (values keep their case).
	if a, _ := b.Rewrite("exec_1", "paste.example", http.Header{"X-Note": {strings.ToLower(body)}}, "GET / HTTP/1.1"); a != Pass && strings.ToLower(body) != body {
		t.Errorf("a lower-cased body in a value: %v", a)
	}
	// Trailers: own placeholder toward its own host passes (nothing injected);
	// another execution's is blocked there.
	tr := http.Header{"Authorization": {"Bearer " + p}}
	if a, _ := b.CheckTrailer("exec_1", "api.openai.com", tr); a != Pass || tr.Get("Authorization") != "Bearer "+p {
		t.Errorf("own trailer on own host: %v %q", a, tr.Get("Authorization"))
	}
	if a, _ := b.CheckTrailer("exec_2", "api.openai.com", tr); a != Block {
		t.Errorf("another execution's trailer on the credential's host: %v", a)
	}
	// Glued in the credential's header toward its host: injected.
	h := http.Header{"Authorization": {"Bearer " + p}}
	if a, _ := b.Rewrite("exec_1", "api.openai.com", h, "GET / HTTP/1.1"); a != Injected {
		t.Errorf("own header: %v", a)
	}
	// Forgotten: dead everywhere, and the index is empty again.
	b.Forget("exec_1")
	if a, _ := b.CheckTrailer("exec_1", "paste.example", http.Header{"X": {"Z" + body + "Z"}}); a != Pass {
		t.Errorf("after Forget: %v", a)
	}
	if len(b.index.byLen) != 0 || len(b.index.byFold) != 0 {
		t.Errorf("index not emptied: %d lengths, %d folds", len(b.index.byLen), len(b.index.byFold))
	}
}

// Many live placeholders, of two lengths: each is found glued in text full
// of the others' near misses, and forgetting some leaves the rest found.
func TestScanManyLive(t *testing.T) {
	short := openAI()
	short.Name, short.Hosts, short.PlaceholderLength, short.SecretEnv = "short", []string{"short.example"}, 30, "GH"
	b := newBroker(t, openAI(), short)
	var all [][]Placeholder
	for i := 0; i < 300; i++ {
		ph, _ := b.Mint(string(rune('a'+i%26)) + strings.Repeat("x", i/26))
		all = append(all, ph)
	}
	for i, ph := range all {
		for _, p := range ph {
			body := p.Value[3:]
			v := "Z" + body[:10] + "-" + body[10:] + "Z" // split: not a placeholder
			if a, _ := b.Rewrite("nobody", "paste.example", http.Header{"X": {v}}, "GET / HTTP/1.1"); a != Pass {
				t.Fatalf("%d: a near miss blocked: %v", i, a)
			}
			if a, _ := b.Rewrite("nobody", "paste.example", http.Header{"X": {"0" + p.Value[3:] + "0"}}, "GET / HTTP/1.1"); a != Block {
				t.Fatalf("%d %s: glued placeholder not found", i, p.Credential)
			}
		}
		if i%2 == 0 {
			b.Forget(string(rune('a'+i%26)) + strings.Repeat("x", i/26))
		}
	}
	for i, ph := range all {
		a, _ := b.Rewrite("nobody", "paste.example", http.Header{"X": {"0" + ph[0].Value[3:] + "0"}}, "GET / HTTP/1.1")
		if want := map[bool]Action{true: Pass, false: Block}[i%2 == 0]; a != want {
			t.Fatalf("%d after forgetting the even ones: %v, want %v", i, a, want)
		}
	}
}

// Cluster mode: a placeholder held here is found glued on both sides with
// no store lookup; another replica's goes to the store only as the rule
// says (run edges, prefix-anchored windows), in one lookup per request;
// too many anchored candidates fail closed.
func TestScanRemoteCandidates(t *testing.T) {
	store := &memStore{owners: map[string]Bound{}}
	alnum := openAI()
	alnum.PlaceholderPrefix = "sk" // a prefix glued to its body
	a, b := newBroker(t, alnum), newBroker(t, alnum)
	a.SetRemote(store)
	b.SetRemote(store)
	phA, _ := a.Mint("exec_a")
	phB, _ := b.Mint("exec_b")
	bodyA, bodyB := phA[0].Value[2:], phB[0].Value[2:]

	// B's own, glued without its prefix: found locally, no lookup.
	n := store.lookups
	if act, _ := b.Rewrite("exec_b", "paste.example", http.Header{"X": {"Z" + bodyB + "Z"}}, "GET / HTTP/1.1"); act != Block || store.lookups != n {
		t.Fatalf("local glued: %v, %d lookups", act, store.lookups-n)
	}
	// A's through B, glued both sides behind its alphanumeric prefix: found
	// through the store, in one lookup for the whole request.
	n = store.lookups
	h := http.Header{"X": {"Z" + phA[0].Value + "Z"}, "Y": {strings.Repeat("Q", 60)}, "Cookie": {"a=" + strings.Repeat("r", 80)}}
	if act, cred := b.Rewrite("exec_a", "paste.example", h, "GET /?q="+strings.Repeat("w", 70)+" HTTP/1.1"); act != Block || cred != "openai" || store.lookups != n+1 {
		t.Fatalf("remote anchored: %v %q, %d lookups", act, cred, store.lookups-n)
	}
	// A's body glued both sides without any prefix, not held by B: not a
	// candidate (the documented limit), and no lookup for it.
	n = store.lookups
	if act, _ := b.Rewrite("exec_a", "paste.example", http.Header{"X": {"-Z" + bodyA + "Z-"}}, "GET / HTTP/1.1"); act != Pass || store.lookups != n+1 {
		t.Fatalf("remote unanchored: %v, %d lookups", act, store.lookups-n)
	}
	// Too many anchored windows in one request: blocked, no lookup at all.
	n = store.lookups
	many := strings.Repeat("sk", 40) + strings.Repeat("x", 60)
	if act, cred := b.Rewrite("exec_b", "paste.example", http.Header{"X": {many}}, "GET / HTTP/1.1"); act != Block || cred != TooManyCandidates || store.lookups != n {
		t.Fatalf("too many anchored: %v %q, %d lookups", act, cred, store.lookups-n)
	}
	// A trailer with a remote candidate costs its own lookup (the head's was
	// spent before the body).
	n = store.lookups
	if act, _ := b.CheckTrailer("exec_b", "paste.example", http.Header{"X-Sum": {phA[0].Value}}); act != Block || store.lookups != n+1 {
		t.Fatalf("remote trailer: %v, %d lookups", act, store.lookups-n)
	}
}
