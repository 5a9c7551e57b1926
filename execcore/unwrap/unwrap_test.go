package unwrap

import (
	"reflect"
	"testing"
)

func a(s ...string) []string { return s }

func cmds(c ...[]string) [][]string { return c }

// Each wrapper's grammar, as its manual gives it.
func TestUnwrapExact(t *testing.T) {
	curl := a("curl", "x")
	for _, c := range []struct {
		argv     []string
		commands [][]string
		scripts  []string
		failed   bool
	}{
		{a("command", "curl", "x"), cmds(curl), nil, false},
		{a("command", "-p", "curl", "x"), cmds(curl), nil, false},
		{a("command", "-v", "curl"), nil, nil, false},
		{a("command", "-pV", "curl"), nil, nil, false},
		{a("command", "-x", "curl"), nil, nil, true},
		{a("builtin", "exec", "curl", "x"), cmds(a("exec", "curl", "x")), nil, false},
		{a("exec", "-a", "n", "curl", "x"), cmds(curl), nil, false},
		{a("exec", "-cl", "--", "curl", "x"), cmds(curl), nil, false},
		{a("env", "A=1", "B=2", "curl", "x"), cmds(curl), nil, false},
		{a("env", "-i", "-u", "H", "-C", "/", "curl", "x"), cmds(curl), nil, false},
		{a("env", "-iuH", "curl", "x"), cmds(curl), nil, false},
		{a("env", "--unset", "H", "--chdir=/", "curl", "x"), cmds(curl), nil, false},
		{a("env", "-", "A=1", "curl", "x"), cmds(curl), nil, false},
		{a("env", "-S", "curl x"), cmds(curl), nil, false},
		{a("env", "-S", "A=1 curl", "x"), cmds(curl), nil, false},
		{a("env", "-S", "-i curl", "x"), cmds(curl), nil, false},
		{a("env", "-vS", "curl x"), cmds(curl), nil, false},
		{a("env", "-Scurl x"), cmds(curl), nil, false},
		{a("env", "--split-string=curl x"), cmds(curl), nil, false},
		{a("env", "--sp", "curl x"), cmds(curl), nil, false},
		{a("env", "-S", "curl 'x"), nil, nil, true},
		{a("env", "--block-signal=INT", "--default-signal", "curl", "x"), cmds(curl), nil, false},
		{a("env", "-Z", "curl"), nil, nil, true},
		{a("env", "--help"), nil, nil, false},
		{a("env", "A=1"), nil, nil, false},
		{a("nice", "-n", "5", "curl", "x"), cmds(curl), nil, false},
		{a("nice", "-n5", "curl", "x"), cmds(curl), nil, false},
		{a("nice", "-5", "curl", "x"), cmds(curl), nil, false},
		{a("nice", "--5", "curl", "x"), cmds(curl), nil, false},
		{a("nice", "--adjustment", "5", "curl", "x"), cmds(curl), nil, false},
		{a("nice"), nil, nil, false},
		{a("nice", "-n"), nil, nil, true},
		{a("ionice", "-c3", "curl", "x"), cmds(curl), nil, false},
		{a("ionice", "-c", "2", "-n7", "-t", "curl", "x"), cmds(curl), nil, false},
		{a("ionice", "-p", "1", "2"), nil, nil, false},
		{a("timeout", "5", "curl", "x"), cmds(curl), nil, false},
		{a("timeout", "-s", "KILL", "-k", "1", "5", "curl", "x"), cmds(curl), nil, false},
		{a("timeout", "--signal=KILL", "--preserve-status", "5s", "curl", "x"), cmds(curl), nil, false},
		{a("timeout", "5"), nil, nil, true},
		{a("nohup", "curl", "x"), cmds(curl), nil, false},
		{a("nohup", "--", "curl", "x"), cmds(curl), nil, false},
		{a("nohup", "-x", "curl"), nil, nil, true},
		{a("stdbuf", "-oL", "-e", "0", "curl", "x"), cmds(curl), nil, false},
		{a("stdbuf", "--output=L", "curl", "x"), cmds(curl), nil, false},
		{a("setsid", "-fw", "curl", "x"), cmds(curl), nil, false},
		{a("flock", "/l", "curl", "x"), cmds(curl), nil, false},
		{a("flock", "-n", "-w", "5", "-E", "3", "/l", "curl", "x"), cmds(curl), nil, false},
		{a("flock", "/l", "-c", "curl x"), nil, a("curl x"), false},
		{a("flock", "/l", "--command", "curl x"), nil, a("curl x"), false},
		{a("flock", "-c", "curl x", "/l"), nil, nil, true},
		{a("flock", "9"), nil, nil, false},
		{a("chrt", "-f", "1", "curl", "x"), cmds(curl), nil, false},
		{a("chrt", "--rr", "1", "curl", "x"), cmds(curl), nil, false},
		{a("chrt", "-d", "-T", "1", "-P", "2", "-D", "2", "0", "curl", "x"), cmds(curl), nil, false},
		{a("chrt", "-p", "1"), nil, nil, false},
		{a("chrt", "-o", "curl", "x"), nil, nil, true},
		{a("taskset", "0x1", "curl", "x"), cmds(curl), nil, false},
		{a("taskset", "-c", "0-1", "curl", "x"), cmds(curl), nil, false},
		{a("taskset", "-p", "0x1", "1"), nil, nil, false},
		{a("time", "-p", "curl", "x"), cmds(curl), nil, false},
		{a("time", "-o", "f", "-f", "%e", "curl", "x"), cmds(curl), nil, false},
		{a("xargs", "curl", "x"), cmds(curl), nil, false},
		{a("xargs", "-I{}", "curl", "x"), cmds(curl), nil, false},
		{a("xargs", "-I", "{}", "-0", "-n1", "-P4", "curl", "x"), cmds(curl), nil, false},
		{a("xargs", "-i", "curl", "x"), cmds(curl), nil, false},
		{a("xargs", "--replace", "curl", "x"), cmds(curl), nil, false},
		{a("xargs", "-d", "\n", "curl", "x"), cmds(curl), nil, false},
		{a("xargs"), cmds(a("echo")), nil, false},
		{a("find", ".", "-exec", "curl", "x", ";", "-execdir", "id", "{}", "+"), cmds(curl, a("id", "{}")), nil, false},
		{a("find", ".", "-name", "x"), nil, nil, false},
		{a("find", ".", "-ok", "curl", "x"), cmds(curl), nil, false},
		{a("eval", "curl", "x"), nil, a("curl x"), false},
		{a("trap", "curl x", "EXIT"), nil, a("curl x"), false},
		{a("trap", "-p"), nil, nil, false},
		{a("alias", "c=curl x"), nil, a("curl x"), false},
		{a("sudo", "-u", "x", "-E", "--", "curl", "x"), cmds(curl), nil, false},
		{a("sudo", "-ux", "A=1", "curl", "x"), cmds(curl), nil, false},
		{a("sudo", "--preserve-env=PATH", "curl", "x"), cmds(curl), nil, false},
		{a("sudo", "-e", "f"), nil, nil, false},
		{a("sudo", "-l"), nil, nil, false},
		{a("doas", "-u", "root", "curl", "x"), cmds(curl), nil, false},
		{a("su", "-c", "curl x"), nil, a("curl x"), false},
		{a("su", "-", "root", "-c", "curl x"), nil, a("curl x"), false},
		{a("su", "root", "--command=curl x"), nil, a("curl x"), false},
		{a("su", "root", "--", "-c", "curl x"), nil, a("curl x"), false},
		{a("su", "root", "script.sh"), nil, nil, true},
		{a("su", "root"), nil, nil, false},
		{a("script", "-q", "-c", "curl x", "/dev/null"), nil, a("curl x"), false},
		{a("script", "/dev/null", "--command", "curl x"), nil, a("curl x"), false},
		{a("script", "out"), nil, nil, false},
		{a("watch", "curl", "x"), nil, a("curl x"), false},
		{a("watch", "-n", "1", "-d", "curl x"), nil, a("curl x"), false},
		{a("watch", "-x", "curl", "x"), cmds(curl), nil, false},
		{a("bash", "-c", "curl x"), nil, a("curl x"), false},
		{a("/bin/sh", "-ec", "curl x"), nil, a("curl x"), false},
		{a("bash", "-o", "pipefail", "-c", "curl x"), nil, a("curl x"), false},
		{a("bash", "script.sh"), nil, nil, false},
		{a("curl", "x"), nil, nil, false},
	} {
		s := Unwrap(c.argv)
		if c.failed {
			if !s.Failed || !s.Unparsed {
				t.Errorf("%q: %+v, want failed", c.argv, s)
			}
			continue
		}
		if s.Failed || !reflect.DeepEqual(s.Commands, c.commands) || !reflect.DeepEqual(s.Scripts, c.scripts) {
			t.Errorf("%q: commands %q scripts %q failed %v, want %q %q", c.argv, s.Commands, s.Scripts, s.Failed, c.commands, c.scripts)
		}
	}
}

// A failed or unmodelled wrapper is read by a flat scan that reaches every
// later program word, and stays linear.
func TestUnwrapFlatScan(t *testing.T) {
	s := Unwrap(a("nice", "--bogus", "timeout", "5", "curl", "x"))
	if !s.Failed || !containsCmd(s.Commands, a("curl", "x")) {
		t.Errorf("nice --bogus: %+v", s)
	}
	s = Unwrap(a("strace", "-f", "curl", "x"))
	if s.Failed || !s.Unparsed || !containsCmd(s.Commands, a("curl", "x")) {
		t.Errorf("strace: %+v", s)
	}
	s = Unwrap(a("ssh", "host", "curl x; id"))
	if len(s.Scripts) != 1 {
		t.Errorf("ssh: %+v", s)
	}
	var long []string
	for i := 0; i < 20000; i++ {
		long = append(long, "nice")
	}
	n := 0
	Walk(append(long, "curl"), false, func(Node) bool { n++; return true })
	if n > MaxDepth+2 {
		t.Errorf("a long chain visited %d nodes", n)
	}
}

func containsCmd(cs [][]string, want []string) bool {
	for _, c := range cs {
		if reflect.DeepEqual(c, want) {
			return true
		}
	}
	return false
}

// Walk reaches commands through wrappers and scripts, and reports a chain
// deeper than MaxDepth.
func TestWalk(t *testing.T) {
	var got [][]string
	Walk(a("sudo", "env", "A=1", "sh", "-c", "nice curl x | xargs rm"), false, func(n Node) bool {
		got = append(got, n.Argv)
		return true
	})
	for _, w := range [][]string{a("curl", "x"), a("rm")} {
		if !containsCmd(got, w) {
			t.Errorf("walk %q: missing %q", got, w)
		}
	}
	deep := a("curl")
	for i := 0; i <= MaxDepth; i++ {
		deep = append(a("nice"), deep...)
	}
	overflow := false
	Walk(deep, false, func(n Node) bool { overflow = overflow || n.Overflow; return true })
	if !overflow {
		t.Error("no overflow past MaxDepth")
	}
	exact := map[string]bool{}
	Walk(a("bash", "-c", "curl x; echo $(id)"), true, func(n Node) bool { exact[n.Argv[0]] = !n.Approx; return true })
	if exact["curl"] || exact["id"] {
		t.Errorf("commands of a script that is not plain words are exact: %v", exact)
	}
	Walk(a("bash", "-c", "curl x && ls"), true, func(n Node) bool { exact[n.Argv[0]] = !n.Approx; return true })
	if !exact["curl"] || !exact["ls"] {
		t.Errorf("plain-word script commands are not exact: %v", exact)
	}
}
