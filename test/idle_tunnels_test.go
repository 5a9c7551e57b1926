package test

// Issue 14 item 2: an agent that opens thousands of tunnels and sends
// nothing must cost netproxy little memory per tunnel — no buffer, no
// library state, no grown stack held while a tunnel is idle — over CONNECT
// and over SOCKS5 alike, and every idle tunnel must still carry bytes both
// ways when it wakes up.

import (
	"bytes"
	"fmt"
	"io"
	"net"
	"os"
	"regexp"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"
)

// procPssKiB is the proportional set size of pid in KiB (smaps_rollup).
func procPssKiB(t *testing.T, pid int) int {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/smaps_rollup", pid))
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`(?m)^Pss:\s+(\d+) kB`).FindSubmatch(b)
	if m == nil {
		t.Fatalf("no Pss in /proc/%d/smaps_rollup", pid)
	}
	n, _ := strconv.Atoi(string(m[1]))
	return n
}

// echoHold accepts connections and echoes what they send: an upstream that
// stays silent until spoken to.
func echoHold(t *testing.T) (port int, count func() int) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var conns []net.Conn
	t.Cleanup(func() {
		ln.Close()
		mu.Lock()
		for _, c := range conns {
			c.Close()
		}
		mu.Unlock()
	})
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
			go func() {
				io.Copy(c, c)
				c.Close() // the client's end ends this connection, as servers do
			}()
		}
	}()
	return ln.Addr().(*net.TCPAddr).Port, func() int {
		mu.Lock()
		defer mu.Unlock()
		return len(conns)
	}
}

func TestIdleTunnelsCostFewKiB(t *testing.T) {
	const n = 2000
	// Targets of issue 14 at 5 000 tunnels are 8 KiB (CONNECT) and 10 KiB
	// (SOCKS5). Parked, an idle tunnel holds no goroutine and costs about
	// 3.5 (CONNECT) and 4.8 KiB (SOCKS5); with two goroutines each it was
	// 8.5 and 9.5; before that, 10.5 and 22 KiB (the SOCKS5 library's
	// reader, server and handler stack stayed with the tunnel).
	limits := map[string]float64{"connect": 6, "socks5": 7}
	port, upstreamConns := echoHold(t)
	for _, kind := range []string{"connect", "socks5"} {
		t.Run(kind, func(t *testing.T) {
			// A proxy of its own: memory freed by the other kind's run
			// would otherwise be reused and hide this one's cost.
			p := StartProxy(t, StdConfig())
			pid := p.Cmd.Process.Pid
			time.Sleep(500 * time.Millisecond)
			before := procPssKiB(t, pid)
			held := upstreamConns()
			clients := make([]net.Conn, 0, n)
			defer func() {
				for _, c := range clients {
					c.Close()
				}
			}()
			for i := 0; i < n; i++ {
				var c net.Conn
				if kind == "connect" {
					var err error
					c, err = net.Dial("tcp", p.HTTP)
					if err != nil {
						t.Fatal(err)
					}
					fmt.Fprintf(c, "CONNECT up.test:%d HTTP/1.1\r\nHost: up.test:%d\r\n\r\n", port, port)
					head := make([]byte, len("HTTP/1.1 200 Connection established\r\n\r\n"))
					c.SetReadDeadline(time.Now().Add(10 * time.Second))
					if _, err := io.ReadFull(c, head); err != nil || !bytes.HasPrefix(head, []byte("HTTP/1.1 200")) {
						c.Close()
						t.Fatalf("tunnel %d: %q %v", i, head, err)
					}
					c.SetReadDeadline(time.Time{})
				} else {
					rep, sc := SocksConnect(t, p.SOCKS, nil, 0x01, "up.test", port)
					if rep != 0 {
						t.Fatalf("tunnel %d: SOCKS5 reply %d", i, rep)
					}
					c = sc
				}
				clients = append(clients, c)
			}
			waitFor(t, 10*time.Second, func() bool { return upstreamConns()-held == n }, "every tunnel reaches the upstream")
			time.Sleep(3 * time.Second) // the set-up garbage settles
			after := procPssKiB(t, pid)
			perTunnel := float64(after-before) / n
			t.Logf("%d idle %s tunnels: Pss %d → %d KiB, %.2f KiB per tunnel", n, kind, before, after, perTunnel)
			if perTunnel > limits[kind] {
				t.Errorf("an idle %s tunnel costs %.2f KiB, want ≤ %.0f", kind, perTunnel, limits[kind])
			}
			listener := map[string]string{"connect": "http", "socks5": "socks5"}[kind]
			labels := `{listener="` + listener + `"}`
			if v := metricValue(t, p, "netproxy_connections_active", labels); v != n {
				t.Errorf("connections_active%s = %v with %d tunnels open, want %d", labels, v, n, n)
			}
			// Every tunnel still works: a few, spread over the set, echo.
			for i := 0; i < n; i += n / 20 {
				c := clients[i]
				msg := []byte(fmt.Sprintf("ping %d\n", i))
				c.SetDeadline(time.Now().Add(5 * time.Second))
				if _, err := c.Write(msg); err != nil {
					t.Fatalf("tunnel %d after idling: %v", i, err)
				}
				got := make([]byte, len(msg))
				if _, err := io.ReadFull(c, got); err != nil || !bytes.Equal(got, msg) {
					t.Fatalf("tunnel %d after idling: %q %v", i, got, err)
				}
			}
			// Each tunnel holds its connection slot until it ends, then
			// gives it back.
			for _, c := range clients {
				c.Close()
			}
			clients = nil
			waitFor(t, 10*time.Second, func() bool {
				return metricValue(t, p, "netproxy_connections_active", labels) == 0
			}, "every slot released after the clients closed")
		})
	}
}

// TestPolicyChangesReachParkedTunnels: an agent's tunnel that has gone
// quiet (its directions parked, no goroutine waiting on it) must still be
// closed by a reload that denies its host within 1 s, and by the kill
// switch; a tunnel to a host still allowed keeps working after it wakes.
func TestPolicyChangesReachParkedTunnels(t *testing.T) {
	up, p := keepGoneProxy(t)
	// Used once, then quiet: parked after the quiet spell.
	gc, _ := framedTunnel(t, p, "https", nil, "gone.test", up.Port)
	gs, _ := framedTunnel(t, p, "socks5", nil, "gone.test", up.Port)
	kc, kbr := framedTunnel(t, p, "https", nil, "keep.test", up.Port)
	// Never used: parked from the start.
	rep, fresh := SocksConnect(t, p.SOCKS, nil, 0x01, "gone.test", up.Port)
	if rep != 0 {
		t.Fatalf("SOCKS5 gone.test: reply %d", rep)
	}
	time.Sleep(3500 * time.Millisecond) // > busy window + park delay

	rewriteDomains(t, p, [2]string{"gone.test", "deny"})
	start := time.Now()
	if code, body := p.AdminRequest(t, "POST", "/api/reload", p.Token); code != 200 {
		t.Fatalf("reload: %d %s", code, body)
	}
	for _, c := range []net.Conn{gc, gs, fresh} {
		if !waitClosed(c, time.Second-time.Since(start)) {
			t.Fatal("a parked tunnel to a now-denied host is still open 1 s after the reload")
		}
	}
	if !stillServes(kc, kbr) {
		t.Fatal("a parked tunnel to a host still allowed does not work after the reload")
	}
	waitFor(t, 5*time.Second, func() bool {
		return metricValue(t, p, "netproxy_connections_active", `{listener="socks5"}`) == 0
	}, "the closed SOCKS5 tunnels' slots released")

	// The kill switch closes a parked tunnel too.
	time.Sleep(3500 * time.Millisecond)
	cfg, err := os.ReadFile(p.ConfigPath)
	if err != nil {
		t.Fatal(err)
	}
	setNetworkEnabled(t, p, cfg, false)
	p.Signal(syscall.SIGHUP)
	if !waitClosed(kc, 2*time.Second) {
		t.Fatal("a parked tunnel survived the kill switch")
	}
	// Every tunnel closed from outside has finished its own bookkeeping:
	// a shutdown does not wait for any of them.
	p.Signal(syscall.SIGTERM)
	p.WaitExit(t, 3*time.Second)
}
