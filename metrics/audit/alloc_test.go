package audit

import (
	"crypto/sha256"
	"encoding/hex"
	"net/netip"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/netproxy/netproxy/hostpolicy"
	"github.com/netproxy/netproxy/internal/observe"
)

// TestAppendLineIsAppendRecordWithTheChain: the writer's line is exactly
// AppendRecord's with seq and prev filled as SPEC §7.5 says, whatever the
// record holds, so the file format cannot drift from the exported encoder.
func TestAppendLineIsAppendRecordWithTheChain(t *testing.T) {
	decision, end := benchRecords()
	shadowed := decision
	shadowed.Shadow = &ShadowRecord{Decision: "deny", Reason: "denied", Pattern: "*.test"}
	shadowed.Addrs = []netip.Addr{netip.MustParseAddr("fe80::1%eth0"), netip.MustParseAddr("::1")}
	shadowed.Rationale = "quote \" backslash \\ nl \n ctl \x01 ls \u2028 bad \xff"
	ts := end
	ts.TS = "2026-01-01T00:00:00.000Z"
	var c chain
	for i, r := range []Record{decision, end, shadowed, ts, {}} {
		if i == 4 {
			r.Time = time.Unix(0, 0) // a zero Time is "now": not comparable
		}
		want := r
		want.Seq, want.Prev = c.seq+1, hex.EncodeToString(c.last[:])
		wantLine := AppendRecord(nil, want)
		got := c.appendLine(nil, &r)
		if string(got) != string(wantLine) {
			t.Fatalf("record %d:\n got %s\nwant %s", i, got, wantLine)
		}
		if c.seq != want.Seq || c.last != sha256.Sum256(wantLine[:len(wantLine)-1]) {
			t.Fatalf("record %d: chain did not advance to seq %d and this line's hash", i, want.Seq)
		}
	}
}

// TestAppendLineDoesNotAllocate: the writer goroutine encodes and hashes a
// line into its reused buffer without allocating (issue 29).
func TestAppendLineDoesNotAllocate(t *testing.T) {
	decision, end := benchRecords()
	var c chain
	line := make([]byte, 0, 1024)
	for _, r := range []Record{decision, end} {
		if n := testing.AllocsPerRun(200, func() { line = c.appendLine(line[:0], &r) }); n != 0 {
			t.Errorf("%s: %v allocations per line, want 0", r.Event, n)
		}
	}
}

// TestDataPathRecordsDoNotAllocate: queueing the two lines of an allowed
// request (its decision and its connection_end) allocates nothing, and
// neither does the writer goroutine writing them.
func TestDataPathRecordsDoNotAllocate(t *testing.T) {
	w, err := Open(filepath.Join(t.TempDir(), "audit.jsonl"), 1<<14, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer closeW(t, w)
	now := time.Now()
	dec := observe.DecisionEvent{
		Time: now, Started: now,
		Request: hostpolicy.Request{Host: "up.test", Port: 80, Protocol: hostpolicy.ProtoHTTP, Method: "GET", Client: "127.0.0.1:1"},
		Decision: hostpolicy.Decision{Verdict: hostpolicy.Allow, Source: hostpolicy.SourceBaseline, Host: "up.test", Port: 80,
			Addrs: []netip.Addr{netip.MustParseAddr("127.0.0.1")}},
	}
	end := observe.ConnectionEndEvent{Time: now, Started: now, Protocol: hostpolicy.ProtoHTTP, Host: "up.test", Port: 80,
		Method: "GET", Client: "127.0.0.1:1", BytesIn: 10, Status: 200, Close: "keepalive"}
	if n := testing.AllocsPerRun(1000, func() { w.ObserveDecision(dec); w.ConnectionEnd(end) }); n != 0 {
		t.Errorf("%v allocations per request, want 0", n)
	}
	if w.Dropped() != 0 {
		t.Fatalf("%d records dropped: the buffer must hold them all", w.Dropped())
	}
}

// sanitizeHostReference is SanitizeHost as it was written before the byte
// loop (strings.IndexAny): the fuzz below holds the two to the same result.
func sanitizeHostReference(raw string) string {
	if i := strings.LastIndexByte(raw, '@'); i >= 0 {
		raw = raw[i+1:]
	}
	if i := strings.IndexAny(raw, "/?#\\ \t\r\n"); i >= 0 {
		raw = raw[:i]
	}
	if len(raw) > 253 {
		raw = raw[:253]
	}
	return strings.ToLower(raw)
}

func FuzzSanitizeHostMatchesReference(f *testing.F) {
	for _, s := range []string{"", "a.test", "u:p@h/x?q=1", "[::1]:443", "h#frag", "h\\x", "ünï.test", "A B", "x\ty", "é/\xff?"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, raw string) {
		if got, want := SanitizeHost(raw), sanitizeHostReference(raw); got != want {
			t.Fatalf("SanitizeHost(%q) = %q, want %q", raw, got, want)
		}
	})
}
