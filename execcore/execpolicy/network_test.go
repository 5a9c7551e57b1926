package execpolicy

import (
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
)

func writeFile(t *testing.T, path, content string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

func TestNetworkRulesCompileIntoDomainLists(t *testing.T) {
	dir := t.TempDir()
	writeFile(t, filepath.Join(dir, "net.rules"), `
network_rule(host="google.com", protocol="http", decision="allow")
network_rule(host="api.github.com", protocol="https", decision="allow")
network_rule(host="blocked.example.com", protocol="https", decision="deny")
network_rule(host="prompt-only.example.com", protocol="https", decision="prompt")
`)
	p, err := LoadDirs(dir)
	if err != nil {
		t.Fatal(err)
	}
	rules := p.NetworkRules()
	if len(rules) != 4 {
		t.Fatalf("got %d rules", len(rules))
	}
	if rules[1].Protocol != "https" || rules[1].Line != 3 || rules[1].File != filepath.Join(dir, "net.rules") {
		t.Fatalf("rule[1] = %+v", rules[1])
	}
	allowed, denied := p.NetworkDomains()
	if strings.Join(allowed, ",") != "google.com,api.github.com" || strings.Join(denied, ",") != "blocked.example.com" {
		t.Fatalf("allowed=%v denied=%v", allowed, denied)
	}
}

func TestNetworkRuleLastWordWins(t *testing.T) {
	p, err := LoadSource("x.rules", []byte(`
network_rule(host="a.test", protocol="https", decision="allow")
network_rule(host="a.test", protocol="http", decision="forbidden")
network_rule(host="b.test", protocol="http", decision="deny")
network_rule(host="b.test", protocol="http", decision="allow")
`))
	if err != nil {
		t.Fatal(err)
	}
	allowed, denied := p.NetworkDomains()
	if strings.Join(allowed, ",") != "b.test" || strings.Join(denied, ",") != "a.test" {
		t.Fatalf("allowed=%v denied=%v", allowed, denied)
	}
	if p.NetworkRules()[1].Decision != "deny" {
		t.Fatalf("forbidden must be stored as deny: %+v", p.NetworkRules()[1])
	}
}

func TestNetworkRuleHostNormalisation(t *testing.T) {
	cases := []struct{ in, want, err string }{
		{"Api.GitHub.com", "api.github.com", ""},
		{"  example.com.  ", "example.com", ""},
		{"example.com:443", "example.com", ""},
		{"[::1]:8080", "::1", ""},
		{"[::1]", "::1", ""},
		{"::1", "::1", ""},
		{"*", "", "wildcards are not allowed"},
		{"*.example.com", "", "wildcards are not allowed"},
		{"https://example.com", "", "without scheme or path"},
		{"example.com/path", "", "without scheme or path"},
		{"example.com?q", "", "without scheme or path"},
		{"", "", "cannot be empty"},
		{"   ", "", "cannot be empty"},
		{"...", "", "cannot be empty"},
		{"[::1", "", "invalid bracketed IPv6"},
		{"[::1]x", "", "unsupported suffix"},
		{"a b.com", "", "whitespace"},
		{`a"b.com`, "", "invalid character"},
	}
	for _, c := range cases {
		got, err := NormalizeNetworkRuleHost(c.in)
		if c.err != "" {
			if err == nil || !strings.Contains(err.Error(), c.err) {
				t.Errorf("%q: err=%v, want %q", c.in, err, c.err)
			}
			continue
		}
		if err != nil || got != c.want {
			t.Errorf("%q: got %q, %v; want %q", c.in, got, err, c.want)
		}
	}
}

func TestNetworkRuleLoadErrorsNameFileAndLine(t *testing.T) {
	cases := []struct{ src, want string }{
		{`network_rule(host="*", protocol="https", decision="allow")`, "wildcards are not allowed"},
		{`network_rule(host="a.com", protocol="ftp", decision="allow")`, "network_rule protocol must be one of http, https, socks5_tcp, socks5_udp (got ftp)"},
		{`network_rule(host="a.com", protocol="https", decision="maybe")`, "invalid decision: maybe"},
		{`network_rule(host="a.com", protocol="https")`, "missing argument for decision"},
		{`network_rule(host="a.com", protocol="https", decision="allow", justification=" ")`, "justification cannot be empty"},
		{`network_rule(host="a.com", protocol="https", decision="allow", port=1)`, "unexpected keyword argument"},
	}
	for _, c := range cases {
		_, err := LoadSource("/r/net.rules", []byte("# comment\n\n"+c.src+"\n"))
		if err == nil {
			t.Errorf("%s: loaded", c.src)
			continue
		}
		if !strings.Contains(err.Error(), c.want) || !strings.Contains(err.Error(), "/r/net.rules:3:") {
			t.Errorf("%s: error %q, want %q at /r/net.rules:3", c.src, err, c.want)
		}
	}
}

func TestNetworkRuleProtocolSpellings(t *testing.T) {
	for in, want := range map[string]string{"http": "http", "https": "https", "https_connect": "https", "http-connect": "https", "socks5_tcp": "socks5_tcp", "socks5_udp": "socks5_udp"} {
		got, err := ParseNetworkProtocol(in)
		if err != nil || got != want {
			t.Errorf("%s: %s %v", in, got, err)
		}
	}
}

func TestAppendNetworkRuleFormatAndDedupe(t *testing.T) {
	path := filepath.Join(t.TempDir(), "home", "rules", "default.rules")
	r := NetworkRule{Host: "Api.GitHub.com", Protocol: "https_connect", Decision: "allow", Justification: "Allow https_connect access to api.github.com"}
	added, err := AppendNetworkRule(path, r)
	if err != nil || !added {
		t.Fatalf("added=%v err=%v", added, err)
	}
	added, err = AppendNetworkRule(path, r)
	if err != nil || added {
		t.Fatalf("second append: added=%v err=%v", added, err)
	}
	got, _ := os.ReadFile(path)
	want := `network_rule(host="api.github.com", protocol="https", decision="allow", justification="Allow https_connect access to api.github.com")` + "\n"
	if string(got) != want {
		t.Fatalf("file = %q, want %q", got, want)
	}
	st, _ := os.Stat(path)
	if st.Mode().Perm() != 0o600 {
		t.Fatalf("mode %v", st.Mode())
	}
	// The written file loads back into the same rule.
	p, err := LoadDirs(filepath.Dir(path))
	if err != nil {
		t.Fatal(err)
	}
	nr := p.NetworkRules()
	if len(nr) != 1 || nr[0].Host != "api.github.com" || nr[0].Decision != "allow" || nr[0].Protocol != "https" {
		t.Fatalf("reloaded %+v", nr)
	}
}

func TestAppendNetworkRuleDenyAndErrors(t *testing.T) {
	path := filepath.Join(t.TempDir(), "rules", "default.rules")
	if _, err := AppendNetworkRule(path, NetworkRule{Host: "*.example.com", Protocol: "https", Decision: "deny"}); err == nil ||
		err.Error() != "invalid network rule: invalid rule: network_rule host must be a specific host; wildcards are not allowed" {
		t.Fatalf("err = %v", err)
	}
	if _, err := os.Stat(path); err == nil {
		t.Fatal("a rejected rule must not create the file")
	}
	if _, err := AppendNetworkRule(path, NetworkRule{Host: "x.test", Protocol: "https", Decision: "forbidden"}); err != nil {
		t.Fatal(err)
	}
	got, _ := os.ReadFile(path)
	if string(got) != `network_rule(host="x.test", protocol="https", decision="deny")`+"\n" {
		t.Fatalf("file = %q", got)
	}
}

func TestAppendInsertsMissingNewlineAndKeepsExisting(t *testing.T) {
	path := filepath.Join(t.TempDir(), "default.rules")
	writeFile(t, path, `prefix_rule(pattern=["ls"], decision="allow")`)
	if _, err := AppendNetworkRule(path, NetworkRule{Host: "a.test", Protocol: "http", Decision: "allow"}); err != nil {
		t.Fatal(err)
	}
	got, _ := os.ReadFile(path)
	want := `prefix_rule(pattern=["ls"], decision="allow")` + "\n" + `network_rule(host="a.test", protocol="http", decision="allow")` + "\n"
	if string(got) != want {
		t.Fatalf("file = %q", got)
	}
}

func TestAppendPrefixRule(t *testing.T) {
	path := filepath.Join(t.TempDir(), "rules", "default.rules")
	for i := 0; i < 2; i++ {
		if _, err := AppendPrefixRule(path, []string{"echo", "Hello, world!"}); err != nil {
			t.Fatal(err)
		}
	}
	got, _ := os.ReadFile(path)
	if string(got) != `prefix_rule(pattern=["echo", "Hello, world!"], decision="allow")`+"\n" {
		t.Fatalf("file = %q", got)
	}
	if _, err := AppendPrefixRule(path, nil); err != ErrEmptyPrefix {
		t.Fatalf("err = %v", err)
	}
}

func TestAppendConcurrentWritersKeepEveryLine(t *testing.T) {
	path := filepath.Join(t.TempDir(), "rules", "default.rules")
	var wg sync.WaitGroup
	for i := 0; i < 20; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			host := string(rune('a'+i)) + ".test"
			if _, err := AppendNetworkRule(path, NetworkRule{Host: host, Protocol: "https", Decision: "allow"}); err != nil {
				t.Error(err)
			}
			// A duplicate from another writer must be a no-op.
			if _, err := AppendNetworkRule(path, NetworkRule{Host: "dup.test", Protocol: "https", Decision: "allow"}); err != nil {
				t.Error(err)
			}
		}(i)
	}
	wg.Wait()
	p, err := LoadFiles(path)
	if err != nil {
		t.Fatal(err)
	}
	if n := len(p.NetworkRules()); n != 21 {
		t.Fatalf("got %d rules, want 21", n)
	}
}
