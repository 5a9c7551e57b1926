package unwrap

import (
	"strings"
	"testing"
)

// FuzzUnwrap: no argv panics the parsers or the walk, a walk ends within
// the depth bound, and every command Unwrap reports is non-empty.
func FuzzUnwrap(f *testing.F) {
	for _, s := range []string{
		"env -S 'curl x'", "env -iS'-S x' y", "nice -n 5 curl", "timeout -s KILL 5 curl", "flock /l -c 'curl x'",
		"xargs -I{} curl {}", "find . -exec curl {} ;", "su - root -c x", "script -c x", "watch -n1 x y",
		"sudo -u x -- curl", "bash -o pipefail -c 'nice curl'", "env -S 'env -S \"env -S x\"'", "chrt -f 1 curl",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, line string) {
		argv := strings.Fields(line)
		if s := Unwrap(argv); s.Failed && !s.Unparsed {
			t.Fatalf("%q: failed but not unparsed", argv)
		} else {
			for _, c := range s.Commands {
				if len(c) == 0 {
					t.Fatalf("%q: empty command", argv)
				}
			}
		}
		Walk(argv, true, func(n Node) bool {
			if n.Depth > MaxDepth+1 {
				t.Fatalf("%q: depth %d", argv, n.Depth)
			}
			return true
		})
	})
}
