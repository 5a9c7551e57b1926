package heuristics

import (
	"strings"

	"github.com/netproxy/netproxy/execcore/unwrap"
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

// MaxWrapperDepth bounds the unwrapping of wrappers and nested shells.
const MaxWrapperDepth = unwrap.MaxDepth

// DangerousCommand is dangerous_command_match of profile R2, with the R3
// `env` flags, plus stricter extensions that only add detections (see
// docs/execpolicy.md): every wrapper package unwrap sees through (sudo
// and env with their options, trap, eval, alias, shells invoked with any
// flags, xargs, nohup, timeout, find -exec, su -c, ...; a wrapper it
// cannot parse is read by a flat scan), abbreviated `--force`, glob and
// escaped command names. A chain deeper than MaxWrapperDepth is
// DangerOther (fail closed).
func DangerousCommand(argv []string) Danger {
	d := DangerNone
	unwrap.Walk(argv, false, func(n unwrap.Node) bool {
		switch {
		case n.Overflow:
			d = DangerOther
		case unwrap.Classify(n.Argv[0]) == "rm" && forcedRm(n.Argv[1:]):
			d = DangerForcedRm
		}
		return d == DangerNone
	})
	return d
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
