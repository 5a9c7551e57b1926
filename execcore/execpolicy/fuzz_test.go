package execpolicy

import (
	"strings"
	"testing"
)

func FuzzRulesParser(f *testing.F) {
	for _, s := range []string{
		`prefix_rule(pattern=["git", ["status", "diff"]], decision="prompt", match=["git status"], not_match=["git log"])`,
		`network_rule(host="a.test", protocol="https", decision="deny", justification="x")`,
		`host_executable(name="git", paths=["/usr/bin/git", "~/bin/git"])`,
		"prefix_rule(\n", "for i in range(3):\n    prefix_rule(pattern=[str(i)])\n", `load("x", "y")`, "def f():\n  return f()\nf()",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, src []byte) {
		p, err := LoadSource("fuzz.rules", src)
		if err != nil {
			if p != nil {
				t.Fatal("policy returned with an error")
			}
			if !strings.HasPrefix(err.Error(), "fuzz.rules") {
				t.Fatalf("error does not name the file: %v", err)
			}
			return
		}
		for _, r := range p.NetworkRules() {
			if r.Host == "" || strings.Contains(r.Host, "*") {
				t.Fatalf("bad host accepted: %+v", r)
			}
			// Every accepted rule formats to a line that loads back.
			if _, err := LoadSource("rt.rules", []byte(FormatNetworkRule(r))); err != nil {
				t.Fatalf("round trip of %+v: %v", r, err)
			}
		}
		p.Check([][]string{{"git", "status"}, {"/usr/bin/git", "diff"}}, MatchOptions{ResolveHostExecutables: true}, func([]string) Decision { return Allow })
	})
}

func FuzzNetworkRuleHost(f *testing.F) {
	for _, s := range []string{"Api.GitHub.com", "[::1]:80", "a.b:443", "*.x", "https://x/", " x. ", "\u00fc.test"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, host string) {
		h, err := NormalizeNetworkRuleHost(host)
		if err != nil {
			return
		}
		h2, err := NormalizeNetworkRuleHost(h)
		if err != nil || h2 != h {
			t.Fatalf("not idempotent: %q -> %q -> %q (%v)", host, h, h2, err)
		}
	})
}
