package audit

import (
	"net/netip"
	"testing"
	"time"
)

// benchRecords are the two lines every allowed keep-alive request writes:
// its network_decision and its connection_end, as the Writer builds them.
func benchRecords() (decision, end Record) {
	started := time.Date(2026, 12, 2, 5, 15, 44, 123456789, time.UTC)
	rule := 2
	decision = Record{
		Time: started.Add(30 * time.Microsecond), Started: started,
		Event: EventNetworkDecision, Decision: "allow", Source: "baseline_policy", Protocol: "http",
		Host: "up.test", Port: 8080, Method: "GET", Client: "127.0.0.1:40000",
		SessionID: "default", EnvironmentID: "default", Pattern: "up.test",
		Addrs: []netip.Addr{netip.MustParseAddr("127.0.0.1")}, Rule: &rule,
	}
	end = Record{
		Time: started.Add(250 * time.Microsecond), Started: started,
		Event: EventConnectionEnd, Decision: "allow", Protocol: "http",
		Host: "up.test", Port: 8080, Method: "GET", Client: "127.0.0.1:40000",
		SessionID: "default", EnvironmentID: "default",
		End: true, BytesOut: 0, BytesIn: 1234, Status: 200, Close: "keepalive",
	}
	return decision, end
}

// BenchmarkAppendLine is the writer goroutine's cost of one chained line
// (encode + hash), into a reused buffer as run reuses it.
func BenchmarkAppendLine(b *testing.B) {
	decision, end := benchRecords()
	for _, bc := range []struct {
		name string
		r    Record
	}{{"network_decision", decision}, {"connection_end", end}} {
		b.Run(bc.name, func(b *testing.B) {
			var c chain
			line := make([]byte, 0, 1024)
			b.ReportAllocs()
			for i := 0; i < b.N; i++ {
				line = c.appendLine(line[:0], &bc.r)
			}
		})
	}
}
