package deptest

import (
	"bufio"
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/netproxy/netproxy/hostpolicy"
)

const module = "github.com/netproxy/netproxy"

// root is the module's directory.
func root(t *testing.T) string {
	t.Helper()
	out, err := exec.Command("go", "list", "-m", "-f", "{{.Dir}}").Output()
	if err != nil {
		t.Fatalf("go list -m: %v", err)
	}
	return strings.TrimSpace(string(out))
}

func readDoc(t *testing.T) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(root(t), "docs", "ARCHITECTURE.md"))
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// layer is one row of the import-rules table.
type layer struct {
	name     string
	patterns []string // "x" exactly, or "x/..." for x and everything under it
}

var codeSpan = regexp.MustCompile("`([^`]+)`")

// layersOf reads the table under the "layers:" marker of the doc.
func layersOf(t *testing.T, doc string) []layer {
	t.Helper()
	i := strings.Index(doc, "<!-- layers:")
	if i < 0 {
		t.Fatal("docs/ARCHITECTURE.md: no <!-- layers: --> table")
	}
	var ls []layer
	sc := bufio.NewScanner(strings.NewReader(doc[i:]))
	sc.Scan() // the marker
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if !strings.HasPrefix(line, "|") {
			if len(ls) > 0 {
				break
			}
			continue
		}
		cells := strings.Split(strings.Trim(line, "|"), "|")
		if len(cells) != 2 || strings.HasPrefix(strings.TrimSpace(cells[0]), "---") || strings.TrimSpace(cells[0]) == "layer" {
			continue
		}
		l := layer{name: strings.TrimSpace(cells[0])}
		for _, m := range codeSpan.FindAllStringSubmatch(cells[1], -1) {
			l.patterns = append(l.patterns, m[1])
		}
		ls = append(ls, l)
	}
	if len(ls) < 2 {
		t.Fatalf("docs/ARCHITECTURE.md: layers table has %d rows", len(ls))
	}
	return ls
}

// layerOf returns the index of pkg's layer (the most specific pattern
// wins: "sandbox" exactly beats "sandbox/..."), or -1.
func layerOf(ls []layer, pkg string) int {
	best, bestLen := -1, -1
	for i, l := range ls {
		for _, p := range l.patterns {
			n := -1
			if base, ok := strings.CutSuffix(p, "/..."); ok {
				if pkg == base || strings.HasPrefix(pkg, base+"/") {
					n = len(base)
				}
			} else if pkg == p {
				n = len(p) + 1 // an exact name beats a tree of the same name
			}
			if n > bestLen {
				best, bestLen = i, n
			}
		}
	}
	return best
}

// imports returns the module's packages and the module packages each
// imports (tests' imports excluded: a test may reach anywhere).
func imports(t *testing.T) map[string][]string {
	t.Helper()
	cmd := exec.Command("go", "list", "-e", "-f", `{{.ImportPath}}{{range .Imports}} {{.}}{{end}}`, module+"/...")
	cmd.Dir = root(t)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, stderr.String())
	}
	g := map[string][]string{}
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		f := strings.Fields(line)
		if len(f) == 0 {
			continue
		}
		pkg := rel(f[0])
		g[pkg] = nil
		for _, imp := range f[1:] {
			if imp == module || strings.HasPrefix(imp, module+"/") {
				g[pkg] = append(g[pkg], rel(imp))
			}
		}
	}
	return g
}

func rel(p string) string { return strings.TrimPrefix(strings.TrimPrefix(p, module), "/") }

// TestImportLayers: no package imports a higher layer than its own, and
// every package has a layer (docs/ARCHITECTURE.md, "Import rules").
func TestImportLayers(t *testing.T) {
	ls := layersOf(t, readDoc(t))
	g := imports(t)
	if len(g) < 10 {
		t.Fatalf("go list found %d packages: is the module root right?", len(g))
	}
	for pkg, deps := range g {
		li := layerOf(ls, pkg)
		if li < 0 {
			t.Errorf("%s has no layer in docs/ARCHITECTURE.md's import rules: add it to a row", pkg)
			continue
		}
		for _, dep := range deps {
			di := layerOf(ls, dep)
			if di > li {
				t.Errorf("%s (layer %q) imports %s (layer %q): a package must never import a higher layer", pkg, ls[li].name, dep, ls[di].name)
			}
		}
	}
}

// TestNamedRules are the "must never" imports the layers imply, spelled
// out so that a change of the table cannot quietly allow them.
func TestNamedRules(t *testing.T) {
	g := imports(t)
	forbidden := func(pkg, dep string) bool {
		switch {
		case strings.HasPrefix(pkg, "cmd/") || strings.HasPrefix(pkg, "test") || pkg == "internal/deptest":
			return false
		case dep == "cmd" || strings.HasPrefix(dep, "cmd/"):
			return true // nothing imports a command
		case dep == "internal/config" && !strings.HasPrefix(pkg, "internal/"):
			return true // domain packages never read TOML
		case (pkg == "hostpolicy" || strings.HasPrefix(pkg, "hostpolicy/")) && !strings.HasPrefix(dep, "hostpolicy/") && !strings.HasPrefix(dep, "execcore/"):
			return true // the policy imports no proxy, wiring or decider
		case pkg == "internal/proxy" && (dep == "internal/server" || dep == "internal/config" || dep == "rollout"):
			return true // the data path is wired, it wires nothing
		}
		return false
	}
	for pkg, deps := range g {
		for _, dep := range deps {
			if forbidden(pkg, dep) {
				t.Errorf("%s imports %s: docs/ARCHITECTURE.md says it must never", pkg, dep)
			}
		}
	}
}

// TestLayerRules: the checker itself fails on an upward import.
func TestLayerRules(t *testing.T) {
	ls := []layer{{"low", []string{"a/...", "b"}}, {"high", []string{"c", "a/x"}}}
	for _, c := range []struct {
		pkg  string
		want int
	}{{"a", 0}, {"a/y", 0}, {"a/x", 1}, {"b", 0}, {"b/z", -1}, {"c", 1}, {"d", -1}} {
		if got := layerOf(ls, c.pkg); got != c.want {
			t.Errorf("layerOf(%q) = %d, want %d", c.pkg, got, c.want)
		}
	}
}

// TestStageListMatchesDoc: docs/ARCHITECTURE.md lists the pipeline's
// stages in code order.
func TestStageListMatchesDoc(t *testing.T) {
	doc := readDoc(t)
	i := strings.Index(doc, "<!-- stages:")
	if i < 0 {
		t.Fatal("docs/ARCHITECTURE.md: no <!-- stages: --> list")
	}
	item := regexp.MustCompile("^[0-9]+\\. `([a-z_]+)`")
	var got []string
	sc := bufio.NewScanner(strings.NewReader(doc[i:]))
	sc.Scan()
	for sc.Scan() {
		line := sc.Text()
		if strings.TrimSpace(line) == "" {
			break
		}
		if m := item.FindStringSubmatch(line); m != nil {
			got = append(got, m[1])
		}
	}
	var want []string
	for _, s := range hostpolicy.Stages() {
		want = append(want, string(s))
	}
	if strings.Join(got, " ") != strings.Join(want, " ") {
		t.Errorf("docs/ARCHITECTURE.md lists the stages\n  %v\nthe code runs\n  %v", got, want)
	}
}
