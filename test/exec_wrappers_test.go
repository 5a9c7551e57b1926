package test

// End-to-end tests of issue 22 items 7, 8 and 9 (exec rules) with the real
// execwrap binary: rules see through every well-known wrapper (SPEC §6.3),
// known-safe commands never write or execute, the approval cache key holds
// the shell, and no interpreter, shell or wrapper is offered as an
// amendment.

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

const curlForbidden = `prefix_rule(pattern=["curl"], decision="forbidden")`

// wrapperSpellings are commands that run `curl x` through a wrapper, in
// every spelling SPEC §6.3 lists (options parsed exactly).
var wrapperSpellings = [][]string{
	{"command", "curl", "x"}, {"command", "-p", "curl", "x"}, {"builtin", "exec", "curl", "x"},
	{"exec", "curl", "x"}, {"exec", "-a", "name", "curl", "x"}, {"exec", "-cl", "curl", "x"},
	{"env", "curl", "x"}, {"/usr/bin/env", "curl", "x"}, {"env", "FOO=1", "curl", "x"}, {"env", "-i", "curl", "x"},
	{"env", "-u", "HOME", "curl", "x"}, {"env", "-uHOME", "curl", "x"}, {"env", "--unset=HOME", "curl", "x"},
	{"env", "-", "curl", "x"}, {"env", "-C", "/", "curl", "x"}, {"env", "-S", "curl x"}, {"env", "-S", "FOO=1 curl x"},
	{"env", "-Scurl x"}, {"env", "-iS", "curl x"}, {"env", "--split-string=curl x"}, {"env", "--split-string", "curl x"},
	{"env", "-S", "-i curl x"}, {"env", "--", "curl", "x"},
	{"nice", "curl", "x"}, {"nice", "-n", "5", "curl", "x"}, {"nice", "-n5", "curl", "x"}, {"nice", "-5", "curl", "x"},
	{"nice", "--adjustment=5", "curl", "x"}, {"nice", "--adj", "5", "curl", "x"},
	{"ionice", "-c3", "curl", "x"}, {"ionice", "-c", "2", "-n", "7", "curl", "x"}, {"ionice", "-t", "curl", "x"},
	{"timeout", "5", "curl", "x"}, {"timeout", "-s", "KILL", "5", "curl", "x"}, {"timeout", "-sKILL", "5", "curl", "x"},
	{"timeout", "--signal=KILL", "-k", "1", "5", "curl", "x"}, {"timeout", "--preserve-status", "--foreground", "5s", "curl", "x"},
	{"nohup", "curl", "x"}, {"nohup", "--", "curl", "x"},
	{"stdbuf", "-oL", "curl", "x"}, {"stdbuf", "-o", "L", "-e", "0", "curl", "x"}, {"stdbuf", "--output=L", "curl", "x"},
	{"setsid", "curl", "x"}, {"setsid", "-f", "curl", "x"}, {"setsid", "--wait", "curl", "x"},
	{"flock", "/tmp/l", "curl", "x"}, {"flock", "-n", "/tmp/l", "curl", "x"}, {"flock", "-w", "5", "/tmp/l", "curl", "x"},
	{"flock", "/tmp/l", "-c", "curl x"}, {"flock", "-x", "/tmp/l", "--command", "curl x"},
	{"chrt", "-f", "1", "curl", "x"}, {"chrt", "-o", "0", "curl", "x"}, {"chrt", "--rr", "1", "curl", "x"},
	{"taskset", "0x1", "curl", "x"}, {"taskset", "-c", "0", "curl", "x"}, {"taskset", "--cpu-list", "0-1", "curl", "x"},
	{"time", "curl", "x"}, {"time", "-p", "curl", "x"}, {"time", "-o", "/dev/null", "-f", "%e", "curl", "x"},
	{"xargs", "curl"}, {"xargs", "-I{}", "curl", "{}"}, {"xargs", "-I", "{}", "curl", "{}"}, {"xargs", "-0", "-n1", "curl"},
	{"xargs", "-a", "/dev/null", "curl"}, {"xargs", "--max-args=1", "-P", "4", "curl"},
	{"find", ".", "-exec", "curl", "{}", ";"}, {"find", ".", "-name", "x", "-execdir", "curl", "{}", "+"},
	{"find", ".", "-ok", "curl", "{}", ";"}, {"find", ".", "-okdir", "curl", "{}", ";"},
	{"eval", "curl", "x"}, {"eval", "curl x"}, {"eval", "echo hi; curl x"},
	{"sudo", "curl", "x"}, {"sudo", "-u", "nobody", "curl", "x"}, {"sudo", "-E", "--", "curl", "x"}, {"sudo", "FOO=1", "curl", "x"},
	{"sudo", "-s", "curl", "x"}, {"doas", "curl", "x"}, {"doas", "-u", "root", "curl", "x"},
	{"su", "-c", "curl x"}, {"su", "root", "-c", "curl x"}, {"su", "-", "root", "-c", "curl x"}, {"su", "--command=curl x"},
	{"su", "root", "--", "-c", "curl x"},
	{"script", "-c", "curl x"}, {"script", "-q", "-c", "curl x", "/dev/null"}, {"script", "/dev/null", "--command", "curl x"},
	{"watch", "curl", "x"}, {"watch", "curl x"}, {"watch", "-n", "1", "curl", "x"}, {"watch", "-x", "curl", "x"},
	{"sh", "-c", "curl x"}, {"bash", "-c", "curl x"}, {"dash", "-c", "curl x"}, {"bash", "-l", "-c", "curl x"}, {"zsh", "-ec", "curl x"},
	{"trap", "curl x", "EXIT"},
	{"nice", "timeout", "5", "env", "FOO=1", "stdbuf", "-oL", "curl", "x"},
	{"sudo", "-u", "x", "xargs", "-0", "sh", "-c", "nohup curl x"},
	// An invocation that cannot be parsed still meets the rule (flat scan).
	{"nice", "--bogus", "curl", "x"}, {"timeout", "--bogus", "5", "curl", "x"}, {"flock", "-c", "curl x", "/tmp/l"},
}

// Item 7: a forbidden rule applies to every command a wrapper runs, given
// as a direct argv and as a shell script.
func TestExecRulesSeeThroughWrappers(t *testing.T) {
	dir := sbxDir(t)
	rules := etRules(t, curlForbidden)
	for _, argv := range wrapperSpellings {
		for _, form := range [][]string{argv, {"bash", "-lc", shJoin(argv)}} {
			out, code := etCheck(t, dir, append([]string{"--rules", rules, "--sandbox", "danger-full-access", "--"}, form...)...)
			reason := ""
			if out.Requirement.Reason != nil {
				reason = *out.Requirement.Reason
			}
			if code != 10 || out.Requirement.Kind != "forbidden" || !strings.Contains(reason, "policy forbids commands starting with `curl`") {
				t.Errorf("%q: exit %d %s %q (want forbidden by the curl rule)", form, code, out.Requirement.Kind, reason)
			}
		}
	}
	// Wrappers that do not run their operand, and words that only name it.
	for _, argv := range [][]string{
		{"command", "-v", "curl"}, {"command", "-V", "curl"}, {"echo", "curl", "x"}, {"grep", "curl", "f"},
		{"env", "--help"}, {"timeout", "--version"}, {"taskset", "-p", "1"}, {"find", ".", "-name", "curl"},
	} {
		out, code := etCheck(t, dir, append([]string{"--rules", rules, "--"}, argv...)...)
		if code == 10 {
			t.Errorf("%q: forbidden %+v; it does not run curl", argv, out.Requirement)
		}
	}
}

// Item 7: an allow rule on a wrapper does not allow what it runs: the
// strictest of wrapper and inner command wins, and only a fully allowed
// chain runs outside the sandbox.
func TestExecAllowedWrapperDoesNotAllowInner(t *testing.T) {
	dir := sbxDir(t)
	rules := etRules(t, `prefix_rule(pattern=["nice"])`+"\n"+`prefix_rule(pattern=["timeout"])`+"\n"+`prefix_rule(pattern=["ls"])`)
	for _, argv := range [][]string{{"nice", "rm", "-rf", "/tmp/x"}, {"timeout", "5", "bash", "-c", "rm -rf /tmp/x"}} {
		out, code := etCheck(t, dir, append([]string{"--rules", rules, "--approval-policy", "on-request", "--"}, argv...)...)
		if code != 11 || out.Requirement.BypassSandbox {
			t.Errorf("%q: exit %d %+v (want needs_approval, never a bypass)", argv, code, out.Requirement)
		}
		out, code = etCheck(t, dir, append([]string{"--rules", rules, "--approval-policy", "never", "--"}, argv...)...)
		if code != 10 {
			t.Errorf("never %q: exit %d %+v (want forbidden)", argv, code, out.Requirement)
		}
	}
	out, code := etCheck(t, dir, "--rules", rules, "--approval-policy", "untrusted", "--", "nice", "make")
	if code != 11 {
		t.Errorf("untrusted nice make: exit %d %+v (make is not allowed)", code, out.Requirement)
	}
	out, code = etCheck(t, dir, "--rules", rules, "--", "nice", "-n", "5", "cargo", "build")
	if code != 0 || out.Requirement.BypassSandbox {
		t.Errorf("nice cargo build: exit %d %+v (want skip inside the sandbox)", code, out.Requirement)
	}
	out, code = etCheck(t, dir, "--rules", rules, "--", "nice", "timeout", "5", "ls")
	if code != 0 || !out.Requirement.BypassSandbox {
		t.Errorf("nice timeout 5 ls, every part allowed: exit %d %+v (want the bypass)", code, out.Requirement)
	}
	out, code = etCheck(t, dir, "--rules", rules, "--", "nice", "--bogus", "ls")
	if code != 11 {
		t.Errorf("nice --bogus ls: exit %d %+v (an unparseable wrapper needs approval)", code, out.Requirement)
	}
}

// Item 7 at run time: curl never runs through a wrapper under
// prefix_rule(["curl"], decision="forbidden"), as root and unprivileged.
func TestExecRunForbiddenThroughWrapper(t *testing.T) {
	for _, u := range escUsers(t) {
		t.Run(string(u), func(t *testing.T) {
			dir := escDir(t, u)
			rules := filepath.Join(dir, "rules")
			os.Mkdir(rules, 0o755)
			if err := os.WriteFile(filepath.Join(rules, "p.rules"), []byte(curlForbidden+"\n"), 0o644); err != nil {
				t.Fatal(err)
			}
			marker := filepath.Join(dir, "M")
			fetch := []string{"curl", "-s", "-o", marker, "file:///etc/hostname"}
			for _, argv := range [][]string{
				append([]string{"env"}, fetch...),
				{"bash", "-lc", "timeout 5 " + shJoin(fetch)},
				{"bash", "-lc", "echo file:///etc/hostname | xargs curl -s -o " + marker},
			} {
				r, code, stderr := escRun(t, u, false, dir, nil, append([]string{"--rules", rules, "--network", "none", "--"}, argv...)...)
				etAbsent(t, marker, strings.Join(argv, " "))
				if code != 10 || len(r.Attempts) != 0 {
					t.Errorf("%q: exit %d attempts %+v requirement %s stderr %s (want exit 10, nothing run)", argv, code, r.Attempts, r.Requirement, stderr)
				}
			}
		})
	}
}

// Item 8: the known-safe sed that ran a command. In a folder with a file
// named 1p, `sed -n 1p '--expression=1e id > M'` reads 1p as a file and
// runs `id`; it must need approval under untrusted and never run.
func TestExecSedExecuteIsNotKnownSafe(t *testing.T) {
	dir := sbxDir(t)
	if err := os.WriteFile(filepath.Join(dir, "1p"), []byte("line\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, argv := range [][]string{
		{"sed", "-n", "1p", "--expression=1e id > M"}, {"sed", "-n", "1p", "-e", "1e id > M"}, {"sed", "-n", "1p", "-f", "script.sed"},
		{"sed", "-n", "1p", "--file=/dev/stdin"}, {"sed", "-n", "1w M", "1p"}, {"sed", "-n", "1p", "-i"}, {"sed", "-n", "1p", "-s"},
		{"sed", "-n", "1e id", "1p"}, {"bash", "-lc", "sed -n 1p '--expression=1e id > M'"},
	} {
		out, code := etCheck(t, dir, append([]string{"--approval-policy", "untrusted", "--sandbox", "read-only", "--"}, argv...)...)
		if code == 0 || out.Requirement.Kind == "skip" {
			t.Errorf("%q under untrusted: exit %d %+v (want needs_approval)", argv, code, out.Requirement)
		}
	}
	for _, argv := range [][]string{{"sed", "-n", "1p", "1p"}, {"sed", "-n", "1,5p", "1p"}, {"sed", "-n", "/line/p", "1p"}} {
		if _, code := etCheck(t, dir, append([]string{"--approval-policy", "untrusted", "--sandbox", "read-only", "--"}, argv...)...); code != 0 {
			t.Errorf("%q under untrusted: exit %d (a print-only sed stays known-safe)", argv, code)
		}
	}
	for _, u := range escUsers(t) {
		t.Run(string(u), func(t *testing.T) {
			d := escDir(t, u)
			os.WriteFile(filepath.Join(d, "1p"), []byte("line\n"), 0o644)
			r, code, stderr := escRun(t, u, false, d, nil, "--approval-policy", "untrusted", "--network", "none",
				"--", "sed", "-n", "1p", "--expression=1e id > M")
			etAbsent(t, filepath.Join(d, "M"), "sed 1e")
			if code == 0 || len(r.Attempts) != 0 {
				t.Errorf("exit %d attempts %+v requirement %s stderr %s (want refused without a run)", code, r.Attempts, r.Requirement, stderr)
			}
		})
	}
}

// Item 9: the approval cache key holds the shell that runs the script.
func TestExecApprovalKeyHoldsShell(t *testing.T) {
	dir := sbxDir(t)
	key := func(args ...string) string {
		t.Helper()
		out, _ := etCheck(t, dir, args...)
		if strings.Join(out.ApprovalIdentity.Command, " ") != "cargo test" {
			t.Fatalf("%q: identity command %q (the R2 command stays as it is)", args, out.ApprovalIdentity.Command)
		}
		var whole struct {
			ApprovalIdentity json.RawMessage `json:"approval_identity"`
		}
		if err := json.Unmarshal(out.raw, &whole); err != nil {
			t.Fatal(err)
		}
		return string(whole.ApprovalIdentity)
	}
	tool := func(shell string) string {
		return key("--tool", "exec_command", "--args", `{"cmd":"cargo test","shell":"`+shell+`"}`)
	}
	if tool("/bin/bash") == tool("/bin/sh") {
		t.Errorf("exec_command shell /bin/bash and /bin/sh share one approval key: %s", tool("/bin/bash"))
	}
	if a, b := key("--", "/bin/bash", "-lc", "cargo test"), key("--", "/bin/bash", "-c", "cargo test"); a == b {
		t.Errorf("-lc and -c share one approval key: %s", a)
	}
	if a, b := key("--", "/bin/bash", "-lc", "cargo test"), key("--", "/bin/bash", "-lc", "cargo   test"); a != b {
		t.Errorf("the same shell and script must keep one key: %s != %s", a, b)
	}
}

// Item 9: interpreters, shells and wrappers in any spelling are never
// offered as an amendment.
func TestExecNoWrapperAmendments(t *testing.T) {
	dir := sbxDir(t)
	for _, c := range []struct {
		cmd    string
		prefix string
	}{
		{"/usr/bin/bash -c 'make'", `["/usr/bin/bash"]`}, {"python3.11 -c 'print(1)'", `["python3.11"]`},
		{"python3.11 -c 'print(1)'", `["python3.11","-c"]`}, {"env make", `["env"]`}, {"git -c x=y status", `["git","-c"]`},
		{"git --exec-path=. status", `["git","--exec-path=."]`}, {"pypy3 -c 1", `["pypy3"]`}, {"node18 -e 1", `["node18"]`},
		{"ruby3.2 -e 1", `["ruby3.2"]`}, {"perl5.36 -e 1", `["perl5.36"]`}, {"nice -n 5 make", `["nice","-n","5"]`},
		{"timeout 5 make", `["timeout","5"]`}, {"xargs make", `["xargs"]`}, {"sudo make", `["sudo"]`}, {"/usr/bin/env make", `["/usr/bin/env"]`},
	} {
		args := `{"command":` + jsonQuote(c.cmd) + `,"sandbox_permissions":"require_escalated","prefix_rule":` + c.prefix + `}`
		var out struct {
			Requirement struct {
				Kind              string   `json:"kind"`
				ProposedAmendment []string `json:"proposed_amendment"`
			} `json:"requirement"`
		}
		res, _ := etCheck(t, dir, "--shell", "/bin/bash", "--sandbox", "read-only", "--tool", "shell_command", "--args", args)
		if err := json.Unmarshal(res.raw, &out); err != nil {
			t.Fatal(err)
		}
		got, _ := json.Marshal(out.Requirement.ProposedAmendment)
		if string(got) == c.prefix {
			t.Errorf("%s: the prefix %s was offered as an amendment", c.cmd, c.prefix)
		}
	}
}

func jsonQuote(s string) string {
	b, _ := json.Marshal(s)
	return string(b)
}

// shJoin quotes words for a POSIX shell.
func shJoin(words []string) string {
	q := make([]string, len(words))
	for i, w := range words {
		q[i] = "'" + strings.ReplaceAll(w, "'", `'\''`) + "'"
	}
	return strings.Join(q, " ")
}
