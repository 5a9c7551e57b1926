package heuristics

import (
	"path"
	"strings"

	"github.com/netproxy/netproxy/execcore/shellparse"
	"github.com/netproxy/netproxy/execcore/shlex"
)

// Danger classifies a dangerous command.
type Danger int

const (
	DangerNone Danger = iota
	// DangerForcedRm is an rm with a force flag somewhere in the command.
	DangerForcedRm
	// DangerOther is any other danger, including a wrapper chain deeper
	// than MaxWrapperDepth (fail closed).
	DangerOther
)

func (d Danger) String() string {
	switch d {
	case DangerForcedRm:
		return "forced_rm"
	case DangerOther:
		return "other"
	}
	return "none"
}

// MaxWrapperDepth bounds the unwrapping of sudo/env/trap/nested shells.
const MaxWrapperDepth = 8

// DangerousCommand is dangerous_command_match of profile R2, with the R3
// `env` flags, plus stricter extensions that only add detections (see
// docs/execpolicy.md): sudo options, shells invoked with other flags than
// exactly `-c`/`-lc`, `eval`, `alias`, command-running wrappers (xargs,
// nohup, timeout, find -exec, su -c, ...), abbreviated `--force`, glob and
// escaped command names.
func DangerousCommand(argv []string) Danger { return dangerAt(argv, 0) }

func dangerAt(argv []string, depth int) Danger {
	if depth > MaxWrapperDepth {
		return DangerOther
	}
	if len(argv) == 0 {
		return DangerNone
	}
	if d := dangerR2(argv, depth); d != DangerNone {
		return d
	}
	return dangerExtended(argv, depth)
}

// dangerR2 is the reference procedure (steps 2 and 3).
func dangerR2(argv []string, depth int) Danger {
	switch classify(argv[0]) {
	case "rm":
		if forcedRm(argv[1:]) {
			return DangerForcedRm
		}
		return DangerNone
	case "sudo":
		return dangerAt(argv[1:], depth+1)
	case "env":
		rest, split := skipEnvArgs(argv[1:])
		for _, s := range split {
			if words, err := shlex.Split(s); err == nil {
				if d := dangerAt(words, depth+1); d != DangerNone {
					return d
				}
			}
		}
		return dangerAt(rest, depth+1)
	case "trap":
		args := argv[1:]
		if len(args) > 0 && args[0] == "--" {
			args = args[1:]
		}
		if len(args) == 0 || strings.HasPrefix(args[0], "-") {
			return DangerNone
		}
		return dangerAt([]string{"sh", "-c", args[0]}, depth+1)
	}
	if w, ok := shellparse.ExtractAnyWrapper(argv); ok {
		return scriptDanger(w.Script, depth)
	}
	return DangerNone
}

func scriptDanger(script string, depth int) Danger {
	cmds, ok := shellparse.LiteralCommands(script)
	if !ok {
		return DangerNone
	}
	for _, c := range cmds {
		if d := dangerAt(c, depth+1); d != DangerNone {
			return d
		}
	}
	return DangerNone
}

// forcedRm: any argument before a literal `--` that is `--force` (or an
// unambiguous abbreviation `--f`…, which GNU getopt accepts),
// `--interactive=WHEN` where WHEN means never (`never`, `no`, `none` or
// any abbreviation GNU argmatch accepts: `n`, `ne`, `non`, …) with the
// option name itself abbreviated or not (`--inter=no`, `--i=n`), or a
// short-option cluster (`-x`, not `--x`) containing `f`.
func forcedRm(args []string) bool {
	for _, a := range args {
		if a == "--" {
			return false
		}
		if strings.HasPrefix(a, "--") {
			opt := a[2:]
			if opt != "" && strings.HasPrefix("force", opt) {
				return true
			}
			if name, val, ok := strings.Cut(opt, "="); ok && name != "" && strings.HasPrefix("interactive", name) && interactiveNever(val) {
				return true
			}
			continue
		}
		if strings.HasPrefix(a, "-") && strings.Contains(a[1:], "f") {
			return true
		}
	}
	return false
}

// interactiveNever reports an rm --interactive value that GNU argmatch maps
// to "never": a non-empty prefix of never, no or none (all three mean the
// same, so even the ambiguous `n` is accepted).
func interactiveNever(val string) bool {
	if val == "" {
		return false
	}
	for _, w := range []string{"never", "no", "none"} {
		if strings.HasPrefix(w, val) {
			return true
		}
	}
	return false
}

// skipEnvArgs skips env's assignments and options (R3: -i, -0, -v and the
// value-taking -C, -u, -S, -a in every spelling) and returns the command,
// plus the -S/--split-string values (each itself a command line).
func skipEnvArgs(args []string) (rest []string, split []string) {
	i := 0
	for i < len(args) {
		a := args[i]
		switch {
		case a == "--":
			return args[i+1:], split
		case a == "-i" || a == "--ignore-environment" || a == "-0" || a == "--null" || a == "-v" || a == "--debug":
			i++
		case a == "-C" || a == "--chdir" || a == "-u" || a == "--unset" || a == "-a" || a == "--argv0":
			i += 2
		case a == "-S" || a == "--split-string":
			if i+1 < len(args) {
				split = append(split, args[i+1])
			}
			i += 2
		case strings.HasPrefix(a, "--split-string="):
			split = append(split, strings.TrimPrefix(a, "--split-string="))
			i++
		case strings.HasPrefix(a, "-S") && len(a) > 2:
			split = append(split, a[2:])
			i++
		case strings.HasPrefix(a, "--chdir=") || strings.HasPrefix(a, "--unset=") || strings.HasPrefix(a, "--argv0="):
			i++
		case len(a) > 2 && (strings.HasPrefix(a, "-C") || strings.HasPrefix(a, "-u") || strings.HasPrefix(a, "-a")):
			i++
		case isAssignment(a):
			i++
		default:
			return args[i:], split
		}
	}
	return nil, split
}

func isAssignment(a string) bool {
	name, _, ok := strings.Cut(a, "=")
	return ok && name != "" && !strings.HasPrefix(name, "-")
}

// shells are executables whose -c argument is a script.
var shells = map[string]bool{
	"bash": true, "sh": true, "zsh": true, "dash": true, "ksh": true, "mksh": true,
	"yash": true, "ash": true, "fish": true, "rbash": true, "pdksh": true, "oksh": true,
	"lksh": true, "posh": true, "tcsh": true, "csh": true,
}

// commandWrappers run (part of) their arguments as a command.
var commandWrappers = map[string]bool{
	"command": true, "builtin": true, "exec": true, "nohup": true, "nice": true,
	"time": true, "timeout": true, "xargs": true, "doas": true, "pkexec": true,
	"stdbuf": true, "setsid": true, "ionice": true, "chrt": true, "taskset": true,
	"unbuffer": true, "find": true, "su": true, "runuser": true, "sg": true,
	"flock": true, "watch": true, "busybox": true, "chroot": true, "strace": true,
	"ltrace": true, "systemd-run": true, "parallel": true, "script": true,
	"unshare": true, "nsenter": true, "fakeroot": true, "faketime": true,
	"firejail": true, "bwrap": true, "proot": true, "ssh": true, "sudo": true,
	"env": true, "catchsegv": true, "valgrind": true, "setpriv": true, "numactl": true,
	"cgexec": true, "torsocks": true, "proxychains": true, "proxychains4": true,
}

// interesting lists the names worth re-examining inside a wrapper's argv.
func interesting(name string) bool {
	switch name {
	case "rm", "sudo", "env", "trap", "eval", "alias":
		return true
	}
	return shells[name] || commandWrappers[name]
}

var knownNames = func() []string {
	names := []string{"rm", "sudo", "env", "trap", "eval", "alias"}
	for n := range shells {
		names = append(names, n)
	}
	for n, ok := range commandWrappers {
		if ok {
			names = append(names, n)
		}
	}
	return names
}()

// classify returns the program name the detector keys on: the basename of
// argv[0]. A glob name (`/bin/r?`) that matches a known program is treated
// as that program, since the shell may expand it to it.
func classify(prog string) string {
	base := path.Base(prog)
	if strings.HasSuffix(prog, "/") {
		base = ""
	}
	if !strings.ContainsAny(base, "*?[") {
		return base
	}
	if ok, _ := path.Match(base, "rm"); ok {
		return "rm"
	}
	for _, n := range knownNames {
		if ok, _ := path.Match(base, n); ok {
			return n
		}
	}
	return base
}

// dangerExtended adds detections beyond the reference; it runs only when
// the reference procedure found nothing.
func dangerExtended(argv []string, depth int) Danger {
	name := classify(argv[0])
	switch {
	case name == "eval":
		return scriptDanger(strings.Join(argv[1:], " "), depth)
	case name == "alias":
		for _, a := range argv[1:] {
			if _, v, ok := strings.Cut(a, "="); ok {
				if d := scriptDanger(v, depth); d != DangerNone {
					return d
				}
			}
		}
		return DangerNone
	case shells[name]:
		if _, ok := shellparse.ExtractAnyWrapper(argv); ok {
			return DangerNone // the reference procedure already read this script
		}
		if script, ok := shellScriptArg(argv[1:]); ok {
			return scriptDanger(script, depth)
		}
		return DangerNone
	case commandWrappers[name]:
		// One flat scan over the argv: every later position that names a
		// program of interest is examined as a command of its own. Nested
		// wrappers in the same argv are skipped, since this scan reaches
		// their positions anyway (keeps the work linear).
		for i := 1; i < len(argv); i++ {
			if n := classify(argv[i]); interesting(n) && !commandWrappers[n] {
				if d := dangerAt(argv[i:], depth+1); d != DangerNone {
					return d
				}
			}
			if strings.ContainsAny(argv[i], " \t\n;&|") {
				if d := scriptDanger(argv[i], depth); d != DangerNone {
					return d
				}
			}
		}
	}
	return DangerNone
}

// shellScriptArg finds the -c script of a shell invocation with any flags:
// `-c`, `-lc`, `-ec`, `-l -c`, `--login -c`, `-o pipefail -c`, ...
func shellScriptArg(args []string) (string, bool) {
	hasC := false
	for i := 0; i < len(args); i++ {
		a := args[i]
		switch {
		case a == "--":
			if hasC && i+1 < len(args) {
				return args[i+1], true
			}
			return "", false
		case a == "-o" || a == "+o" || a == "-O" || a == "+O" || a == "--rcfile" || a == "--init-file":
			i++
		case a == "--command":
			hasC = true
		case strings.HasPrefix(a, "--"):
		case (strings.HasPrefix(a, "-") || strings.HasPrefix(a, "+")) && len(a) > 1:
			if strings.Contains(a[1:], "c") {
				hasC = true
			}
		default:
			if hasC {
				return a, true
			}
			return "", false
		}
	}
	return "", false
}

// ShellScript returns the -c script of any shell invocation: a bash-like
// `[shell, -c|-lc, script]` wrapper, or any known shell with any flag
// spelling that includes `c`.
func ShellScript(argv []string) (string, bool) {
	if len(argv) == 0 {
		return "", false
	}
	if w, ok := shellparse.ExtractAnyWrapper(argv); ok {
		return w.Script, true
	}
	if shells[classify(argv[0])] {
		return shellScriptArg(argv[1:])
	}
	return "", false
}
