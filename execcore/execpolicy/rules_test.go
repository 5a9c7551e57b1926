package execpolicy

import (
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"testing"
)

func a(s ...string) []string { return s }

func mustLoad(t *testing.T, src string) *Policy {
	t.Helper()
	p, err := LoadSource("test.rules", []byte(src))
	if err != nil {
		t.Fatalf("load: %v", err)
	}
	return p
}

var resolveOn = MatchOptions{ResolveHostExecutables: true}

func fallback(d Decision) Fallback { return func([]string) Decision { return d } }

// Reference §10.1 rows 4-27 and 34 (rules language and matching).
func TestRulesReferenceTable(t *testing.T) {
	t.Run("4 basic match", func(t *testing.T) {
		ev := mustLoad(t, `prefix_rule(["git", "status"])`).Check([][]string{a("git", "status")}, resolveOn, fallback(Prompt))
		if ev.Decision != Allow || len(ev.MatchedRules) != 1 || !reflect.DeepEqual(ev.MatchedRules[0].MatchedPrefix, a("git", "status")) ||
			ev.MatchedRules[0].ResolvedProgram != "" || ev.MatchedRules[0].Justification != "" || ev.MatchedRules[0].Kind != KindPrefix {
			t.Fatalf("%+v", ev)
		}
	})
	t.Run("5 justification on forbidden", func(t *testing.T) {
		ev := mustLoad(t, `prefix_rule(pattern=["rm"], decision="forbidden", justification="destructive command")`).
			Check([][]string{a("rm", "-rf", "/some/important/folder")}, resolveOn, fallback(Allow))
		if ev.Decision != Forbidden || !reflect.DeepEqual(ev.MatchedRules[0].MatchedPrefix, a("rm")) || ev.MatchedRules[0].Justification != "destructive command" {
			t.Fatalf("%+v", ev)
		}
	})
	t.Run("6 justification with allow", func(t *testing.T) {
		ev := mustLoad(t, `prefix_rule(pattern=["ls"], decision="allow", justification="read only")`).Check([][]string{a("ls", "-l")}, resolveOn, fallback(Prompt))
		if ev.Decision != Allow || ev.MatchedRules[0].Justification != "read only" {
			t.Fatalf("%+v", ev)
		}
	})
	t.Run("8 added rule", func(t *testing.T) {
		p := Empty().WithPrefixRule(PrefixRule{Program: "ls", Rest: []PatternToken{{Alternatives: a("-l")}}, Decision: Prompt})
		ev := p.Check([][]string{a("ls", "-l", "/some/important/folder")}, resolveOn, fallback(Allow))
		if ev.Decision != Prompt || !reflect.DeepEqual(ev.MatchedRules[0].MatchedPrefix, a("ls", "-l")) {
			t.Fatalf("%+v", ev)
		}
	})
	t.Run("10 multiple files", func(t *testing.T) {
		dir := t.TempDir()
		writeFile(t, filepath.Join(dir, "first.rules"), `prefix_rule(pattern=["git"], decision="prompt")`)
		writeFile(t, filepath.Join(dir, "second.rules"), `prefix_rule(pattern=["git", "commit"], decision="forbidden")`)
		p, err := LoadDirs(dir)
		if err != nil {
			t.Fatal(err)
		}
		if rs := p.RulesFor("git"); len(rs) != 2 || rs[0].Decision != Prompt || rs[1].Decision != Forbidden {
			t.Fatalf("rules %+v", rs)
		}
		if ev := p.Check([][]string{a("git", "status")}, resolveOn, nil); ev.Decision != Prompt || len(ev.MatchedRules) != 1 {
			t.Fatalf("%+v", ev)
		}
		ev := p.Check([][]string{a("git", "commit", "-m", "hi")}, resolveOn, nil)
		if ev.Decision != Forbidden || len(ev.MatchedRules) != 2 || ev.MatchedRules[0].Decision != Prompt || ev.MatchedRules[1].Decision != Forbidden {
			t.Fatalf("%+v", ev)
		}
		// 15: across several commands.
		ev = p.Check([][]string{a("git", "status"), a("git", "commit", "-m", "hi")}, resolveOn, nil)
		if ev.Decision != Forbidden || len(ev.MatchedRules) != 3 {
			t.Fatalf("%+v", ev)
		}
	})
	t.Run("11 first-token alternatives expand", func(t *testing.T) {
		p := mustLoad(t, `prefix_rule(pattern=[["bash", "sh"], ["-c", "-l"]])`)
		if len(p.RulesFor("bash")) != 1 || len(p.RulesFor("sh")) != 1 || p.PrefixRuleCount() != 2 {
			t.Fatal("want one rule per program")
		}
		if got := p.Matches(a("bash", "-c", "echo", "hi"), resolveOn); len(got) != 1 || !reflect.DeepEqual(got[0].MatchedPrefix, a("bash", "-c")) {
			t.Fatalf("%+v", got)
		}
		if got := p.Matches(a("sh", "-l", "echo", "hi"), resolveOn); len(got) != 1 || !reflect.DeepEqual(got[0].MatchedPrefix, a("sh", "-l")) {
			t.Fatalf("%+v", got)
		}
	})
	t.Run("12 tail alternatives not cartesian", func(t *testing.T) {
		p := mustLoad(t, `prefix_rule(pattern=["npm", ["i", "install"], ["--legacy-peer-deps", "--no-save"]])`)
		if p.PrefixRuleCount() != 1 {
			t.Fatal("one rule")
		}
		if got := p.Matches(a("npm", "i", "--legacy-peer-deps"), resolveOn); len(got) != 1 || len(got[0].MatchedPrefix) != 3 {
			t.Fatalf("%+v", got)
		}
		if got := p.Matches(a("npm", "install", "--no-save", "leftpad"), resolveOn); len(got) != 1 || !reflect.DeepEqual(got[0].MatchedPrefix, a("npm", "install", "--no-save")) {
			t.Fatalf("%+v", got)
		}
		if got := p.Matches(a("npm", "install"), resolveOn); len(got) != 0 {
			t.Fatal("too short an argv must not match")
		}
	})
	t.Run("13 examples enforced", func(t *testing.T) {
		p := mustLoad(t, `prefix_rule(pattern=["git", "status"], match=[["git", "status"], "git status"], not_match=[["git", "--config", "color.status=always", "status"], "git --config color.status=always status"])`)
		if ev := p.Check([][]string{a("git", "status")}, resolveOn, fallback(Allow)); ev.Decision != Allow || ev.MatchedRules[0].Kind != KindPrefix {
			t.Fatalf("%+v", ev)
		}
		ev := p.Check([][]string{a("git", "--config", "color.status=always", "status")}, resolveOn, fallback(Allow))
		if len(ev.MatchedRules) != 1 || ev.MatchedRules[0].Kind != KindHeuristics {
			t.Fatalf("%+v", ev)
		}
	})
	t.Run("16 heuristics when nothing matches", func(t *testing.T) {
		ev := Empty().Check([][]string{a("python")}, resolveOn, fallback(Prompt))
		if ev.Decision != Prompt || len(ev.MatchedRules) != 1 || ev.MatchedRules[0].Kind != KindHeuristics || !reflect.DeepEqual(ev.MatchedRules[0].Command, a("python")) {
			t.Fatalf("%+v", ev)
		}
	})
	t.Run("17 host executable paths dedup", func(t *testing.T) {
		p := mustLoad(t, `host_executable(name="git", paths=["/opt/homebrew/bin/git", "/usr/bin/git", "/usr/bin/git"])`)
		if got, _ := p.HostExecutable("git"); !reflect.DeepEqual(got, a("/opt/homebrew/bin/git", "/usr/bin/git")) {
			t.Fatalf("%q", got)
		}
	})
	t.Run("21 host executable last definition wins", func(t *testing.T) {
		dir := t.TempDir()
		writeFile(t, filepath.Join(dir, "shared.rules"), `host_executable(name="git", paths=["/usr/bin/git"])`)
		writeFile(t, filepath.Join(dir, "user.rules"), `host_executable(name="git", paths=["/opt/homebrew/bin/git"])`)
		p, err := LoadDirs(dir)
		if err != nil {
			t.Fatal(err)
		}
		if got, _ := p.HostExecutable("git"); !reflect.DeepEqual(got, a("/opt/homebrew/bin/git")) {
			t.Fatalf("%q", got)
		}
	})
	t.Run("22 basename rule through host executable", func(t *testing.T) {
		p := mustLoad(t, `prefix_rule(pattern=["git", "status"], decision="prompt")
host_executable(name="git", paths=["/usr/bin/git"])`)
		got := p.Matches(a("/usr/bin/git", "status"), resolveOn)
		if len(got) != 1 || got[0].Decision != Prompt || !reflect.DeepEqual(got[0].MatchedPrefix, a("git", "status")) || got[0].ResolvedProgram != "/usr/bin/git" {
			t.Fatalf("%+v", got)
		}
		if got := p.Matches(a("/usr/bin/git", "status"), MatchOptions{}); len(got) != 0 {
			t.Fatal("resolution off must not fall back")
		}
	})
	t.Run("23 examples honour host executables declared later", func(t *testing.T) {
		mustLoad(t, `prefix_rule(pattern=["git", "status"], match=[["/usr/bin/git", "status"]], not_match=[["/opt/homebrew/bin/git", "status"]])
host_executable(name="git", paths=["/usr/bin/git"])`)
	})
	t.Run("24 empty host executable list", func(t *testing.T) {
		p := mustLoad(t, `prefix_rule(pattern=["git"], decision="prompt")
host_executable(name="git", paths=[])`)
		if ev := p.Check([][]string{a("/usr/bin/git", "status")}, resolveOn, fallback(Allow)); ev.Decision != Allow || ev.MatchedRules[0].Kind != KindHeuristics {
			t.Fatalf("%+v", ev)
		}
	})
	t.Run("25 path not in the allow-list", func(t *testing.T) {
		p := mustLoad(t, `prefix_rule(pattern=["git"], decision="prompt")
host_executable(name="git", paths=["/usr/bin/git"])`)
		if ev := p.Check([][]string{a("/opt/homebrew/bin/git", "status")}, resolveOn, fallback(Allow)); ev.MatchedRules[0].Kind != KindHeuristics {
			t.Fatalf("%+v", ev)
		}
	})
	t.Run("26 basename fallback without mapping", func(t *testing.T) {
		p := mustLoad(t, `prefix_rule(pattern=["git"], decision="prompt")`)
		got := p.Matches(a("/usr/bin/git", "status"), resolveOn)
		if len(got) != 1 || !reflect.DeepEqual(got[0].MatchedPrefix, a("git")) || got[0].ResolvedProgram != "/usr/bin/git" {
			t.Fatalf("%+v", got)
		}
		// Relative paths never fall back (a workspace ./git is not git).
		for _, rel := range []string{"./git", "bin/git", "../x/git"} {
			if got := p.Matches(a(rel, "status"), resolveOn); len(got) != 0 {
				t.Fatalf("%s matched %+v", rel, got)
			}
		}
	})
	t.Run("27 exact match shadows basename rules", func(t *testing.T) {
		p := mustLoad(t, `prefix_rule(pattern=["/usr/bin/git"], decision="allow")
prefix_rule(pattern=["git"], decision="prompt")
host_executable(name="git", paths=["/usr/bin/git"])`)
		got := p.Matches(a("/usr/bin/git", "status"), resolveOn)
		if len(got) != 1 || got[0].Decision != Allow || !reflect.DeepEqual(got[0].MatchedPrefix, a("/usr/bin/git")) || got[0].ResolvedProgram != "" {
			t.Fatalf("%+v", got)
		}
	})
	t.Run("34 example fixture", func(t *testing.T) {
		mustLoad(t, `
prefix_rule(
    pattern = ["git", "reset", "--hard"],
    decision = "forbidden",
    justification = "destructive operation",
    match = [["git", "reset", "--hard"], "git reset --hard HEAD~1"],
    not_match = ["git reset --keep", "git reset --merge"],
)
prefix_rule(pattern = ["ls"], match = ["ls", "ls -la"])
prefix_rule(pattern = ["cat"], match = ["cat file.txt"])
prefix_rule(pattern = ["head"], match = ["head -n 5 file.txt"])
prefix_rule(pattern = ["printenv"], match = ["printenv PATH"])
prefix_rule(pattern = ["pwd"], match = ["pwd"])
prefix_rule(pattern = ["which"], match = ["which python3"])
prefix_rule(pattern = ["cp"], decision = "prompt", match = ["cp a b"], not_match = ["mv a b"])
`)
	})
}

// Reference §1.3-§1.6 and §10.1 rows 3, 7, 9, 18-20, 37: errors, each
// naming file:line.
func TestRulesLoadErrors(t *testing.T) {
	cases := []struct {
		name, src, want string
		line            int
	}{
		{"wildcard host", `network_rule(host="*", protocol="https", decision="allow")`, "wildcards are not allowed", 1},
		{"blank justification", `prefix_rule(pattern=["ls"], justification="   ")`, "invalid rule: justification cannot be empty", 1},
		{"empty pattern", `prefix_rule(pattern=[])`, "invalid pattern element: pattern cannot be empty", 1},
		{"empty alternatives", `prefix_rule(pattern=["a", []])`, "pattern alternatives cannot be empty", 1},
		{"non-string alternative", `prefix_rule(pattern=["a", ["b", 1]])`, "pattern alternative must be a string (got int)", 1},
		{"bad element", `prefix_rule(pattern=["a", 1])`, "pattern element must be a string or list of strings (got int)", 1},
		{"bad decision", `prefix_rule(pattern=["ls"], decision="maybe")`, "invalid decision: maybe", 1},
		{"case-sensitive decision", `prefix_rule(pattern=["ls"], decision="Allow")`, "invalid decision: Allow", 1},
		{"bad example type", `prefix_rule(pattern=["ls"], match=[1])`, "invalid example: example must be a string or list of strings (got int)", 1},
		{"bad example token", `prefix_rule(pattern=["ls"], match=[["ls", 1]])`, "example tokens must be strings (got int)", 1},
		{"bad example quoting", `prefix_rule(pattern=["ls"], match=["ls 'x"])`, "example string has invalid shell syntax", 1},
		{"empty example string", `prefix_rule(pattern=["ls"], match=[""])`, "example cannot be an empty string", 1},
		{"empty example list", `prefix_rule(pattern=["ls"], match=[[]])`, "example cannot be an empty list", 1},
		{"relative host path", `host_executable(name="git", paths=["git"])`, "host_executable paths must be absolute", 1},
		{"name with separator", `host_executable(name="/usr/bin/git", paths=[])`, "host_executable name must be a bare executable name", 1},
		{"empty name", `host_executable(name="", paths=[])`, "host_executable name cannot be empty", 1},
		{"wrong basename", `host_executable(name="git", paths=["/usr/bin/rg"])`, "must have basename `git`", 1},
		{"non-string path", `host_executable(name="git", paths=[1])`, "host_executable paths must be strings (got int)", 1},
		{"failing match", "# the pattern token holds a space\n\nprefix_rule(pattern=[\"tmux capture-pane\"], match=[\"tmux capture-pane -p\"])", "broken.rules:3: expected every example to match at least one rule", 3},
		{"not_match that matches", "\nprefix_rule(pattern=[\"git\"], not_match=[\"git status\"])", "broken.rules:2: expected example to not match rule", 2},
		{"syntax error", "prefix_rule(\n", "starlark error", 2},
		{"unknown keyword", `prefix_rule(pattern=["ls"], bogus=1)`, "unexpected keyword argument", 1},
		{"unknown builtin", "\n\nfoo(1)", "undefined: foo", 3},
		{"load is not supported", `load("x.star", "y")`, "load", 1},
		{"runtime error in a loop", "x = 1\nfor i in [1, 2]:\n    x = x + \"a\"", "unknown binary op", 3},
		{"network decision", `network_rule(host="a.com", protocol="http", decision="nope")`, "invalid decision: nope", 1},
		{"network url host", `network_rule(host="https://a.com/x", protocol="http", decision="allow")`, "without scheme or path", 1},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := LoadSource("/x/broken.rules", []byte(c.src))
			if err == nil {
				t.Fatal("loaded")
			}
			var le *LoadError
			if !asLoadError(err, &le) {
				t.Fatalf("not a LoadError: %T %v", err, err)
			}
			if !strings.Contains(err.Error(), c.want) {
				t.Fatalf("error %q does not contain %q", err, c.want)
			}
			if le.Line != c.line || le.File != "/x/broken.rules" {
				t.Fatalf("location %s:%d, want line %d", le.File, le.Line, c.line)
			}
			want := "/x/broken.rules:" + itoa(c.line) + ": "
			if !strings.HasPrefix(err.Error(), want) || !strings.Contains(err.Error(), "on or around line "+itoa(c.line)) {
				t.Fatalf("error %q does not start with %q", err, want)
			}
		})
	}
}

func asLoadError(err error, le **LoadError) bool {
	e, ok := err.(*LoadError)
	*le = e
	return ok
}

func itoa(n int) string { return strconv.Itoa(n) }

func TestInfiniteLoopIsBounded(t *testing.T) {
	_, err := LoadSource("loop.rules", []byte("def f():\n    for i in range(1000000000):\n        pass\nf()\n"))
	if err == nil || !strings.Contains(err.Error(), "loop.rules") {
		t.Fatalf("err = %v", err)
	}
}

func TestLoadDirsFileSelectionAndOrder(t *testing.T) {
	dir := t.TempDir()
	writeFile(t, filepath.Join(dir, "b.rules"), `prefix_rule(pattern=["b"])`)
	writeFile(t, filepath.Join(dir, "a.rules"), `prefix_rule(pattern=["a"])`)
	writeFile(t, filepath.Join(dir, "c.txt"), `this is not a rules file`)
	writeFile(t, filepath.Join(dir, "sub", "d.rules"), `syntax error (`)
	writeFile(t, filepath.Join(dir, "default.rules.lock"), ``)
	target := filepath.Join(t.TempDir(), "linked.rules")
	writeFile(t, target, `prefix_rule(pattern=["linked"])`)
	if err := os.Symlink(target, filepath.Join(dir, "z.rules")); err != nil {
		t.Fatal(err)
	}
	p, err := LoadDirs(dir, filepath.Join(dir, "missing"), dir)
	if err != nil {
		t.Fatal(err)
	}
	files := p.Files()
	want := []string{filepath.Join(dir, "a.rules"), filepath.Join(dir, "b.rules"), filepath.Join(dir, "z.rules")}
	if !reflect.DeepEqual(files, want) {
		t.Fatalf("files %q, want %q", files, want)
	}
	if len(p.RulesFor("linked")) != 1 {
		t.Fatal("symlinked rules file must be read")
	}
	// A `rules` path that is a file is an error, not an empty policy.
	if _, err := LoadDirs(filepath.Join(dir, "a.rules")); err == nil {
		t.Fatal("a non-directory must fail")
	}
	// One broken file fails the whole load: never a partial policy.
	writeFile(t, filepath.Join(dir, "c.rules"), "prefix_rule(pattern=[\"c\"])\nprefix_rule(pattern=[])\n")
	if p, err := LoadDirs(dir); err == nil || p != nil || !strings.Contains(err.Error(), "c.rules:2:") {
		t.Fatalf("p=%v err=%v", p, err)
	}
}

func TestAllowedPrefixesAndFilters(t *testing.T) {
	p := mustLoad(t, `
prefix_rule(pattern=["cargo"])
prefix_rule(pattern=["cargo", "publish"], decision="prompt")
prefix_rule(pattern=["rm"], decision="forbidden")
prefix_rule(pattern=["git", ["status", "diff"]])
host_executable(name="cargo", paths=["/usr/bin/cargo"])
network_rule(host="example.com", protocol="https", decision="allow")
`)
	if got := p.AllowedPrefixes(); !reflect.DeepEqual(got, [][]string{a("cargo"), a("git", "[status|diff]")}) {
		t.Fatalf("%q", got)
	}
	c := p.WithoutAllowPrefixRules()
	if len(c.AllowedPrefixes()) != 0 || len(c.NetworkRules()) != 1 {
		t.Fatal("filter must drop allow rules only")
	}
	if _, ok := c.HostExecutable("cargo"); !ok {
		t.Fatal("host executables kept")
	}
	if ev := c.Check([][]string{a("rm", "target")}, resolveOn, fallback(Allow)); ev.Decision != Forbidden {
		t.Fatal("forbidden kept")
	}
	if ev := c.Check([][]string{a("/usr/bin/cargo", "publish")}, resolveOn, fallback(Allow)); ev.Decision != Prompt {
		t.Fatal("prompt kept through resolution")
	}
}

func TestFormatRulesRoundTrip(t *testing.T) {
	tokens := a("echo", "Hello, world!", `quote " and \ back`, "tab\tnew\nline", "<html>&", "ünï")
	line := FormatPrefixRule(tokens)
	p, err := LoadSource("rt.rules", []byte(line+"\n"))
	if err != nil {
		t.Fatal(err)
	}
	if got := p.Matches(tokens, resolveOn); len(got) != 1 || !reflect.DeepEqual(got[0].MatchedPrefix, tokens) {
		t.Fatalf("round trip of %s: %+v", line, got)
	}
	if FormatPrefixRule(a("echo", "Hello, world!")) != `prefix_rule(pattern=["echo", "Hello, world!"], decision="allow")` {
		t.Fatal(FormatPrefixRule(a("echo", "Hello, world!")))
	}
	nr := NetworkRule{Host: "a.test", Protocol: "https", Decision: "allow", Justification: `why "not" <b>`}
	p, err = LoadSource("rt.rules", []byte(FormatNetworkRule(nr)))
	if err != nil {
		t.Fatal(err)
	}
	if got := p.NetworkRules()[0]; got.Justification != nr.Justification || got.Host != "a.test" {
		t.Fatalf("%+v", got)
	}
}

// Reference §10.1 rows 35-36.
func TestFormatAllowPrefixes(t *testing.T) {
	var many [][]string
	for i := 0; i < 150; i++ {
		many = append(many, a(fmt.Sprintf("tool-%03d", i)))
	}
	out := FormatAllowPrefixes(many)
	if !strings.HasSuffix(out, "...\n[Some commands were truncated]") || strings.Count(out, "\n")+1 != 101 {
		t.Fatalf("lines %d: %s", strings.Count(out, "\n")+1, out[len(out)-80:])
	}
	if !strings.HasPrefix(out, `- ["tool-000"]`) {
		t.Fatal(out[:40])
	}
	var long [][]string
	for i := 0; i < 200; i++ {
		long = append(long, a(fmt.Sprintf("tool-%03d", i), strings.Repeat("x", 500)))
	}
	out = FormatAllowPrefixes(long)
	if len(out) > 5000+len("...\n[Some commands were truncated]") || !strings.HasSuffix(out, "[Some commands were truncated]") {
		t.Fatalf("len %d", len(out))
	}
	got := FormatAllowPrefixes([][]string{a("git", "status"), a("ls"), a("cat", "x"), a("rm")})
	if got != "- [\"ls\"]\n- [\"rm\"]\n- [\"cat\", \"x\"]\n- [\"git\", \"status\"]" {
		t.Fatalf("%q", got)
	}
}

// Reference §10.1 row 32: prefix and network amendments share a file, in order.
func TestAppendPrefixAndNetworkRules(t *testing.T) {
	path := filepath.Join(t.TempDir(), "rules", "default.rules")
	if _, err := AppendPrefixRule(path, a("curl")); err != nil {
		t.Fatal(err)
	}
	if _, err := AppendNetworkRule(path, NetworkRule{Host: "api.github.com", Protocol: "https", Decision: "allow"}); err != nil {
		t.Fatal(err)
	}
	got, _ := os.ReadFile(path)
	want := "prefix_rule(pattern=[\"curl\"], decision=\"allow\")\nnetwork_rule(host=\"api.github.com\", protocol=\"https\", decision=\"allow\")\n"
	if string(got) != want {
		t.Fatalf("%q", got)
	}
	p, err := LoadFiles(path)
	if err != nil || len(p.RulesFor("curl")) != 1 || len(p.NetworkRules()) != 1 {
		t.Fatalf("%v", err)
	}
}

func TestWorldWritableRulesFileIsRefused(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "open.rules")
	writeFile(t, path, `prefix_rule(pattern=["ls"])`)
	if err := os.Chmod(path, 0o666); err != nil {
		t.Fatal(err)
	}
	if _, err := LoadDirs(dir); err == nil || !strings.Contains(err.Error(), "writable by every user") {
		t.Fatalf("err = %v", err)
	}
	if err := os.Chmod(path, 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := LoadDirs(dir); err != nil {
		t.Fatal(err)
	}
}

// Issue 17: with TrustedPath set, a bare-name allow rule is not inherited
// by an arbitrary absolute path; prompt and forbidden rules still are, and
// host_executable lists stay the operator's explicit word.
func TestBasenameFallbackTrustedPath(t *testing.T) {
	p := mustLoad(t, `prefix_rule(pattern=["ls"], decision="allow")
prefix_rule(pattern=["rm"], decision="forbidden")
prefix_rule(pattern=["tool"], decision="allow")
host_executable(name="tool", paths=["/home/u/bin/tool"])`)
	trusted := func(p string) bool { return strings.HasPrefix(p, "/usr/bin/") }
	opts := MatchOptions{ResolveHostExecutables: true, TrustedPath: trusted}
	for _, c := range []struct {
		argv []string
		want int
	}{
		{[]string{"/usr/bin/ls"}, 1},
		{[]string{"/proc/self/cwd/ls"}, 0},
		{[]string{"/proc/self/cwd/rm", "x"}, 1},
		{[]string{"/home/u/bin/tool"}, 1},
		{[]string{"/home/v/bin/tool"}, 0},
		{[]string{"ls"}, 1},
	} {
		if got := len(p.Matches(c.argv, opts)); got != c.want {
			t.Errorf("%q: %d matches, want %d", c.argv, got, c.want)
		}
	}
	if got := len(p.Matches([]string{"/proc/self/cwd/ls"}, MatchOptions{ResolveHostExecutables: true})); got != 1 {
		t.Errorf("without TrustedPath the reference fallback applies: %d", got)
	}
}
