package cluster

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/netproxy/netproxy/approvalsvc"
)

// boundedReviews is an attached approval service as far as the bounds go
// (the changes it is told of are dropped).
type boundedReviews struct{ total, perSession int }

func (boundedReviews) ApplyClusterCache(approvalsvc.ReviewKey, string)  {}
func (boundedReviews) ApplyClusterCreated(approvalsvc.Approval)         {}
func (boundedReviews) ApplyClusterDecision(approvalsvc.ClusterDecision) {}

func (b boundedReviews) PendingBounds() (int, int) { return b.total, b.perSession }

// TestPendingSlots: the bounds count the reviews open across replicas; a
// decision frees its slot; the slot of a replica that died (its lease in
// the past on Redis's clock) frees itself; joining needs no slot.
func TestPendingSlots(t *testing.T) {
	url := startRedis(t)
	a, b := join(t, url, "a", nil), join(t, url, "b", nil)
	a.Attach(boundedReviews{total: 2, perSession: 2})
	b.Attach(boundedReviews{total: 2, perSession: 2})
	ctx := context.Background()
	dl := time.Now().Add(time.Minute)
	key := func(host, sess string) approvalsvc.ReviewKey {
		return approvalsvc.ReviewKey{Session: sess, Env: "e", Host: host, Protocol: "http", Port: 80}
	}
	begin := func(c *Cluster, k approvalsvc.ReviewKey, id string) approvalsvc.Begin {
		t.Helper()
		r, err := c.Begin(ctx, k, id, dl)
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	if r := begin(a, key("one.test", "s"), "apv_1"); r.Kind != approvalsvc.BeginLead {
		t.Fatalf("first review: %+v", r)
	}
	exec := approvalsvc.ReviewKey{Session: "s2", Env: "e", Ident: `{"command":["make"]}`}
	if r := begin(b, exec, "apv_2"); r.Kind != approvalsvc.BeginLead {
		t.Fatalf("exec review on b: %+v", r)
	}
	if r := begin(b, key("three.test", "s3"), "apv_3"); r.Kind != approvalsvc.BeginOverloaded || !strings.Contains(r.Why, "approvals.max_pending") {
		t.Fatalf("third review: %+v", r)
	}
	if r := begin(b, key("one.test", "s"), "apv_4"); r.Kind != approvalsvc.BeginJoin || r.ID != "apv_1" {
		t.Fatalf("joining the open review: %+v", r)
	}
	if _, ok, err := b.Decide(ctx, approvalsvc.ClusterDecision{ID: "apv_1", Key: key("one.test", "s"), Outcome: approvalsvc.OutcomeDeny}, true); err != nil || !ok {
		t.Fatal(ok, err)
	}
	if r := begin(b, key("three.test", "s3"), "apv_5"); r.Kind != approvalsvc.BeginLead {
		t.Fatalf("after a decision: %+v", r)
	}
	// A dead replica's slot: its lease ended (score in the past).
	rdb := redis.NewClient(&redis.Options{Addr: strings.TrimSuffix(strings.TrimPrefix(url, "redis://"), "/0")})
	defer rdb.Close()
	rdb.ZAdd(ctx, "t:slots", redis.Z{Score: float64(time.Now().Add(-time.Second).UnixMilli()), Member: "apv_5"})
	if r := begin(a, key("four.test", "s4"), "apv_6"); r.Kind != approvalsvc.BeginLead {
		t.Fatalf("after a slot's lease ended: %+v", r)
	}
	// Per session: two in s, the third of s is refused though the total
	// has room once the others are decided.
	for _, id := range []string{"apv_2", "apv_6"} {
		k := exec
		if id == "apv_6" {
			k = key("four.test", "s4")
		}
		a.Decide(ctx, approvalsvc.ClusterDecision{ID: id, Key: k, Outcome: approvalsvc.OutcomeDeny}, true)
	}
	a.Attach(boundedReviews{total: 10, perSession: 1})
	if r := begin(a, key("five.test", "s"), "apv_7"); r.Kind != approvalsvc.BeginLead {
		t.Fatalf("first of s: %+v", r)
	}
	if r := begin(a, key("six.test", "s"), "apv_8"); r.Kind != approvalsvc.BeginOverloaded || !strings.Contains(r.Why, "max_pending_per_session") {
		t.Fatalf("second of s with per-session 1: %+v", r)
	}
}

// BenchmarkBeginLeadDecide is a review's two round trips when it opens one
// (Begin with the slot bookkeeping, then Decide freeing it).
func BenchmarkBeginLeadDecide(b *testing.B) {
	c := join(b, startRedis(b), "bench", nil)
	c.Attach(boundedReviews{total: 1000, perSession: 100})
	ctx := context.Background()
	k := approvalsvc.ReviewKey{Session: "s", Env: "e", Host: "alpha.test", Protocol: "http", Port: 80}
	for i := 0; i < b.N; i++ {
		id := fmt.Sprintf("apv_%d", i)
		if r, err := c.Begin(ctx, k, id, time.Now().Add(time.Minute)); err != nil || r.Kind != approvalsvc.BeginLead {
			b.Fatal(r, err)
		}
		if _, ok, err := c.Decide(ctx, approvalsvc.ClusterDecision{ID: id, Key: k, Outcome: approvalsvc.OutcomeDeny}, true); err != nil || !ok {
			b.Fatal(ok, err)
		}
	}
}
