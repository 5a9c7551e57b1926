package audit

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/netproxy/netproxy/hostpolicy"
	"github.com/netproxy/netproxy/internal/observe"
)

var specKeys = []string{"ts", "started", "event", "decision", "reason", "source", "protocol", "host", "port", "method", "client", "session_id", "environment_id", "execution_id", "pattern", "override", "approval_id", "reviewer", "outcome", "rationale", "addrs", "level", "rule", "shadow", "bytes_out", "bytes_in", "duration_ms", "status", "close", "seq", "prev"}

func readLines(t *testing.T, path string) []map[string]any {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var out []map[string]any
	sc := bufio.NewScanner(bytes.NewReader(data))
	for sc.Scan() {
		var m map[string]any
		if err := json.Unmarshal(sc.Bytes(), &m); err != nil {
			t.Fatalf("line %q is not JSON: %v", sc.Text(), err)
		}
		out = append(out, m)
	}
	return out
}

func closeW(t *testing.T, w *Writer) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := w.Close(ctx); err != nil {
		t.Fatal(err)
	}
}

func sampleDecision() observe.DecisionEvent {
	return observe.DecisionEvent{
		Time: time.Date(2026, 1, 2, 3, 4, 5, 6e6, time.UTC),
		Request: hostpolicy.Request{
			Host: "Denied.test", Port: 443, Protocol: hostpolicy.ProtoHTTPS, Method: "CONNECT",
			Client: "127.0.0.1:5555", ExecutionID: "exec-1", SessionID: "s1", EnvironmentID: "e1",
		},
		Decision: hostpolicy.Decision{
			Verdict: hostpolicy.Deny, Reason: hostpolicy.ReasonDenied, Source: hostpolicy.SourceBaseline,
			Host: "denied.test", Port: 443, Pattern: "denied.test",
		},
	}
}

func TestEveryEventHasTheSpecKeys(t *testing.T) {
	path := filepath.Join(t.TempDir(), "sub", "audit.jsonl")
	w, err := Open(path, 16, nil)
	if err != nil {
		t.Fatal(err)
	}
	w.ObserveDecision(sampleDecision())
	w.ApprovalResolved(ApprovalEvent{ApprovalID: "a1", Kind: "network", Decision: "allow", Host: "alpha.test", Port: 80, Protocol: "http", Reviewer: "user", Outcome: "allow_once"})
	w.ExecDecision(ExecEvent{Requirement: "needs_approval", Reason: "dangerous", Source: "heuristics", ExecutionID: "exec-2"})
	w.ConnectionClosed(observe.ConnectionClosedEvent{Reason: "execution_ended", Protocol: "socks5-tcp", Host: "up.test/x?token=s3cret", Port: 443,
		Client: "127.0.0.1:7", ExecutionID: "exec-3", SessionID: "s3", EnvironmentID: "e3"})
	began := time.Date(2026, 1, 2, 3, 4, 6, 0, time.UTC)
	w.ConnectionEnd(observe.ConnectionEndEvent{Time: began.Add(1500 * time.Millisecond), Started: began, Protocol: "http", Host: "up.test", Port: 80,
		Method: "GET", Client: "127.0.0.1:8", BytesOut: 3, BytesIn: 19, Status: 200, Close: "complete"})
	w.ConnectionEnd(observe.ConnectionEndEvent{Time: began.Add(2 * time.Second), Started: began, Protocol: "socks5-tcp", Host: "up.test", Port: 22,
		Client: "127.0.0.1:9", BytesIn: 5, Close: "client_closed"})
	closeW(t, w)

	st, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if st.Mode().Perm() != 0o600 {
		t.Errorf("audit file mode %v, want 0600", st.Mode().Perm())
	}
	lines := readLines(t, path)
	if len(lines) != 6 {
		t.Fatalf("%d lines, want 6", len(lines))
	}
	for i, l := range lines {
		if len(l) != len(specKeys) {
			t.Errorf("line %d has %d keys, want exactly %d: %v", i, len(l), len(specKeys), l)
		}
		for _, k := range specKeys {
			if _, ok := l[k]; !ok {
				t.Errorf("line %d lacks %q: %v", i, k, l)
			}
		}
	}
	d := lines[0]
	want := map[string]any{"ts": "2026-01-02T03:04:05.006Z", "event": "network_decision", "decision": "deny", "reason": "denied",
		"source": "baseline_policy", "protocol": "https", "host": "denied.test", "port": 443.0, "method": "CONNECT",
		"client": "127.0.0.1:5555", "execution_id": "exec-1", "session_id": "s1", "environment_id": "e1", "pattern": "denied.test"}
	for k, v := range want {
		if d[k] != v {
			t.Errorf("network_decision %s = %v, want %v", k, d[k], v)
		}
	}
	if lines[1]["event"] != "approval_resolved" || lines[1]["outcome"] != "allow_once" || lines[1]["host"] != "alpha.test" || lines[1]["source"] != "network" {
		t.Errorf("approval line = %v", lines[1])
	}
	if lines[2]["event"] != "exec_decision" || lines[2]["decision"] != "needs_approval" || lines[2]["source"] != "heuristics" {
		t.Errorf("exec line = %v", lines[2])
	}
	if l := lines[3]; l["event"] != "connection_closed" || l["decision"] != "deny" || l["reason"] != "execution_ended" || l["source"] != "proxy_state" ||
		l["host"] != "up.test" || l["port"] != 443.0 || l["execution_id"] != "exec-3" || l["session_id"] != "s3" || l["protocol"] != "socks5-tcp" {
		t.Errorf("connection_closed line = %v", l)
	}
	// connection_end: the access record; status only for an HTTP answer;
	// the other lines carry null there.
	if l := lines[4]; l["event"] != "connection_end" || l["decision"] != "allow" || l["bytes_out"] != 3.0 || l["bytes_in"] != 19.0 ||
		l["duration_ms"] != 1500.0 || l["status"] != 200.0 || l["close"] != "complete" || l["started"] != "2026-01-02T03:04:06.000Z" ||
		l["session_id"] != "default" || l["method"] != "GET" {
		t.Errorf("connection_end line = %v", l)
	}
	if l := lines[5]; l["status"] != nil || l["bytes_out"] != 0.0 || l["close"] != "client_closed" {
		t.Errorf("tunnel connection_end line = %v", l)
	}
	if d["started"] != d["ts"] || d["bytes_in"] != nil || d["status"] != nil || d["close"] != "" {
		t.Errorf("network_decision access fields = %v", d)
	}
}

// The file is in ts order even when lines are queued out of it (two
// goroutines read the clock, then queue in the other order).
func TestTsNeverGoesBackwards(t *testing.T) {
	path := filepath.Join(t.TempDir(), "audit.jsonl")
	w, err := Open(path, 16, nil)
	if err != nil {
		t.Fatal(err)
	}
	late := time.Date(2026, 1, 2, 3, 4, 5, 900e6, time.UTC)
	ev := sampleDecision()
	ev.Time = late
	w.ObserveDecision(ev)
	ev.Time, ev.Started = late.Add(-300*time.Millisecond), late.Add(-time.Second)
	w.ObserveDecision(ev)
	closeW(t, w)
	lines := readLines(t, path)
	if lines[0]["ts"] != "2026-01-02T03:04:05.900Z" || lines[1]["ts"] != "2026-01-02T03:04:05.900Z" || lines[1]["started"] != "2026-01-02T03:04:04.900Z" {
		t.Fatalf("ts order: %v / %v", lines[0], lines[1])
	}
}

// The secrets a request can carry must never reach the file, whatever the
// data path hands over.
func TestNeverWritesTokenQueryOrHeader(t *testing.T) {
	const secret = "s3cr3tQueryValue"
	path := filepath.Join(t.TempDir(), "audit.jsonl")
	w, err := Open(path, 16, nil)
	if err != nil {
		t.Fatal(err)
	}
	ev := sampleDecision()
	ev.Decision.Host = "" // normalisation failed: the raw host is all there is
	ev.Request.Host = "user:" + secret + "@evil.test/path?token=" + secret
	ev.Request.Method = "GET /x?q=" + secret
	w.ObserveDecision(ev)
	ev.Request.Host = "evil.test?x=" + secret
	w.ObserveDecision(ev)
	w.ApprovalResolved(ApprovalEvent{Host: "a.test/?token=" + secret, Outcome: "deny"})
	closeW(t, w)
	raw, _ := os.ReadFile(path)
	if bytes.Contains(raw, []byte(secret)) {
		t.Fatalf("secret in audit:\n%s", raw)
	}
	lines := readLines(t, path)
	if lines[0]["host"] != "evil.test" || lines[1]["host"] != "evil.test" || lines[2]["host"] != "a.test" {
		t.Fatalf("hosts = %v %v %v", lines[0]["host"], lines[1]["host"], lines[2]["host"])
	}
	if lines[0]["method"] != "" {
		t.Fatalf("method = %q, want empty for a non-token method", lines[0]["method"])
	}
}

func TestCloseFlushesEverythingAndLaterRecordsAreCountedDrops(t *testing.T) {
	path := filepath.Join(t.TempDir(), "audit.jsonl")
	var drops atomic.Int64
	w, err := Open(path, 10000, nil, WithDropCounter(func() { drops.Add(1) }))
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 5000; i++ {
		w.ObserveDecision(sampleDecision())
	}
	closeW(t, w)
	if n := len(readLines(t, path)); n != 5000 {
		t.Fatalf("%d lines after Close, want 5000", n)
	}
	w.ObserveDecision(sampleDecision())
	if drops.Load() != 1 || w.Dropped() != 1 {
		t.Fatalf("a record after Close: drops=%d Dropped=%d, want 1", drops.Load(), w.Dropped())
	}
	closeW(t, w) // idempotent
	if err := w.Reopen(); err == nil {
		t.Fatal("Reopen after Close succeeded")
	}
}

func TestRecordsAppearWithoutClose(t *testing.T) {
	path := filepath.Join(t.TempDir(), "audit.jsonl")
	w, err := Open(path, 16, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer closeW(t, w)
	w.ObserveDecision(sampleDecision())
	deadline := time.Now().Add(3 * time.Second)
	for time.Now().Before(deadline) {
		if data, _ := os.ReadFile(path); bytes.Count(data, []byte("\n")) == 1 {
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Fatal("a queued record was not flushed to the file within 3s")
}

func TestReopenAfterRename(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "audit.jsonl")
	w, err := Open(path, 16, nil)
	if err != nil {
		t.Fatal(err)
	}
	w.ObserveDecision(sampleDecision())
	if err := w.Reopen(); err != nil { // flushes the first record
		t.Fatal(err)
	}
	rotated := path + ".1"
	if err := os.Rename(path, rotated); err != nil {
		t.Fatal(err)
	}
	w.ObserveDecision(sampleDecision()) // may land in either file until Reopen…
	if err := w.Reopen(); err != nil {
		t.Fatal(err)
	}
	w.ObserveDecision(sampleDecision()) // …but this one goes to the new file
	w.ObserveDecision(sampleDecision())
	closeW(t, w)
	old, cur := readLines(t, rotated), readLines(t, path)
	if len(old)+len(cur) != 4 || len(cur) < 2 || len(old) < 1 {
		t.Fatalf("rotated %d + current %d lines, want 4 with ≥1 old and ≥2 new", len(old), len(cur))
	}
}

func TestReopenFailureKeepsWriting(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "d", "audit.jsonl")
	w, err := Open(path, 16, nil)
	if err != nil {
		t.Fatal(err)
	}
	// Make the path unopenable: replace the folder with a file.
	if err := os.Rename(filepath.Join(dir, "d"), filepath.Join(dir, "moved")); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "d"), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := w.Reopen(); err == nil {
		t.Fatal("Reopen into an unopenable path succeeded")
	}
	w.ObserveDecision(sampleDecision())
	closeW(t, w)
	if n := len(readLines(t, filepath.Join(dir, "moved", "audit.jsonl"))); n != 1 {
		t.Fatalf("%d lines in the previous file, want 1", n)
	}
}

// syncBuffer is a goroutine-safe log destination.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}
func (s *syncBuffer) String() string { s.mu.Lock(); defer s.mu.Unlock(); return s.b.String() }

// A full buffer drops (never blocks), counts and logs. The file is a FIFO
// nobody reads, so the writer goroutine really blocks on the disk side.
func TestFullBufferDropsCountsAndLogs(t *testing.T) {
	dir := t.TempDir()
	fifo := filepath.Join(dir, "audit.fifo")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	reader, err := os.OpenFile(fifo, os.O_RDONLY|syscall.O_NONBLOCK, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer reader.Close()
	var logs syncBuffer
	var drops atomic.Int64
	w, err := Open(fifo, 8, slog.New(slog.NewTextHandler(&logs, nil)), WithDropCounter(func() { drops.Add(1) }))
	if err != nil {
		t.Fatal(err)
	}
	// ~400 bytes per line: 2000 lines overflow the 64 KiB pipe, the 64 KiB
	// bufio buffer and the 8-record queue.
	start := time.Now()
	for i := 0; i < 2000; i++ {
		w.ObserveDecision(sampleDecision())
	}
	if el := time.Since(start); el > time.Second {
		t.Fatalf("enqueueing into a full buffer took %v: the data path blocked", el)
	}
	if drops.Load() == 0 || uint64(drops.Load()) != w.Dropped() {
		t.Fatalf("drops=%d Dropped=%d, want equal and > 0", drops.Load(), w.Dropped())
	}
	// Logged while the writer is still stuck on the full pipe.
	if !strings.Contains(logs.String(), "audit buffer full: records dropped") {
		t.Fatalf("drop not logged while the writer is stuck; log:\n%s", logs.String())
	}
	// Drain the pipe so the writer can proceed; Close reports the rest.
	go func() {
		buf := make([]byte, 1<<16)
		for {
			if _, err := reader.Read(buf); err != nil && err != syscall.EAGAIN {
				return
			}
			time.Sleep(time.Millisecond)
		}
	}()
	deadline := time.Now().Add(5 * time.Second)
	for !strings.Contains(logs.String(), "records dropped") && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	if !strings.Contains(logs.String(), "audit buffer full: records dropped") {
		t.Fatalf("drop not logged; log:\n%s", logs.String())
	}
	closeW(t, w)
}

func TestOpenErrorsNameTheKey(t *testing.T) {
	if _, err := Open("", 1, nil); err == nil || !strings.Contains(err.Error(), "[audit] path") {
		t.Fatalf("empty path error = %v", err)
	}
	dir := t.TempDir()
	blocker := filepath.Join(dir, "file")
	os.WriteFile(blocker, nil, 0o600)
	if _, err := Open(filepath.Join(blocker, "audit.jsonl"), 1, nil); err == nil || !strings.Contains(err.Error(), "[audit] path") {
		t.Fatalf("unopenable path error = %v", err)
	}
}

func FuzzSanitizeHost(f *testing.F) {
	for _, s := range []string{"", "a.test", "u:p@h/x?q=1", "[::1]:443", "h#frag", "h\\x", "ünï.test"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, raw string) {
		h := SanitizeHost(raw)
		if strings.ContainsAny(h, "/?#@\\ \t\r\n") || len(h) > 253*4 {
			t.Fatalf("SanitizeHost(%q) = %q", raw, h)
		}
		if m := SanitizeMethod(raw); m != "" && m != raw {
			t.Fatalf("SanitizeMethod(%q) = %q", raw, m)
		}
	})
}

// FuzzAppendRecord: whatever bytes the fields hold, the line is one valid
// JSON object that decodes back to the same (UTF-8-sanitised) values.
func FuzzAppendRecord(f *testing.F) {
	f.Add("a.test", "GET", "why \"quoted\"\n\u2028", uint16(443))
	f.Add("\xff\xfe", "", "\x00\x1f\\", uint16(0))
	f.Fuzz(func(t *testing.T, host, method, rationale string, port uint16) {
		line := AppendRecord(nil, Record{Time: time.Unix(1, 0), Event: EventNetworkDecision, Host: host, Method: method, Rationale: rationale, Port: port})
		if bytes.Count(line, []byte("\n")) != 1 || line[len(line)-1] != '\n' {
			t.Fatalf("not one line: %q", line)
		}
		var m map[string]any
		if err := json.Unmarshal(line, &m); err != nil {
			t.Fatalf("invalid JSON %q: %v", line, err)
		}
		if len(m) != len(specKeys) {
			t.Fatalf("%d keys", len(m))
		}
		// encoding/json also replaces each invalid byte by U+FFFD.
		var want string
		canon, _ := json.Marshal(rationale)
		_ = json.Unmarshal(canon, &want)
		if m["rationale"] != want {
			t.Fatalf("rationale %q decoded as %q, want %q", rationale, m["rationale"], want)
		}
		if m["port"] != float64(port) {
			t.Fatalf("port %v", m["port"])
		}
	})
}

// A file that refuses writes (/dev/full: ENOSPC) loses records: each one is
// counted as a drop and the failure is logged, not silently swallowed.
func TestWriteErrorsAreCountedAndLogged(t *testing.T) {
	if _, err := os.Stat("/dev/full"); err != nil {
		t.Fatalf("/dev/full is needed for this test: %v", err)
	}
	var logs syncBuffer
	var drops atomic.Int64
	w, err := Open("/dev/full", 16, slog.New(slog.NewTextHandler(&logs, nil)), WithDropCounter(func() { drops.Add(1) }))
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 3; i++ {
		w.ObserveDecision(sampleDecision())
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_ = w.Close(ctx) // the close itself may or may not report the error
	if w.Dropped() != 3 || drops.Load() != 3 {
		t.Fatalf("Dropped=%d drops=%d, want 3 lost records counted", w.Dropped(), drops.Load())
	}
	if !strings.Contains(logs.String(), "audit write failed") {
		t.Fatalf("write failure not logged:\n%s", logs.String())
	}
}

// An unattributed decision is written in the default session and
// environment (SPEC §4.3), like the approvals it may create.
func TestUnattributedDecisionIsInTheDefaultSession(t *testing.T) {
	path := filepath.Join(t.TempDir(), "audit.jsonl")
	w, err := Open(path, 16, nil)
	if err != nil {
		t.Fatal(err)
	}
	e := sampleDecision()
	e.Request.ExecutionID, e.Request.SessionID, e.Request.EnvironmentID = "", "", ""
	w.ObserveDecision(e)
	closeW(t, w)
	l := readLines(t, path)[0]
	if l["session_id"] != "default" || l["environment_id"] != "default" || l["execution_id"] != "" {
		t.Fatalf("session %v environment %v execution %v, want default/default/empty", l["session_id"], l["environment_id"], l["execution_id"])
	}
}
