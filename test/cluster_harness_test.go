package test

// Cluster-mode harness: a real redis-server (AOF on) on a free port and
// several real `netproxy serve` replicas joined to it.

import (
	"cmp"
	"context"
	"crypto/tls"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// Redis is a running redis-server with append-only persistence.
type Redis struct {
	Port int
	Dir  string
	// Args are extra redis-server arguments (--requirepass …); with TLS
	// set, Port is the TLS port and the plain port is off.
	Args []string
	// User, Password and TLS are what the test's own client (Client, CLI)
	// authenticates with.
	User, Password string
	TLS            *tls.Config
	cmd            *exec.Cmd
	done           chan struct{}
	out            *SyncBuffer
}

// StartRedis starts redis-server (installed by scripts/install-test-deps.sh)
// on a free loopback port; it is killed when the test ends.
func StartRedis(t testing.TB) *Redis {
	t.Helper()
	return StartRedisWith(t, &Redis{})
}

// StartRedisWith starts r (its Args, Password, TLS set by the caller) on a
// free loopback port like StartRedis.
func StartRedisWith(t testing.TB, r *Redis) *Redis {
	t.Helper()
	if _, err := exec.LookPath("redis-server"); err != nil {
		t.Fatal("redis-server is required (scripts/install-test-deps.sh installs the Debian package redis-server)")
	}
	r.Port, r.Dir = FreePort(t), t.TempDir()
	r.Start(t)
	t.Cleanup(func() { r.Stop(t) })
	return r
}

// URL is the redis:// URL of the server.
func (r *Redis) URL() string { return fmt.Sprintf("redis://127.0.0.1:%d/0", r.Port) }

// Start (re)starts the server on the same port and folder (its AOF).
func (r *Redis) Start(t testing.TB) {
	t.Helper()
	r.out = &SyncBuffer{}
	ports := []string{"--port", fmt.Sprint(r.Port)}
	if r.TLS != nil {
		ports = []string{"--port", "0", "--tls-port", fmt.Sprint(r.Port)}
	}
	r.cmd = exec.Command("redis-server", append(ports, append([]string{"--bind", "127.0.0.1", "--dir", r.Dir,
		"--appendonly", "yes", "--appendfsync", "everysec", "--save", "", "--daemonize", "no", "--protected-mode", "no",
		"--logfile", ""}, r.Args...)...)...)
	r.cmd.Stdout, r.cmd.Stderr = r.out, r.out
	r.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := r.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	r.done = make(chan struct{})
	go func(c *exec.Cmd, d chan struct{}) { c.Wait(); close(d) }(r.cmd, r.done)
	c := r.Client()
	defer c.Close()
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
		err := c.Ping(ctx).Err()
		cancel()
		if err == nil {
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatalf("redis-server not answering within 10s\n%s", r.out.String())
}

// Stop stops the server as an operator's restart does: SIGTERM, so Redis
// writes its AOF before it exits (a kill could lose acknowledged writes:
// under disk load appendfsync everysec postpones the AOF write past the
// reply), then SIGKILL if it has not exited within 10 s.
func (r *Redis) Stop(t testing.TB) {
	select {
	case <-r.done:
		return
	default:
	}
	r.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-r.done:
	case <-time.After(10 * time.Second):
		r.cmd.Process.Kill()
		<-r.done
	}
}

// Client is a go-redis client of the server (the test's own view).
func (r *Redis) Client() *redis.Client {
	return redis.NewClient(&redis.Options{Addr: fmt.Sprintf("127.0.0.1:%d", r.Port), Username: r.User, Password: r.Password, TLSConfig: r.TLS})
}

// clusterHosts are the unlisted names the cluster tests review.
var clusterHosts = []string{"alpha.test", "bravo.test", "charlie.test", "delta.test", "echo.test", "foxtrot.test", "golf.test", "hotel.test", "india.test"}

// ClusterReplica is one replica of a test cluster.
type ClusterReplica struct {
	*apprProxy
	Node string
}

// StartReplica starts one `netproxy serve` joined to redisURL with the
// user reviewer and extraApprovals appended to [approvals] (hooks).
func StartReplica(t *testing.T, redisURL, node, extraApprovals string) *ClusterReplica {
	t.Helper()
	p := ReplicaConfig(t, redisURL, node, extraApprovals, "")
	p.Start(t)
	return &ClusterReplica{apprProxy: &apprProxy{Proxy: p, t: t}, Node: node}
}

// ReplicaConfig writes the config of a replica like StartReplica's with
// extraCluster appended to [cluster], without starting it.
func ReplicaConfig(t testing.TB, redisURL, node, extraApprovals, extraCluster string) *Proxy {
	t.Helper()
	c := StdConfig()
	for _, h := range clusterHosts {
		c.Hosts[h] = []string{"127.0.0.1"}
	}
	c.Approvals = true
	c.Extra = extraApprovals
	return ReplicaConfigOf(t, c, redisURL, node, extraCluster)
}

// ReplicaConfigOf writes c joined to redisURL as node (the shared key,
// prefix "e2e:", extraCluster appended to [cluster]).
func ReplicaConfigOf(t testing.TB, c ProxyConfig, redisURL, node, extraCluster string) *Proxy {
	t.Helper()
	c.Extra += fmt.Sprintf("\n[cluster]\nredis = %q\nnode_id = %q\nkey_prefix = \"e2e:\"\nkey_file = %q\n%s", redisURL, node, ClusterKeyFile(t), extraCluster)
	return WriteProxyConfig(t, c)
}

// testClusterKey is the key every test replica shares (cluster.key_file).
const testClusterKey = "e2e-cluster-key-0123456789abcdef-0123456789abcdef"

// ClusterKeyFile writes the shared cluster key into a fresh file (mode
// 0600) and returns its path.
func ClusterKeyFile(t testing.TB) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "cluster.key")
	if err := os.WriteFile(p, []byte(testClusterKey), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// RedisCLI runs redis-cli against r (the attacker's tool: Redis access
// without the cluster key) and returns its trimmed output.
func (r *Redis) CLI(t testing.TB, args ...string) string {
	t.Helper()
	base := []string{"-p", fmt.Sprint(r.Port), "--raw"}
	if r.Password != "" {
		base = append(base, "--no-auth-warning", "--user", cmp.Or(r.User, "default"), "--pass", r.Password)
	}
	out, err := exec.Command("redis-cli", append(base, args...)...).CombinedOutput()
	if err != nil {
		t.Fatalf("redis-cli %v: %v\n%s", args, err, out)
	}
	return strings.TrimSpace(string(out))
}

// countingHook writes a hook that appends a line to a file per call and
// abstains (the user reviews next).
func countingHook(t *testing.T) (toml, countFile string) {
	t.Helper()
	dir := t.TempDir()
	countFile = filepath.Join(dir, "calls")
	hook := filepath.Join(dir, "hook.sh")
	script := fmt.Sprintf("#!/bin/sh\ncat >/dev/null\necho call >> %q\necho '{\"decision\":\"none\"}'\n", countFile)
	if err := os.WriteFile(hook, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	return fmt.Sprintf("[[approvals.hooks]]\ncommand = [%q]\ntimeout = \"5s\"\n", hook), countFile
}

func countLines(path string) int {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0
	}
	return strings.Count(string(b), "\n")
}

// eventually polls f every 10 ms until it is true or within passes; it
// returns how long it took.
func eventually(t *testing.T, within time.Duration, what string, f func() bool) time.Duration {
	t.Helper()
	start := time.Now()
	for time.Since(start) < within {
		if f() {
			return time.Since(start)
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Fatalf("%s: not within %v", what, within)
	return 0
}
