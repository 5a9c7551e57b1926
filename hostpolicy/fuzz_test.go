package hostpolicy

import (
	"testing"

	"github.com/netproxy/netproxy/hostpolicy/hostname"
)

// FuzzMatcherAgreesWithPattern: the hash/bucket matcher used by the chain
// must answer exactly what the pattern's reference semantics say, for any
// pattern and host (a disagreement would be a bypass or a false block).
func FuzzMatcherAgreesWithPattern(f *testing.F) {
	for _, s := range [][2]string{
		{"example.com", "example.com"}, {"*.example.com", "a.b.example.com"}, {"**.example.com", "example.com"},
		{"region*.glob.test", "regionx.y.glob.test"}, {"host?.q.test", "host1.q.test"}, {"10.*", "10.0.0.1"},
		{"*", "anything"}, {"[::1]", "::1"}, {"x[0-9].test", "x5.test"}, {"*.0.0.1", "127.0.0.1"},
		{"?*.a*b.com", "x.aqb.com"}, {"bücher.example", "xn--bcher-kva.example"},
	} {
		f.Add(s[0], s[1])
	}
	f.Fuzz(func(t *testing.T, pattern, host string) {
		p, err := hostname.ParsePattern(pattern)
		if err != nil {
			return
		}
		h, err := hostname.Normalize(host)
		if err != nil {
			return
		}
		mb := newMatcherBuilder()
		mb.add(p)
		m := mb.build()
		_, got := m.match(h)
		if want := p.Match(h); got != want {
			t.Fatalf("pattern %q (%+v) host %q: matcher %v, reference %v", pattern, p, h, got, want)
		}
	})
}
