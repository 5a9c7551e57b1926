package test

// End-to-end tests of issue 17's exec-policy items with the real execwrap
// binary (check and run): only a trusted shell is a wrapper (item 1), the
// known-safe heuristics that wrote or executed (item 10), and git running
// repository configuration (item 11).

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// etCheckOut is the subset of `execwrap check --json` these tests read.
type etCheckOut struct {
	HandlerArgv []string `json:"handler_argv"`
	Policy      struct {
		Commands [][]string `json:"commands"`
	} `json:"policy"`
	ApprovalIdentity struct {
		Command []string `json:"command"`
	} `json:"approval_identity"`
	Requirement struct {
		Kind          string  `json:"kind"`
		BypassSandbox bool    `json:"bypass_sandbox"`
		Reason        *string `json:"reason"`
	} `json:"requirement"`
	// raw is the whole JSON output, for fields the struct does not hold.
	raw []byte
}

// etCheck runs `execwrap check --json ARGS` in dir; it fails the test on
// a usage error (exit 2) so a missing flag cannot pass as "not skip".
func etCheck(t *testing.T, dir string, args ...string) (etCheckOut, int) {
	t.Helper()
	var out etCheckOut
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, ExecwrapBin(t), append([]string{"check", "--json"}, args...)...)
	cmd.Dir = dir
	cmd.Env = etEnv(dir)
	var so, se bytes.Buffer
	cmd.Stdout, cmd.Stderr = &so, &se
	err := cmd.Run()
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatal(err)
	}
	if code == 2 {
		t.Fatalf("check %q: usage or input error: %s", args, se.String())
	}
	if err := json.Unmarshal(so.Bytes(), &out); err != nil {
		t.Fatalf("check %q: no JSON (%v): %s %s", args, err, so.String(), se.String())
	}
	out.raw = so.Bytes()
	return out, code
}

// etEnv is a clean environment: no git or proxy variables of the caller.
func etEnv(home string) []string {
	var env []string
	for _, kv := range os.Environ() {
		k, _, _ := strings.Cut(kv, "=")
		if strings.HasPrefix(k, "GIT_") || strings.HasSuffix(strings.ToUpper(k), "_PROXY") || k == "HOME" || k == "NETPROXY_HOME" {
			continue
		}
		env = append(env, kv)
	}
	return append(env, "HOME="+home, "NETPROXY_HOME="+filepath.Join(home, ".np-home"))
}

func etRules(t *testing.T, content string) string {
	t.Helper()
	d := t.TempDir()
	if err := os.WriteFile(filepath.Join(d, "p.rules"), []byte(content+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	return d
}

// etOutside is a folder outside the workdir and outside /tmp (private in
// the sandbox), so only an unsandboxed command can create files in it.
func etOutside(t *testing.T) string {
	t.Helper()
	d, err := os.MkdirTemp("/var/tmp", "execwrap-e2e-outside-")
	if err != nil {
		t.Fatal(err)
	}
	os.Chmod(d, 0o777)
	t.Cleanup(func() { os.RemoveAll(d) })
	return d
}

// etTrojan writes an executable shell script at path that creates marker
// and prints "trojan ran".
func etTrojan(t *testing.T, path, marker string) {
	t.Helper()
	os.MkdirAll(filepath.Dir(path), 0o755)
	script := "#!/bin/sh\necho trojan ran\ntouch " + marker + "\n"
	if err := os.WriteFile(path, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
}

var (
	etYes = func() *bool { b := true; return &b }()
	etNo  = func() *bool { b := false; return &b }()
)

// etBypass reads bypass_sandbox from a requirement object.
func etBypass(t *testing.T, raw json.RawMessage) bool {
	t.Helper()
	var req struct {
		BypassSandbox *bool `json:"bypass_sandbox"`
	}
	if err := json.Unmarshal(raw, &req); err != nil || req.BypassSandbox == nil {
		t.Fatalf("requirement without bypass_sandbox: %s (%v)", raw, err)
	}
	return *req.BypassSandbox
}

func etAbsent(t *testing.T, marker, what string) {
	t.Helper()
	if _, err := os.Stat(marker); err == nil {
		t.Fatalf("%s: the attacker's command ran (%s exists)", what, marker)
	}
}

// Item 1: an argv[0] that only looks like a shell is an ordinary unknown
// program for check: never known-safe, never lowered, never a bypass.
func TestExecUntrustedShellIsNotAWrapper(t *testing.T) {
	dir := sbxDir(t)
	for _, argv0 := range []string{"./bash", "/proc/self/cwd/sh", "/work/x/bash.py", "bin/zsh", "/usr/bin/../../tmp/bash", "/usr//bin/bash"} {
		out, code := etCheck(t, dir, "--approval-policy", "untrusted", "--sandbox", "read-only", "--", argv0, "-lc", "ls")
		if code != 11 || out.Requirement.Kind != "needs_approval" {
			t.Errorf("%s -lc ls under untrusted: exit %d %+v (want needs_approval)", argv0, code, out.Requirement)
		}
		if len(out.Policy.Commands) != 1 || out.Policy.Commands[0][0] != argv0 {
			t.Errorf("%s -lc ls: projection B %q lowered an untrusted shell", argv0, out.Policy.Commands)
		}
		if len(out.ApprovalIdentity.Command) != 3 || out.ApprovalIdentity.Command[0] != argv0 {
			t.Errorf("%s -lc ls: approval identity %q dropped the shell", argv0, out.ApprovalIdentity.Command)
		}
	}
	// Trusted shells keep the R2 behaviour.
	for _, argv0 := range []string{"bash", "zsh", "sh", "/bin/bash", "/usr/bin/bash", "/usr/local/bin/zsh", "/opt/homebrew/bin/bash"} {
		out, code := etCheck(t, dir, "--approval-policy", "untrusted", "--sandbox", "read-only", "--", argv0, "-lc", "ls")
		if code != 0 || len(out.Policy.Commands) != 1 || strings.Join(out.Policy.Commands[0], " ") != "ls" {
			t.Errorf("%s -lc ls: exit %d commands %q (want skip, lowered to ls)", argv0, code, out.Policy.Commands)
		}
	}
	// A system directory inside a writable root is not trusted.
	t.Run("writable-root", func(t *testing.T) {
		out, code := etCheck(t, dir, "--approval-policy", "untrusted", "--sandbox", "read-only", "--writable-root", "/usr/local/bin",
			"--", "/usr/local/bin/bash", "-lc", "ls")
		if code != 11 {
			t.Errorf("/usr/local/bin/bash with --writable-root /usr/local/bin: exit %d %+v", code, out.Requirement)
		}
	})
	out, code := etCheck(t, "/", "--approval-policy", "untrusted", "--sandbox", "read-only", "--cwd", "/usr", "--", "/usr/bin/bash", "-lc", "ls")
	if code != 11 {
		t.Errorf("/usr/bin/bash with the workspace /usr: exit %d %+v", code, out.Requirement)
	}

	// The tool-call form of the attack: shell ./bash under prefix_rule(["ls"]).
	rules := etRules(t, `prefix_rule(pattern=["ls"], decision="allow")`)
	for _, shell := range []string{"./bash", "/proc/self/cwd/bash", dir + "/bash"} {
		out, code = etCheck(t, dir, "--rules", rules, "--tool", "exec_command", "--args", `{"cmd":"ls","shell":"`+shell+`"}`)
		if out.Requirement.BypassSandbox {
			t.Errorf("exec_command shell %s under prefix_rule([ls]): exit %d %+v (a bypass)", shell, code, out.Requirement)
		}
		out, _ = etCheck(t, dir, "--rules", rules, "--shell", shell, "--tool", "shell_command", "--args", `{"command":"ls"}`)
		if out.Requirement.BypassSandbox {
			t.Errorf("shell_command --shell %s: %+v (a bypass)", shell, out.Requirement)
		}
	}
	out, _ = etCheck(t, dir, "--rules", rules, "--tool", "exec_command", "--args", `{"cmd":"ls","shell":"/bin/bash"}`)
	if !out.Requirement.BypassSandbox {
		t.Errorf("exec_command shell /bin/bash under prefix_rule([ls]): %+v (want the bypass)", out.Requirement)
	}
	// An explicit rule on a workspace program allows it, inside the sandbox.
	t.Run("explicit-rule", func(t *testing.T) {
		own := etRules(t, `prefix_rule(pattern=["./bash"], decision="allow")`)
		out, code := etCheck(t, dir, "--rules", own, "--", "./bash", "-lc", "ls")
		if code != 0 || out.Requirement.BypassSandbox {
			t.Errorf("./bash under prefix_rule([./bash]): exit %d %+v (want skip in the sandbox)", code, out.Requirement)
		}
	})
	// A rule on a bare name is not inherited by an arbitrary absolute path.
	out, _ = etCheck(t, dir, "--rules", rules, "--", "/proc/self/cwd/ls")
	if out.Requirement.BypassSandbox {
		t.Errorf("/proc/self/cwd/ls under prefix_rule([ls]): %+v (a bypass)", out.Requirement)
	}
	out, _ = etCheck(t, dir, "--rules", rules, "--", "/usr/bin/ls")
	if !out.Requirement.BypassSandbox {
		t.Errorf("/usr/bin/ls under prefix_rule([ls]): %+v (want the bypass)", out.Requirement)
	}
}

// Item 1 at run time: a workspace ./bash given as the exec_command shell
// under prefix_rule(["ls"]) runs inside the sandbox, as root and as an
// unprivileged user.
func TestExecWorkspaceShellNeverRunsUnsandboxed(t *testing.T) {
	p := StartProxy(t, StdConfig())
	dir := sbxDir(t)
	outside := etOutside(t)
	marker := filepath.Join(outside, "root-marker")
	etTrojan(t, filepath.Join(dir, "bash"), marker)
	rules := etRules(t, `prefix_rule(pattern=["ls"], decision="allow")`)
	t.Run("root", func(t *testing.T) {
		r, code, stderr := sbxRun(t, p.Env(), dir, "--control", p.Control, "--network", "proxied", "--rules", rules,
			"--tool", "exec_command", "--args", `{"cmd":"ls","shell":"./bash"}`)
		etAbsent(t, marker, "root run of a workspace ./bash")
		if len(r.Attempts) == 0 || !r.Attempts[0].Sandboxed || etBypass(t, r.Requirement) {
			t.Fatalf("exit %d requirement %s attempts %+v stderr %s", code, r.Requirement, r.Attempts, stderr)
		}
	})
	if os.Geteuid() != 0 {
		return
	}
	setpriv, err := exec.LookPath("setpriv")
	if err != nil {
		t.Fatal("setpriv (util-linux) is required")
	}
	udir := sbxDir(t)
	os.Chown(udir, 65534, 65534)
	umarker := filepath.Join(outside, "unpriv-marker")
	etTrojan(t, filepath.Join(udir, "bash"), umarker)
	os.Chown(filepath.Join(udir, "bash"), 65534, 65534)
	bin := filepath.Join(sbxDir(t), "execwrap")
	b, err := os.ReadFile(ExecwrapBin(t))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(bin, b, 0o755); err != nil {
		t.Fatal(err)
	}
	urules := sbxDir(t)
	if err := os.WriteFile(filepath.Join(urules, "p.rules"), []byte(`prefix_rule(pattern=["ls"], decision="allow")`+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	// --network none: the unprivileged user cannot reach the test's
	// control socket. The requirement must still not be a bypass.
	cmd := exec.Command(setpriv, "--reuid=65534", "--regid=65534", "--clear-groups", "--", bin, "run", "--json",
		"--network", "none", "--rules", urules, "--tool", "exec_command", "--args", `{"cmd":"ls","shell":"./bash"}`)
	cmd.Dir = udir
	cmd.Env = []string{"PATH=/usr/local/bin:/usr/bin:/bin", "HOME=" + udir, "NETPROXY_HOME=" + udir}
	var uerr bytes.Buffer
	cmd.Stderr = &uerr
	uout, _ := cmd.Output()
	var ur sbxResult
	if err := json.Unmarshal(uout, &ur); err != nil {
		t.Fatalf("unprivileged: no result: %v %s %s", err, uout, uerr.String())
	}
	etAbsent(t, umarker, "unprivileged run of a workspace ./bash")
	if etBypass(t, ur.Requirement) || len(ur.Attempts) == 0 || !ur.Attempts[0].Sandboxed {
		t.Fatalf("unprivileged: requirement %s attempts %+v", ur.Requirement, ur.Attempts)
	}
}

// Item 1: a bare shell name runs from execwrap's trusted PATH (system
// directories), not from the caller's PATH, even when a rule bypasses the
// sandbox.
func TestExecBareShellResolvedOnTrustedPath(t *testing.T) {
	p := StartProxy(t, StdConfig())
	dir := sbxDir(t)
	outside := etOutside(t)
	marker := filepath.Join(outside, "path-marker")
	etTrojan(t, filepath.Join(dir, "bin", "bash"), marker)
	if err := os.WriteFile(filepath.Join(dir, "listed-file"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	rules := etRules(t, `prefix_rule(pattern=["ls"], decision="allow")`)
	var env []string
	for _, kv := range p.Env() {
		if !strings.HasPrefix(kv, "PATH=") {
			env = append(env, kv)
		}
	}
	env = append(env, "PATH="+filepath.Join(dir, "bin")+":/usr/local/bin:/usr/bin:/bin")
	r, code, stderr := sbxRun(t, env, dir, "--control", p.Control, "--network", "proxied", "--rules", rules,
		"--tool", "exec_command", "--args", `{"cmd":"ls","shell":"bash"}`)
	etAbsent(t, marker, "bare bash with a workspace bin/bash first on PATH")
	if code != 0 || !strings.Contains(r.Stdout, "listed-file") {
		t.Fatalf("exit %d stdout %q stderr %q", code, r.Stdout, stderr)
	}
	if len(r.Attempts) != 1 || r.Attempts[0].Sandboxed {
		t.Fatalf("the allow rule should still bypass: attempts %+v", r.Attempts)
	}
}

// Item 10: known-safe heuristics that write or execute.
func TestExecKnownSafeDoesNotWriteOrExecute(t *testing.T) {
	dir := sbxDir(t)
	untrusted := func(want int, argv ...string) {
		t.Helper()
		out, code := etCheck(t, dir, append([]string{"--approval-policy", "untrusted", "--sandbox", "read-only", "--"}, argv...)...)
		if code != want {
			t.Errorf("untrusted %q: exit %d (want %d) %+v", argv, code, want, out.Requirement)
		}
	}
	untrusted(11, "uniq", "in.txt", "out.txt")
	untrusted(11, "uniq", "-c", "in.txt", "out.txt")
	untrusted(11, "uniq", "-f", "1", "in.txt", "out.txt")
	untrusted(11, "uniq", "--bogus-option", "in.txt")
	untrusted(0, "uniq", "in.txt")
	untrusted(0, "uniq", "-c", "-f", "1", "in.txt")
	untrusted(11, "/proc/self/cwd/cat", "f")
	untrusted(11, "/proc/self/root/usr/bin/cat", "f")
	untrusted(11, "/home/user/bin/cat", "f")
	untrusted(11, "./cat", "f")
	untrusted(11, "bash", "-lc", "/proc/self/cwd/cat f")
	untrusted(0, "/usr/bin/cat", "f")
	untrusted(0, "/bin/cat", "f")
	untrusted(11, "rg", "-zi", "foo")
	untrusted(11, "rg", "-uz", "foo")
	untrusted(11, "rg", "-n", "-z", "foo")
	untrusted(11, "rg", "--search-zip", "foo")
	untrusted(0, "rg", "-ui", "foo")
	untrusted(0, "rg", "-e", "z", "foo")
	never := func(want int, argv ...string) {
		t.Helper()
		out, code := etCheck(t, dir, append([]string{"--approval-policy", "never", "--sandbox", "read-only", "--"}, argv...)...)
		if code != want {
			t.Errorf("never %q: exit %d (want %d) %+v", argv, code, want, out.Requirement)
		}
		if want == 10 && (out.Requirement.Reason == nil || !strings.Contains(*out.Requirement.Reason, "rm -f style commands are not permitted")) {
			t.Errorf("never %q: reason %v", argv, out.Requirement.Reason)
		}
	}
	for _, f := range []string{"--interactive=none", "--interactive=no", "--interactive=never", "--interactive=n",
		"--inter=no", "--i=nev", "--interactive=non"} {
		never(10, "rm", "-r", f, "d")
	}
	never(0, "rm", "-r", "--interactive=always", "d")
	never(0, "rm", "-r", "--interactive", "d")
}

// etGitFixture builds a workspace that is itself a repository and holds
// an embedded bare repository "evil" whose configuration runs the
// attacker's command (core.fsmonitor for status, a textconv driver via
// info/attributes for log -p), each creating a marker in the workspace.
func etGitFixture(t *testing.T) (ws, fsmonMarker, textconvMarker string) {
	t.Helper()
	ws = sbxDir(t)
	src := t.TempDir()
	git := func(dir string, args ...string) {
		t.Helper()
		cmd := exec.Command("git", append([]string{"-c", "user.name=t", "-c", "user.email=t@example.com"}, args...)...)
		cmd.Dir = dir
		cmd.Env = etEnv(dir)
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("git %q: %v\n%s", args, err, out)
		}
	}
	git(ws, "init", "-q")
	os.WriteFile(filepath.Join(ws, "README"), []byte("hello\n"), 0o644)
	git(ws, "add", "README")
	git(ws, "commit", "-qm", "ws")
	git(src, "init", "-q")
	os.WriteFile(filepath.Join(src, "f.txt"), []byte("one\n"), 0o644)
	git(src, "add", "f.txt")
	git(src, "commit", "-qm", "one")
	os.WriteFile(filepath.Join(src, "f.txt"), []byte("one\ntwo\n"), 0o644)
	git(src, "commit", "-qam", "two")
	evil := filepath.Join(ws, "evil")
	git(ws, "init", "-q", "--bare", evil)
	git(src, "push", "-q", evil, "HEAD:refs/heads/master")
	fsmonMarker = filepath.Join(ws, "fsmonitor-ran")
	textconvMarker = filepath.Join(ws, "textconv-ran")
	git(evil, "config", "core.bare", "false")
	git(evil, "config", "core.worktree", ".")
	git(evil, "config", "core.fsmonitor", "touch "+fsmonMarker+"; false")
	git(evil, "config", "diff.x.textconv", "touch "+textconvMarker+"; cat")
	if err := os.WriteFile(filepath.Join(evil, "info", "attributes"), []byte("* diff=x\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	// The fixture must be live: without execwrap, git runs both commands.
	probe := exec.Command("sh", "-c", "cd evil && git status >/dev/null 2>&1; git log -p >/dev/null 2>&1; true")
	probe.Dir, probe.Env = ws, etEnv(ws)
	probe.Run()
	for _, m := range []string{fsmonMarker, textconvMarker} {
		if _, err := os.Stat(m); err != nil {
			t.Fatalf("fixture: plain git did not run %s", m)
		}
		os.Remove(m)
	}
	return ws, fsmonMarker, textconvMarker
}

// Item 11: git in an embedded repository never runs its configuration,
// sandboxed (known-safe) or bypassing by rule. Each case is a subtest with
// fresh markers, so each one fails on its own without the fix.
func TestExecGitRepositoryConfigDoesNotRun(t *testing.T) {
	p := StartProxy(t, StdConfig())
	ws, fsmon, textconv := etGitFixture(t)
	evil := filepath.Join(ws, "evil")
	rules := etRules(t, `prefix_rule(pattern=["git", "status"], decision="allow")`+"\n"+
		`prefix_rule(pattern=["git", "log"], decision="allow")`)
	cases := []struct {
		name   string
		dir    string
		args   []string
		bypass *bool // the requirement's bypass_sandbox, when checked
	}{
		// Sandboxed under on-request (no approval needed).
		{"sandboxed-status", ws, []string{"--", "bash", "-lc", "cd evil && git status"}, nil},
		{"sandboxed-log-p", ws, []string{"--", "bash", "-lc", "cd evil && git log -p"}, nil},
		// A tool call into the embedded repository under allow rules: the
		// rule still allows it, but not outside the sandbox.
		{"workdir-tool-call", ws, []string{"--rules", rules, "--tool", "exec_command", "--args", `{"cmd":"git status","workdir":"evil","shell":"/bin/bash"}`}, etNo},
		{"git-C", ws, []string{"--rules", rules, "--", "git", "-C", "evil", "log", "-p"}, etNo},
		// The operator starts git in the embedded repository with a
		// bypassing rule: only git's configuration overrides stand between
		// the repository and the host.
		{"bypass-status", evil, []string{"--rules", rules, "--", "git", "status"}, etYes},
		{"bypass-log-p", evil, []string{"--rules", rules, "--", "git", "log", "-p"}, etYes},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			os.Remove(fsmon)
			os.Remove(textconv)
			r, code, stderr := sbxRun(t, p.Env(), c.dir, append([]string{"--control", p.Control, "--network", "proxied"}, c.args...)...)
			etAbsent(t, fsmon, c.name+" (core.fsmonitor)")
			etAbsent(t, textconv, c.name+" (diff textconv)")
			if c.bypass != nil {
				if got := etBypass(t, r.Requirement); got != *c.bypass {
					t.Errorf("bypass_sandbox %v, want %v (exit %d, attempts %+v, stderr %s)", got, *c.bypass, code, r.Attempts, stderr)
				}
				if *c.bypass && (len(r.Attempts) != 1 || r.Attempts[0].Sandboxed) {
					t.Errorf("expected one unsandboxed attempt: %+v", r.Attempts)
				}
			}
		})
	}

	// The workspace's own repository still works, and git status there is
	// still known-safe under untrusted.
	t.Run("workspace-root", func(t *testing.T) {
		r, _, _ := sbxRun(t, p.Env(), ws, "--control", p.Control, "--network", "proxied", "--rules", rules, "--", "git", "log", "--oneline")
		if r.ExitCode != 0 || !strings.Contains(r.Stdout, "ws") || !etBypass(t, r.Requirement) {
			t.Errorf("git log in the workspace root: exit %d stdout %q stderr %q requirement %s", r.ExitCode, r.Stdout, r.Stderr, r.Requirement)
		}
	})
	t.Run("known-safe", func(t *testing.T) {
		for _, c := range []struct {
			want int
			args []string
		}{
			{0, []string{"--", "git", "status"}},
			{11, []string{"--", "bash", "-lc", "cd evil && git status"}},
			{11, []string{"--", "bash", "-lc", "cd evil && git log -p"}},
			{11, []string{"--tool", "exec_command", "--args", `{"cmd":"git status","workdir":"evil","shell":"/bin/bash"}`}},
		} {
			out, code := etCheck(t, ws, append([]string{"--approval-policy", "untrusted", "--sandbox", "read-only"}, c.args...)...)
			if code != c.want {
				t.Errorf("untrusted %q: exit %d (want %d) %+v", c.args, code, c.want, out.Requirement)
			}
		}
	})

	// The same sandboxed cases as an unprivileged user (the fixture handed
	// over to that user, so git's ownership check does not refuse it).
	t.Run("unprivileged", func(t *testing.T) {
		if os.Geteuid() != 0 {
			t.Skip("already unprivileged: the cases above cover this user")
		}
		setpriv, err := exec.LookPath("setpriv")
		if err != nil {
			t.Fatal("setpriv (util-linux) is required")
		}
		bin := filepath.Join(sbxDir(t), "execwrap")
		b, err := os.ReadFile(ExecwrapBin(t))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(bin, b, 0o755); err != nil {
			t.Fatal(err)
		}
		filepath.Walk(ws, func(p string, _ os.FileInfo, _ error) error { return os.Lchown(p, 65534, 65534) })
		for _, script := range []string{"cd evil && git status", "cd evil && git log -p"} {
			os.Remove(fsmon)
			os.Remove(textconv)
			cmd := exec.Command(setpriv, "--reuid=65534", "--regid=65534", "--clear-groups", "--", bin, "run", "--json",
				"--network", "none", "--", "bash", "-lc", script)
			cmd.Dir = ws
			cmd.Env = []string{"PATH=/usr/local/bin:/usr/bin:/bin", "HOME=" + ws, "NETPROXY_HOME=" + ws}
			var errb bytes.Buffer
			cmd.Stderr = &errb
			out, _ := cmd.Output()
			var r sbxResult
			if err := json.Unmarshal(out, &r); err != nil {
				t.Fatalf("%s: no result: %v %s %s", script, err, out, errb.String())
			}
			if len(r.Attempts) == 0 || !r.Attempts[0].Sandboxed {
				t.Fatalf("%s: not sandboxed: %+v", script, r)
			}
			etAbsent(t, fsmon, "unprivileged "+script+" (core.fsmonitor)")
			etAbsent(t, textconv, "unprivileged "+script+" (diff textconv)")
		}
	})
}

// Found while fixing issue 17: a tool call's workdir chose the sandbox's
// writable root, so `{"workdir":"/usr/local/bin"}` let a model plant host
// programs as root without approval. The writable root is the workspace
// (the base cwd) and the --writable-root folders; a workdir elsewhere is
// read-only, and one inside the workspace is still writable.
func TestExecToolWorkdirIsNotAWritableRoot(t *testing.T) {
	dir := sbxDir(t)
	outside := etOutside(t)
	os.Chmod(outside, 0o755)
	r, code, stderr := sbxRun(t, etEnv(dir), dir, "--network", "none", "--shell", "/bin/bash",
		"--tool", "exec_command", "--args", `{"cmd":"touch planted","workdir":"`+outside+`"}`)
	etAbsent(t, filepath.Join(outside, "planted"), "a workdir outside the workspace")
	if code == 0 {
		t.Errorf("the write outside the workspace succeeded: %+v %s", r, stderr)
	}
	os.MkdirAll(filepath.Join(dir, "sub"), 0o755)
	r, code, stderr = sbxRun(t, etEnv(dir), dir, "--network", "none", "--shell", "/bin/bash",
		"--tool", "exec_command", "--args", `{"cmd":"touch in-sub ../in-root","workdir":"sub"}`)
	if code != 0 {
		t.Fatalf("workdir inside the workspace: exit %d %+v %s", code, r, stderr)
	}
	for _, f := range []string{filepath.Join(dir, "sub", "in-sub"), filepath.Join(dir, "in-root")} {
		if _, err := os.Stat(f); err != nil {
			t.Errorf("%s not written: the workspace must stay writable", f)
		}
	}
	// An explicit --writable-root still makes the outside folder writable.
	r, code, stderr = sbxRun(t, etEnv(dir), dir, "--network", "none", "--shell", "/bin/bash", "--writable-root", outside,
		"--tool", "exec_command", "--args", `{"cmd":"touch granted","workdir":"`+outside+`"}`)
	if _, err := os.Stat(filepath.Join(outside, "granted")); err != nil || code != 0 {
		t.Errorf("--writable-root %s: exit %d %+v %s", outside, code, r, stderr)
	}
}

// A bypassing rule for a bare name must not run a program the command
// planted in a workspace folder that the caller's PATH lists first: outside
// the sandbox PATH keeps only fixed folders.
func TestExecBypassIgnoresWorkspaceOnPATH(t *testing.T) {
	p := StartProxy(t, StdConfig())
	dir := sbxDir(t)
	outside := etOutside(t)
	marker := filepath.Join(outside, "bypass-path-marker")
	etTrojan(t, filepath.Join(dir, "bin", "ls"), marker)
	if err := os.WriteFile(filepath.Join(dir, "listed-file"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	rules := etRules(t, `prefix_rule(pattern=["ls"], decision="allow")`)
	for _, path := range []string{filepath.Join(dir, "bin"), "bin", ""} {
		var env []string
		for _, kv := range p.Env() {
			if !strings.HasPrefix(kv, "PATH=") {
				env = append(env, kv)
			}
		}
		env = append(env, "PATH="+path+":/usr/local/bin:/usr/bin:/bin")
		for _, how := range [][]string{
			{"--tool", "exec_command", "--args", `{"cmd":"ls","shell":"bash","login":false}`},
			{"--", "ls"},
		} {
			args := append([]string{"--control", p.Control, "--network", "proxied", "--rules", rules}, how...)
			r, code, stderr := sbxRun(t, env, dir, args...)
			etAbsent(t, marker, fmt.Sprintf("bypassed %q with PATH=%s:… first", how, path))
			if code != 0 || !strings.Contains(r.Stdout, "listed-file") {
				t.Fatalf("PATH %q %q: exit %d stdout %q stderr %q", path, how, code, r.Stdout, stderr)
			}
			if len(r.Attempts) != 1 || r.Attempts[0].Sandboxed {
				t.Fatalf("PATH %q %q: the allow rule should still bypass: attempts %+v", path, how, r.Attempts)
			}
		}
	}
}
