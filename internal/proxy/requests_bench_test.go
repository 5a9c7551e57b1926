package proxy

import (
	"fmt"
	"strings"
	"testing"

	"github.com/netproxy/netproxy/hostpolicy"
)

// BenchmarkInterceptedRequestRules: keep-alive requests through the
// interception of a limited-mode tunnel (every inner request re-judged),
// with no request rules and with 100 (one of them names the host and
// allows its path): SPEC §3.10 asks the rules to cost within 5 %.
func BenchmarkInterceptedRequestRules(b *testing.B) {
	limited := strings.Replace(credPolicy, `mode = "full"`, `mode = "limited"`, 1)
	for _, n := range []int{0, 100} {
		var rules []hostpolicy.RequestRule
		for i := 0; i < n-1; i++ {
			rules = append(rules, hostpolicy.RequestRule{Hosts: []string{fmt.Sprintf("h%d.test", i)}, Methods: []string{"POST"}, Paths: []string{"/*/*/git-receive-pack"}, Action: hostpolicy.ActionDeny})
		}
		if n > 0 {
			rules = append(rules, hostpolicy.RequestRule{Hosts: []string{"up.test"}, Methods: []string{"GET"}, Paths: []string{"/**"}, Action: hostpolicy.ActionAllow})
		}
		b.Run(fmt.Sprintf("rules=%d", n), func(b *testing.B) {
			cb := newCredBenchWith(b, limited, rules)
			c := cb.client(false, true)
			defer c.CloseIdleConnections()
			cb.get(b, c, "up.test", "/")
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				cb.get(b, c, "up.test", "/")
			}
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "req/s")
		})
	}
}
