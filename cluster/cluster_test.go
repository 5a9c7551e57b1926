package cluster

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/redis/go-redis/v9"

	"github.com/netproxy/netproxy/approvalsvc"
	"github.com/netproxy/netproxy/cluster/settings"
	"github.com/netproxy/netproxy/hostpolicy"
)

// startRedis runs a real redis-server on a free port for the test
// (scripts/install-test-deps.sh installs it).
func startRedis(tb testing.TB) string {
	tb.Helper()
	if _, err := exec.LookPath("redis-server"); err != nil {
		tb.Fatal("redis-server is required (Debian package redis-server)")
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	port := ln.Addr().(*net.TCPAddr).Port
	ln.Close()
	cmd := exec.Command("redis-server", "--port", fmt.Sprint(port), "--bind", "127.0.0.1", "--dir", tb.TempDir(),
		"--save", "", "--appendonly", "no", "--protected-mode", "no")
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	url := fmt.Sprintf("redis://127.0.0.1:%d/0", port)
	c := redis.NewClient(&redis.Options{Addr: fmt.Sprintf("127.0.0.1:%d", port)})
	defer c.Close()
	for i := 0; i < 200; i++ {
		if c.Ping(context.Background()).Err() == nil {
			return url
		}
		time.Sleep(10 * time.Millisecond)
	}
	tb.Fatal("redis-server did not start")
	return ""
}

// testKey is one cluster key file per test binary run, shared by the
// replicas of a test.
func testKey(tb testing.TB) string {
	tb.Helper()
	p := filepath.Join(tb.TempDir(), "cluster.key")
	if err := os.WriteFile(p, []byte("0123456789abcdef0123456789abcdef-test-key"), 0o600); err != nil {
		tb.Fatal(err)
	}
	return p
}

func testSettings(tb testing.TB, url, node string) settings.Settings {
	return settings.Settings{Redis: url, NodeID: node, KeyPrefix: "t:", KeyFile: testKey(tb)}
}

func join(tb testing.TB, url, node string, reg prometheus.Registerer) *Cluster {
	tb.Helper()
	c, err := Open(context.Background(), Options{Settings: testSettings(tb, url, node), Registerer: reg, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		tb.Fatal(err)
	}
	if err := c.Start(context.Background()); err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(c.Close)
	return c
}

func TestOneReviewAcrossNodes(t *testing.T) {
	url := startRedis(t)
	a, b := join(t, url, "a", nil), join(t, url, "b", nil)
	ctx := context.Background()
	k := approvalsvc.ReviewKey{Session: "s", Env: "e", Host: "alpha.test", Protocol: "https", Port: 443}
	dl := time.Now().Add(time.Minute)
	ba, err := a.Begin(ctx, k, "apv_1", dl)
	if err != nil || ba.Kind != approvalsvc.BeginLead {
		t.Fatalf("a: %+v %v", ba, err)
	}
	bb, err := b.Begin(ctx, k, "apv_2", dl)
	if err != nil || bb.Kind != approvalsvc.BeginJoin || bb.ID != "apv_1" || bb.Deadline.UnixMilli() != dl.UnixMilli() {
		t.Fatalf("b: %+v %v", bb, err)
	}
	if err := a.Open(ctx, approvalsvc.Approval{ID: "apv_1", Kind: "network", Status: "pending", Host: k.Host}, k); err != nil {
		t.Fatal(err)
	}
	if p, err := b.Pending(ctx); err != nil || len(p) != 1 || p[0].ID != "apv_1" {
		t.Fatalf("pending on b: %+v %v", p, err)
	}
	got := make(chan approvalsvc.ClusterDecision, 1)
	go func() { d, _ := b.Await(ctx, "apv_1"); got <- d }()
	time.Sleep(20 * time.Millisecond)
	if _, ok, err := b.Decide(ctx, approvalsvc.ClusterDecision{ID: "apv_1", Key: k, Outcome: approvalsvc.OutcomeAllowSession, Reviewer: "user"}, false); !ok || err != nil {
		t.Fatalf("decide: %v %v", ok, err)
	}
	select {
	case d := <-got:
		if d.Outcome != approvalsvc.OutcomeAllowSession {
			t.Fatalf("await: %+v", d)
		}
	case <-time.After(2 * time.Second):
		t.Fatal("await not released")
	}
	// A second decision loses; the first holds.
	held, ok, err := a.Decide(ctx, approvalsvc.ClusterDecision{ID: "apv_1", Key: k, Outcome: approvalsvc.OutcomeDeny}, true)
	if ok || err != nil || held.Outcome != approvalsvc.OutcomeAllowSession {
		t.Fatalf("second decision: %+v %v %v", held, ok, err)
	}
	if bc, err := a.Begin(ctx, k, "apv_3", dl); err != nil || bc.Kind != approvalsvc.BeginCached || bc.Outcome != approvalsvc.OutcomeAllowSession {
		t.Fatalf("after allow_session: %+v %v", bc, err)
	}
}

func TestForeignSchemaRefused(t *testing.T) {
	url := startRedis(t)
	opt, _ := redis.ParseURL(url)
	r := redis.NewClient(opt)
	defer r.Close()
	r.Set(context.Background(), "t:schema", "99", 0)
	_, err := Open(context.Background(), Options{Settings: testSettings(t, url, "x")})
	if err == nil || !strings.Contains(err.Error(), "cluster.redis") || !strings.Contains(err.Error(), "schema version") {
		t.Fatalf("foreign schema: %v", err)
	}
	// Garbage under the prefix (not sealed with the key) is ignored and
	// counted, never applied.
	r.Set(context.Background(), "t:schema", SchemaVersion, 0)
	r.HSet(context.Background(), "t:execs", "exec_1", "{not json")
	c, err := Open(context.Background(), Options{Settings: testSettings(t, url, "x")})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if err := c.Start(context.Background()); err != nil {
		t.Fatalf("garbage: %v", err)
	}
	if n := testutil.ToFloat64(c.m.rejected.WithLabelValues(kindExecution)); n != 1 {
		t.Fatalf("rejected executions: %v, want 1", n)
	}
}

// newBench builds an approval service with an allow_session cached for
// alpha.test:80 in the default session, with or without a cluster.
func newBench(b *testing.B, clustered bool) (*approvalsvc.Service, *Cluster, hostpolicy.Request, hostpolicy.Decision) {
	var c *Cluster
	opts := approvalsvc.Options{Settings: approvalsvc.Settings{Enabled: true}, UserReviewer: true}
	if clustered {
		c = join(b, startRedis(b), "bench", nil)
		opts.Coordinator = c
	}
	svc, err := approvalsvc.New(opts)
	if err != nil {
		b.Fatal(err)
	}
	if c != nil {
		c.Attach(svc)
	}
	svc.ApplyClusterCache(approvalsvc.ReviewKey{Session: "default", Env: "default", Host: "alpha.test", Protocol: "http", Port: 80}, approvalsvc.OutcomeAllowSession)
	req := hostpolicy.Request{Host: "alpha.test", Port: 80, Protocol: hostpolicy.ProtoHTTP}
	base := hostpolicy.Decision{Verdict: hostpolicy.Deny, Reason: hostpolicy.ReasonNotAllowed, Source: hostpolicy.SourceBaseline, Host: "alpha.test", Port: 80}
	return svc, c, req, base
}

func benchCached(b *testing.B, clustered bool) {
	svc, c, req, base := newBench(b, clustered)
	ctx := context.Background()
	var before float64
	if c != nil {
		before = testutil.ToFloat64(c.m.commands.WithLabelValues("begin"))
	}
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if d := svc.Decide(ctx, req, base); !d.Allowed() {
			b.Fatal("cache miss")
		}
	}
	b.StopTimer()
	if c != nil {
		ops := testutil.ToFloat64(c.m.commands.WithLabelValues("begin")) - before
		b.ReportMetric(ops/float64(b.N), "redis-ops/op")
		if ops != 0 {
			b.Fatalf("%v Redis round trips for %d cached decisions", ops, b.N)
		}
	}
}

// BenchmarkCachedDecisionSingle / Cluster: a cached allow_session decision
// with cluster mode off and on (target ≤ 5 µs, 0 Redis operations).
func BenchmarkCachedDecisionSingle(b *testing.B)  { benchCached(b, false) }
func BenchmarkCachedDecisionCluster(b *testing.B) { benchCached(b, true) }

// BenchmarkBeginMiss is the one Redis round trip a cache miss makes before
// a review (the Begin script, answered "cached" here).
func BenchmarkBeginMiss(b *testing.B) {
	url := startRedis(b)
	c := join(b, url, "bench", nil)
	ctx := context.Background()
	k := approvalsvc.ReviewKey{Session: "s", Env: "e", Host: "alpha.test", Protocol: "http", Port: 80}
	c.Decide(ctx, approvalsvc.ClusterDecision{ID: "x", Key: k, Outcome: approvalsvc.OutcomeAllowSession}, true)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if r, err := c.Begin(ctx, k, "y", time.Now().Add(time.Minute)); err != nil || r.Kind != approvalsvc.BeginCached {
			b.Fatal(r, err)
		}
	}
}
