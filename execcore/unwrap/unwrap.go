// Package unwrap finds the commands that a wrapper command runs: `command`,
// `builtin`, `exec`, `env` (VAR=…, -i, -u, -S), `nice`, `ionice`,
// `timeout`, `nohup`, `stdbuf`, `setsid`, `flock`, `chrt`, `taskset`,
// `time`, `xargs`, `find -exec/-execdir/-ok/-okdir`, `eval`, `trap`,
// `alias`, `sudo`, `doas`, `su -c`, `script -c`, `watch`, and nested shells
// (SPEC §6.3). It is the one unwrapping implementation: the
// dangerous-command detector and the rule matcher both walk commands with
// it, so what one sees through, the other does too.
//
// Each wrapper's options are parsed exactly, as its own getopt does. An
// invocation it cannot parse (an unknown option, a missing operand) is
// reported Unparsed, with a flat scan of the words as candidates, so a
// caller can both apply the restrictive rules of any program named later
// and fail closed.
//
// It reads argvs and scripts only: it must never run a command or touch
// the file system.
package unwrap

import (
	"path"
	"strings"

	"github.com/netproxy/netproxy/execcore/shellparse"
	"github.com/netproxy/netproxy/execcore/shlex"
)

// Step is what one wrapper invocation runs.
type Step struct {
	// Wrapper is the wrapper's name ("" when argv is not a wrapper).
	Wrapper string
	// Commands are the argvs run; for xargs and find -exec they lack the
	// arguments appended at run time.
	Commands [][]string
	// Scripts are shell scripts run (sh -c, eval, su -c, watch, ...).
	Scripts []string
	// Unparsed: the invocation was not read exactly, so Commands hold
	// every later word as a possible command start and Scripts every word
	// that looks like a script (a flat scan).
	Unparsed bool
	// Failed: a wrapper whose grammar is modelled could not be parsed (an
	// unknown option, a missing operand); Unparsed is then set too. A
	// wrapper whose grammar is not modelled (ssh, strace, ...) is Unparsed
	// but not Failed.
	Failed bool
}

// Shells are executables whose -c argument is a script.
var shells = map[string]bool{
	"bash": true, "sh": true, "zsh": true, "dash": true, "ksh": true, "mksh": true,
	"yash": true, "ash": true, "fish": true, "rbash": true, "pdksh": true, "oksh": true,
	"lksh": true, "posh": true, "tcsh": true, "csh": true,
}

// IsShell reports a shell by name (basename, glob-aware).
func IsShell(prog string) bool { return shells[Classify(prog)] }

// exact maps each wrapper parsed exactly to its parser.
var exact map[string]func(args []string) Step

func init() {
	exact = map[string]func(args []string) Step{
		"command": plain(commandSpec, "v", "V"), "builtin": unwrapBuiltin, "exec": plain(execSpec),
		"env": unwrapEnv, "nice": unwrapNice, "ionice": unwrapIonice,
		"timeout": unwrapTimeout, "nohup": plain(nohupSpec, "help", "version"),
		"stdbuf": plain(stdbufSpec, "help", "version"), "setsid": plain(setsidSpec, "h", "help", "V", "version"),
		"flock": unwrapFlock, "chrt": unwrapChrt, "taskset": unwrapTaskset,
		"time": plain(timeSpec, "V", "help", "version"), "xargs": unwrapXargs,
		"find": unwrapFind, "eval": unwrapEval, "trap": unwrapTrap, "alias": unwrapAlias,
		"sudo": unwrapSudo, "doas": unwrapDoas, "su": unwrapSu, "script": unwrapScript,
		"watch": unwrapWatch,
	}
}

// flat are other programs that run a command among their arguments; their
// grammars are not modelled, so they are always read by a flat scan.
var flat = map[string]bool{
	"pkexec": true, "unbuffer": true, "runuser": true, "sg": true, "busybox": true,
	"chroot": true, "strace": true, "ltrace": true, "systemd-run": true, "parallel": true,
	"unshare": true, "nsenter": true, "fakeroot": true, "faketime": true, "firejail": true,
	"bwrap": true, "proot": true, "ssh": true, "catchsegv": true, "valgrind": true,
	"setpriv": true, "numactl": true, "cgexec": true, "torsocks": true, "proxychains": true,
	"proxychains4": true,
}

// IsWrapper reports a program (by name, glob-aware) that runs another
// command: an exactly parsed wrapper, a flat-scanned one, or a shell.
func IsWrapper(prog string) bool {
	n := Classify(prog)
	return exact[n] != nil || flat[n] || shells[n]
}

var knownNames = func() []string {
	names := []string{"rm"}
	for n := range shells {
		names = append(names, n)
	}
	for _, m := range []string{"command", "builtin", "exec", "env", "nice", "ionice", "timeout", "nohup", "stdbuf", "setsid",
		"flock", "chrt", "taskset", "time", "xargs", "find", "eval", "trap", "alias", "sudo", "doas", "su", "script", "watch"} {
		names = append(names, m)
	}
	for n := range flat {
		names = append(names, n)
	}
	return names
}()

// Classify returns the program name argv[0] stands for: its basename. A
// glob name (`/bin/r?`) that matches a known program is taken as that
// program, since the shell may expand it to it.
func Classify(prog string) string {
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

// Unwrap reads one level of wrapping. For anything that is not a wrapper
// it returns the zero Step.
func Unwrap(argv []string) Step {
	if len(argv) == 0 {
		return Step{}
	}
	name := Classify(argv[0])
	if shells[name] {
		if script, ok := ShellScript(argv); ok {
			return Step{Wrapper: name, Scripts: []string{script}}
		}
		return Step{}
	}
	if f := exact[name]; f != nil {
		s := f(argv[1:])
		s.Wrapper = name
		if s.Failed {
			s.Unparsed = true
			s.Commands, s.Scripts = scan(argv[1:])
		}
		return s
	}
	if flat[name] {
		s := Step{Wrapper: name, Unparsed: true}
		s.Commands, s.Scripts = scan(argv[1:])
		return s
	}
	return Step{}
}

// scan is the flat reading of a wrapper whose grammar is unknown: every
// word that is not an option or a nested wrapper starts a candidate
// command (nested wrappers are skipped since the scan reaches their
// positions anyway: the work stays linear), and every word holding shell
// syntax is a candidate script.
func scan(args []string) (cmds [][]string, scripts []string) {
	for i, a := range args {
		if a == "" {
			continue
		}
		if a[0] != '-' {
			if n := Classify(a); exact[n] == nil && !flat[n] {
				cmds = append(cmds, args[i:])
			}
		}
		if strings.ContainsAny(a, " \t\n;&|") {
			scripts = append(scripts, a)
		}
	}
	return cmds, scripts
}

func unparsed() Step { return Step{Failed: true} }

// parseRun parses a wrapper's options; done reports a result already
// decided: a parse failure (Failed) or one of noRun given (nothing runs).
func parseRun(spec optSpec, args []string, noRun ...string) (opts []opt, ops []string, s Step, done bool) {
	opts, ops, ok := spec.parse(args)
	switch {
	case !ok:
		return nil, nil, unparsed(), true
	case has(opts, noRun...):
		return nil, nil, Step{}, true
	}
	return opts, ops, Step{}, false
}

// plain is the parser of a wrapper whose operands are the command.
func plain(spec optSpec, noRun ...string) func([]string) Step {
	return func(args []string) Step {
		_, ops, s, done := parseRun(spec, args, noRun...)
		if done {
			return s
		}
		return run(ops)
	}
}

// run is the common tail: operands are the command (none: nothing runs).
func run(operands []string) Step {
	if len(operands) == 0 {
		return Step{}
	}
	return Step{Commands: [][]string{operands}}
}

func long(kv ...any) map[string]argKind {
	m := make(map[string]argKind, len(kv)/2)
	for i := 0; i+1 < len(kv); i += 2 {
		m[kv[i].(string)] = kv[i+1].(argKind)
	}
	return m
}

// bash `command [-pVv] cmd`: -v and -V only describe the command.
var commandSpec = optSpec{short: "pvV"}

// bash `builtin name args`: the builtin may itself be a wrapper (exec,
// eval, command).
func unwrapBuiltin(args []string) Step {
	if len(args) > 0 && args[0] == "--" {
		args = args[1:]
	}
	return run(args)
}

// bash `exec [-cl] [-a name] cmd`.
var execSpec = optSpec{short: "cla:"}

// GNU env: options, then NAME=VALUE assignments, then the command. -S
// splits its value into arguments that are read in place, options
// included (the shebang form `env -S 'perl -w'`).
var envSpec = optSpec{short: "+iu:vC:S:0a:", long: long(
	"ignore-environment", noArg, "null", noArg, "unset", reqArg, "chdir", reqArg,
	"split-string", reqArg, "debug", noArg, "block-signal", optArg, "default-signal", optArg,
	"ignore-signal", optArg, "list-signal-handling", noArg, "argv0", reqArg,
	"help", noArg, "version", noArg), expand: splitEnvString}

func unwrapEnv(args []string) Step {
	_, ops, s, done := parseRun(envSpec, args, "help", "version")
	if done {
		return s
	}
	if len(ops) > 0 && ops[0] == "-" {
		ops = ops[1:]
	}
	for len(ops) > 0 && isAssignment(ops[0]) {
		ops = ops[1:]
	}
	return run(ops)
}

// splitEnvString is env -S: the value becomes arguments, read in place.
func splitEnvString(name, val string) ([]string, bool) {
	if name != "S" && name != "split-string" {
		return nil, false
	}
	words, err := shlex.Split(val)
	if err != nil {
		return nil, true
	}
	if words == nil {
		words = []string{}
	}
	return words, true
}

func isAssignment(a string) bool {
	name, _, ok := strings.Cut(a, "=")
	return ok && name != "" && !strings.HasPrefix(name, "-")
}

// coreutils nice: `-N`/`--N` legacy adjustment, or -n N.
var niceSpec = optSpec{short: "+n:", long: long("adjustment", reqArg, "help", noArg, "version", noArg)}

func unwrapNice(args []string) Step {
	if len(args) > 0 && legacyNice(args[0]) {
		args = args[1:]
	}
	_, ops, s, done := parseRun(niceSpec, args, "help", "version")
	if done {
		return s
	}
	return run(ops)
}

func legacyNice(a string) bool {
	if !strings.HasPrefix(a, "-") {
		return false
	}
	n := strings.TrimLeft(a[1:], "+-")
	if len(a)-len(n) > 2 || n == "" {
		return false
	}
	for _, c := range n {
		if c < '0' || c > '9' {
			return false
		}
	}
	return true
}

// util-linux ionice: with -p/-P/-u the operands are ids, not a command.
var ioniceSpec = optSpec{short: "+c:n:p:P:tu:hV", long: long(
	"class", reqArg, "classdata", reqArg, "pid", reqArg, "pgid", reqArg, "ignore", noArg,
	"uid", reqArg, "help", noArg, "version", noArg)}

func unwrapIonice(args []string) Step {
	_, ops, s, done := parseRun(ioniceSpec, args, "p", "pid", "P", "pgid", "u", "uid", "h", "help", "V", "version")
	if done {
		return s
	}
	return run(ops)
}

// coreutils timeout DURATION COMMAND.
var timeoutSpec = optSpec{short: "+k:s:fpv", long: long(
	"kill-after", reqArg, "signal", reqArg, "foreground", noArg, "preserve-status", noArg,
	"verbose", noArg, "help", noArg, "version", noArg)}

func unwrapTimeout(args []string) Step {
	_, ops, s, done := parseRun(timeoutSpec, args, "help", "version")
	if done {
		return s
	}
	if len(ops) < 2 {
		return unparsed()
	}
	return run(ops[1:])
}

var nohupSpec = optSpec{short: "+", long: long("help", noArg, "version", noArg)}

var stdbufSpec = optSpec{short: "+i:o:e:", long: long("input", reqArg, "output", reqArg, "error", reqArg, "help", noArg, "version", noArg)}

var setsidSpec = optSpec{short: "+cfwhV", long: long("ctty", noArg, "fork", noArg, "wait", noArg, "help", noArg, "version", noArg)}

// util-linux flock: `flock [opts] FILE CMD...`, `flock [opts] FILE -c
// STRING` (run by the shell), `flock [opts] FD` (no command).
var flockSpec = optSpec{short: "+sexnoFuw:E:hV", long: long(
	"shared", noArg, "exclusive", noArg, "unlock", noArg, "nonblock", noArg, "nb", noArg,
	"close", noArg, "no-fork", noArg, "timeout", reqArg, "wait", reqArg,
	"conflict-exit-code", reqArg, "verbose", noArg, "fcntl", noArg, "help", noArg, "version", noArg)}

func unwrapFlock(args []string) Step {
	_, ops, s, done := parseRun(flockSpec, args, "h", "help", "V", "version")
	if done {
		return s
	}
	if len(ops) < 2 {
		return Step{}
	}
	if ops[1] == "-c" || ops[1] == "--command" {
		if len(ops) != 3 {
			return unparsed()
		}
		return Step{Scripts: []string{ops[2]}}
	}
	return run(ops[1:])
}

// util-linux chrt: `chrt [opts] PRIORITY CMD...`; -p (a pid) and -m (the
// limits) run nothing.
var chrtSpec = optSpec{short: "+abdD:efiphmoP:T:RrvV", long: long(
	"all-tasks", noArg, "batch", noArg, "deadline", noArg, "fifo", noArg, "idle", noArg,
	"other", noArg, "rr", noArg, "reset-on-fork", noArg, "pid", noArg, "max", noArg,
	"verbose", noArg, "sched-runtime", reqArg, "sched-period", reqArg, "sched-deadline", reqArg,
	"ext", noArg, "help", noArg, "version", noArg)}

func unwrapChrt(args []string) Step {
	_, ops, s, done := parseRun(chrtSpec, args, "p", "pid", "m", "max", "h", "help", "V", "version")
	if done {
		return s
	}
	if len(ops) < 2 || !digits(ops[0]) {
		return unparsed()
	}
	return run(ops[1:])
}

// util-linux taskset: `taskset [opts] MASK|LIST CMD...`; -p runs nothing.
var tasksetSpec = optSpec{short: "+apchV", long: long("all-tasks", noArg, "pid", noArg, "cpu-list", noArg, "help", noArg, "version", noArg)}

func unwrapTaskset(args []string) Step {
	_, ops, s, done := parseRun(tasksetSpec, args, "p", "pid", "h", "help", "V", "version")
	if done {
		return s
	}
	if len(ops) < 2 {
		return unparsed()
	}
	return run(ops[1:])
}

// GNU time (a superset of the bash keyword's -p).
var timeSpec = optSpec{short: "+agqvVo:f:p", long: long(
	"append", noArg, "format", reqArg, "output", reqArg, "portability", noArg, "quiet", noArg,
	"verbose", noArg, "help", noArg, "version", noArg)}

// GNU xargs; without a command it runs echo.
var xargsSpec = optSpec{short: "+0a:E:e::i::I:l::L:n:oprs:txP:d:", long: long(
	"null", noArg, "arg-file", reqArg, "delimiter", reqArg, "eof", optArg, "replace", optArg,
	"max-lines", optArg, "max-args", reqArg, "open-tty", noArg, "interactive", noArg,
	"no-run-if-empty", noArg, "max-chars", reqArg, "verbose", noArg, "show-limits", noArg,
	"exit", noArg, "max-procs", reqArg, "process-slot-var", reqArg, "help", noArg, "version", noArg)}

func unwrapXargs(args []string) Step {
	_, ops, s, done := parseRun(xargsSpec, args, "help", "version")
	if done {
		return s
	}
	if len(ops) == 0 {
		return run([]string{"echo"})
	}
	return run(ops)
}

// find: every -exec/-execdir/-ok/-okdir runs the words up to `;` (or `+`
// after `{}`); an unterminated one is taken to the end (find refuses it).
func unwrapFind(args []string) Step {
	var s Step
	for i := 0; i < len(args); i++ {
		switch args[i] {
		case "-exec", "-execdir", "-ok", "-okdir":
		default:
			continue
		}
		j := i + 1
		for j < len(args) && args[j] != ";" && !(args[j] == "+" && args[j-1] == "{}") {
			j++
		}
		if j > i+1 {
			s.Commands = append(s.Commands, args[i+1:j])
		}
		i = j
	}
	return s
}

// eval joins its arguments into one script.
func unwrapEval(args []string) Step {
	if len(args) > 0 && args[0] == "--" {
		args = args[1:]
	}
	if len(args) == 0 {
		return Step{}
	}
	return Step{Scripts: []string{strings.Join(args, " ")}}
}

// trap ACTION SIGNAL...: the action is a script.
func unwrapTrap(args []string) Step {
	if len(args) > 0 && args[0] == "--" {
		args = args[1:]
	}
	if len(args) == 0 || strings.HasPrefix(args[0], "-") {
		return Step{}
	}
	return Step{Scripts: []string{args[0]}}
}

// alias NAME=VALUE: each value is a script run where the name is used.
func unwrapAlias(args []string) Step {
	var s Step
	for _, a := range args {
		if _, v, ok := strings.Cut(a, "="); ok {
			s.Scripts = append(s.Scripts, v)
		}
	}
	return s
}

// sudo (1.9): VAR=value assignments may precede the command; -e (edit),
// -l (list), -v, -k/-K alone, -h and -V run no command; -s/-i hand the
// command to a shell, which runs the same words.
var sudoSpec = optSpec{short: "+Aa:BbC:c:D:Eeg:Hh::iKklNnPp:R:r:SsT:t:U:u:Vv", long: long(
	"askpass", noArg, "auth-type", reqArg, "background", noArg, "bell", noArg, "close-from", reqArg,
	"login-class", reqArg, "chdir", reqArg, "preserve-env", optArg, "edit", noArg, "group", reqArg,
	"set-home", noArg, "help", noArg, "host", reqArg, "login", noArg, "remove-timestamp", noArg,
	"reset-timestamp", noArg, "list", noArg, "no-update", noArg, "non-interactive", noArg,
	"preserve-groups", noArg, "prompt", reqArg, "chroot", reqArg, "role", reqArg, "stdin", noArg,
	"shell", noArg, "type", reqArg, "command-timeout", reqArg, "other-user", reqArg, "user", reqArg,
	"version", noArg, "validate", noArg)}

func unwrapSudo(args []string) Step {
	_, ops, s, done := parseRun(sudoSpec, args, "e", "edit", "l", "list", "v", "validate", "h", "help", "V", "version")
	if done {
		return s
	}
	for len(ops) > 0 && isAssignment(ops[0]) {
		ops = ops[1:]
	}
	return run(ops)
}

// OpenBSD doas.
var doasSpec = optSpec{short: "+a:C:Lnsu:"}

func unwrapDoas(args []string) Step {
	_, ops, s, done := parseRun(doasSpec, args, "C", "L")
	if done {
		return s
	}
	return run(ops)
}

// util-linux su (options anywhere): `su [-] [USER [SHELL-ARGS]]` with
// -c/--command/--session-command STRING run by the user's shell; any
// SHELL-ARGS go to that shell too.
var suSpec = optSpec{short: "c:fg:G:lmpPs:hVw:", permute: true, long: long(
	"command", reqArg, "session-command", reqArg, "fast", noArg, "group", reqArg,
	"supp-group", reqArg, "login", noArg, "preserve-environment", noArg, "pty", noArg,
	"shell", reqArg, "help", noArg, "version", noArg, "whitelist-environment", reqArg)}

func unwrapSu(args []string) Step {
	opts, ops, s, done := parseRun(suSpec, args, "h", "help", "V", "version")
	if done {
		return s
	}
	if c, ok := value(opts, "c", "command", "session-command"); ok {
		s.Scripts = append(s.Scripts, c)
	}
	if len(ops) > 0 && ops[0] == "-" {
		ops = ops[1:]
	}
	if len(ops) > 1 {
		// Arguments after USER are the shell's own: `su root -- -c X`.
		if script, ok := shellScriptArg(ops[1:]); ok {
			s.Scripts = append(s.Scripts, script)
		} else if !strings.HasPrefix(ops[1], "-") {
			// The shell runs a script file: not readable here.
			return unparsed()
		}
	}
	return s
}

// util-linux script (options anywhere): -c STRING is run by the shell.
var scriptSpec = optSpec{short: "aB:c:eE:fI:O:o:qm:T:t::Vh", permute: true, long: long(
	"append", noArg, "command", reqArg, "echo", reqArg, "return", noArg, "flush", noArg,
	"force", noArg, "input-log", reqArg, "output-log", reqArg, "log-io", reqArg,
	"log-timing", reqArg, "logging-format", reqArg, "output-limit", reqArg, "quiet", noArg,
	"timing", optArg, "version", noArg, "help", noArg)}

func unwrapScript(args []string) Step {
	opts, ops, ok := scriptSpec.parse(args)
	if !ok || len(ops) > 1 {
		return unparsed()
	}
	if c, ok := value(opts, "c", "command"); ok && !has(opts, "h", "help", "V", "version") {
		return Step{Scripts: []string{c}}
	}
	return Step{}
}

// procps watch: the command words are joined and run by `sh -c`, or
// executed as they are with -x.
var watchSpec = optSpec{short: "+bcCd::egn:pq:rtwxhv", long: long(
	"beep", noArg, "color", noArg, "no-color", noArg, "differences", optArg, "errexit", noArg,
	"chgexit", noArg, "interval", reqArg, "precise", noArg, "equexit", reqArg, "no-rerun", noArg,
	"no-title", noArg, "no-wrap", noArg, "exec", noArg, "shotsdir", reqArg, "help", noArg, "version", noArg)}

func unwrapWatch(args []string) Step {
	opts, ops, s, done := parseRun(watchSpec, args, "h", "help", "v", "version")
	if done {
		return s
	}
	if len(ops) == 0 {
		return Step{}
	}
	if has(opts, "x", "exec") {
		return run(ops)
	}
	return Step{Scripts: []string{strings.Join(ops, " ")}}
}

func digits(s string) bool {
	if s == "" {
		return false
	}
	for _, c := range s {
		if c < '0' || c > '9' {
			return false
		}
	}
	return true
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
	if shells[Classify(argv[0])] {
		return shellScriptArg(argv[1:])
	}
	return "", false
}
