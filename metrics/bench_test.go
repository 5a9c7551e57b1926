package metrics_test

import (
	"context"
	"fmt"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/netproxy/netproxy/hostpolicy"
	"github.com/netproxy/netproxy/internal/observe"
	"github.com/netproxy/netproxy/metrics"
	"github.com/netproxy/netproxy/metrics/audit"
)

func benchEvents() []observe.DecisionEvent {
	mk := func(host string, v hostpolicy.Verdict, r hostpolicy.Reason) observe.DecisionEvent {
		return observe.DecisionEvent{
			Time:     time.Now(),
			Request:  hostpolicy.Request{Host: host, Port: 443, Protocol: hostpolicy.ProtoHTTPS, Method: "CONNECT", Client: "127.0.0.1:40000", ExecutionID: "exec-0123456789"},
			Decision: hostpolicy.Decision{Verdict: v, Reason: r, Source: hostpolicy.SourceBaseline, Host: host, Port: 443},
			Elapsed:  30 * time.Microsecond,
		}
	}
	var evs []observe.DecisionEvent
	for i := 0; i < 16; i++ {
		evs = append(evs, mk(fmt.Sprintf("allowed%d.test", i), hostpolicy.Allow, ""))
		evs = append(evs, mk(fmt.Sprintf("denied%d.test", i), hostpolicy.Deny, hostpolicy.ReasonDenied))
	}
	return evs
}

// BenchmarkObserveDecision is the metrics cost per decision (half allowed,
// half denied over 16 tracked hosts).
func BenchmarkObserveDecision(b *testing.B) {
	m := metrics.New(100)
	evs := benchEvents()
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		m.ObserveDecision(evs[i%len(evs)])
	}
}

// BenchmarkDataPathMetricsAndAudit is what the data path pays per decision
// for metrics plus the audit enqueue (the budget is 2 µs). The audit file is
// a real file written by the real writer goroutine, concurrently. Records go
// in batches smaller than the buffer, and the clock stops while the writer
// catches up between batches, so every measured enqueue succeeds (drops/op
// must be 0): this is the normal path, not the cheaper drop path.
func BenchmarkDataPathMetricsAndAudit(b *testing.B) {
	benchDataPath(b, false)
}

// BenchmarkDataPathParallel is the same with concurrent connections.
func BenchmarkDataPathParallel(b *testing.B) {
	benchDataPath(b, true)
}

func benchDataPath(b *testing.B, parallel bool) {
	const bufSize, batch = 4096, 2048
	m := metrics.New(100)
	w, err := audit.Open(filepath.Join(b.TempDir(), "audit.jsonl"), bufSize, nil, audit.WithDropCounter(m.AuditDropped))
	if err != nil {
		b.Fatal(err)
	}
	sink := observe.Fanout{m, w}
	evs := benchEvents()
	b.ReportAllocs()
	b.ResetTimer()
	for done := 0; done < b.N; done += batch {
		n := min(batch, b.N-done)
		if parallel {
			var wg sync.WaitGroup
			for g := 0; g < 2; g++ {
				wg.Add(1)
				go func(g int) {
					defer wg.Done()
					for i := g; i < n; i += 2 {
						sink.ObserveDecision(evs[i%len(evs)])
					}
				}(g)
			}
			wg.Wait()
		} else {
			for i := 0; i < n; i++ {
				sink.ObserveDecision(evs[i%len(evs)])
			}
		}
		b.StopTimer()
		for w.Pending() > 0 {
			time.Sleep(50 * time.Microsecond)
		}
		b.StartTimer()
	}
	b.StopTimer()
	b.ReportMetric(float64(w.Dropped())/float64(b.N), "drops/op")
	if err := w.Close(context.Background()); err != nil {
		b.Fatal(err)
	}
}

// BenchmarkAuditSustained measures the writer's throughput: records reach
// the disk (encode + write, fsync at Close) with the clock running, fed in
// batches that fit the buffer so none is dropped.
func BenchmarkAuditSustained(b *testing.B) {
	const bufSize, batch = 8192, 4096
	w, err := audit.Open(filepath.Join(b.TempDir(), "audit.jsonl"), bufSize, nil)
	if err != nil {
		b.Fatal(err)
	}
	evs := benchEvents()
	b.ResetTimer()
	for done := 0; done < b.N; done += batch {
		n := min(batch, b.N-done)
		for i := 0; i < n; i++ {
			w.ObserveDecision(evs[i%len(evs)])
		}
		for w.Pending() > bufSize-batch {
			time.Sleep(20 * time.Microsecond)
		}
	}
	if err := w.Close(context.Background()); err != nil {
		b.Fatal(err)
	}
	b.ReportMetric(float64(w.Dropped())/float64(b.N), "drops/op")
}
