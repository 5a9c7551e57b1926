package server

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/netip"
	"path/filepath"
	"testing"
	"time"

	"github.com/netproxy/netproxy/hostpolicy"
	"github.com/netproxy/netproxy/internal/config"
	"github.com/netproxy/netproxy/internal/observe"
	"github.com/netproxy/netproxy/metrics"
)

// BenchmarkObserveFanout is what the data path pays per allowed decision
// for everything Assemble wires behind Core.Sink: metrics, the execution
// stream, the decision log (info level: allowed requests not logged), the
// audit enqueue and the blocked ring. The audit writer runs concurrently;
// the clock stops while it drains between batches, so no record is dropped.
func BenchmarkObserveFanout(b *testing.B) {
	dir := b.TempDir()
	b.Setenv("NETPROXY_HOME", dir)
	path := writeConfig(b, dir, fmt.Sprintf("[audit]\npath = %q\nbuffer_size = 4096\n", filepath.Join(dir, "audit.jsonl")))
	cfg, err := config.Load(path)
	if err != nil {
		b.Fatal(err)
	}
	n, err := Assemble(cfg, slog.New(slog.NewTextHandler(io.Discard, &slog.HandlerOptions{Level: slog.LevelInfo})), metrics.New(100))
	if err != nil {
		b.Fatal(err)
	}
	defer func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		n.Shutdown(ctx)
	}()
	now := time.Now()
	ev := observe.DecisionEvent{
		Time: now, Started: now.Add(-30 * time.Microsecond), Elapsed: 30 * time.Microsecond,
		Request: hostpolicy.Request{Host: "up.test", Port: 8080, Protocol: hostpolicy.ProtoHTTP, Method: "GET", Client: "127.0.0.1:40000"},
		Decision: hostpolicy.Decision{Verdict: hostpolicy.Allow, Source: hostpolicy.SourceBaseline, Host: "up.test", Port: 8080,
			Pattern: "up.test", Addrs: []netip.Addr{netip.MustParseAddr("127.0.0.1")}},
	}
	sink := n.core.Sink
	const batch = 2048
	b.ReportAllocs()
	b.ResetTimer()
	for done := 0; done < b.N; done += batch {
		for i := 0; i < min(batch, b.N-done); i++ {
			sink.ObserveDecision(ev)
		}
		b.StopTimer()
		for n.audit.Pending() > 0 {
			time.Sleep(50 * time.Microsecond)
		}
		b.StartTimer()
	}
	b.StopTimer()
	b.ReportMetric(float64(n.audit.Dropped())/float64(b.N), "drops/op")
}
