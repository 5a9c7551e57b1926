package approvalsvc

import (
	"context"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/netproxy/netproxy/hostpolicy"
)

// benchRig is a service with an allow_session cached for alpha.test:80/http
// in the default session.
func benchRig(b *testing.B) (*rig, hostpolicy.Request, hostpolicy.Decision) {
	r := newRig(b)
	req := hostpolicy.Request{Host: "alpha.test", Port: 80, Protocol: hostpolicy.ProtoHTTP}
	base := hostpolicy.Decision{Verdict: hostpolicy.Deny, Reason: hostpolicy.ReasonNotAllowed, Source: hostpolicy.SourceBaseline, Host: "alpha.test", Port: 80}
	ch := make(chan hostpolicy.Decision, 1)
	go func() { ch <- r.svc.Decide(context.Background(), req, base) }()
	var id string
	for id == "" {
		for _, a := range r.svc.Approvals(StatusPending) {
			id = a.ID
		}
		time.Sleep(time.Millisecond)
	}
	if err := r.svc.DecideApproval(id, OutcomeAllowSession, ""); err != nil {
		b.Fatal(err)
	}
	if d := <-ch; !d.Allowed() {
		b.Fatal("setup: not allowed")
	}
	return r, req, base
}

// BenchmarkDecideCacheHit is what the approval service adds to a decision
// whose key is in the session allow cache (target ≤ 5 µs).
func BenchmarkDecideCacheHit(b *testing.B) {
	r, req, base := benchRig(b)
	ctx := context.Background()
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if d := r.svc.Decide(ctx, req, base); !d.Allowed() {
			b.Fatal("cache miss")
		}
	}
}

// BenchmarkDecideCacheHitParallel is the same under contention.
func BenchmarkDecideCacheHitParallel(b *testing.B) {
	r, req, base := benchRig(b)
	b.ReportAllocs()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		ctx := context.Background()
		for pb.Next() {
			if d := r.svc.Decide(ctx, req, base); !d.Allowed() {
				b.Fatal("cache miss")
			}
		}
	})
}

// BenchmarkRelease1000Waiters measures the time from a reviewer's decision
// until the last of 1 000 requests waiting on the same key has its answer
// (target ≤ 50 ms): ns/op is the mean; p99-ms and max-ms the tail.
func BenchmarkRelease1000Waiters(b *testing.B) {
	const n = 1000
	var lat []time.Duration
	for i := 0; i < b.N; i++ {
		b.StopTimer()
		r := newRig(b)
		req := hostpolicy.Request{Host: "bravo.test", Port: 80, Protocol: hostpolicy.ProtoHTTP}
		base := hostpolicy.Decision{Verdict: hostpolicy.Deny, Reason: hostpolicy.ReasonNotAllowed, Source: hostpolicy.SourceBaseline, Host: "bravo.test", Port: 80}
		done := make([]time.Time, n)
		var wg sync.WaitGroup
		for j := range n {
			wg.Add(1)
			go func() {
				defer wg.Done()
				r.svc.Decide(context.Background(), req, base)
				done[j] = time.Now()
			}()
		}
		for r.svc.waiters() < n {
			time.Sleep(time.Millisecond)
		}
		id := r.svc.Approvals(StatusPending)[0].ID
		b.StartTimer()
		start := time.Now()
		if err := r.svc.DecideApproval(id, OutcomeAllowOnce, ""); err != nil {
			b.Fatal(err)
		}
		wg.Wait()
		b.StopTimer()
		var last time.Time
		for _, t := range done {
			if t.After(last) {
				last = t
			}
		}
		lat = append(lat, last.Sub(start))
		r.svc.Close()
	}
	// ns/op is the mean decision→last-waiter time; p99-ms and max-ms its tail.
	slices.Sort(lat)
	ms := func(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }
	b.ReportMetric(ms(lat[len(lat)*99/100]), "p99-ms")
	b.ReportMetric(ms(lat[len(lat)-1]), "max-ms")
}
