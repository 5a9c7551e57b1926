package audit

import (
	"net/netip"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/netproxy/netproxy/hostpolicy"
	"github.com/netproxy/netproxy/internal/observe"
)

// goldenFile holds lines written by the writer before issue 29's encoder
// work (commit 30693fa): the file format must not change by one byte.
const goldenFile = "testdata/golden.jsonl"

// writeGolden writes every kind of line, with escapes, zones, rules,
// shadows, times before 1970 and after 9999, through the real writer.
func writeGolden(t *testing.T, path string) {
	w, err := Open(path, 64, nil)
	if err != nil {
		t.Fatal(err)
	}
	base := time.Date(2026, 12, 2, 5, 15, 44, 123456789, time.FixedZone("x", 3600))
	rule := 3
	dec := observe.DecisionEvent{
		Time: base.Add(30 * time.Microsecond), Started: base,
		Request: hostpolicy.Request{Host: "Up.Test:8080/path?token=x", Port: 8080, Protocol: hostpolicy.ProtoHTTP, Method: "GET",
			Client: "127.0.0.1:40000", ExecutionID: "exec-1", SessionID: "s\"1", EnvironmentID: "e\u20281"},
		Decision: hostpolicy.Decision{Verdict: hostpolicy.Allow, Source: hostpolicy.SourceBaseline, Host: "up.test", Port: 8080,
			Pattern: "*.test", Rule: 4, Addrs: []netip.Addr{netip.MustParseAddr("127.0.0.1"), netip.MustParseAddr("fe80::1%eth0")},
			Rationale: "ctl \x01 bad \xff tab \t", Shadow: &hostpolicy.ShadowDecision{Verdict: hostpolicy.Deny, Reason: hostpolicy.ReasonDenied, Pattern: "up.test"}},
	}
	w.ObserveDecision(dec)
	deny := dec
	deny.Time, deny.Started = time.Date(1969, 12, 31, 23, 59, 59, 999999999, time.UTC), time.Time{}
	deny.Decision = hostpolicy.Decision{Verdict: hostpolicy.Deny, Reason: hostpolicy.ReasonDenied, Source: hostpolicy.SourceBaseline, Level: "session"}
	w.ObserveDecision(deny) // ts goes back: the writer keeps the previous line's
	w.ConnectionEnd(observe.ConnectionEndEvent{Time: base.Add(time.Second), Started: base, Protocol: hostpolicy.ProtoHTTP, Host: "up.test",
		Port: 8080, Method: "GET", Client: "127.0.0.1:40000", BytesOut: 12, BytesIn: 3456, Status: 200, Close: "keepalive"})
	w.ConnectionEnd(observe.ConnectionEndEvent{Time: base.Add(2 * time.Second), Started: base, Protocol: hostpolicy.ProtoHTTPS, Host: "t.test",
		Port: 443, Method: "CONNECT", ExecutionID: "exec-2", BytesIn: 1, Close: "client_closed"})
	w.ConnectionClosed(observe.ConnectionClosedEvent{Time: base.Add(3 * time.Second), Reason: "proxy_disabled", Protocol: hostpolicy.ProtoSOCKS5, Host: "s.test", Port: 22})
	w.ApprovalResolved(ApprovalEvent{Time: time.Date(10000, 1, 1, 0, 0, 0, 0, time.UTC), Started: base, ApprovalID: "ap-1", Kind: "network",
		Decision: "allow", Host: "a.test", Port: 443, Protocol: "https", Method: "POST", Rule: &rule, Reviewer: "user", Outcome: "allow_once", Rationale: "ok"})
	w.ExecDecision(ExecEvent{Time: time.Date(10000, 1, 1, 0, 0, 0, 5e6, time.UTC), Requirement: "needs_approval", Reason: "r", Source: "heuristics", ExecutionID: "exec-3"})
	closeW(t, w)
}

func TestLinesAreByteForByteTheGoldenOnes(t *testing.T) {
	path := filepath.Join(t.TempDir(), "audit.jsonl")
	writeGolden(t, path)
	got, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if os.Getenv("AUDIT_WRITE_GOLDEN") != "" {
		if err := os.WriteFile(goldenFile, got, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(goldenFile)
	if err != nil {
		t.Fatal(err)
	}
	if string(got) != string(want) {
		t.Fatalf("audit lines changed:\n got %s\nwant %s", got, want)
	}
	// The golden file (written by the earlier encoder) still verifies.
	res, err := Verify([]string{goldenFile})
	if err != nil || res.Break != nil || res.Lines != 7 {
		t.Fatalf("Verify(golden) = %+v, %v; want 7 chained lines, no break", res, err)
	}
}
