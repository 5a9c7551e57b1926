package heuristics

import (
	"regexp"
	"strings"
)

// sedPrintOnly is a sed script that provably only prints: `N`, `N,M`,
// `N,$` or `$` line addresses, or one /RE/ without a delimiter, backslash
// or newline inside, followed by `p` (no `e`, `w`, `W`, `r`, `R`
// commands, no `;` to start another command).
var sedPrintOnly = regexp.MustCompile(`^((\d+,)?(\d+|\$)|/[^/\\\n]*/)p$`)

// safeSed: `sed -n SCRIPT [FILE]...` with a print-only SCRIPT, and files
// that cannot be read as options. GNU sed reads options anywhere on the
// line, so `sed -n 1p '--expression=1e id'` makes 1p a file and runs the
// expression; -e/-f/--file/-i/-s/... are therefore refused wherever they
// stand.
func safeSed(args []string) bool {
	if len(args) < 2 || args[0] != "-n" || !sedPrintOnly.MatchString(args[1]) {
		return false
	}
	for _, f := range args[2:] {
		if strings.HasPrefix(f, "-") && f != "-" {
			return false
		}
	}
	return true
}

// gitSubUnsafe are options of the known-safe git subcommands (log, diff,
// show, status, branch) that write a file or run a program.
var gitSubUnsafe = []string{"output", "ext-diff", "textconv", "exec"}

// gitSubExact are options that are themselves prefixes of an unsafe one;
// git's parse-options prefers an exact match (`--text` is -a).
var gitSubExact = map[string]bool{"text": true}

// unsafeLongOption reports a long option `--NAME[=VALUE]` that is one of
// unsafe or an abbreviation of one. GNU getopt and git's parse-options
// accept unique prefixes; where a tool does not (git log refuses
// `--outp`), refusing the abbreviation costs nothing. exact lists the
// valid option names that are prefixes of an unsafe one.
func unsafeLongOption(a string, unsafe []string, exact map[string]bool) bool {
	if !strings.HasPrefix(a, "--") || a == "--" {
		return false
	}
	name, _, _ := strings.Cut(a[2:], "=")
	if name == "" || strings.HasPrefix(name, "no-") || exact[name] {
		return false
	}
	for _, u := range unsafe {
		if strings.HasPrefix(u, name) {
			return true
		}
	}
	return false
}

// rgUnsafe are ripgrep options that run a program (--pre, --hostname-bin)
// or decompressors (--search-zip).
var rgUnsafe = []string{"pre", "hostname-bin", "search-zip"}
