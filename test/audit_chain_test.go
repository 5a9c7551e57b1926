package test

import (
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestAuditChainVerifies is issue 26 item 3 (SPEC §7.5): every audit line
// carries seq and prev; the chain continues across a rotation (rename +
// SIGHUP) and a restart; `netproxy audit verify` exits 0 on the untouched
// files and 1 naming file:line and seq when a line was removed or edited.
func TestAuditChainVerifies(t *testing.T) {
	up := StartUpstream(t, false)
	p := StartProxy(t, StdConfig())
	hit := func(n int) {
		for i := 0; i < n; i++ {
			Curl(t, "-x", "http://"+p.HTTP, up.URL("up.test", "/hello"))
			Curl(t, "-x", "http://"+p.HTTP, up.URL("denied.test", "/hello"))
		}
	}
	waitLines := func(path string, n int) {
		t.Helper()
		deadline := time.Now().Add(5 * time.Second)
		for time.Now().Before(deadline) {
			b, _ := os.ReadFile(path)
			if strings.Count(string(b), "\n") >= n {
				return
			}
			time.Sleep(20 * time.Millisecond)
		}
		b, _ := os.ReadFile(path)
		t.Fatalf("%s: fewer than %d lines:\n%s", path, n, b)
	}
	hit(3)
	waitLines(p.Audit, 6)
	rotated := p.Audit + ".1"
	if err := os.Rename(p.Audit, rotated); err != nil {
		t.Fatal(err)
	}
	p.Signal(syscall.SIGHUP)
	time.Sleep(300 * time.Millisecond)
	hit(2)
	waitLines(p.Audit, 4)
	// Restart: the chain continues from the file's tail.
	p.Signal(syscall.SIGTERM)
	p.WaitExit(t, 10*time.Second)
	p.Start(t)
	hit(1)
	p.Signal(syscall.SIGTERM)
	p.WaitExit(t, 10*time.Second)

	verify := func(files ...string) (int, string) {
		cmd := exec.Command(netproxyBin, append([]string{"audit", "verify"}, files...)...)
		out, _ := cmd.CombinedOutput()
		return cmd.ProcessState.ExitCode(), string(out)
	}
	code, out := verify(rotated, p.Audit)
	if code != 0 || !strings.Contains(out, "OK") || !strings.Contains(out, "seq 1..") {
		t.Fatalf("untouched audit: exit %d\n%s", code, out)
	}
	cur, _ := os.ReadFile(p.Audit)
	for _, l := range strings.Split(string(cur), "\n") {
		if strings.Contains(l, "token") || strings.Contains(l, "?") {
			t.Fatalf("audit line carries a token or query: %s", l)
		}
	}
	// Remove the second line of the rotated file: the break is named at
	// the line after the gap with its seq.
	orig, _ := os.ReadFile(rotated)
	lines := strings.SplitAfter(string(orig), "\n")
	os.WriteFile(rotated, []byte(lines[0]+strings.Join(lines[2:], "")), 0o600)
	code, out = verify(rotated, p.Audit)
	if code != 1 || !strings.Contains(out, rotated+":2") || !strings.Contains(out, "seq 3") {
		t.Fatalf("a removed line: exit %d\n%s", code, out)
	}
	// Edit a field of the third line: the next line's prev no longer holds.
	lines[2] = strings.Replace(lines[2], `"decision":"deny"`, `"decision":"allow"`, 1)
	lines[2] = strings.Replace(lines[2], `"decision":"allow","reason":""`, `"decision":"deny","reason":""`, 1)
	os.WriteFile(rotated, []byte(strings.Join(lines, "")), 0o600)
	code, out = verify(rotated, p.Audit)
	if code != 1 || !strings.Contains(out, rotated+":4") {
		t.Fatalf("an edited line: exit %d\n%s", code, out)
	}
}
