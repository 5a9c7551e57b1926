package heuristics

import (
	"strings"

	"github.com/netproxy/netproxy/execcore/shellparse"
)

// SafeOptions is the context of the known-safe test.
type SafeOptions struct {
	// Trust decides which program words name the system's own tools:
	// only a bare name or a system-directory path outside the writable
	// roots is the known tool (SPEC §6.2).
	Trust shellparse.Trust
	// GitElsewhere reports that the command runs somewhere else than the
	// workspace root (a tool call's workdir into a sub-folder, or a `cd`
	// earlier in the same script): git there may read a repository the
	// command itself planted, whose configuration runs programs.
	GitElsewhere bool
}

// IsKnownSafe is is_known_safe_command: the argv itself is a known
// read-only command, or it is a trusted bash-like wrapper whose word-only
// lowering is non-empty and made only of known read-only commands.
func IsKnownSafe(argv []string, o SafeOptions) bool {
	norm := make([]string, len(argv))
	for i, t := range argv {
		if t == "zsh" {
			t = "bash"
		}
		norm[i] = t
	}
	if safeExec(norm, o) {
		return true
	}
	w, ok := shellparse.ExtractWrapper(norm, o.Trust)
	if !ok {
		return false
	}
	cmds, ok := shellparse.PlainCommands(w.Script)
	if !ok || len(cmds) == 0 {
		return false
	}
	inner := o
	for _, c := range cmds {
		if !safeExec(c, inner) {
			return false
		}
		if ChangesDirectory(c) {
			inner.GitElsewhere = true
		}
	}
	return true
}

// ChangesDirectory reports a command that moves the rest of a script to
// another folder (`cd`, `pushd`, `popd`).
func ChangesDirectory(argv []string) bool {
	if len(argv) == 0 {
		return false
	}
	switch argv[0] {
	case "cd", "pushd", "popd", "chdir":
		return true
	}
	return false
}

var alwaysSafe = map[string]bool{
	"cat": true, "cd": true, "cut": true, "echo": true, "expr": true, "false": true,
	"grep": true, "head": true, "id": true, "ls": true, "nl": true, "paste": true,
	"pwd": true, "rev": true, "seq": true, "stat": true, "tail": true, "tr": true,
	"true": true, "uname": true, "wc": true, "which": true, "whoami": true,
	// Linux only in the reference; this product runs on Linux.
	"numfmt": true, "tac": true,
}

func safeExec(argv []string, o SafeOptions) bool {
	if len(argv) == 0 {
		return false
	}
	name, ok := o.Trust.Program(argv[0])
	if !ok {
		return false
	}
	args := argv[1:]
	if alwaysSafe[name] {
		return true
	}
	switch name {
	case "uniq":
		return safeUniq(args)
	case "base64":
		for _, a := range args {
			if a == "--output" || strings.HasPrefix(a, "--output=") || strings.HasPrefix(a, "-o") {
				return false
			}
		}
		return true
	case "find":
		for _, a := range args {
			switch a {
			case "-exec", "-execdir", "-ok", "-okdir", "-delete", "-fls", "-fprint", "-fprint0", "-fprintf":
				return false
			}
		}
		return true
	case "rg":
		return safeRg(args)
	case "sed":
		return safeSed(args)
	case "git":
		return !o.GitElsewhere && safeGit(args)
	}
	return false
}

// uniqLong are GNU uniq's long options; uniqLongValue the ones that take a
// required value (inline after `=` or as the next argument).
var (
	uniqLong      = []string{"all-repeated", "check-chars", "count", "group", "help", "ignore-case", "repeated", "skip-chars", "skip-fields", "unique", "version", "zero-terminated"}
	uniqLongValue = map[string]bool{"check-chars": true, "skip-chars": true, "skip-fields": true}
)

// safeUniq: `uniq [OPTION]... [INPUT [OUTPUT]]` writes OUTPUT, so at most
// one operand is safe. Options are parsed as GNU getopt does (clusters,
// attached or separate values, unique long-option abbreviations, operands
// anywhere, `--`); anything unknown is not safe.
func safeUniq(args []string) bool {
	operands := 0
	for i := 0; i < len(args); i++ {
		a := args[i]
		switch {
		case a == "--":
			operands += len(args) - i - 1
			i = len(args)
		case strings.HasPrefix(a, "--"):
			name, _, hasValue := strings.Cut(a[2:], "=")
			full, ok := uniqueLong(name, uniqLong)
			if !ok {
				return false
			}
			if uniqLongValue[full] && !hasValue {
				i++
			}
		case strings.HasPrefix(a, "-") && a != "-":
			for j := 1; j < len(a); j++ {
				switch a[j] {
				case 'c', 'd', 'D', 'i', 'u', 'z':
				case 'f', 's', 'w':
					if j == len(a)-1 {
						i++
					}
					j = len(a)
				default:
					return false
				}
			}
		default:
			operands++
		}
	}
	return operands <= 1
}

// uniqueLong resolves a GNU long option name or unique abbreviation.
func uniqueLong(name string, opts []string) (string, bool) {
	if name == "" {
		return "", false
	}
	found := ""
	for _, o := range opts {
		if o == name {
			return o, true
		}
		if strings.HasPrefix(o, name) {
			if found != "" {
				return "", false
			}
			found = o
		}
	}
	return found, found != ""
}

// rgShortValue are ripgrep's short flags that take a value; the rest of
// their cluster (or the next argument) is that value.
const rgShortValue = "ABCdEefgjMmrtT"

// safeRg: ripgrep without --pre/--hostname-bin (they run a program) and
// without -z/--search-zip (it runs decompressors), in any spelling:
// `-z` alone or inside a short cluster (`-zi`, `-uz`).
func safeRg(args []string) bool {
	for i := 0; i < len(args); i++ {
		a := args[i]
		switch {
		case a == "--":
			return true
		case unsafeLongOption(a, rgUnsafe, nil):
			return false
		case strings.HasPrefix(a, "--"):
		case strings.HasPrefix(a, "-") && len(a) > 1:
			for j := 1; j < len(a); j++ {
				c := a[j]
				if c == 'z' {
					return false
				}
				if strings.IndexByte(rgShortValue, c) >= 0 {
					if j == len(a)-1 {
						i++
					}
					break
				}
			}
		}
	}
	return true
}

// gitGlobalsWithValue are git options before the subcommand that take a
// value (separately or inline).
var gitGlobalsWithValue = []string{"-C", "-c", "--config-env", "--exec-path", "--git-dir", "--namespace", "--super-prefix", "--work-tree"}

func safeGit(args []string) bool {
	sub := -1
	for i := 0; i < len(args); i++ {
		a := args[i]
		if a == "--" {
			continue
		}
		if !strings.HasPrefix(a, "-") {
			sub = i
			break
		}
		// Unsafe global options: they redirect config, paths or the pager.
		if a == "-p" || a == "--paginate" {
			return false
		}
		for _, g := range gitGlobalsWithValue {
			if a == g {
				return false
			}
			if strings.HasPrefix(g, "--") && strings.HasPrefix(a, g+"=") {
				return false
			}
			if !strings.HasPrefix(g, "--") && strings.HasPrefix(a, g) {
				return false
			}
		}
	}
	if sub < 0 {
		return false
	}
	switch args[sub] {
	case "status", "log", "diff", "show", "branch":
	default:
		return false
	}
	rest := args[sub+1:]
	for _, a := range rest {
		if a == "--" {
			break
		}
		if unsafeLongOption(a, gitSubUnsafe, gitSubExact) {
			return false
		}
	}
	if args[sub] == "branch" {
		for _, a := range rest {
			switch {
			case a == "--list", a == "-l", a == "--show-current", a == "-a", a == "--all",
				a == "-r", a == "--remotes", a == "-v", a == "-vv", a == "--verbose",
				strings.HasPrefix(a, "--format="):
			default:
				return false
			}
		}
	}
	return true
}

// GitMovesWorkdir reports a git argv whose global options point it at
// another repository or work tree (`-C DIR`, `--git-dir`, `--work-tree`,
// in every spelling). argv[0] must already be known to be git.
func GitMovesWorkdir(argv []string) bool {
	for i := 1; i < len(argv); i++ {
		a := argv[i]
		if !strings.HasPrefix(a, "-") {
			return false // the subcommand: globals end here
		}
		switch {
		case strings.HasPrefix(a, "-C"),
			a == "--git-dir", strings.HasPrefix(a, "--git-dir="),
			a == "--work-tree", strings.HasPrefix(a, "--work-tree="):
			return true
		case a == "-c", a == "--config-env", a == "--namespace", a == "--super-prefix":
			i++ // their value may not start with '-'
		}
	}
	return false
}
