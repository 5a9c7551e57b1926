package shellparse

import (
	"reflect"
	"strings"
	"testing"
)

func FuzzLowering(f *testing.F) {
	for _, s := range []string{
		"ls -1", "ls && pwd; echo 'hi there' | wc -l", `echo "/usr"'/'"local"/bin`, "python3 <<'PY'\nprint(1)\nPY",
		"echo $(rm -rf /)", "FOO=1 ls", "(ls)", "a | b || c && d", "echo \"a\\\nb\"", `rg -g"*.py" x`, "",
		"cat <<EOF\n$(x)\nEOF", `$'\x72m' -rf /`, "{a,b} c", "f() { x; }", "x=$(( $(y) ))",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, script string) {
		cmds, ok := PlainCommands(script)
		if ok {
			for _, c := range cmds {
				if len(c) == 0 {
					t.Fatalf("empty command from %q", script)
				}
				for _, w := range c {
					// A lowered word never hides an expansion.
					if strings.Contains(w, "$(") && !strings.Contains(script, "'") && !strings.Contains(script, `"`) {
						t.Fatalf("expansion %q lowered from %q", w, script)
					}
				}
			}
		}
		argv := []string{"bash", "-lc", script}
		p := CommandsForExecPolicy(argv, Trust{})
		if len(p.Commands) == 0 {
			t.Fatalf("no commands for %q", script)
		}
		if !ok || len(cmds) == 0 {
			if !p.UsedComplexParsing && !reflect.DeepEqual(p.Commands, [][]string{argv}) {
				t.Fatalf("fallback of %q is %q", script, p.Commands)
			}
		}
		id := CanonicalizeForApproval(argv, Trust{})
		if len(id) == 0 {
			t.Fatalf("empty identity for %q", script)
		}
		_, _ = HeredocPrefix(script)
		_, _ = LiteralCommands(script)
	})
}
