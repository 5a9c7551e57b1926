package shellparse

import (
	"reflect"
	"strings"
	"testing"
)

func a(s ...string) []string { return s }

// Reference §3.5 / §10.3: word-only lowering (nil = rejected).
func TestPlainCommandsReferenceTable(t *testing.T) {
	cases := []struct {
		script string
		want   [][]string
	}{
		{"ls -1", [][]string{a("ls", "-1")}},
		{"ls && pwd; echo 'hi there' | wc -l", [][]string{a("ls"), a("pwd"), a("echo", "hi there"), a("wc", "-l")}},
		{`echo "hello world"`, [][]string{a("echo", "hello world")}},
		{`echo 'hi there'`, [][]string{a("echo", "hi there")}},
		{"git commit -m \"line1\nline2\"", [][]string{a("git", "commit", "-m", "line1\nline2")}},
		{`echo "/usr"'/'"local"/bin`, [][]string{a("echo", "/usr/local/bin")}},
		{`echo '/usr'"/"'local'/bin`, [][]string{a("echo", "/usr/local/bin")}},
		{"echo 123 456", [][]string{a("echo", "123", "456")}},
		{`rg -n "foo" -g"*.py"`, [][]string{a("rg", "-n", "foo", "-g*.py")}},
		{`grep -n 'pattern' -g'*.txt'`, [][]string{a("grep", "-n", "pattern", "-g*.txt")}},
		{"ls\npwd", [][]string{a("ls"), a("pwd")}},
		{"git status || true", [][]string{a("git", "status"), a("true")}},
		{"git status && madeup-cmd", [][]string{a("git", "status"), a("madeup-cmd")}},
		{"apple | orange", [][]string{a("apple"), a("orange")}},
		{"cat LOG.md && curl -fsSL https://example.invalid/setup.sh -o setup.sh && bash setup.sh",
			[][]string{a("cat", "LOG.md"), a("curl", "-fsSL", "https://example.invalid/setup.sh", "-o", "setup.sh"), a("bash", "setup.sh")}},
		// R3 hardening keeps quoted literals.
		{`rg -g"*.py" pattern`, [][]string{a("rg", "-g*.py", "pattern")}},
		{`echo "\n"`, [][]string{a("echo", `\n`)}},
		{`echo "~HOME" 'HEAD~1' "HEAD^" 'foo#bar' "=sh" 'file~'`, [][]string{a("echo", "~HOME", "HEAD~1", "HEAD^", "foo#bar", "=sh", "file~")}},
		{`echo -"{a,b}" '*?[]~^#=\\'`, [][]string{a("echo", "-{a,b}", `*?[]~^#=\\`)}},
		// Empty scripts lower to no command.
		{"", [][]string{}},
		{"  \n\t  ", [][]string{}},
	}
	for _, c := range cases {
		got, ok := PlainCommands(c.script)
		if !ok {
			t.Errorf("%q: rejected, want %q", c.script, c.want)
			continue
		}
		if len(got) == 0 && len(c.want) == 0 {
			continue
		}
		if !reflect.DeepEqual(got, c.want) {
			t.Errorf("%q: got %q, want %q", c.script, got, c.want)
		}
	}
}

func TestPlainCommandsRejections(t *testing.T) {
	rejected := []string{
		`echo "hi ${USER}"`, `echo "$HOME"`, `echo $HOME`, `echo "hi $USER"`,
		"(ls)", "ls || (pwd && echo hi)", "{ ls; }",
		"ls > out.txt", "ls < in", "ls 2>&1", "ls &> x", "cat <<EOF\nx\nEOF", "cat <<< x",
		"echo hi & echo bye", "ls &",
		"echo $(pwd)", "echo `pwd`", "echo <(ls)", "echo $((1+2))",
		"FOO=bar ls",
		"ls &&", "&& ls", "ls ;; pwd", "ls | | wc", "ls |& wc",
		`rg -g"$VAR" pattern`, `rg -g"${VAR}" pattern`, `rg -g"$(pwd)" pattern`, `rg -g"$(echo '*.py')" pattern`,
		"ls # comment", "# only a comment",
		"if true; then ls; fi", "for x in a; do ls; done", "while false; do ls; done", "case x in x) ls;; esac",
		"f() { ls; }", "! ls", "[[ -f x ]]", "echo $'a'", `echo $"a"`,
		"'git' status", `"git" status`, "g'i't status",
		// R3 hardening: expansion characters in unquoted words.
		"find . -{delete,print}", "rg --pre{=,=sh} pattern payload.sh", "find . -del*", "find . -delet?",
		"find . -delet[e]", `find . -de\lete`, "echo ~", "echo ~HOME", "echo HEAD~1", "echo HEAD^",
		"echo file~", "echo =sh", "echo foo^bar", "echo foo#bar", "l* -l", `\rm -rf x`,
		// R3 hardening: escapes inside double quotes.
		"echo \"\\$HOME\\`\\\"\\\\\\\n\"", "find . \"-de\\\nlete\"", `echo "\\"`, `tool "a\"b"`,
	}
	for _, s := range rejected {
		if got, ok := PlainCommands(s); ok {
			t.Errorf("%q: lowered to %q, want rejection", s, got)
		}
	}
}

func TestHeredocPrefix(t *testing.T) {
	ok := map[string][]string{
		"python3 <<'PY'\nprint('hello')\nPY": a("python3"),
		"python3 << PY\nprint('hello')\nPY":  a("python3"),
		"python3 -u <<-EOF\n\tx\n\tEOF":      a("python3", "-u"),
	}
	for s, want := range ok {
		got, good := HeredocPrefix(s)
		if !good || !reflect.DeepEqual(got, want) {
			t.Errorf("%q: got %q %v, want %q", s, got, good, want)
		}
	}
	rejected := []string{
		"python3 <<'PY'\nprint('hello')\nPY\necho done",     // two commands
		"echo hello > /tmp/out.txt",                         // no heredoc
		"python3 <<'PY' > /tmp/out.txt\nprint('hello')\nPY", // file redirect
		"PATH=/tmp/evil:$PATH cat <<'EOF'\nhello\nEOF",      // assignment
		"python3 <<< \"$(rm -rf /)\"",                       // here-string only
		"python3 <<< x && echo hi",                          // here-string with chaining
		"echo $((1<<2))",                                    // arithmetic, not a heredoc
		"python3 $((1<<2)) <<'PY'\nprint(1)\nPY",            // non-literal argument
		"python3 \"x\" <<'PY'\nprint(1)\nPY",                // quoted argument
		"python3 <<PY\n$(rm -rf /)\nPY",                     // substitution in the body (stricter)
		"python3 <<PY\n${HOME}\nPY",                         // expansion in the body (stricter)
		"python3 <<'PY' 2>/dev/null\nprint(1)\nPY",          // fd redirect
		"python3 <<'PY' &\nprint(1)\nPY",                    // background
		"(python3 <<'PY'\nprint(1)\nPY\n)",                  // subshell
		"python3 <<'PY' | sh\nprint(1)\nPY",                 // pipeline
		"py* <<'PY'\nprint(1)\nPY",                          // glob name
		"",
	}
	for _, s := range rejected {
		if got, ok := HeredocPrefix(s); ok {
			t.Errorf("%q: got %q, want rejection", s, got)
		}
	}
}

func TestCommandsForExecPolicy(t *testing.T) {
	heredoc := "python3 <<'PY'\nprint('hello')\nPY"
	cases := []struct {
		argv    []string
		want    [][]string
		complex bool
	}{
		{a("bash", "-lc", "ls -1"), [][]string{a("ls", "-1")}, false},
		{a("zsh", "-lc", "ls"), [][]string{a("ls")}, false},
		{a("/bin/bash", "-c", "git status"), [][]string{a("git", "status")}, false},
		{a("sh", "-c", "ls"), [][]string{a("ls")}, false},
		{a("bash.exe", "-c", "ls"), [][]string{a("bash.exe", "-c", "ls")}, false},
		{a("./bash", "-lc", "ls"), [][]string{a("./bash", "-lc", "ls")}, false},
		{a("/proc/self/cwd/sh", "-c", "ls"), [][]string{a("/proc/self/cwd/sh", "-c", "ls")}, false},
		{a("/usr/bin/zsh", "-c", "ls"), [][]string{a("ls")}, false},
		{a("/opt/homebrew/bin/bash", "-c", "ls"), [][]string{a("ls")}, false},
		{a("bash", "-lc", ""), [][]string{a("bash", "-lc", "")}, false},
		{a("bash", "-lc", "  \n\t  "), [][]string{a("bash", "-lc", "  \n\t  ")}, false},
		{a("zsh", "-lc", heredoc), [][]string{a("python3")}, true},
		{a("bash", "-lc", "touch X && echo hello > X"), [][]string{a("bash", "-lc", "touch X && echo hello > X")}, false},
		{a("bash", "-l", "-c", "ls"), [][]string{a("bash", "-l", "-c", "ls")}, false},
		{a("bash", "-cl", "ls"), [][]string{a("bash", "-cl", "ls")}, false},
		{a("bash", "--login", "ls"), [][]string{a("bash", "--login", "ls")}, false},
		{a("dash", "-c", "ls"), [][]string{a("dash", "-c", "ls")}, false},
		{a("fish", "-c", "ls"), [][]string{a("fish", "-c", "ls")}, false},
		{a("cargo", "fmt"), [][]string{a("cargo", "fmt")}, false},
	}
	for _, c := range cases {
		got := CommandsForExecPolicy(c.argv, Trust{})
		if !reflect.DeepEqual(got.Commands, c.want) || got.UsedComplexParsing != c.complex || got.Origin != OriginGeneric {
			t.Errorf("%q: got %+v, want %q complex=%v", c.argv, got, c.want, c.complex)
		}
	}
}

// Reference §4.3 / §10.6 (R1/R2 rows) with the SPEC sentinel.
func TestCanonicalizeForApproval(t *testing.T) {
	heredoc := "python3 <<'PY'\nprint('hello')\nPY"
	cases := []struct{ argv, want []string }{
		{a("/bin/bash", "-lc", "cargo test -p codex-core"), a("cargo", "test", "-p", "codex-core")},
		{a("bash", "-lc", "cargo   test   -p codex-core"), a("cargo", "test", "-p", "codex-core")},
		{a("/bin/bash", "-c", "cargo test -p codex-core"), a("cargo", "test", "-p", "codex-core")},
		{a("/bin/zsh", "-lc", "cargo test -p codex-core"), a("cargo", "test", "-p", "codex-core")},
		{a("/bin/zsh", "-lc", heredoc), a("__shell_script__", "-lc", heredoc)},
		{a("zsh", "-lc", heredoc), a("__shell_script__", "-lc", heredoc)},
		{a("bash", "-lc", "ls && pwd"), a("__shell_script__", "-lc", "ls && pwd")},
		{a("bash", "-c", "ls | wc -l"), a("__shell_script__", "-c", "ls | wc -l")},
		{a("bash", "-lc", ""), a("__shell_script__", "-lc", "")},
		{a("bash", "-lc", "echo $(pwd)"), a("__shell_script__", "-lc", "echo $(pwd)")},
		{a("powershell.exe", "-NoProfile", "-Command", "Write-Host hi"), a("__powershell_script__", "Write-Host hi")},
		{a("powershell", "-Command", "Write-Host hi"), a("__powershell_script__", "Write-Host hi")},
		{a("./workspace-local/pwsh.exe", "-NoProfile", "-Command", "Get-ChildItem"), a("./workspace-local/pwsh.exe", "-NoProfile", "-Command", "Get-ChildItem")},
		{a("pwsh.exe", "-NoProfile", "-Command", "Get-ChildItem"), a("__powershell_script__", "Get-ChildItem")},
		{a("./bash", "-lc", "ls"), a("./bash", "-lc", "ls")},
		{a("/work/x/bash.py", "-lc", "ls"), a("/work/x/bash.py", "-lc", "ls")},
		{a("cargo", "fmt"), a("cargo", "fmt")},
		{a("bash", "-l", "-c", "ls"), a("bash", "-l", "-c", "ls")},
	}
	for _, c := range cases {
		if got := CanonicalizeForApproval(c.argv, Trust{}); !reflect.DeepEqual(got, c.want) {
			t.Errorf("%q: got %q, want %q", c.argv, got, c.want)
		}
	}
	// The two escape spellings of §4.3 differ under the hardened lowering:
	// the double-quoted escape is a script, the single-quoted text a word.
	x := CanonicalizeForApproval(a("bash", "-lc", `tool "a\"b"`), Trust{})
	y := CanonicalizeForApproval(a("bash", "-lc", `tool 'a\"b'`), Trust{})
	if reflect.DeepEqual(x, y) || x[0] != ShellScriptSentinel || !reflect.DeepEqual(y, a("tool", `a\"b`)) {
		t.Errorf("escape identities: %q vs %q", x, y)
	}
}

func TestDetectShellTypeAndDeriveExecArgs(t *testing.T) {
	types := map[string]ShellType{
		"bash": Bash, "/bin/bash": Bash, "/usr/local/bin/zsh": Zsh, "zsh": Zsh, "sh": Sh, "/bin/sh": Sh,
		"bash.exe": Bash, "pwsh": PowerShell, "powershell.exe": PowerShell, `C:\x\powershell.exe`: PowerShell,
		"cmd": Cmd, "cmd.exe": Cmd, "dash": Other, "ksh": Other, "fish": Other, "": Other,
	}
	for in, want := range types {
		if got := DetectShellType(in); got != want {
			t.Errorf("DetectShellType(%q) = %s, want %s", in, got, want)
		}
	}
	derive := []struct {
		shell string
		login bool
		want  []string
	}{
		{"/bin/bash", true, a("/bin/bash", "-lc", "ls -la")},
		{"/bin/bash", false, a("/bin/bash", "-c", "ls -la")},
		{"/bin/zsh", true, a("/bin/zsh", "-lc", "ls -la")},
		{"/bin/zsh", false, a("/bin/zsh", "-c", "ls -la")},
		{"pwsh", true, a("pwsh", "-Command", "ls -la")},
		{"pwsh", false, a("pwsh", "-NoProfile", "-Command", "ls -la")},
		{"cmd", true, a("cmd", "/c", "ls -la")},
		{"/usr/bin/fish", false, a("/usr/bin/fish", "-c", "ls -la")},
	}
	for _, d := range derive {
		got := DeriveExecArgs(d.shell, DetectShellType(d.shell), "ls -la", d.login)
		if !reflect.DeepEqual(got, d.want) {
			t.Errorf("%s login=%v: %q, want %q", d.shell, d.login, got, d.want)
		}
		// The handler argv of bash-like shells lowers back to the script.
		if DetectShellType(d.shell).IsBashLike() {
			p := CommandsForExecPolicy(got, Trust{})
			if !reflect.DeepEqual(p.Commands, [][]string{a("ls", "-la")}) {
				t.Errorf("%q lowers to %q", got, p.Commands)
			}
		}
	}
}

func TestLiteralCommands(t *testing.T) {
	cases := []struct {
		script string
		want   [][]string
	}{
		{"printf x | rm -rf /tmp/example", [][]string{a("printf", "x"), a("rm", "-rf", "/tmp/example")}},
		{`rm -rf "$TARGET" >/dev/null`, [][]string{a("rm", "-rf")}},
		{`echo "$(rm -rf /tmp/example)"`, [][]string{a("echo"), a("rm", "-rf", "/tmp/example")}},
		{"cmd=rm; $cmd -rf /tmp/example", nil},
		{`\r\m -{r,f} $'\x2f'`, [][]string{a("rm", "-r", "-f", "/")}},
		{`"r"'m' -rf x`, [][]string{a("rm", "-rf", "x")}},
		{"f() { rm -rf x; }; f", [][]string{a("rm", "-rf", "x"), a("f")}},
		{"cat <<EOF\n$(rm -rf x)\nEOF", [][]string{a("cat"), a("rm", "-rf", "x")}},
		{"x=$(( $(rm -rf y) ))", [][]string{a("rm", "-rf", "y")}},
		{"rm -rf x\n)", [][]string{a("rm", "-rf", "x")}}, // statements before a syntax error still run
	}
	for _, c := range cases {
		got, _ := LiteralCommands(c.script)
		if !reflect.DeepEqual(got, c.want) {
			t.Errorf("%q: got %q, want %q", c.script, got, c.want)
		}
	}
	if _, ok := LiteralCommands("if then rm -rf /tmp/example"); ok {
		t.Error("a script with nothing before its syntax error must not parse")
	}
}

func TestANSICDecoding(t *testing.T) {
	cases := map[string]string{`\x72\x6d`: "rm", `\162\155`: "rm", `\u0072m`: "rm", `a\tb`: "a\tb", `\'`: "'", `\q`: `\q`, `\cA`: "\x01"}
	for in, want := range cases {
		if got := decodeANSIC(in); got != want {
			t.Errorf("%q: %q, want %q", in, got, want)
		}
	}
}

func TestOversizedScriptIsNotLowered(t *testing.T) {
	big := strings.Repeat("ls ", maxScriptBytes/3+10)
	if _, ok := PlainCommands(big); ok {
		t.Fatal("an oversized script must fall back")
	}
	p := CommandsForExecPolicy(a("bash", "-c", big), Trust{})
	if len(p.Commands) != 1 || p.Commands[0][0] != "bash" {
		t.Fatal("oversized script must be evaluated whole")
	}
}

func TestLineContinuationIsNotLowered(t *testing.T) {
	for _, s := range []string{"find . -de\\\nlete", "find . \"-de\\\nlete\"", "r\\\nm x"} {
		if got, ok := PlainCommands(s); ok {
			t.Errorf("%q: lowered to %q", s, got)
		}
	}
}

func TestTrustProgram(t *testing.T) {
	tr := Trust{WritableRoots: []string{"/w", "/usr/local/bin"}}
	for _, c := range []struct {
		prog, name string
		ok         bool
	}{
		{"bash", "bash", true}, {"cat", "cat", true}, {"/bin/cat", "cat", true}, {"/usr/bin/bash", "bash", true},
		{"/sbin/ip", "ip", true}, {"/opt/homebrew/bin/git", "git", true},
		{"/usr/local/bin/bash", "", false}, {"./bash", "", false}, {"bin/bash", "", false}, {"/proc/self/cwd/sh", "", false},
		{"/usr//bin/cat", "", false}, {"/usr/bin/./cat", "", false}, {"/usr/bin/", "", false}, {"/usr/bin/..", "", false},
		{"/usr/bin/sub/cat", "", false}, {"/w/bash", "", false}, {"", "", false}, {".", "", false}, {"..", "", false},
		{"/bin", "", false}, {"/usr/lib/cat", "", false},
	} {
		name, ok := tr.Program(c.prog)
		if ok != c.ok || name != c.name {
			t.Errorf("%q: (%q, %v), want (%q, %v)", c.prog, name, ok, c.name, c.ok)
		}
	}
	if _, ok := (Trust{WritableRoots: []string{"/"}}).Program("/bin/cat"); ok {
		t.Error("/bin/cat inside the writable root / was trusted")
	}
	if _, ok := (Trust{WritableRoots: []string{"/usr/"}}).Program("/usr/bin/cat"); ok {
		t.Error("a trailing slash on a root hid it")
	}
	for _, s := range []string{"bash.exe", "bash.py", "rbash", "dash", "/usr/bin/fish"} {
		if _, ok := tr.Shell(s); ok {
			t.Errorf("%s: trusted as a wrapper shell", s)
		}
	}
}

func TestTrustFixedProgram(t *testing.T) {
	tr := Trust{WritableRoots: []string{"/w"}}
	for p, want := range map[string]bool{
		"ls": true, "/usr/bin/ls": true, "/home/u/bin/tool": true, "/opt/x/bin/tool": true,
		"./ls": false, "bin/ls": false, "/w/bin/ls": false, "/proc/self/cwd/ls": false, "/proc/self/root/usr/bin/ls": false,
		"/dev/fd/3": false, "/tmp/x/ls": false, "/var/tmp/ls": false, "/home/u//tool": false, "/": false, "": false,
	} {
		if got := tr.FixedProgram(p); got != want {
			t.Errorf("%q: %v, want %v", p, got, want)
		}
	}
}
