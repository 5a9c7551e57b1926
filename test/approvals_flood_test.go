package test

// Issue 11 item 6: a flood of requests to fresh public IP:port pairs, each
// hanging up after 150 ms, must not pile up pending reviews (SPEC §5:
// approvals.max_pending, approvals.max_pending_per_session →
// approvals_overloaded).

import (
	"bufio"
	"fmt"
	"net"
	"os"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// procRSSKiB is VmRSS of pid in KiB.
func procRSSKiB(t *testing.T, pid int) int {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`VmRSS:\s+(\d+) kB`).FindSubmatch(b)
	if m == nil {
		t.Fatalf("no VmRSS in /proc/%d/status", pid)
	}
	n, _ := strconv.Atoi(string(m[1]))
	return n
}

func TestApprovalsFloodIsBounded(t *testing.T) {
	p := apprStart(t, "[approvals]\nenabled = true\nreviewer = \"user\"\npolicy = \"on-request\"\ntimeout = \"60s\"\n", "", "")
	up := StartUpstream(t, false)
	pid := p.Cmd.Process.Pid
	rss0 := procRSSKiB(t, pid)
	g0 := metricValue(t, p.Proxy, "go_goroutines", "")

	// 100 clients, each: a request to a fresh public address, hang up
	// after 150 ms, again — for 4 seconds.
	const clients, floodFor = 100, 4 * time.Second
	var sent, overloaded atomic.Int64
	var maxPending atomic.Int64
	stop := time.Now().Add(floodFor)
	var wg sync.WaitGroup
	for c := 0; c < clients; c++ {
		wg.Add(1)
		go func(c int) {
			defer wg.Done()
			for i := 0; time.Now().Before(stop); i++ {
				n := c*10000 + i
				target := fmt.Sprintf("11.%d.%d.%d:%d", (n>>16)&255, (n>>8)&255, n&255, 1024+n%50000)
				conn, err := net.DialTimeout("tcp", p.HTTP, 2*time.Second)
				if err != nil {
					continue
				}
				fmt.Fprintf(conn, "GET http://%s/ HTTP/1.1\r\nHost: %s\r\n\r\n", target, target)
				sent.Add(1)
				conn.SetReadDeadline(time.Now().Add(150 * time.Millisecond))
				if line, err := bufio.NewReader(conn).ReadString('\n'); err == nil && strings.Contains(line, "403") {
					overloaded.Add(1)
					time.Sleep(150 * time.Millisecond)
				}
				conn.Close()
			}
		}(c)
	}
	// Watch the pending list while the flood runs.
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	watch := time.NewTicker(250 * time.Millisecond)
	defer watch.Stop()
	for flooding := true; flooding; {
		select {
		case <-done:
			flooding = false
		case <-watch.C:
			if n := int64(len(p.pending())); n > maxPending.Load() {
				maxPending.Store(n)
			}
		}
	}
	// Let the proxy notice the hang-ups.
	time.Sleep(time.Second)
	pending := len(p.pending())
	rss := procRSSKiB(t, pid)
	g := metricValue(t, p.Proxy, "go_goroutines", "")
	overloadedMetric := metricValue(t, p.Proxy, "netproxy_requests_total", `{decision="deny",protocol="http",reason="approvals_overloaded",source="decider"}`)
	t.Logf("sent %d requests; %d answered 403 at once; pending max %d, after %d; RSS %d → %d KiB; goroutines %.0f → %.0f; requests_total{approvals_overloaded} %.0f",
		sent.Load(), overloaded.Load(), maxPending.Load(), pending, rss0, rss, g0, g, overloadedMetric)

	if maxPending.Load() > 100 || pending > 100 {
		t.Fatalf("pending reviews reached %d (after: %d), want ≤ 100 (approvals.max_pending_per_session)", maxPending.Load(), pending)
	}
	if pending != 100 {
		t.Fatalf("pending after the flood = %d, want exactly the session bound 100 (abandoned reviews keep their slot)", pending)
	}
	if g > g0+400 {
		t.Fatalf("goroutines %.0f → %.0f: not bounded", g0, g)
	}
	if rss > rss0+64*1024 {
		t.Fatalf("RSS %d → %d KiB: grew by more than 64 MiB", rss0, rss)
	}
	if overloadedMetric < 1 {
		t.Fatal("no request counted with reason approvals_overloaded")
	}
	auditB, _ := os.ReadFile(p.Audit)
	if !strings.Contains(string(auditB), `"reason":"approvals_overloaded"`) {
		t.Fatal("no approvals_overloaded decision in the audit log")
	}

	// A request of the flooded (default) session is refused at once, with
	// the SPEC's reason, decision and source.
	r := Curl(t, "-sS", "-m", "5", "-x", "http://"+p.HTTP, "-o", "-", "-w", "\n%{http_code}", "http://11.255.255.1:4444/")
	if !strings.HasSuffix(r.Stdout, "403") || !strings.Contains(r.Stdout, `"reason":"approvals_overloaded"`) ||
		!strings.Contains(r.Stdout, `"decision":"deny"`) || !strings.Contains(r.Stdout, `"source":"decider"`) {
		t.Fatalf("flooded session: %+v", r)
	}

	// A legitimate review in another session still reaches the reviewer.
	reg := p.Register(t, "legit", "env-legit")
	conn, err := net.Dial("tcp", p.HTTP)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	conn.Write(Frame(reg.Token))
	u := up.URL("alpha.test", "/hello")
	fmt.Fprintf(conn, "GET %s HTTP/1.1\r\nHost: alpha.test:%d\r\nConnection: close\r\n\r\n", u, up.Port)
	a := p.waitPending("alpha.test")
	p.decide(a.ID, "allow_once")
	conn.SetReadDeadline(time.Now().Add(10 * time.Second))
	status, _ := bufio.NewReader(conn).ReadString('\n')
	if !strings.Contains(status, "200") {
		t.Fatalf("legitimate request in another session: %q", status)
	}
}
