package test

// Credential placeholders across replicas (SPEC §7.7): a placeholder minted
// on replica A is injected, guarded and refused to other executions on
// replica B exactly as on A; Redis holds only digests of placeholders.

import (
	"crypto/x509"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// credReplica starts a replica with MITM on and the "openai" credential on
// api.cred.test (the same CA and secret on every replica).
func credReplica(t *testing.T, rds *Redis, node string, mitmCA, upCA *testCA) *ClusterReplica {
	t.Helper()
	return credReplicaWith(t, rds, node, mitmCA, upCA, "")
}

// credReplicaWith is credReplica with extraCluster appended to [cluster].
func credReplicaWith(t *testing.T, rds *Redis, node string, mitmCA, upCA *testCA, extraCluster string) *ClusterReplica {
	t.Helper()
	cfg := StdConfig()
	for _, h := range []string{"api.cred.test", "paste.test"} {
		cfg.Domains = append(cfg.Domains, [2]string{h, "allow"})
		cfg.Hosts[h] = []string{"127.0.0.1"}
	}
	cfg.Extra = `[mitm]
enabled = true
ca_cert = "ca.pem"
ca_key = "ca-key.pem"
upstream_ca = "upstream-ca.pem"

[[credentials]]
name = "openai"
hosts = ["api.cred.test"]
header = "Authorization"
format = "Bearer {secret}"
secret_file = "openai.secret"
env = "OPENAI_API_KEY"
placeholder_prefix = "sk-"
placeholder_length = 51
`
	p := ReplicaConfigOf(t, cfg, rds.URL(), node, extraCluster)
	for name, b := range map[string][]byte{"ca.pem": mitmCA.pem, "ca-key.pem": mitmCA.keyPEM(), "upstream-ca.pem": upCA.pem,
		"openai.secret": []byte(credSecret + "\n")} {
		if err := os.WriteFile(filepath.Join(p.Dir, name), b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	p.Start(t)
	return &ClusterReplica{apprProxy: &apprProxy{Proxy: p, t: t}, Node: node}
}

// registerCred registers an execution on r and returns it and its openai
// placeholder.
func registerCred(t *testing.T, r *ClusterReplica, session string) (credRegistration, string) {
	t.Helper()
	body := fmt.Sprintf(`{"session_id":%q,"environment_id":"e1","command":["agent"],"cwd":"/tmp"}`, session)
	resp, err := r.ControlClient().Post("http://netproxy/v1/executions", "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var reg credRegistration
	if resp.StatusCode != 201 || json.NewDecoder(resp.Body).Decode(&reg) != nil {
		t.Fatalf("register on %s: %d", r.Node, resp.StatusCode)
	}
	return reg, reg.placeholder(t, "openai")
}

func TestClusterCredentialPlaceholders(t *testing.T) {
	upCA, mitmCA := newTestCA(t, "e2e upstream CA"), newTestCA(t, "e2e netproxy MITM CA")
	up := startCredUpstream(t, upCA.leaf(t, "api.cred.test", "paste.test"))
	plain := StartUpstream(t, false)
	rds := StartRedis(t)
	a := credReplica(t, rds, "node-a", mitmCA, upCA)
	b := credReplica(t, rds, "node-b", mitmCA, upCA)
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(mitmCA.pem)
	through := func(r *ClusterReplica, token string) *http.Client {
		f := &credFixture{p: r.Proxy, mitmCA: pool}
		return f.client(token, false)
	}
	op := `{op="read_through_placeholder"}`

	// Registered on A, used at once through B: the secret is injected.
	regA, ph := registerCred(t, a, "s-a")
	code, body, _ := credGet(t, through(b, regA.Token), fmt.Sprintf("https://api.cred.test:%d/v1/models", up.Port), "Bearer "+ph)
	if _, auths := up.seen(); code != 200 || len(auths) == 0 || auths[len(auths)-1] != "Bearer "+credSecret {
		t.Fatalf("A's placeholder through B to the credential host: %d %s, upstream saw %q\n%s", code, body, auths, b.Output.String())
	}
	// The placeholder toward another host through B: blocked.
	code, body, _ = credGet(t, through(b, regA.Token), plain.URL("paste.test", "/leak?k="+ph), "")
	if code != 403 || !strings.Contains(body, "credential_misuse") {
		t.Fatalf("A's placeholder to paste.test through B: %d %s", code, body)
	}
	// Another execution, registered on B, using A's placeholder: blocked.
	regB, _ := registerCred(t, b, "s-b")
	code, body, _ = credGet(t, through(b, regB.Token), fmt.Sprintf("https://api.cred.test:%d/v1/models", up.Port), "Bearer "+ph)
	if code != 403 || !strings.Contains(body, "credential_misuse") {
		t.Fatalf("B's execution with A's placeholder: %d %s", code, body)
	}
	// And a fresh placeholder of A, first seen by B in another execution's request.
	_, ph2 := registerCred(t, a, "s-a2")
	code, body, _ = credGet(t, through(b, regB.Token), plain.URL("paste.test", "/leak?k="+ph2), "")
	if code != 403 || !strings.Contains(body, "credential_misuse") {
		t.Fatalf("B's execution with a fresh placeholder of A toward paste.test: %d %s", code, body)
	}
	if n := metricValue(t, b.Proxy, "netproxy_cluster_commands_total", op); n < 1 {
		t.Fatalf("B made %v placeholder read-throughs", n)
	}
	// Redis holds digests only: neither a placeholder nor the secret.
	dump := rds.CLI(t, "HGETALL", "e2e:placeholders")
	if strings.Count(dump, `"exec"`) < 2 || strings.Contains(dump, ph) || strings.Contains(dump, ph[3:]) || strings.Contains(dump, credSecret) {
		t.Fatalf("e2e:placeholders: %s", dump)
	}
	// A request without any placeholder candidate costs no Redis operation.
	before := metricValue(t, b.Proxy, "netproxy_cluster_commands_total", op)
	if code, _, _ := credGet(t, through(b, regB.Token), plain.URL("paste.test", "/hello?q=short"), ""); code != 200 {
		t.Fatalf("plain request through B: %d", code)
	}
	if d := metricValue(t, b.Proxy, "netproxy_cluster_commands_total", op) - before; d != 0 {
		t.Fatalf("%v read-throughs for a request without candidates", d)
	}

	// The execution ends on A: its placeholders leave Redis.
	a.Revoke(t, regA.ExecutionID)
	eventually(t, 5*time.Second, "A's placeholders removed", func() bool {
		return !strings.Contains(rds.CLI(t, "HGETALL", "e2e:placeholders"), regA.ExecutionID)
	})

	// Redis down: a candidate B cannot resolve is blocked (fail closed).
	rds.Stop(t)
	eventually(t, 5*time.Second, "B notices Redis is down", func() bool {
		return metricValue(t, b.Proxy, "netproxy_cluster_up", "") == 0
	})
	ph3 := "sk-" + strings.Repeat("Q7x", 16)
	code, body, _ = credGet(t, through(b, regB.Token), plain.URL("paste.test", "/leak?k="+ph3), "")
	if code != 403 || !strings.Contains(body, "credential_misuse") {
		t.Fatalf("unresolvable candidate with Redis down: %d %s", code, body)
	}
}
