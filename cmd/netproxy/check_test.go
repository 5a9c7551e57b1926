package main

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func writeCheckConfig(t *testing.T, body string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "netproxy.toml")
	if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

const checkConfig = `
[network]
allow_local_binding = false
[network.domains]
"ok.test" = "allow"
"*.wild.test" = "allow"
"bad.test" = "deny"
"127.0.0.1" = "allow"
[dns.hosts]
"ok.test" = ["93.184.216.34"]
"a.wild.test" = ["93.184.216.34", "2606:4700::1111"]
"unknown.test" = ["93.184.216.34"]
"private.test" = ["10.0.0.5"]
[approvals]
enabled = %s
policy = "%s"
`

func runNetproxyCLI(args ...string) (int, string, string) {
	var out, errb bytes.Buffer
	code := run(args, &out, &errb)
	return code, out.String(), errb.String()
}

func TestCheckExitCodesAndJSON(t *testing.T) {
	off := writeCheckConfig(t, fillCheckConfig(checkConfig, "false", "on-request"))
	ask := writeCheckConfig(t, fillCheckConfig(checkConfig, "true", "on-request"))
	never := writeCheckConfig(t, fillCheckConfig(checkConfig, "true", "never"))
	cases := []struct {
		cfg, target                    string
		args                           []string
		exit                           int
		decision, reason, source, host string
		port                           float64
	}{
		{off, "ok.test", nil, 0, "allow", "", "baseline_policy", "ok.test", 80},
		{off, "A.Wild.Test.:8443", nil, 0, "allow", "", "baseline_policy", "a.wild.test", 8443},
		{off, "bad.test", nil, 10, "deny", "denied", "baseline_policy", "bad.test", 80},
		{off, "unknown.test", nil, 10, "deny", "not_allowed", "baseline_policy", "unknown.test", 80},
		{off, "private.test", nil, 10, "deny", "not_allowed_local", "baseline_policy", "private.test", 80},
		{off, "[::1]:443", nil, 10, "deny", "not_allowed_local", "baseline_policy", "::1", 443},
		{off, "127.1", nil, 0, "allow", "", "baseline_policy", "127.0.0.1", 80},
		{off, "ok.test", []string{"--protocol", "https"}, 0, "allow", "", "baseline_policy", "ok.test", 443},
		{ask, "unknown.test", nil, 11, "ask", "not_allowed", "decider", "unknown.test", 80},
		{ask, "bad.test", nil, 10, "deny", "denied", "baseline_policy", "bad.test", 80},
		{ask, "private.test", nil, 10, "deny", "not_allowed_local", "baseline_policy", "private.test", 80},
		{never, "unknown.test", nil, 10, "deny", "not_allowed", "decider", "unknown.test", 80},
	}
	for _, c := range cases {
		args := append([]string{"check", "--config", c.cfg, "--json"}, c.args...)
		code, stdout, stderr := runNetproxyCLI(append(args, c.target)...)
		if code != c.exit {
			t.Errorf("%s: exit %d, want %d (%s)", c.target, code, c.exit, stderr)
			continue
		}
		var m map[string]any
		if err := json.Unmarshal([]byte(stdout), &m); err != nil {
			t.Errorf("%s: not JSON: %v\n%s", c.target, err, stdout)
			continue
		}
		if m["decision"] != c.decision || m["reason"] != c.reason || m["source"] != c.source || m["host"] != c.host || m["port"] != c.port {
			t.Errorf("%s: got %v", c.target, m)
		}
		for _, f := range []string{"protocol", "pattern", "resolved", "steps"} {
			if _, ok := m[f]; !ok {
				t.Errorf("%s: JSON lacks %q", c.target, f)
			}
		}
	}
	// the resolved addresses are reported
	_, stdout, _ := runNetproxyCLI("check", "--config", off, "--json", "a.wild.test")
	if !strings.Contains(stdout, "2606:4700::1111") || !strings.Contains(stdout, `"pattern": "*.wild.test"`) {
		t.Errorf("resolved/pattern missing:\n%s", stdout)
	}
	// human output, flags after the target
	code, stdout, _ := runNetproxyCLI("check", "bad.test", "--config", off)
	if code != 10 || !strings.Contains(stdout, "Domain denied by the sandbox policy.") {
		t.Errorf("human output: %d\n%s", code, stdout)
	}
}

func TestCheckUsageAndConfigErrors(t *testing.T) {
	bad := writeCheckConfig(t, "[network]\ncolour = 1\n")
	for _, args := range [][]string{
		{"check"},
		{"check", "a.test", "b.test"},
		{"check", "--protocol", "gopher", "a.test"},
		{"check", "a.test:notaport"},
		{"check", "--config", bad, "a.test"},
		{"check", "--config", filepath.Join(t.TempDir(), "missing.toml"), "a.test"},
	} {
		if code, _, _ := runNetproxyCLI(args...); code != 2 {
			t.Errorf("%v: exit %d, want 2", args, code)
		}
	}
	// the embedded default: nothing allowed, approvals on → ask for a public literal
	if code, stdout, _ := runNetproxyCLI("check", "--json", "93.184.216.34"); code != 11 || !strings.Contains(stdout, `"decision": "ask"`) {
		t.Errorf("default config: exit %d\n%s", code, stdout)
	}
}

func TestConfigValidate(t *testing.T) {
	good := writeCheckConfig(t, "[network]\nmode = \"full\"\n[network.domains]\n\"example.com\" = \"allow\"\n")
	if code, stdout, _ := runNetproxyCLI("config", "validate", good); code != 0 || !strings.Contains(stdout, "OK") {
		t.Errorf("valid file: %d %s", code, stdout)
	}
	bad := writeCheckConfig(t, "[network]\nmode = \"partial\"\ncolour = 1\n[network.domains]\n\"*\" = \"deny\"\n")
	code, _, stderr := runNetproxyCLI("config", "validate", bad)
	if code != 2 {
		t.Fatalf("invalid file: exit %d", code)
	}
	for _, w := range []string{"network.mode", "network.colour", `network.domains."*"`, ":2", ":3", ":5"} {
		if !strings.Contains(stderr, w) {
			t.Errorf("validate output lacks %q:\n%s", w, stderr)
		}
	}
	if code, _, _ := runNetproxyCLI("config", "check", good); code != 2 {
		t.Errorf("unknown config subcommand: exit %d", code)
	}
}

// A wrong-typed value (dns.timeout) must not hide the file's other problems:
// `config validate` lists all six, each with file:line and key, and exits 2.
func TestConfigValidateReportsEveryError(t *testing.T) {
	bad := writeCheckConfig(t, `[network]
mode = "fast"
bogus = 1

[network.domains]
"*" = "deny"
"ok.test" = "maybe"

[dns]
timeout = "xx"

[approvals]
policy = "sometimes"
`)
	code, _, stderr := runNetproxyCLI("config", "validate", bad)
	if code != 2 {
		t.Fatalf("invalid file: exit %d\n%s", code, stderr)
	}
	for _, w := range []string{"netproxy.toml:2: network.mode", "netproxy.toml:3: network.bogus",
		`netproxy.toml:6: network.domains."*"`, `netproxy.toml:7: network.domains."ok.test"`,
		"netproxy.toml:10:11: dns.timeout", "netproxy.toml:13: approvals.policy", "6 error(s)"} {
		if !strings.Contains(stderr, w) {
			t.Errorf("validate output lacks %q:\n%s", w, stderr)
		}
	}
}

func fillCheckConfig(format string, a ...any) string {
	r := format
	for _, v := range a {
		r = strings.Replace(r, "%s", v.(string), 1)
	}
	return r
}

// With network.enabled = false `netproxy check` reports the kill switch:
// exit 10, deny/proxy_disabled/proxy_state, one "mode" step — even for a
// host the allow list names and with approvals on (nothing may ask).
func TestCheckDisabledProxy(t *testing.T) {
	disabled := writeCheckConfig(t, strings.Replace(fillCheckConfig(checkConfig, "true", "on-request"),
		"[network]\n", "[network]\nenabled = false\n", 1))
	for _, target := range []string{"ok.test", "unknown.test", "bad.test", "127.0.0.1:8080"} {
		for _, proto := range []string{"http", "https", "socks5"} {
			code, stdout, stderr := runNetproxyCLI("check", "--config", disabled, "--json", "--protocol", proto, target)
			if code != 10 {
				t.Errorf("%s %s: exit %d, want 10 (%s)", proto, target, code, stderr)
				continue
			}
			var out struct {
				Host, Decision, Reason, Source string
				Resolved                       []string
				Steps                          []struct{ Step, Result, Detail string }
			}
			if err := json.Unmarshal([]byte(stdout), &out); err != nil {
				t.Fatalf("%s: not JSON: %v\n%s", target, err, stdout)
			}
			if out.Decision != "deny" || out.Reason != "proxy_disabled" || out.Source != "proxy_state" || len(out.Resolved) != 0 {
				t.Errorf("%s %s: %+v", proto, target, out)
			}
			if len(out.Steps) != 1 || out.Steps[0].Step != "mode" || out.Steps[0].Result != "block" || out.Steps[0].Detail != "network.enabled = false" {
				t.Errorf("%s %s: steps %+v", proto, target, out.Steps)
			}
		}
	}
	code, stdout, _ := runNetproxyCLI("check", "--config", disabled, "ok.test")
	if code != 10 || !strings.Contains(stdout, "mode") || !strings.Contains(stdout, "network proxy is disabled") {
		t.Errorf("human output: %d\n%s", code, stdout)
	}
}

// --client NAME judges as an authenticated proxy client (SPEC §4.4): its
// narrower policy applies; an unknown name is a usage error.
func TestCheckClient(t *testing.T) {
	cfg := writeCheckConfig(t, fillCheckConfig(checkConfig, "false", "on-request")+`
[[proxy_auth.clients]]
name = "dev"
secret_env = "NETPROXY_TEST_UNUSED"
deny = ["ok.test"]
`)
	code, out, errs := runNetproxyCLI("check", "--config", cfg, "--json", "--client", "dev", "ok.test")
	var o checkOutput
	if err := json.Unmarshal([]byte(out), &o); err != nil || code != 10 || o.Reason != "policy_denied" || o.Level != "client" {
		t.Fatalf("--client dev: exit %d %+v %v %s", code, o, err, errs)
	}
	if code, _, _ := runNetproxyCLI("check", "--config", cfg, "ok.test"); code != 0 {
		t.Fatalf("without --client: exit %d", code)
	}
	if code, _, errs := runNetproxyCLI("check", "--config", cfg, "--client", "nobody", "ok.test"); code != 2 || !strings.Contains(errs, "nobody") {
		t.Fatalf("--client nobody: exit %d %s", code, errs)
	}
}
