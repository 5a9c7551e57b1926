package execcore

import (
	"path"
	"strings"

	"github.com/netproxy/netproxy/execcore/unwrap"
)

// interpreters run a program given on their command line (-c, -e, -r,
// stdin): a prefix of one followed only by options would allow any code.
// git is judged apart: any global option (-c, --exec-path, -C, ...) may
// run a configured program.
var interpreters = map[string]bool{
	"python": true, "pythonw": true, "py": true, "pyw": true, "pypy": true, "node": true, "nodejs": true,
	"deno": true, "bun": true, "ruby": true, "perl": true, "php": true, "lua": true, "luajit": true,
	"julia": true, "Rscript": true, "osascript": true, "pwsh": true, "powershell": true, "cmd": true,
	"tclsh": true, "wish": true, "awk": true, "gawk": true, "mawk": true, "nawk": true, "expect": true,
}

// bannedSpelling reports a prefix (SPEC §6.3, second set of 2026-12-01)
// whose program, in any spelling — a path (`/usr/bin/bash`), a version
// suffix (`python3.11`, `pypy3`, `node18`, `ruby3.2`, `perl5.36`), `.exe`
// — is a banned entry, an interpreter or a shell followed only by
// options (`git -c`, `git --exec-path=…`, `python3.11 -c`), or a wrapper
// whose prefix does not reach the command it runs (`env`, `nice -n 5`,
// `timeout 5`, `xargs`, `sudo -u x`); a wrapper prefix that does reach one
// is judged by that command (`env python3`).
func bannedSpelling(prefix []string, depth int) bool {
	if len(prefix) == 0 || depth > unwrap.MaxDepth {
		return len(prefix) == 0
	}
	name := path.Base(strings.ReplaceAll(prefix[0], `\`, "/"))
	name = strings.TrimSuffix(strings.TrimSuffix(name, ".exe"), ".EXE")
	norm := append([]string{name}, prefix[1:]...)
	if bannedPrefixSuggestions[strings.Join(norm, "\x00")] {
		return true
	}
	family := strings.TrimRight(strings.TrimRight(name, "0123456789."), "-")
	if name == "git" || family == "git" {
		return len(prefix) == 1 || strings.HasPrefix(prefix[1], "-")
	}
	if interpreters[family] || interpreters[name] || unwrap.IsShell(family) || unwrap.IsShell(name) {
		for _, t := range prefix[1:] {
			if !strings.HasPrefix(t, "-") && !strings.HasPrefix(t, "+") && !strings.HasPrefix(t, "/") {
				return false
			}
		}
		return true
	}
	if name == "find" || !unwrap.IsWrapper(name) {
		return false
	}
	s := unwrap.Unwrap(norm)
	if s.Unparsed || len(s.Scripts) > 0 || len(s.Commands) == 0 {
		return true
	}
	for _, c := range s.Commands {
		// The command must be the prefix's own words (xargs alone runs
		// an implicit echo: the prefix then names no command).
		if !isSuffix(c, norm) || bannedSpelling(c, depth+1) {
			return true
		}
	}
	return false
}

func isSuffix(tail, words []string) bool {
	if len(tail) >= len(words) {
		return false
	}
	off := len(words) - len(tail)
	for i, t := range tail {
		if words[off+i] != t {
			return false
		}
	}
	return true
}
