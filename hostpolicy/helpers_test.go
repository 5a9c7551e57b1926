package hostpolicy

import (
	"slices"
	"strconv"
	"testing"
)

// domainEntries maps a [network.domains]-like table onto Entries with the
// origins config.PolicyOptions gives them.
func domainEntries(domains map[string]string) []Entry {
	var out []Entry
	for _, k := range slices.Sorted(mapKeys(domains)) {
		out = append(out, Entry{Pattern: k, Decision: domains[k], Origin: "network.domains." + strconv.Quote(k)})
	}
	return out
}

func mapKeys(m map[string]string) func(func(string) bool) {
	return func(yield func(string) bool) {
		for k := range m {
			if !yield(k) {
				return
			}
		}
	}
}

func testOptions(enabled bool, domains map[string]string, allowLocal bool, extra ...Entry) Options {
	return Options{Enabled: enabled, Mode: ModeFull, AllowLocalBinding: allowLocal,
		Entries: append(domainEntries(domains), extra...)}
}

func mustCompile(t testing.TB, domains map[string]string, allowLocal bool, extra ...Entry) *Snapshot {
	t.Helper()
	p, err := Build(testOptions(true, domains, allowLocal, extra...))
	if err != nil {
		t.Fatalf("Build: %v", err)
	}
	return p
}

func compileEnabled(t *testing.T, enabled bool, domains map[string]string, allowLocal bool) *Snapshot {
	t.Helper()
	p, err := Build(testOptions(enabled, domains, allowLocal))
	if err != nil {
		t.Fatalf("Build: %v", err)
	}
	return p
}

// testSnap is p with mode and, when r is set, r as its DNS resolver.
func testSnap(p *Snapshot, r Resolver, mode string) *Snapshot {
	if p == nil {
		p = orEmpty(nil)
	}
	c := *p
	c.mode = mode
	if r != nil {
		c.dns = r
	}
	return &c
}

func newTestEngine(p *Snapshot, r Resolver, mode string, d Decider) *Engine {
	return NewEngine(testSnap(p, r, mode), d)
}

// swapT swaps p in with mode, keeping the engine's current DNS resolver.
func swapT(e *Engine, p *Snapshot, mode string) {
	e.Swap(testSnap(p, e.Snapshot().dns, mode))
}
