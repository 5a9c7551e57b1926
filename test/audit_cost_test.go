package test

import (
	"encoding/json"
	"os"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestAuditKeepAliveRecordsAndMetrics guards issue 29's audit and metrics
// work (no behaviour change allowed): one curl keep-alive connection makes
// n requests through the real netproxy; the audit file then holds, in
// order, n network_decision + n connection_end lines whose ts/started are
// RFC 3339 UTC milliseconds within the run, seq consecutive, and the file
// verifies with `netproxy audit verify`; /metrics counts exactly those
// decisions on the series SPEC §7.4 names.
func TestAuditKeepAliveRecordsAndMetrics(t *testing.T) {
	const n = 20
	up := StartUpstream(t, false)
	p := StartProxy(t, StdConfig())
	before := time.Now().UTC().Truncate(time.Millisecond)
	args := []string{"-x", "http://" + p.HTTP, "-w", "%{http_code}%{num_connects} "}
	for range n {
		args = append(args, "-o", "/dev/null", up.URL("up.test", "/hello?token=secret"))
	}
	res := Curl(t, args...)
	// One connect for the first request, none after: one keep-alive connection.
	if res.Exit != 0 || res.Stdout != "2001 "+strings.Repeat("2000 ", n-1) {
		t.Fatalf("curl: exit %d, %q %s", res.Exit, res.Stdout, res.Stderr)
	}
	if r := Curl(t, "-x", "http://"+p.HTTP, "-o", "/dev/null", "-w", "%{http_code}", up.URL("Denied.TEST", "/")); r.Stdout != "403" {
		t.Fatalf("denied.test: %q %s", r.Stdout, r.Stderr)
	}
	_, text := p.AdminRequest(t, "GET", "/metrics", "")
	for _, want := range []string{
		`netproxy_requests_total{decision="allow",protocol="http",reason="none",source="baseline_policy"} 20`,
		`netproxy_requests_total{decision="deny",protocol="http",reason="denied",source="baseline_policy"} 1`,
		`netproxy_denied_hosts_total{host="denied.test"} 1`,
		`netproxy_decision_seconds_count 21`,
	} {
		if !strings.Contains(text, want+"\n") {
			t.Errorf("/metrics lacks %s", want)
		}
	}
	p.Signal(syscall.SIGTERM)
	p.WaitExit(t, 10*time.Second)
	after := time.Now().UTC()

	raw, err := os.ReadFile(p.Audit)
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSuffix(string(raw), "\n"), "\n")
	if len(lines) != 2*n+1 {
		t.Fatalf("%d audit lines, want %d:\n%s", len(lines), 2*n+1, raw)
	}
	stamp := regexp.MustCompile(`^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$`)
	var events []string
	for i, l := range lines {
		var rec struct {
			TS, Started, Event, Decision, Host string
			Seq                                uint64
			Status                             *int
		}
		if err := json.Unmarshal([]byte(l), &rec); err != nil {
			t.Fatalf("line %d: %v: %s", i+1, err, l)
		}
		if rec.Seq != uint64(i+1) || strings.Contains(l, "token") || strings.Contains(l, "?") {
			t.Fatalf("line %d: seq %d or a query in the line: %s", i+1, rec.Seq, l)
		}
		for _, s := range []string{rec.TS, rec.Started} {
			ts, err := time.Parse(time.RFC3339Nano, s)
			if !stamp.MatchString(s) || err != nil || ts.Before(before) || ts.After(after) {
				t.Fatalf("line %d: time %q is not RFC 3339 UTC ms within the run: %s", i+1, s, l)
			}
		}
		if rec.Started > rec.TS {
			t.Fatalf("line %d: started after ts: %s", i+1, l)
		}
		ev := rec.Event + "/" + rec.Decision + "/" + rec.Host
		if rec.Status != nil {
			ev += "/" + strconv.Itoa(*rec.Status)
		}
		events = append(events, ev)
	}
	want := strings.Repeat("network_decision/allow/up.test connection_end/allow/up.test/200 ", n) + "network_decision/deny/denied.test"
	if got := strings.Join(events, " "); got != want {
		t.Fatalf("events:\n got %s\nwant %s", got, want)
	}
	out, err := exec.Command(netproxyBin, "audit", "verify", p.Audit).CombinedOutput()
	if err != nil || !strings.Contains(string(out), "OK") {
		t.Fatalf("audit verify: %v\n%s", err, out)
	}
}
