package test

import (
	"fmt"
	"strings"
	"testing"
)

// TestDecisionFastPathAnswers is issue 29's decision work seen from a
// client: one curl keep-alive connection through the real netproxy (guard
// on, approvals off, audit on) asks for names allowed exactly, by "**."
// and "*." patterns and through an allow-listed prefix, names denied by
// pattern (one spelt in hex digits, which an IP-literal parser reads
// first), a static answer the guard refuses, and an allow-listed literal.
// Every answer and every audited pattern, reason and pinned address stays
// what SPEC §3 says, now that the decision allocates nothing and reports
// the policy's own pattern text and static answers.
func TestDecisionFastPathAnswers(t *testing.T) {
	up := StartUpstream(t, false)
	cfg := ProxyConfig{
		Domains: [][2]string{
			{"up.test", "allow"}, {"127.0.0.1/32", "allow"}, {"cafe.test", "allow"},
			{"**.wild.test", "allow"}, {"*.zone.test", "allow"}, {"priv.test", "allow"},
			{"*.bad.test", "deny"}, {"deadbeef.test", "deny"},
		},
		Hosts: map[string][]string{
			"up.test": {"127.0.0.1"}, "cafe.test": {"127.0.0.1"}, "wild.test": {"127.0.0.1"},
			"a.b.wild.test": {"127.0.0.1"}, "b.zone.test": {"127.0.0.1"}, "x.bad.test": {"127.0.0.1"},
			"deadbeef.test": {"127.0.0.1"}, "priv.test": {"10.0.0.1"},
		},
	}
	p := StartProxy(t, cfg)
	cases := []struct {
		host, code, decision, reason, pattern string
	}{
		{"up.test", "200", "allow", "", "up.test"},
		{"cafe.test", "200", "allow", "", "cafe.test"},
		{"wild.test", "200", "allow", "", "**.wild.test"},
		{"a.b.wild.test", "200", "allow", "", "**.wild.test"},
		{"b.zone.test", "200", "allow", "", "*.zone.test"},
		{"127.0.0.1", "200", "allow", "", "127.0.0.1/32"},
		{"x.bad.test", "403", "deny", "denied", "*.bad.test"},
		{"deadbeef.test", "403", "deny", "denied", "deadbeef.test"},
		{"priv.test", "403", "deny", "not_allowed_local", ""},
	}
	var urls []string
	for _, c := range cases {
		urls = append(urls, "-o", "/dev/null", up.URL(c.host, "/hello"))
	}
	// Twice over: the second round's decisions run on a warm connection.
	args := append([]string{"-x", "http://" + p.HTTP, "-w", "%{url_effective} %{http_code} %{num_connects}\\n"}, urls...)
	r := Curl(t, append(args, urls...)...)
	if r.Exit != 0 {
		t.Fatalf("curl exit %d: %s", r.Exit, r.Stderr)
	}
	lines := strings.Split(strings.TrimSpace(r.Stdout), "\n")
	if len(lines) != 2*len(cases) {
		t.Fatalf("curl printed %d lines, want %d:\n%s", len(lines), 2*len(cases), r.Stdout)
	}
	connects := 0
	for i, line := range lines {
		c := cases[i%len(cases)]
		var url, code string
		var n int
		fmt.Sscanf(line, "%s %s %d", &url, &code, &n)
		connects += n
		if url != up.URL(c.host, "/hello") || code != c.code {
			t.Errorf("%s: HTTP %s, want %s (curl: %q)", c.host, code, c.code, line)
		}
	}
	if connects >= len(lines) {
		t.Errorf("curl opened %d connections for %d requests: no keep-alive", connects, len(lines))
	}
	for _, c := range cases {
		got := auditDecisions(t, p.Audit, c.host, 2)
		if len(got) != 2 {
			t.Fatalf("%s: %d network_decision lines, want 2", c.host, len(got))
		}
		for _, l := range got {
			reason, _ := l["reason"].(string)
			pattern, _ := l["pattern"].(string)
			if l["decision"] != c.decision || reason != c.reason || pattern != c.pattern {
				t.Errorf("%s: audited %v/%q pattern %q, want %s/%q pattern %q", c.host, l["decision"], reason, pattern, c.decision, c.reason, c.pattern)
			}
			if c.decision == "allow" {
				if addrs, _ := l["addrs"].([]any); len(addrs) != 1 || addrs[0] != "127.0.0.1" {
					t.Errorf("%s: audited addrs %v, want [127.0.0.1]", c.host, l["addrs"])
				}
			}
		}
	}
	if up.Hits() != 12 {
		t.Errorf("upstream hits %d, want 12 (6 allowed names, twice)", up.Hits())
	}
}
