package test

// Exec approvals and the pending bounds across replicas (SPEC §7.7 third
// bullet, §5 "Pending reviews are bounded"): an exec approval asked on one
// replica is listed, decided and answered from any other; its allow_always
// amendment reaches every replica's rules file (sealed like every record);
// approvals.max_pending counts the reviews of the whole cluster.

import (
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// execAsk posts an exec approval request to p's control socket and
// answers when it is decided.
func execAsk(p *Proxy, body string) <-chan apprReply {
	ch := make(chan apprReply, 1)
	go func() {
		resp, err := p.ControlClient().Post("http://control/v1/approvals", "application/json", strings.NewReader(body))
		if err != nil {
			ch <- apprReply{err: err}
			return
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		ch <- apprReply{status: resp.StatusCode, body: string(b)}
	}()
	return ch
}

// waitExecPending waits until r lists a pending exec approval with cwd and
// returns its id.
func waitExecPending(t *testing.T, r *ClusterReplica, cwd string) string {
	t.Helper()
	var id string
	eventually(t, 10*time.Second, r.Node+" lists the exec approval", func() bool {
		_, b := r.api("GET", "/api/approvals?status=pending", "")
		var out struct {
			Approvals []struct{ ID, Kind, Cwd string }
		}
		json.Unmarshal(b, &out)
		for _, a := range out.Approvals {
			if a.Kind == "exec" && a.Cwd == cwd {
				id = a.ID
				return true
			}
		}
		return false
	})
	return id
}

func rulesFile(r *ClusterReplica) string {
	b, _ := os.ReadFile(filepath.Join(r.Home, "rules", "default.rules"))
	return string(b)
}

func TestClusterExecApprovals(t *testing.T) {
	rds := StartRedis(t)
	a := StartReplica(t, rds.URL(), "node-a", "")
	b := StartReplica(t, rds.URL(), "node-b", "")
	c := StartReplica(t, rds.URL(), "node-c", "")
	all := []*ClusterReplica{a, b, c}
	ask := func(cwd string, amend ...string) string {
		am, _ := json.Marshal(amend)
		return fmt.Sprintf(`{"session_id":"sx","environment_id":"e1","command":["git","push"],"cwd":%q,"sandbox_permissions":"require_escalated","reason":"network needed","proposed_amendment":%s}`, cwd, am)
	}

	// Asked on A (execwrap's control socket), listed on B and C, decided on
	// B: A's waiter gets B's decision.
	ch := execAsk(a.Proxy, ask("/work", "git", "push"))
	id := waitExecPending(t, b, "/work")
	if other := waitExecPending(t, c, "/work"); other != id {
		t.Fatalf("B lists %s, C lists %s", id, other)
	}
	b.decide(id, "allow_always")
	r := apprAwait(t, ch)
	if r.status != 200 || !strings.Contains(r.body, `"approved":true`) || !strings.Contains(r.body, `"decision":"allow_always"`) {
		t.Fatalf("A's exec approval after B's allow_always: %d %s", r.status, r.body)
	}
	// The amendment (a prefix rule) is in every replica's rules file.
	const rule = `prefix_rule(pattern=["git", "push"], decision="allow")`
	took := eventually(t, 2*time.Second, "the exec amendment on every replica", func() bool {
		for _, x := range all {
			if !strings.Contains(rulesFile(x), rule) {
				return false
			}
		}
		return true
	})
	t.Logf("exec amendment on every replica after %v", took)
	// The session-wide outcome holds on C without a new review.
	if r := apprAwait(t, execAsk(c.Proxy, ask("/work", "git", "push"))); r.status != 200 || !strings.Contains(r.body, `"reviewer":"cache"`) {
		t.Fatalf("the same exec approval on C: %d %s", r.status, r.body)
	}

	// A denial taken on A reaches the waiter on C.
	ch = execAsk(c.Proxy, ask("/elsewhere"))
	id = waitExecPending(t, a, "/elsewhere")
	a.decide(id, "deny")
	if r := apprAwait(t, ch); r.status != 200 || !strings.Contains(r.body, `"approved":false`) || !strings.Contains(r.body, `"decision":"deny"`) {
		t.Fatalf("C's exec approval after A's deny: %d %s", r.status, r.body)
	}
	for _, x := range all {
		for _, p := range x.pending() {
			t.Fatalf("%s still lists %+v", x.Node, p)
		}
	}

	// Redis without the key: a forged exec amendment (the product's own
	// schema, a MAC that does not verify) is refused and counted, written
	// to the hash and announced on the stream alike.
	forged := `{"tokens":["rm","-rf"],"seq":999999}`
	field := fmt.Sprintf("%x", sha256.Sum256([]byte(`["rm","-rf"]`)))
	rds.CLI(t, "HSET", "e2e:xamend", field, strings.Repeat("0", 64)+"."+forged)
	rds.CLI(t, "XADD", "e2e:events", "*", "t", "exec_amend", "n", "node-a", "d", strings.Repeat("0", 64)+"."+forged)
	eventually(t, 5*time.Second, "the forged exec amendment counted", func() bool {
		return metricValue(t, b.Proxy, "netproxy_cluster_rejected_total", `{kind="change"}`) >= 1
	})
	// A replica started now loads the hash: it refuses the record too.
	d := StartReplica(t, rds.URL(), "node-d", "")
	if n := metricValue(t, d.Proxy, "netproxy_cluster_rejected_total", `{kind="amendment"}`); n < 1 {
		t.Fatalf("node-d rejected %v amendments at load", n)
	}
	if !strings.Contains(rulesFile(d), rule) {
		t.Fatalf("node-d lacks the sealed exec amendment:\n%s", rulesFile(d))
	}
	for _, x := range append(all, d) {
		if strings.Contains(rulesFile(x), `"rm"`) {
			t.Fatalf("%s applied the forged exec amendment:\n%s", x.Node, rulesFile(x))
		}
	}
}

// TestClusterMaxPending: approvals.max_pending = 2 across three replicas:
// two reviews open on A and B, a third on C is denied at once with
// approvals_overloaded; once one is decided C may open one. Redis down: a
// new review is refused with approvals_unavailable (the cluster cannot be
// counted; fail closed).
func TestClusterMaxPending(t *testing.T) {
	up := StartUpstream(t, false)
	rds := StartRedis(t)
	bounds := "max_pending = 2\nmax_pending_per_session = 2\n"
	a := StartReplica(t, rds.URL(), "node-a", bounds)
	b := StartReplica(t, rds.URL(), "node-b", bounds)
	c := StartReplica(t, rds.URL(), "node-c", bounds)

	chA := a.goGet(up.URL("alpha.test", "/"))
	idA := c.waitPending("alpha.test").ID
	chB := b.goGet(up.URL("bravo.test", "/"))
	c.waitPending("bravo.test")

	start := time.Now()
	r := c.get(up.URL("charlie.test", "/"))
	if r.status != 403 || !strings.Contains(r.body, "approvals_overloaded") || time.Since(start) > 3*time.Second {
		t.Fatalf("third review on C: %d after %v %q, want 403 approvals_overloaded at once", r.status, time.Since(start), r.body)
	}
	// An exec approval is a review too.
	body := `{"session_id":"s9","environment_id":"e1","command":["make"],"cwd":"/w"}`
	if r := apprAwait(t, execAsk(c.Proxy, body)); !strings.Contains(r.body, "approvals_overloaded") {
		t.Fatalf("exec approval past max_pending: %d %s", r.status, r.body)
	}
	// Joining an open review adds none: the same request on C waits.
	chJoin := c.goGet(up.URL("alpha.test", "/"))
	time.Sleep(300 * time.Millisecond)
	b.decide(idA, "allow_once")
	apprExpect(t, "A's alpha", apprAwait(t, chA), 200)
	apprExpect(t, "C joining alpha", apprAwait(t, chJoin), 200)
	// A slot is free again: C opens a review.
	chC := c.goGet(up.URL("charlie.test", "/"))
	idC := a.waitPending("charlie.test").ID
	a.decide(idC, "deny")
	apprExpect(t, "C's charlie", apprAwait(t, chC), 403)
	a.decide(b.waitPending("bravo.test").ID, "deny")
	apprExpect(t, "B's bravo", apprAwait(t, chB), 403)

	// Redis down: fail closed.
	rds.Stop(t)
	eventually(t, 5*time.Second, "C notices Redis is down", func() bool {
		return metricValue(t, c.Proxy, "netproxy_cluster_up", "") == 0
	})
	if r := c.get(up.URL("delta.test", "/")); r.status != 403 || !strings.Contains(r.body, "approvals_unavailable") {
		t.Fatalf("a new review with Redis down: %d %q", r.status, r.body)
	}
}
