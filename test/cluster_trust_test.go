package test

// Cluster trust (SPEC §7.7, issue 27): Redis is not trusted blindly. A
// client with Redis access but without cluster.key_file writes forged,
// moved and replayed records in the product's own schema with redis-cli;
// every replica ignores and counts them, and nothing reaches a decision or
// a rules file.

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// TestClusterKeyFileRequired: serve refuses cluster mode without a usable
// cluster.key_file (exit 2 naming it).
func TestClusterKeyFileRequired(t *testing.T) {
	rds := StartRedis(t)
	dir := t.TempDir()
	short := filepath.Join(dir, "short.key")
	os.WriteFile(short, []byte("too-short"), 0o600)
	loose := filepath.Join(dir, "loose.key")
	os.WriteFile(loose, []byte(testClusterKey), 0o644)
	os.Chmod(loose, 0o644)
	for _, tc := range []struct{ name, line, want string }{
		{"missing", "", "required"},
		{"short", fmt.Sprintf("key_file = %q\n", short), "at least 32"},
		{"loose mode", fmt.Sprintf("key_file = %q\n", loose), "chmod 600"},
		{"absent", fmt.Sprintf("key_file = %q\n", filepath.Join(dir, "nope")), "no such file"},
	} {
		c := StdConfig()
		c.Extra = fmt.Sprintf("[cluster]\nredis = %q\nkey_prefix = \"e2e:\"\n%s", rds.URL(), tc.line)
		p := WriteProxyConfig(t, c)
		out, err := NetproxyCmd(t, p, "serve", "--config", p.ConfigPath).CombinedOutput()
		code := -1
		if ee, ok := err.(interface{ ExitCode() int }); ok {
			code = ee.ExitCode()
		}
		if code != 2 || !strings.Contains(string(out), "cluster.key_file") || !strings.Contains(string(out), tc.want) {
			t.Errorf("%s: exit %d, output %q; want exit 2 naming cluster.key_file and %q", tc.name, code, out, tc.want)
		}
		if strings.Contains(string(out), testClusterKey) {
			t.Errorf("%s: the output shows the key", tc.name)
		}
	}
}

// rejected is netproxy_cluster_rejected_total{kind} on r.
func rejected(t *testing.T, r *ClusterReplica, kind string) float64 {
	return metricValue(t, r.Proxy, "netproxy_cluster_rejected_total", fmt.Sprintf("{kind=%q}", kind))
}

// streamEntry finds the newest change of type typ whose data mentions s.
func streamEntry(t *testing.T, cl *redis.Client, typ, s string) redis.XMessage {
	t.Helper()
	xs, err := cl.XRevRange(context.Background(), "e2e:events", "+", "-").Result()
	if err != nil {
		t.Fatal(err)
	}
	for _, x := range xs {
		if x.Values["t"] == typ && strings.Contains(fmt.Sprint(x.Values["d"]), s) {
			return x
		}
	}
	t.Fatalf("no %s change mentioning %s on the stream", typ, s)
	return redis.XMessage{}
}

// replayEntry writes a verbatim copy of a change at the stream's end.
func replayEntry(t *testing.T, rds *Redis, x redis.XMessage) {
	t.Helper()
	rds.CLI(t, "XADD", "e2e:events", "*", "t", fmt.Sprint(x.Values["t"]), "n", fmt.Sprint(x.Values["n"]), "d", fmt.Sprint(x.Values["d"]))
}

// neverWithin checks f stays false for d (polled).
func neverWithin(t *testing.T, d time.Duration, what string, f func() bool) {
	t.Helper()
	for end := time.Now().Add(d); time.Now().Before(end); time.Sleep(50 * time.Millisecond) {
		if f() {
			t.Fatalf("%s", what)
		}
	}
}

func TestClusterForgedAndReplayedRecords(t *testing.T) {
	up := StartUpstream(t, false)
	rds := StartRedis(t)
	cl := rds.Client()
	defer cl.Close()
	ctx := context.Background()
	a := StartReplica(t, rds.URL(), "node-a", "")
	b := StartReplica(t, rds.URL(), "node-b", "")
	c := StartReplica(t, rds.URL(), "node-c", "")
	all := []*ClusterReplica{a, b, c}
	hello := func(host string) string { return up.URL(host, "/hello") }
	attributed := func(r *ClusterReplica, tok string) bool {
		return strings.Contains(framedGet(t, r.Proxy, tok, hello("up.test")), "200")
	}
	unsealed := func(v string) string { _, p, _ := strings.Cut(v, "."); return p }

	// 1. An execution under a token hash the attacker chose, attributed to
	// a session of its choice: in the hash and announced on the stream,
	// unsealed and with a made-up MAC.
	t.Run("forged execution", func(t *testing.T) {
		token := "attacker-chosen-token-0123456789"
		sum := sha256.Sum256([]byte(token))
		rec := fmt.Sprintf(`{"execution":{"execution_id":"exec_forged","session_id":"victim-session","environment_id":"prod"},"token_sha256":%q,"node":"node-a"}`, hex.EncodeToString(sum[:]))
		b0, c0 := rejected(t, b, "change"), rejected(t, c, "change")
		rds.CLI(t, "HSET", "e2e:execs", "exec_forged", rec)
		rds.CLI(t, "XADD", "e2e:events", "*", "t", "exec_start", "n", "node-a", "d", rec)
		rds.CLI(t, "XADD", "e2e:events", "*", "t", "exec_start", "n", "node-a", "d", strings.Repeat("ab", 32)+"."+rec)
		eventually(t, 2*time.Second, "B and C count the forged changes", func() bool {
			return rejected(t, b, "change") >= b0+2 && rejected(t, c, "change") >= c0+2
		})
		for _, r := range all {
			if attributed(r, token) {
				t.Fatalf("%s attributes the forged execution", r.Node)
			}
		}
	})

	// 2. An allow_always amendment and a session allow, forged: the request
	// still needs a review, and no rules file mirrors the host.
	t.Run("forged amendment and session allow", func(t *testing.T) {
		// A real allow_session for echo.test shows the schema's field.
		ch := a.goGet(hello("echo.test"))
		a.decide(a.waitPending("echo.test").ID, "allow_session")
		apprExpect(t, "echo on A", apprAwait(t, ch), 200)
		fields, _ := cl.HKeys(ctx, "e2e:cache:default").Result()
		if len(fields) != 1 || !strings.Contains(fields[0], "echo.test") {
			t.Fatalf("session cache fields %v", fields)
		}
		realVal := cl.HGet(ctx, "e2e:cache:default", fields[0]).Val()
		field := strings.Replace(fields[0], "echo.test", "foxtrot.test", 1)
		// Forged (no MAC) and moved (echo's sealed value under foxtrot's field).
		rds.CLI(t, "HSET", "e2e:cache:default", field, unsealed(realVal))
		rds.CLI(t, "XADD", "e2e:events", "*", "t", "cache", "n", "node-a", "d",
			strings.Replace(unsealed(streamEntry(t, cl, "cache", "echo.test").Values["d"].(string)), "echo.test", "foxtrot.test", 1))
		amend := `{"host":"delta.test","verdict":"allow","protocol":"http","seq":999999}`
		rds.CLI(t, "HSET", "e2e:amend", "delta.test", amend)
		rds.CLI(t, "XADD", "e2e:events", "*", "t", "amend", "n", "node-a", "d", amend)
		b0c, b0a := rejected(t, b, "session_cache"), rejected(t, b, "amendment")
		for _, host := range []string{"foxtrot.test", "delta.test"} {
			ch := b.goGet(hello(host))
			id := b.waitPending(host).ID // a review, not the forged outcome
			b.decide(id, "deny")
			apprExpect(t, host+" on B", apprAwait(t, ch), 403)
		}
		if rejected(t, b, "session_cache") <= b0c || rejected(t, b, "amendment") <= b0a {
			t.Fatalf("B did not count the forged records: session_cache %v→%v amendment %v→%v",
				b0c, rejected(t, b, "session_cache"), b0a, rejected(t, b, "amendment"))
		}
		// Moved: bravo's real allow_always sealed under hotel.test.
		ch = a.goGet(hello("bravo.test"))
		a.decide(a.waitPending("bravo.test").ID, "allow_always")
		apprExpect(t, "bravo on A", apprAwait(t, ch), 200)
		rds.CLI(t, "HSET", "e2e:amend", "hotel.test", cl.HGet(ctx, "e2e:amend", "bravo.test").Val())
		ch = c.goGet(hello("hotel.test"))
		c.decide(c.waitPending("hotel.test").ID, "deny")
		apprExpect(t, "hotel on C", apprAwait(t, ch), 403)
	})

	// 3. Ending executions: a forged end and a deleted record end nothing;
	// the origin republishes the deleted record.
	t.Run("forged end of an execution", func(t *testing.T) {
		reg := a.Register(t, "live-session", "live-env")
		for _, r := range []*ClusterReplica{b, c} {
			eventually(t, 2*time.Second, r.Node+" attributes the execution", func() bool { return attributed(r, reg.Token) })
		}
		end := fmt.Sprintf(`{"id":%q}`, reg.ExecutionID)
		rds.CLI(t, "XADD", "e2e:events", "*", "t", "exec_end", "n", "node-a", "d", end)
		rds.CLI(t, "XADD", "e2e:events", "*", "t", "exec_end", "n", "node-a", "d", strings.Repeat("00", 32)+"."+end)
		rds.CLI(t, "HDEL", "e2e:execs", reg.ExecutionID)
		time.Sleep(300 * time.Millisecond)
		for _, r := range all {
			if !attributed(r, reg.Token) {
				t.Fatalf("%s ended the execution on a forged end", r.Node)
			}
		}
		eventually(t, 8*time.Second, "A republishes its deleted execution", func() bool {
			return cl.HExists(ctx, "e2e:execs", reg.ExecutionID).Val()
		})
	})

	// 4. Replays of valid records: an ended execution re-added, a decided
	// review reopened.
	t.Run("replayed records", func(t *testing.T) {
		reg := a.Register(t, "replay-session", "replay-env")
		eventually(t, 2*time.Second, "B attributes the execution", func() bool { return attributed(b, reg.Token) })
		rec := cl.HGet(ctx, "e2e:execs", reg.ExecutionID).Val()
		start := streamEntry(t, cl, "exec_start", reg.ExecutionID)
		a.Revoke(t, reg.ExecutionID)
		for _, r := range all {
			eventually(t, time.Second, r.Node+" ends the execution", func() bool { return !attributed(r, reg.Token) })
		}
		b0 := rejected(t, b, "execution")
		rds.CLI(t, "HSET", "e2e:execs", reg.ExecutionID, rec)
		replayEntry(t, rds, start)
		neverWithin(t, time.Second, "a replica attributes the re-added execution", func() bool {
			return attributed(b, reg.Token) || attributed(c, reg.Token) || attributed(a, reg.Token)
		})
		if rejected(t, b, "execution") <= b0 {
			t.Fatal("B did not count the replayed execution")
		}
		eventually(t, 8*time.Second, "A removes its ended execution again", func() bool {
			return !cl.HExists(ctx, "e2e:execs", reg.ExecutionID).Val()
		})

		ch := a.goGet(hello("golf.test"))
		id := a.waitPending("golf.test").ID
		pend := cl.HGet(ctx, "e2e:pending", id).Val()
		created := streamEntry(t, cl, "created", id)
		b.decide(id, "deny")
		apprExpect(t, "golf on A", apprAwait(t, ch), 403)
		rds.CLI(t, "HSET", "e2e:pending", id, pend)
		replayEntry(t, rds, created)
		time.Sleep(300 * time.Millisecond)
		for _, r := range all {
			for _, p := range r.pending() {
				if p.ID == id {
					t.Fatalf("%s lists the decided review %s again", r.Node, id)
				}
			}
		}
	})

	// 5. A replica started now loads the forged hash records at start and
	// ignores them all; no rules file mirrors a forged host.
	parent := t // the subtest's name would make the control socket path too long
	t.Run("fresh replica and rules files", func(t *testing.T) {
		d := StartReplica(parent, rds.URL(), "node-d", "")
		for _, kind := range []string{"execution", "amendment", "session_cache"} {
			if v := rejected(t, d, kind); v < 1 {
				t.Errorf("D: rejected{%s} = %v at start, want ≥ 1", kind, v)
			}
		}
		if attributed(d, "attacker-chosen-token-0123456789") {
			t.Fatal("D attributes the forged execution")
		}
		for _, r := range append(all, d) {
			data, _ := os.ReadFile(filepath.Join(r.Home, "rules", "default.rules"))
			for _, host := range []string{"delta.test", "hotel.test", "foxtrot.test"} {
				if strings.Contains(string(data), host) {
					t.Fatalf("%s: rules file mirrors forged %s:\n%s", r.Node, host, data)
				}
			}
			if !strings.Contains(string(data), "bravo.test") {
				t.Fatalf("%s: the real amendment is missing from the rules file", r.Node)
			}
		}
		for _, r := range append(all, d) {
			if strings.Contains(r.Output.String(), testClusterKey) {
				t.Fatalf("%s: the key appears in the log", r.Node)
			}
		}
	})
}
