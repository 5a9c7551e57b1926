package execcore

import (
	"fmt"
	"strings"
	"testing"

	"github.com/netproxy/netproxy/execcore/execpolicy"
	"github.com/netproxy/netproxy/execcore/heuristics"
)

// rules1000 is a realistic rules file: 1 000 prefix rules over ~330
// programs, with alternatives, justifications and a few host executables.
func rules1000() string {
	var b strings.Builder
	decisions := []string{"allow", "prompt", "forbidden"}
	for i := 0; i < 997; i++ {
		prog := fmt.Sprintf("tool-%03d", i/3)
		fmt.Fprintf(&b, "prefix_rule(pattern=[%q, [\"sub-%d\", \"alt-%d\"], \"--flag\"], decision=%q, justification=\"rule %d\")\n",
			prog, i, i, decisions[i%3], i)
	}
	b.WriteString(`prefix_rule(pattern=["git", ["status", "diff", "log"]])` + "\n")
	b.WriteString(`prefix_rule(pattern=["cargo", "test"])` + "\n")
	b.WriteString(`prefix_rule(pattern=["rm"], decision="forbidden")` + "\n")
	b.WriteString(`host_executable(name="git", paths=["/usr/bin/git"])` + "\n")
	return b.String()
}

func load1000(b *testing.B) *execpolicy.Policy {
	p, err := execpolicy.LoadSource("bench.rules", []byte(rules1000()))
	if err != nil {
		b.Fatal(err)
	}
	if p.PrefixRuleCount() != 1000 {
		b.Fatalf("%d rules", p.PrefixRuleCount())
	}
	return p
}

// BenchmarkEvaluate1000Rules: a typical model command (a login-shell
// wrapper with two segments) against 1 000 prefix rules. Budget: 50 µs.
func BenchmarkEvaluate1000Rules(b *testing.B) {
	p := load1000(b)
	for _, c := range []struct {
		name string
		argv []string
	}{
		{"plain", []string{"git", "status"}},
		{"wrapper", []string{"/bin/bash", "-lc", "git status && cargo test -p core"}},
		{"heuristics", []string{"/bin/bash", "-lc", "rg -n TODO src | head -20"}},
		{"complex", []string{"/bin/bash", "-lc", "for f in *.go; do gofmt -l \"$f\"; done > /tmp/out"}},
	} {
		b.Run(c.name, func(b *testing.B) {
			in := Input{Argv: c.argv, ApprovalPolicy: ApprovalPolicy{Kind: heuristics.OnRequest}, Sandbox: heuristics.WorkspaceWrite,
				Policy: p, BaseCwd: "/w", ParentEnv: []string{"PATH=/usr/bin:/bin", "HOME=/h", "LANG=C.UTF-8"}}
			b.ReportAllocs()
			for b.Loop() {
				if _, err := Evaluate(in); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkLoad1000Rules measures parsing and validating the rules file.
func BenchmarkLoad1000Rules(b *testing.B) {
	src := []byte(rules1000())
	b.ReportAllocs()
	for b.Loop() {
		if _, err := execpolicy.LoadSource("bench.rules", src); err != nil {
			b.Fatal(err)
		}
	}
}
