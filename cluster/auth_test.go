package cluster

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/redis/go-redis/v9"

	"github.com/netproxy/netproxy/approvalsvc"
)

func TestLoadKey(t *testing.T) {
	dir := t.TempDir()
	write := func(name string, data []byte, mode os.FileMode) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, data, mode); err != nil {
			t.Fatal(err)
		}
		os.Chmod(p, mode)
		return p
	}
	secret := []byte("s3cret-key-material-0123456789abcdef")
	if k, err := LoadKey(write("good", secret, 0o600)); err != nil || string(k) != string(secret) {
		t.Fatalf("good key: %v", err)
	}
	if _, err := LoadKey(write("ro", secret, 0o400)); err != nil {
		t.Fatalf("0400 key: %v", err)
	}
	for name, tc := range map[string]struct {
		path string
		want string
	}{
		"missing": {"", "required"},
		"absent":  {filepath.Join(dir, "nope"), "no such file"},
		"short":   {write("short", secret[:31], 0o600), "at least 32"},
		"loose":   {write("loose", secret, 0o640), "chmod 600"},
		"world":   {write("world", secret, 0o604), "chmod 600"},
		"dir":     {dir, "regular file"},
	} {
		_, err := LoadKey(tc.path)
		if err == nil || !strings.Contains(err.Error(), "cluster.key_file") || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v; want an error naming cluster.key_file and %q", name, err, tc.want)
		}
		if err != nil && strings.Contains(err.Error(), string(secret[:20])) {
			t.Errorf("%s: the error shows the key", name)
		}
	}
}

func TestSealBindsKeyAndField(t *testing.T) {
	s := sealer{[]byte("0123456789abcdef0123456789abcdef")}
	v := s.seal("p:amend", "a.test", []byte(`{"x":1}`))
	if p, err := s.open("p:amend", "a.test", v); err != nil || string(p) != `{"x":1}` {
		t.Fatalf("open: %q %v", p, err)
	}
	for _, tc := range [][3]string{
		{"p:amend", "b.test", v},                               // moved to another field
		{"p:cache:s", "a.test", v},                             // moved to another key
		{"p:amend", "a.test", strings.Replace(v, "1", "2", 1)}, // tampered
		{"p:amend", "a.test", `{"x":1}`},                       // unsealed
		{"p:amend", "a.test", sealer{[]byte("another key of 32 bytes or more!!")}.seal("p:amend", "a.test", []byte(`{"x":1}`))},
	} {
		if _, err := s.open(tc[0], tc[1], tc[2]); err == nil {
			t.Errorf("accepted %q at %s/%s", tc[2], tc[0], tc[1])
		}
	}
	// Length prefixes keep (key, field) unambiguous.
	if s.seal("ab", "c", nil) == s.seal("a", "bc", nil) {
		t.Fatal("(ab,c) and (a,bc) share a MAC")
	}
}

// An amendment and a session cache rolled back to an older valid version
// are refused by a replica that saw the newer one; a forged one is ignored
// and a review runs instead.
func TestRollbackAndForgeryRefused(t *testing.T) {
	url := startRedis(t)
	a, b := join(t, url, "a", nil), join(t, url, "b", nil)
	opt, _ := redis.ParseURL(url)
	r := redis.NewClient(opt)
	defer r.Close()
	ctx := context.Background()
	k := approvalsvc.ReviewKey{Session: "s", Env: "e", Host: "roll.test", Protocol: "https", Port: 443}
	if _, ok, err := a.Decide(ctx, approvalsvc.ClusterDecision{ID: "apv_1", Key: k, Outcome: approvalsvc.OutcomeAllowAlways}, true); !ok || err != nil {
		t.Fatal(ok, err)
	}
	oldAmend := r.HGet(ctx, "t:amend", "roll.test").Val()
	oldCache := r.HGet(ctx, "t:cache:s", reviewField(k)).Val()
	if _, ok, err := a.Decide(ctx, approvalsvc.ClusterDecision{ID: "apv_2", Key: k, Outcome: approvalsvc.OutcomeDenyAlways}, true); !ok || err != nil {
		t.Fatal(ok, err)
	}
	payload, err := a.seal.open("t:amend", "roll.test", r.HGet(ctx, "t:amend", "roll.test").Val())
	if err != nil {
		t.Fatal(err)
	}
	cur, err := parseAmend("roll.test", payload)
	if err != nil || cur.Verdict != "deny" {
		t.Fatalf("stored amendment: %+v %v", cur, err)
	}
	second := cur.Seq
	waitFor(t, func() bool {
		return seqOf(b.replay, amendItem("roll.test")) == second && seqOf(b.replay, cacheItem("s", reviewField(k))) == second
	})
	// Roll both back to the allow_always records.
	r.HSet(ctx, "t:amend", "roll.test", oldAmend)
	r.HSet(ctx, "t:cache:s", reviewField(k), oldCache)
	res, err := b.Begin(ctx, k, "apv_3", time.Now().Add(time.Minute))
	if err != nil || res.Kind != approvalsvc.BeginLead {
		t.Fatalf("after rollback: %+v %v; want a new review (lead)", res, err)
	}
	if n := testutil.ToFloat64(b.m.rejected.WithLabelValues(kindCache)); n < 1 {
		t.Fatalf("rolled-back session cache not counted: %v", n)
	}
	// The same with a forged (unsealed) amendment for another host.
	k2 := approvalsvc.ReviewKey{Session: "s", Env: "e", Host: "forged.test", Protocol: "https", Port: 443}
	r.HSet(ctx, "t:amend", "forged.test", `{"host":"forged.test","verdict":"allow","protocol":"https","seq":99}`)
	if res, err := b.Begin(ctx, k2, "apv_4", time.Now().Add(time.Minute)); err != nil || res.Kind != approvalsvc.BeginLead {
		t.Fatalf("forged amendment: %+v %v; want a review", res, err)
	}
	if n := testutil.ToFloat64(b.m.rejected.WithLabelValues(kindAmendment)); n < 1 {
		t.Fatalf("forged amendment not counted: %v", n)
	}
	// A resetted sequence counter does not make new records look old.
	r.Set(ctx, "t:seq", "1", 0)
	if n, err := a.nextSeq(ctx); err != nil || n <= 2 {
		t.Fatalf("sequence after reset: %d %v", n, err)
	}
}

func seqOf(g *replayGuard, item string) uint64 {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.seq[item]
}

func waitFor(t *testing.T, f func() bool) {
	t.Helper()
	for i := 0; i < 300; i++ {
		if f() {
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Fatal("condition not met within 3 s")
}

// BenchmarkSeal / BenchmarkOpen: the HMAC cost per record (a typical
// execution record).
func BenchmarkSeal(b *testing.B) {
	s := sealer{[]byte("0123456789abcdef0123456789abcdef")}
	payload := []byte(`{"execution":{"execution_id":"exec_0123456789","session_id":"sess","environment_id":"env"},"token_sha256":"` + strings.Repeat("ab", 32) + `","node":"node-a"}`)
	b.ReportAllocs()
	for i := 0; i < b.N; i++ {
		s.seal("netproxy:execs", "exec_0123456789", payload)
	}
}

func BenchmarkOpen(b *testing.B) {
	s := sealer{[]byte("0123456789abcdef0123456789abcdef")}
	payload := []byte(`{"execution":{"execution_id":"exec_0123456789","session_id":"sess","environment_id":"env"},"token_sha256":"` + strings.Repeat("ab", 32) + `","node":"node-a"}`)
	v := s.seal("netproxy:execs", "exec_0123456789", payload)
	b.ReportAllocs()
	for i := 0; i < b.N; i++ {
		if _, err := s.open("netproxy:execs", "exec_0123456789", v); err != nil {
			b.Fatal(err)
		}
	}
}
