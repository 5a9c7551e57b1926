package execcore

import "testing"

// Issue 22 item 9: interpreters, shells and wrappers in any spelling are
// never offered as an amendment; ordinary prefixes still are.
func TestBannedPrefixAnySpelling(t *testing.T) {
	for _, p := range [][]string{
		a("/usr/bin/bash"), a("/usr/bin/bash", "-c"), a("/usr/local/bin/zsh", "-lc"), a("bash5.2"), a("/bin/dash"), a("fish", "-c"),
		a("python3.11"), a("python3.11", "-c"), a("/usr/bin/python3", "-"), a("pypy3"), a("pypy3.10", "-c"), a("node18"), a("node18", "-e"),
		a("/usr/bin/node"), a("ruby3.2"), a("ruby3.2", "-e"), a("perl5.36"), a("perl5.36", "-e"), a("php8.2", "-r"), a("lua5.4"),
		a("python.exe"), a("C:\\Python311\\python.exe", "-c"), a("awk"), a("gawk", "-f"),
		a("git"), a("/usr/bin/git"), a("git", "-c"), a("git", "-c", "core.pager=x"), a("git", "--exec-path"), a("git", "--exec-path=."),
		a("git", "-C", "dir"), a("git", "--git-dir=x"), a("git", "--config-env=x=y"),
		a("env"), a("/usr/bin/env"), a("env", "-i"), a("env", "FOO=1"), a("env", "python3"), a("env", "bash", "-c"),
		a("nice"), a("nice", "-n", "5"), a("timeout", "5"), a("timeout", "-s", "KILL", "5"), a("xargs"), a("xargs", "-0"),
		a("sudo"), a("sudo", "-u", "x"), a("doas"), a("nohup"), a("stdbuf", "-oL"), a("setsid"), a("flock", "/tmp/l"),
		a("command"), a("exec"), a("eval"), a("time"), a("watch"), a("su", "-c"), a("script", "-c"), a("chrt", "-f", "1"),
		a("taskset", "0x1"), a("ionice", "-c3"), a("builtin"), a("nice", "--bogus", "make"), a("strace"), a("ssh", "host"),
		a("nice", "timeout", "5"), a("nice", "python3"), a("sudo", "-u", "x", "bash"),
	} {
		if !IsBannedPrefixSuggestion(p) {
			t.Errorf("%q: offered as an amendment", p)
		}
	}
	for _, p := range [][]string{
		a("cargo", "build"), a("git", "status"), a("/usr/bin/git", "status"), a("npm", "test"), a("python3", "manage.py"),
		a("bash", "setup.sh"), a("nice", "make"), a("env", "FOO=1", "make"), a("timeout", "5", "cargo", "test"), a("find", "."),
		a("make"), a("ls"), a("xargs", "grep"),
	} {
		if IsBannedPrefixSuggestion(p) {
			t.Errorf("%q: banned; want it offered", p)
		}
	}
	if n := BannedPrefixSuggestionCount(); n != 88 {
		t.Errorf("the R2 list has %d entries, want 88", n)
	}
}
