package unwrap

import "github.com/netproxy/netproxy/execcore/shellparse"

// MaxDepth bounds the unwrapping of wrappers and nested scripts; a command
// deeper than this is reported as an Overflow node (fail closed).
const MaxDepth = 8

// Node is one command reached by Walk.
type Node struct {
	Argv  []string
	Depth int
	// Step is how Argv itself unwraps.
	Step Step
	// Approx: Argv is not exactly what runs: a flat-scan candidate, or (in
	// the non-exact mode) a literal command taken from a script.
	Approx bool
	// Overflow: Argv lies deeper than MaxDepth and was not unwrapped.
	Overflow bool
}

// Walk calls visit for argv (depth 0) and for every command it runs
// through wrappers and scripts, recursively, depth first in argument
// order; visit returns false to stop. Scripts are read with
// shellparse.LiteralCommands; with exact set, a script made of plain words
// is read with shellparse.PlainCommands first, and only the commands of
// other scripts are Approx.
func Walk(argv []string, exact bool, visit func(Node) bool) {
	walk(argv, 0, false, exact, visit)
}

func walk(argv []string, depth int, approx, exact bool, visit func(Node) bool) bool {
	if len(argv) == 0 {
		return true
	}
	if depth > MaxDepth {
		return visit(Node{Argv: argv, Depth: depth, Approx: approx, Overflow: true})
	}
	s := Unwrap(argv)
	if !visit(Node{Argv: argv, Depth: depth, Step: s, Approx: approx}) {
		return false
	}
	inner := approx || s.Unparsed
	for _, c := range s.Commands {
		if !walk(c, depth+1, inner, exact, visit) {
			return false
		}
	}
	for _, script := range s.Scripts {
		cmds, plain := [][]string(nil), false
		if exact {
			cmds, plain = shellparse.PlainCommands(script)
		}
		if !plain {
			cmds, _ = shellparse.LiteralCommands(script)
		}
		for _, c := range cmds {
			if !walk(c, depth+1, inner || !plain, exact, visit) {
				return false
			}
		}
	}
	return true
}
