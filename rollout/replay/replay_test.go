package replay

import (
	"bytes"
	"compress/gzip"
	"encoding/json"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/netproxy/netproxy/hostpolicy"
	"github.com/netproxy/netproxy/metrics/audit"
)

func snap(t testing.TB, domains map[string]string) *hostpolicy.Snapshot {
	t.Helper()
	var es []hostpolicy.Entry
	for k, v := range domains {
		es = append(es, hostpolicy.Entry{Pattern: k, Decision: v})
	}
	s, err := hostpolicy.Build(hostpolicy.Options{Enabled: true, Mode: hostpolicy.ModeFull, Entries: es})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// line renders one audit line exactly as the audit writer does.
func line(decision, reason, source, host string, addrs ...string) string {
	r := audit.Record{Time: time.Unix(1, 0), Event: audit.EventNetworkDecision, Decision: decision, Reason: reason,
		Source: source, Protocol: "http", Host: host, Port: 80, Method: "GET"}
	for _, a := range addrs {
		r.Addrs = append(r.Addrs, mustAddr(a))
	}
	return string(audit.AppendRecord(nil, r))
}

func TestReplayCountsFlipsPerHost(t *testing.T) {
	cand := snap(t, map[string]string{"b.test": "allow", "c.test": "allow", "203.0.113.0/24": "deny"})
	r, _ := New(Options{Candidate: Policy{Snapshot: cand}})
	in := line("allow", "", "baseline_policy", "a.test", "93.184.216.34") + // allow→deny not_allowed
		line("deny", "not_allowed", "baseline_policy", "b.test") + // deny→allow
		line("allow", "", "baseline_policy", "c.test", "203.0.113.5") + // allow→deny denied (pinned address)
		line("allow", "", "baseline_policy", "c.test", "93.184.216.34") + // unchanged
		`{"ts":"x","event":"approval_resolved","decision":"allow"}` + "\n" +
		"{broken\n" +
		line("deny", "attribution_rejected", "proxy_state", "b.test") // never re-judged
	var bad []LineError
	r.o.OnMalformed = func(le LineError) { bad = append(bad, le) }
	if err := r.Stream("a.jsonl", strings.NewReader(in)); err != nil {
		t.Fatal(err)
	}
	rep := r.Report()
	if rep.Decisions != 5 || rep.Malformed != 1 || len(bad) != 1 || bad[0].Line != 6 || bad[0].File != "a.jsonl" {
		t.Fatalf("decisions %d malformed %d %v", rep.Decisions, rep.Malformed, bad)
	}
	if rep.NewlyBlocked != 2 || rep.NewlyAllowed != 1 || rep.ExitCode() != ExitNewlyBlocked {
		t.Fatalf("flips %d/%d exit %d", rep.NewlyBlocked, rep.NewlyAllowed, rep.ExitCode())
	}
	got := map[string]string{}
	for _, h := range rep.Hosts {
		got[h.Host] = fmt.Sprintf("%d/%d %s", h.AllowBlock, h.BlockAllow, h.Changes[0].Reason)
	}
	want := map[string]string{"a.test": "1/0 not_allowed", "b.test": "0/1 not_allowed", "c.test": "1/0 denied"}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("%s: %q, want %q", k, got[k], v)
		}
	}
	var text bytes.Buffer
	rep.WriteText(&text)
	if !strings.Contains(text.String(), "allow→deny denied [203.0.113.0/24]") {
		t.Fatalf("text report:\n%s", text.String())
	}
}

func TestReplayStrictAndGzip(t *testing.T) {
	cand := snap(t, map[string]string{"b.test": "allow"})
	dir := t.TempDir()
	content := line("deny", "not_allowed", "baseline_policy", "b.test") + "nope\n"
	var gz bytes.Buffer
	zw := gzip.NewWriter(&gz)
	zw.Write([]byte(content))
	zw.Close()
	p := filepath.Join(dir, "audit.jsonl.3.gz")
	os.WriteFile(p, gz.Bytes(), 0o600)
	r, _ := New(Options{Candidate: Policy{Snapshot: cand}})
	if err := r.File(p); err != nil {
		t.Fatal(err)
	}
	if rep := r.Report(); rep.NewlyAllowed != 1 || rep.Malformed != 1 || rep.ExitCode() != ExitOnlyAllowed {
		t.Fatalf("gzip replay: %+v", rep)
	}
	r, _ = New(Options{Candidate: Policy{Snapshot: cand}, Strict: true})
	err := r.File(p)
	if err == nil || !strings.Contains(err.Error(), p+":2:") {
		t.Fatalf("strict: %v", err)
	}
	if err := r.File(filepath.Join(dir, "missing")); err == nil {
		t.Fatal("missing file accepted")
	}
}

func TestReplayOverlongLine(t *testing.T) {
	cand := snap(t, nil)
	r, _ := New(Options{Candidate: Policy{Snapshot: cand}})
	in := strings.Repeat("x", maxLineBytes+10) + "\n" + line("allow", "", "baseline_policy", "a.test")
	if err := r.Stream("big", strings.NewReader(in)); err != nil {
		t.Fatal(err)
	}
	if rep := r.Report(); rep.Malformed != 1 || rep.Decisions != 1 || rep.Errors[0].Line != 1 {
		t.Fatalf("%+v", rep)
	}
}

// FuzzParseLine: no audit line, however broken, panics the parser, and a
// parsed decision always has a valid verdict and host.
func FuzzParseLine(f *testing.F) {
	f.Add([]byte(line("allow", "", "baseline_policy", "a.test", "127.0.0.1")))
	f.Add([]byte(`{"event":"network_decision","decision":"ask","host":"x","addrs":["::1%eth0"]}`))
	f.Add([]byte(`{"event":1}`))
	f.Add([]byte(`{"event":"network_decision","HOST":"a","host":"b","decision":"deny","port":80,"x":{"a":null}}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		// The fast path agrees with encoding/json whenever it accepts.
		var fast, slow Line
		if scanLine(bytes.TrimSpace(b), &fast) {
			if err := json.Unmarshal(bytes.TrimSpace(b), &slow); err != nil {
				t.Fatalf("fast path accepted what encoding/json rejects (%v): %q", err, b)
			}
			if fmt.Sprint(fast) != fmt.Sprint(slow) {
				t.Fatalf("fast %+v != json %+v for %q", fast, slow, b)
			}
		}
		l, ok, err := ParseLine(b)
		if err != nil || !ok {
			return
		}
		if l.Host == "" {
			t.Fatal("empty host accepted")
		}
		switch l.Decision {
		case "allow", "deny", "ask":
		default:
			t.Fatalf("decision %q accepted", l.Decision)
		}
		cand, _ := hostpolicy.Build(hostpolicy.Options{Enabled: true, Mode: hostpolicy.ModeLimited})
		Judge(Policy{Snapshot: cand, Approvals: true}, l)
	})
}

// BenchmarkReplayMillionLines measures `netproxy replay` over one million
// audit lines of a realistic mix (docs/BENCHMARKS.md).
func BenchmarkReplayMillionLines(b *testing.B) { benchReplay(b, 1_000_000) }

// BenchmarkReplay50k is the same mix, shorter (for profiles).
func BenchmarkReplay50k(b *testing.B) { benchReplay(b, 50_000) }

func benchReplay(b *testing.B, n int) {
	var doms = map[string]string{"**.github.com": "allow", "pypi.org": "allow", "files.pythonhosted.org": "allow", "evil.test": "deny", "203.0.113.0/24": "deny"}
	cand := snap(b, doms)
	mix := []string{
		line("allow", "", "baseline_policy", "api.github.com", "140.82.112.5"),
		line("allow", "", "baseline_policy", "pypi.org", "151.101.0.223"),
		line("deny", "not_allowed", "baseline_policy", "example.com"),
		line("allow", "", "baseline_policy", "registry.npmjs.org", "104.16.0.35"),
		line("deny", "denied", "baseline_policy", "evil.test"),
	}
	var buf bytes.Buffer
	for i := 0; i < n; i++ {
		buf.WriteString(mix[i%len(mix)])
	}
	data := buf.Bytes()
	b.SetBytes(int64(len(data)))
	// CPU time is reported besides wall time: on a shared machine the
	// wall time measures the neighbours as much as the replay.
	cpu0 := cpuTime()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		r, _ := New(Options{Candidate: Policy{Snapshot: cand}})
		if err := r.Stream("bench", bytes.NewReader(data)); err != nil {
			b.Fatal(err)
		}
		if rep := r.Report(); rep.Decisions != n || rep.NewlyBlocked != n/5 {
			b.Fatalf("decisions %d newly blocked %d", rep.Decisions, rep.NewlyBlocked)
		}
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/float64(n), "ns/line")
	b.ReportMetric((cpuTime()-cpu0).Seconds()/float64(b.N), "cpu-s/op")
}

func mustAddr(s string) netip.Addr { return netip.MustParseAddr(s) }

// cpuTime is the process's user+system CPU time so far.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
