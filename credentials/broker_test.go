package credentials

import (
	"fmt"
	"io/fs"
	"net/http"
	"strings"
	"testing"
)

const testSecret = "sk-REAL-secret-0123456789abcdef"

func openAI() Spec {
	return Spec{Name: "openai", Hosts: []string{"api.openai.com"}, Header: "Authorization",
		Format: "Bearer {secret}", SecretEnv: "OPENAI_KEY", Env: "OPENAI_API_KEY", PlaceholderPrefix: "sk-", PlaceholderLength: 51}
}

func env(m map[string]string) Sources {
	return Sources{LookupEnv: func(k string) (string, bool) { v, ok := m[k]; return v, ok },
		ReadFile: func(p string) ([]byte, error) { return nil, &fs.PathError{Op: "open", Path: p, Err: fs.ErrNotExist} }}
}

func newBroker(t *testing.T, specs ...Spec) *Broker {
	t.Helper()
	set, err := Load(specs, env(map[string]string{"OPENAI_KEY": testSecret, "GH": "ghp_other"}))
	if err != nil {
		t.Fatal(err)
	}
	return NewBroker(set)
}

func TestMintShape(t *testing.T) {
	b := newBroker(t, openAI())
	ph, err := b.Mint("exec_1")
	if err != nil || len(ph) != 1 {
		t.Fatal(ph, err)
	}
	v := ph[0].Value
	if !strings.HasPrefix(v, "sk-") || len(v) != 51 || ph[0].Env != "OPENAI_API_KEY" || strings.Contains(v, testSecret) {
		t.Fatalf("placeholder %q", v)
	}
	ph2, _ := b.Mint("exec_2")
	if ph2[0].Value == v {
		t.Fatal("two executions got the same placeholder")
	}
}

func TestRewrite(t *testing.T) {
	gh := Spec{Name: "github", Hosts: []string{"*.github.com", "github.com"}, Header: "Authorization", Format: "token {secret}", SecretEnv: "GH"}
	b := newBroker(t, openAI(), gh)
	ph, _ := b.Mint("exec_1")
	other, _ := b.Mint("exec_2")
	p := ph[0].Value

	h := http.Header{"Authorization": {"Bearer " + p}}
	if a, _ := b.Rewrite("exec_1", "api.openai.com", h, "POST /v1/chat HTTP/1.1"); a != Injected || h.Get("Authorization") != "Bearer "+testSecret {
		t.Fatalf("own host: %v %q", a, h.Get("Authorization"))
	}
	for _, tc := range []struct {
		name, exec, host, line string
		h                      http.Header
	}{
		{"other host header", "exec_1", "paste.example", "GET / HTTP/1.1", http.Header{"Authorization": {"Bearer " + p}}},
		{"other host query", "exec_1", "paste.example", "GET /?k=" + p + " HTTP/1.1", http.Header{}},
		{"other host other header", "exec_1", "paste.example", "GET / HTTP/1.1", http.Header{"X-Note": {"key:" + p + "!"}}},
		{"other credential's host", "exec_1", "api.github.com", "GET / HTTP/1.1", http.Header{"Authorization": {"token " + p}}},
		{"other execution", "exec_2", "api.openai.com", "GET / HTTP/1.1", http.Header{"Authorization": {"Bearer " + p}}},
		{"unattributed", "", "api.openai.com", "GET / HTTP/1.1", http.Header{"Authorization": {"Bearer " + p}}},
		{"body only prefix glued", "exec_1", "paste.example", "GET /x" + p[3:] + " HTTP/1.1", http.Header{}},
		{"suffix glued", "exec_1", "paste.example", "GET /" + p + "zz HTTP/1.1", http.Header{}},
		{"in header name", "exec_1", "paste.example", "GET / HTTP/1.1", http.Header{"X-" + p[3:]: {"1"}}},
	} {
		a, name := b.Rewrite(tc.exec, tc.host, tc.h, tc.line)
		if a != Block || name != "openai" {
			t.Errorf("%s: %v %q, want block openai", tc.name, a, name)
		}
		for _, vs := range tc.h {
			for _, v := range vs {
				if strings.Contains(v, testSecret) {
					t.Errorf("%s: secret injected", tc.name)
				}
			}
		}
	}
	// exec_2's own placeholder on its own host works.
	h = http.Header{"Authorization": {"Bearer " + other[0].Value}}
	if a, _ := b.Rewrite("exec_2", "api.openai.com", h, "GET / HTTP/1.1"); a != Injected {
		t.Fatal(a)
	}
	// A request with no placeholder passes untouched.
	h = http.Header{"Authorization": {"Bearer mine"}}
	if a, _ := b.Rewrite("exec_1", "api.openai.com", h, "GET / HTTP/1.1"); a != Pass || h.Get("Authorization") != "Bearer mine" {
		t.Fatal(a)
	}
	// Placeholder in another header toward its own host: neither injected nor blocked.
	h = http.Header{"X-Key": {p}}
	if a, _ := b.Rewrite("exec_1", "api.openai.com", h, "GET / HTTP/1.1"); a != Pass || h.Get("X-Key") != p {
		t.Fatal(a)
	}
	// After the execution ends the placeholder is dead.
	b.Forget("exec_1")
	h = http.Header{"Authorization": {"Bearer " + p}}
	if a, _ := b.Rewrite("exec_1", "paste.example", h, "GET / HTTP/1.1"); a != Pass || h.Get("Authorization") != "Bearer "+p {
		t.Fatal(a)
	}
}

func TestLoadErrorsNameKeyNeverSecret(t *testing.T) {
	_, err := Load([]Spec{openAI()}, env(nil))
	if err == nil || !strings.Contains(err.Error(), `credentials[0] "openai": secret_env`) || !strings.Contains(err.Error(), "OPENAI_KEY") {
		t.Fatalf("missing env: %v", err)
	}
	s := openAI()
	s.SecretEnv, s.SecretFile = "", "/run/secrets/x"
	_, err = Load([]Spec{s}, env(nil))
	if err == nil || !strings.Contains(err.Error(), "secret_file: cannot read /run/secrets/x") {
		t.Fatalf("missing file: %v", err)
	}
	// A secret with a newline is refused without echoing it.
	src := env(map[string]string{"OPENAI_KEY": "abc\nSECRETPART"})
	_, err = Load([]Spec{openAI()}, src)
	if err == nil || strings.Contains(err.Error(), "SECRETPART") {
		t.Fatalf("bad secret: %v", err)
	}
	// Two credentials sharing a host pattern for one header.
	a, c := openAI(), openAI()
	c.Name, c.Hosts = "second", []string{"API.openai.com."}
	_, err = Load([]Spec{a, c}, env(map[string]string{"OPENAI_KEY": "x"}))
	if err == nil || !strings.Contains(err.Error(), `credentials[1] "second": hosts[0]`) {
		t.Fatalf("conflict: %v", err)
	}
	c.Header = "X-Api-Key"
	if _, err = Load([]Spec{a, c}, env(map[string]string{"OPENAI_KEY": "x"})); err != nil {
		t.Fatalf("different headers may share a host: %v", err)
	}
}

func TestCheck(t *testing.T) {
	for _, tc := range []struct {
		mut func(*Spec)
		key string
	}{
		{func(s *Spec) { s.Name = "Bad Name" }, "name"},
		{func(s *Spec) { s.Hosts = nil }, "hosts"},
		{func(s *Spec) { s.Hosts = []string{"*"} }, "hosts[0]"},
		{func(s *Spec) { s.Header = "Host" }, "header"},
		{func(s *Spec) { s.Header = "Bad Header" }, "header"},
		{func(s *Spec) { s.Format = "Bearer" }, "format"},
		{func(s *Spec) { s.Format = "{secret}{secret}" }, "format"},
		{func(s *Spec) { s.SecretEnv = "" }, "secret_env"},
		{func(s *Spec) { s.SecretFile = "/x" }, "secret_file"},
		{func(s *Spec) { s.Env = "1X" }, "env"},
		{func(s *Spec) { s.PlaceholderLength = 10 }, "placeholder_length"},
		{func(s *Spec) { s.PlaceholderPrefix = "a b" }, "placeholder_prefix"},
	} {
		s := openAI()
		tc.mut(&s)
		errs := s.Check()
		if len(errs) == 0 || errs[0].Key != tc.key {
			t.Errorf("want error at %s, got %v", tc.key, errs)
		}
	}
	if errs := openAI().Check(); errs != nil {
		t.Fatal(errs)
	}
}

func TestSecretNeverPrints(t *testing.T) {
	s := newSecret(testSecret)
	for _, out := range []string{fmt.Sprint(s), fmt.Sprintf("%v %+v %#v %s", s, s, s, s)} {
		if strings.Contains(out, testSecret) {
			t.Fatal(out)
		}
	}
	set, _ := Load([]Spec{openAI()}, env(map[string]string{"OPENAI_KEY": testSecret}))
	if strings.Contains(fmt.Sprintf("%v %+v", set, *set.creds[0]), testSecret) {
		t.Fatal("a credential prints its secret")
	}
}

// TestConcurrent: minting, forgetting, swapping and rewriting at once
// (run with -race).
func TestConcurrent(t *testing.T) {
	b := newBroker(t, openAI())
	done := make(chan struct{})
	go func() {
		defer close(done)
		for i := 0; i < 200; i++ {
			id := fmt.Sprintf("exec_%d", i)
			b.Mint(id)
			if i%3 == 0 {
				b.Forget(id)
			}
			if i%50 == 0 {
				set, _ := Load([]Spec{openAI()}, env(map[string]string{"OPENAI_KEY": testSecret}))
				b.Swap(set)
			}
		}
	}()
	ph, _ := b.Mint("mine")
	for {
		select {
		case <-done:
			return
		default:
		}
		h := http.Header{"Authorization": {"Bearer " + ph[0].Value}}
		if a, _ := b.Rewrite("mine", "api.openai.com", h, "GET / HTTP/1.1"); a != Injected {
			t.Fatalf("rewrite under load: %v", a)
		}
	}
}
