package test

import (
	"bufio"
	"fmt"
	"net"
	"strings"
	"testing"
	"time"
)

// framedConnect opens a framed CONNECT to host:port through addr and
// returns the status line ("" when the connection was closed or reset).
func framedConnect(t *testing.T, addr, token, host string, port int) string {
	t.Helper()
	conn, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	conn.Write(Frame(token))
	fmt.Fprintf(conn, "CONNECT %s:%d HTTP/1.1\r\nHost: %s:%d\r\n\r\n", host, port, host, port)
	conn.SetReadDeadline(time.Now().Add(10 * time.Second))
	line, _ := bufio.NewReader(conn).ReadString('\n')
	return strings.TrimSpace(line)
}

// SPEC §7.7: POST /v1/executions on A, then at once a framed CONNECT
// through C is attributed (C reads the token through from Redis instead of
// waiting for the change stream); a token known to C costs no Redis
// operation; with Redis down an unknown token is refused.
func TestClusterTokenReadThrough(t *testing.T) {
	up := StartUpstream(t, false)
	rds := StartRedis(t)
	a := StartReplica(t, rds.URL(), "node-a", "")
	c := StartReplica(t, rds.URL(), "node-c", "")
	op := `{op="read_through_token"}`
	before := metricValue(t, c.Proxy, "netproxy_cluster_commands_total", op)
	var regs []Registration
	var lat []time.Duration
	// The stream usually wins the race; run until the read-through was
	// needed a few times (every round must be attributed).
	for i := 0; i < 400 && metricValue(t, c.Proxy, "netproxy_cluster_commands_total", op)-before < 3; i++ {
		reg := a.Register(t, fmt.Sprintf("rt-%d", i), "rt-env")
		start := time.Now()
		if s := framedConnect(t, c.HTTP, reg.Token, "up.test", up.Port); !strings.Contains(s, " 200") {
			t.Fatalf("round %d: framed CONNECT through C right after registering on A: %q", i, s)
		}
		lat = append(lat, time.Since(start))
		regs = append(regs, reg)
	}
	misses := metricValue(t, c.Proxy, "netproxy_cluster_commands_total", op) - before
	t.Logf("%d CONNECTs right after registration on another replica: %v read through Redis; CONNECT answered p50 %v p99 %v",
		len(regs), misses, percentile(lat, .5), percentile(lat, .99))
	if misses < 1 {
		t.Fatal("no connection needed the read-through: the race this tests did not happen")
	}
	// Held tokens: no Redis operation.
	held := metricValue(t, c.Proxy, "netproxy_cluster_commands_total", op)
	for _, reg := range regs[:min(10, len(regs))] {
		if s := framedConnect(t, c.HTTP, reg.Token, "up.test", up.Port); !strings.Contains(s, " 200") {
			t.Fatalf("held token: %q", s)
		}
	}
	if d := metricValue(t, c.Proxy, "netproxy_cluster_commands_total", op) - held; d != 0 {
		t.Fatalf("%v read-throughs for tokens C holds, want 0", d)
	}
	// Redis down: a token C does not hold is refused (fail closed).
	rds.Stop(t)
	eventually(t, 5*time.Second, "C notices Redis is down", func() bool {
		return metricValue(t, c.Proxy, "netproxy_cluster_up", "") == 0
	})
	if s := framedConnect(t, c.HTTP, "never-registered-token-0123456789", "up.test", up.Port); strings.Contains(s, " 200") {
		t.Fatalf("unknown token with Redis down: %q", s)
	}
}
