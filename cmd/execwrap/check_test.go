package main

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"sort"
	"strings"
	"testing"
)

// runCheckCLI runs `execwrap check` in-process with a private
// $NETPROXY_HOME.
func runCheckCLI(t *testing.T, stdin string, args ...string) (int, string, string) {
	t.Helper()
	var out, errb bytes.Buffer
	code := run(append([]string{"check"}, args...), strings.NewReader(stdin), &out, &errb)
	return code, out.String(), errb.String()
}

func isolateHome(t *testing.T) string {
	t.Helper()
	home := t.TempDir()
	t.Setenv("NETPROXY_HOME", home)
	t.Setenv("HOME", home)
	return home
}

func writeRules(t *testing.T, dir, name, content string) string {
	t.Helper()
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	return dir
}

func TestCheckJSONShapeAndExitCodes(t *testing.T) {
	isolateHome(t)
	rules := writeRules(t, t.TempDir(), "p.rules", `prefix_rule(pattern=["rm"], decision="forbidden", justification="destructive")
prefix_rule(pattern=["git", "push"], decision="prompt")
prefix_rule(pattern=["git"])
`)
	cases := []struct {
		args []string
		code int
		kind string
	}{
		{[]string{"--", "git", "status"}, 0, "skip"},
		{[]string{"--", "git", "push", "origin"}, 11, "needs_approval"},
		{[]string{"--", "rm", "x"}, 10, "forbidden"},
		{[]string{"--approval-policy", "never", "--", "git", "push"}, 10, "forbidden"},
	}
	for _, c := range cases {
		args := append([]string{"--json", "--rules", rules, "--cwd", "/w"}, c.args...)
		code, stdout, stderr := runCheckCLI(t, "", args...)
		if code != c.code {
			t.Fatalf("%q: exit %d, want %d (stderr %s)", c.args, code, c.code, stderr)
		}
		var m map[string]any
		if err := json.Unmarshal([]byte(stdout), &m); err != nil {
			t.Fatalf("%q: %v: %s", c.args, err, stdout)
		}
		if got := keys(m); !reflect.DeepEqual(got, []string{"approval_identity", "cwd", "evaluation", "handler_argv", "policy", "requirement", "shell"}) {
			t.Fatalf("top-level keys %q", got)
		}
		req := m["requirement"].(map[string]any)
		if got := keys(req); !reflect.DeepEqual(got, []string{"bypass_sandbox", "kind", "proposed_amendment", "reason"}) {
			t.Fatalf("requirement keys %q", got)
		}
		if req["kind"] != c.kind {
			t.Fatalf("%q: kind %v", c.args, req["kind"])
		}
		pol := m["policy"].(map[string]any)
		if got := keys(pol); !reflect.DeepEqual(got, []string{"commands", "origin", "used_complex_parsing"}) {
			t.Fatalf("policy keys %q", got)
		}
		ev := m["evaluation"].(map[string]any)
		for _, r := range ev["matched_rules"].([]any) {
			rm := r.(map[string]any)
			if rm["kind"] == "prefix" && rm["matched_prefix"] == nil || rm["kind"] == "heuristics" && rm["command"] == nil {
				t.Fatalf("match %v", rm)
			}
		}
	}
	// The forbidden reason carries the justification.
	_, stdout, _ := runCheckCLI(t, "", "--json", "--rules", rules, "--", "rm", "-rf", "/x")
	if !strings.Contains(stdout, "`rm -rf /x` rejected: destructive") {
		t.Fatalf("%s", stdout)
	}
}

func keys(m map[string]any) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

func TestCheckRulesErrorsExit2NamingFileLine(t *testing.T) {
	isolateHome(t)
	good := writeRules(t, t.TempDir(), "good.rules", `prefix_rule(pattern=["ls"])`)
	bad := writeRules(t, t.TempDir(), "bad.rules", "prefix_rule(pattern=[\"ls\"])\n\nprefix_rule(pattern=[\"x y\"], match=[\"x y z\"])\n")
	code, stdout, stderr := runCheckCLI(t, "", "--json", "--rules", good, "--rules", bad, "--", "ls")
	if code != 2 || stdout != "" || !strings.Contains(stderr, "bad.rules:3:") {
		t.Fatalf("exit %d stdout %q stderr %q", code, stdout, stderr)
	}
	// A broken file in $NETPROXY_HOME/rules also stops evaluation.
	home := isolateHome(t)
	writeRules(t, filepath.Join(home, "rules"), "default.rules", `network_rule(host="*.x", protocol="https", decision="allow")`)
	code, _, stderr = runCheckCLI(t, "", "--", "ls")
	if code != 2 || !strings.Contains(stderr, "default.rules:1:") || !strings.Contains(stderr, "wildcards are not allowed") {
		t.Fatalf("exit %d stderr %q", code, stderr)
	}
	// A missing --rules folder is an error, not an empty policy.
	code, _, stderr = runCheckCLI(t, "", "--rules", filepath.Join(good, "nope"), "--", "ls")
	if code != 2 || !strings.Contains(stderr, "nope") {
		t.Fatalf("exit %d stderr %q", code, stderr)
	}
}

func TestCheckUsageErrors(t *testing.T) {
	isolateHome(t)
	for _, args := range [][]string{
		{},
		{"--approval-policy", "sometimes", "--", "ls"},
		{"--sandbox", "none", "--", "ls"},
		{"--sandbox-permissions", "root", "--", "ls"},
		{"--tool", "shell_command", "--", "ls"},
		{"--tool", "shell_command", "--args", `{"command":"ls"}`, "--", "ls"},
		{"--args", `{"command":"ls"}`},
		{"--tool", "apply_patch", "--args", "{}"},
		{"--tool", "shell_command", "--args", `{"command":"ls","x":1}`, "--shell", "/bin/bash"},
		{"--prefix-rule", "ls", "--", "ls"},
		{"--env-set", "NOEQ", "--", "ls"},
		{"--no-such-flag"},
	} {
		if code, _, _ := runCheckCLI(t, "", args...); code != 2 {
			t.Errorf("%q: exit %d, want 2", args, code)
		}
	}
}

func TestCheckToolCallFromStdinAndReadableOutput(t *testing.T) {
	isolateHome(t)
	code, stdout, stderr := runCheckCLI(t, `{"command":"git status && rm -rf /tmp/x","workdir":"sub"}`,
		"--tool", "shell_command", "--args", "-", "--shell", "/bin/zsh", "--cwd", "/w", "--approval-policy", "never")
	if code != 10 {
		t.Fatalf("exit %d: %s %s", code, stdout, stderr)
	}
	for _, want := range []string{"command:      /bin/zsh -lc 'git status && rm -rf /tmp/x'", "cwd:          /w/sub", "[2] rm -rf /tmp/x",
		"approval key: __shell_script__ -lc", "heuristics forbidden: rm -rf /tmp/x (no rule matched; dangerous: forced_rm)",
		"requirement:  forbidden", "rm -f style commands are not permitted"} {
		if !strings.Contains(stdout, want) {
			t.Errorf("output lacks %q:\n%s", want, stdout)
		}
	}
	code, stdout, _ = runCheckCLI(t, "", "--cwd", "/w", "--", "echo", "hi")
	if code != 0 || !strings.Contains(stdout, "requirement:  skip (runs in the sandbox)") || !strings.Contains(stdout, `amendment:    prefix_rule(pattern=["echo", "hi"], decision="allow")`) {
		t.Fatalf("%d %s", code, stdout)
	}
}

func TestCheckPrefixRuleFlagAndEnvFlags(t *testing.T) {
	isolateHome(t)
	_, stdout, _ := runCheckCLI(t, "", "--json", "--sandbox", "read-only", "--sandbox-permissions", "require_escalated",
		"--prefix-rule", `["cargo","install"]`, "--", "cargo", "install", "x")
	var m struct {
		Requirement struct {
			ProposedAmendment []string `json:"proposed_amendment"`
		} `json:"requirement"`
	}
	if err := json.Unmarshal([]byte(stdout), &m); err != nil || !reflect.DeepEqual(m.Requirement.ProposedAmendment, []string{"cargo", "install"}) {
		t.Fatalf("%v %s", err, stdout)
	}
	f, err := parseCheckFlags("t", []string{"--env-inherit", "none", "--env-set", "A=1", "--env-set", "B_TOKEN=2", "--", "ls"}, &bytes.Buffer{})
	if err != nil {
		t.Fatal(err)
	}
	res, err := f.evaluate(strings.NewReader(""))
	if err != nil {
		t.Fatal(err)
	}
	// set happens after the default excludes, so an explicit B_TOKEN stays;
	// the fixed git overrides (issue 17) are always there.
	var env []string
	for _, kv := range res.Envelope.Env {
		if !strings.HasPrefix(kv, "GIT_CONFIG_") {
			env = append(env, kv)
		}
	}
	if !reflect.DeepEqual(env, []string{"A=1", "B_TOKEN=2"}) {
		t.Fatalf("%q", res.Envelope.Env)
	}
}
