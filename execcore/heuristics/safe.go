package heuristics

import (
	"path"
	"regexp"
	"strings"

	"github.com/netproxy/netproxy/execcore/shellparse"
)

// IsKnownSafe is is_known_safe_command: the argv itself is a known
// read-only command, or it is a bash-like wrapper whose word-only lowering
// is non-empty and made only of known read-only commands.
func IsKnownSafe(argv []string) bool {
	norm := make([]string, len(argv))
	for i, t := range argv {
		if t == "zsh" {
			t = "bash"
		}
		norm[i] = t
	}
	if safeExec(norm) {
		return true
	}
	w, ok := shellparse.ExtractWrapper(norm)
	if !ok {
		return false
	}
	cmds, ok := shellparse.PlainCommands(w.Script)
	if !ok || len(cmds) == 0 {
		return false
	}
	for _, c := range cmds {
		if !safeExec(c) {
			return false
		}
	}
	return true
}

var alwaysSafe = map[string]bool{
	"cat": true, "cd": true, "cut": true, "echo": true, "expr": true, "false": true,
	"grep": true, "head": true, "id": true, "ls": true, "nl": true, "paste": true,
	"pwd": true, "rev": true, "seq": true, "stat": true, "tail": true, "tr": true,
	"true": true, "uname": true, "uniq": true, "wc": true, "which": true, "whoami": true,
	// Linux only in the reference; this product runs on Linux.
	"numfmt": true, "tac": true,
}

// untrustedDirs hold files anyone can plant; a program there is never
// trusted by name.
var untrustedDirs = []string{"/tmp/", "/var/tmp/", "/dev/shm/"}

// programName keys the safe list. A bare name and an absolute path count
// (by basename); a relative path with a slash (`./cat`, `bin/sed`) is a
// workspace file and never safe, nor is an absolute path under a
// world-writable temp folder (reference issues #28732/#37078).
func programName(prog string) (string, bool) {
	if !strings.Contains(prog, "/") {
		return prog, prog != ""
	}
	if !strings.HasPrefix(prog, "/") {
		return "", false
	}
	clean := path.Clean(prog)
	for _, d := range untrustedDirs {
		if strings.HasPrefix(clean+"/", d) {
			return "", false
		}
	}
	return path.Base(clean), true
}

var sedPrintRange = regexp.MustCompile(`^(\d+,)?\d+p$`)

func safeExec(argv []string) bool {
	if len(argv) == 0 {
		return false
	}
	name, ok := programName(argv[0])
	if !ok {
		return false
	}
	args := argv[1:]
	if alwaysSafe[name] {
		return true
	}
	switch name {
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
		for _, a := range args {
			if a == "--search-zip" || a == "-z" || a == "--pre" || a == "--hostname-bin" ||
				strings.HasPrefix(a, "--pre=") || strings.HasPrefix(a, "--hostname-bin=") {
				return false
			}
		}
		return true
	case "sed":
		return len(argv) <= 4 && len(argv) >= 3 && argv[1] == "-n" && sedPrintRange.MatchString(argv[2])
	case "git":
		return safeGit(args)
	}
	return false
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
		if a == "--output" || strings.HasPrefix(a, "--output=") || a == "--ext-diff" || a == "--textconv" ||
			a == "--exec" || strings.HasPrefix(a, "--exec=") {
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
