package cluster

import (
	"context"
	"crypto/sha256"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/netproxy/netproxy/attribution"
)

// BenchmarkTokenReadThrough: the miss path of a framed token held by
// another replica (one Redis round trip and two MAC checks), with p50/p99.
func BenchmarkTokenReadThrough(b *testing.B) {
	_, c, key := readThroughPair(b)
	ctx := context.Background()
	lat := make([]time.Duration, 0, b.N)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		start := time.Now()
		if got, ok, err := c.fetchToken(ctx, key); err != nil || !ok || got.Execution.ID != "exec_1" {
			b.Fatal(got, ok, err)
		}
		lat = append(lat, time.Since(start))
	}
	b.StopTimer()
	reportPercentiles(b, lat)
}

// readThroughPair is replicas a and c on one Redis, with execution exec_1
// (token "token", whose digest is key) published by a only.
func readThroughPair(b *testing.B) (a, c *Cluster, key [32]byte) {
	url := startRedis(b)
	a, c = join(b, url, "a", nil), join(b, url, "c", nil)
	key = sha256.Sum256([]byte("token"))
	rec := execRecord{Execution: attribution.Execution{ID: "exec_1", SessionID: "s", EnvironmentID: "e"}, TokenSHA256: fmt.Sprintf("%x", key), Node: "a"}
	if err := a.publishExec(context.Background(), rec); err != nil {
		b.Fatal(err)
	}
	return a, c, key
}

// reportPercentiles reports p50 and p99 of lat (given enough samples).
func reportPercentiles(b *testing.B, lat []time.Duration) {
	if len(lat) > 100 {
		slices.Sort(lat)
		b.ReportMetric(float64(lat[len(lat)/2].Microseconds()), "p50-µs")
		b.ReportMetric(float64(lat[len(lat)*99/100].Microseconds()), "p99-µs")
	}
}

// BenchmarkPlaceholderReadThrough: a request carrying 4 candidate bodies
// this replica does not hold, one of them another replica's placeholder
// (one Redis round trip for all four, two MAC checks), with p50/p99.
func BenchmarkPlaceholderReadThrough(b *testing.B) {
	a, c, _ := readThroughPair(b)
	body := "Pq7Zx0Kd93LmNs82RtYv41BwCe65FgHj70QaUi"
	a.PublishPlaceholders("exec_1", map[string]string{body: "openai"})
	bodies := []string{"NotAPlaceholder0000000000000000000000a", body, "NotAPlaceholder0000000000000000000000b", "NotAPlaceholder0000000000000000000000c"}
	lat := make([]time.Duration, 0, b.N)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		start := time.Now()
		got, err := c.LookupPlaceholders(bodies)
		if err != nil || len(got) != 1 || got[body].Exec != "exec_1" {
			b.Fatal(got, err)
		}
		lat = append(lat, time.Since(start))
	}
	b.StopTimer()
	reportPercentiles(b, lat)
}
