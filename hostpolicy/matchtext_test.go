package hostpolicy

import (
	"testing"

	"github.com/netproxy/netproxy/hostpolicy/hostname"
)

// A match reports its entry's text, port suffix included, as a slice of
// the matcher's arena: every kind, unscoped and scoped, and nothing built
// per lookup.
func TestMatcherReportsEntryText(t *testing.T) {
	for _, suffix := range []string{"", ":443", ":8000-8999"} {
		mb := newMatcherBuilder()
		mb.m.suffix = suffix
		for _, raw := range []string{"exact.test", "*.star.test", "**.double.test", "both.test", "*.both.test", "x.test"} {
			p, err := hostname.ParsePattern(raw)
			if err != nil {
				t.Fatal(err)
			}
			mb.add(p)
		}
		m := mb.build()
		for host, want := range map[string]string{
			"exact.test":       "exact.test",
			"a.star.test":      "*.star.test",
			"a.b.star.test":    "*.star.test",
			"double.test":      "**.double.test",
			"a.b.double.test":  "**.double.test",
			"both.test":        "both.test",
			"a.both.test":      "*.both.test",
			"x.test":           "x.test",
			"star.test":        "",
			"other.test":       "",
			"exact.test.other": "",
		} {
			got, ok := m.match(host)
			if want == "" {
				if ok {
					t.Errorf("suffix %q: %s matched %q", suffix, host, got)
				}
				continue
			}
			if !ok || got != want+suffix {
				t.Errorf("suffix %q: %s matched %q, %v; want %q", suffix, host, got, ok, want+suffix)
			}
			if n := testing.AllocsPerRun(20, func() { m.match(host) }); n != 0 {
				t.Errorf("suffix %q: %s: %v allocations", suffix, host, n)
			}
		}
		if got, ok := m.matchExact("x.test"); !ok || got != "x.test"+suffix {
			t.Errorf("suffix %q: matchExact = %q, %v", suffix, got, ok)
		}
		if _, ok := m.matchExact("a.star.test"); ok {
			t.Errorf("suffix %q: matchExact matched a wildcard", suffix)
		}
		all, _ := hostname.ParsePattern("*")
		mb = newMatcherBuilder()
		mb.m.suffix = suffix
		mb.add(all)
		if got, ok := mb.build().match("any.test"); !ok || got != "*"+suffix {
			t.Errorf("suffix %q: all = %q, %v", suffix, got, ok)
		}
	}
}
