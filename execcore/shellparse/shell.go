// Package shellparse turns a handler argv into what the exec policy and the
// approval cache look at: shell detection, the handler argv per shell type,
// the word-only lowering of `bash|zsh|sh -c|-lc SCRIPT` wrappers
// (commands_for_exec_policy), the heredoc single-command prefix, the
// approval identity, and the literal commands of any script (for the
// dangerous-command detector). Parsing uses mvdan.cc/sh/v3.
//
// It only reads scripts: it must never expand variables against a real
// environment, run a command, or touch the file system.
package shellparse

import (
	"path/filepath"
	"strings"
)

// ShellType is the family of a shell executable.
type ShellType string

const (
	Bash       ShellType = "bash"
	Zsh        ShellType = "zsh"
	Sh         ShellType = "sh"
	PowerShell ShellType = "powershell"
	Cmd        ShellType = "cmd"
	// Other is any other executable (dash, ksh, fish, ...). It is not
	// bash-like for the lowering, and gets POSIX `-c` handler argv.
	Other ShellType = "other"
)

// DetectShellType maps a shell path to its family: the exact names first,
// then the file stem (basename without extension).
func DetectShellType(shell string) ShellType {
	if t, ok := shellByName(shell); ok {
		return t
	}
	base := filepath.Base(strings.ReplaceAll(shell, `\`, "/"))
	if t, ok := shellByName(base); ok {
		return t
	}
	if i := strings.LastIndexByte(base, '.'); i > 0 {
		if t, ok := shellByName(base[:i]); ok {
			return t
		}
	}
	return Other
}

func shellByName(s string) (ShellType, bool) {
	switch s {
	case "bash":
		return Bash, true
	case "zsh":
		return Zsh, true
	case "sh":
		return Sh, true
	case "pwsh", "powershell":
		return PowerShell, true
	case "cmd":
		return Cmd, true
	}
	return "", false
}

// IsBashLike reports whether the family is lowered by the bash parser.
func (t ShellType) IsBashLike() bool { return t == Bash || t == Zsh || t == Sh }

// DeriveExecArgs builds the handler argv for a script run by shell:
// bash/zsh/sh (and other POSIX shells) `[shell, -lc|-c, script]`,
// PowerShell `[shell, (-NoProfile when not login), -Command, script]`,
// cmd `[shell, /c, script]`.
func DeriveExecArgs(shell string, t ShellType, script string, login bool) []string {
	switch t {
	case PowerShell:
		argv := []string{shell}
		if !login {
			argv = append(argv, "-NoProfile")
		}
		return append(argv, "-Command", script)
	case Cmd:
		return []string{shell, "/c", script}
	default:
		flag := "-c"
		if login {
			flag = "-lc"
		}
		return []string{shell, flag, script}
	}
}

// Wrapper is a recognised `[shell, -c|-lc, script]` argv.
type Wrapper struct {
	Shell  string
	Type   ShellType
	Flag   string // "-c" or "-lc", as given
	Script string
}

// ExtractWrapper recognises the wrapper of SPEC §6.2: exactly three
// elements, the flag `-c` or `-lc`, and a *trusted* bash, zsh or sh
// (Trust.Shell: a bare name or a system path outside the writable roots).
// Anything else (`-l -c`, `-cl`, `--login`, dash, fish, `./bash`,
// `/proc/self/cwd/sh`) is not a wrapper: it is evaluated whole, as an
// unknown program.
func ExtractWrapper(argv []string, tr Trust) (Wrapper, bool) {
	if len(argv) != 3 {
		return Wrapper{}, false
	}
	if argv[1] != "-c" && argv[1] != "-lc" {
		return Wrapper{}, false
	}
	t, ok := tr.Shell(argv[0])
	if !ok {
		return Wrapper{}, false
	}
	return Wrapper{Shell: argv[0], Type: t, Flag: argv[1], Script: argv[2]}, true
}

// ExtractAnyWrapper is the permissive form for detectors that only add
// restrictions (dangerous commands, forbidden rules inside scripts): any
// bash/zsh/sh by name or file stem, wherever it lives, counts. It must
// never be used to lower, unwrap or trust a command.
func ExtractAnyWrapper(argv []string) (Wrapper, bool) {
	if len(argv) != 3 {
		return Wrapper{}, false
	}
	if argv[1] != "-c" && argv[1] != "-lc" {
		return Wrapper{}, false
	}
	t := DetectShellType(argv[0])
	if !t.IsBashLike() {
		return Wrapper{}, false
	}
	return Wrapper{Shell: argv[0], Type: t, Flag: argv[1], Script: argv[2]}, true
}
