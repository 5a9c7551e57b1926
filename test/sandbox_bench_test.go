package test

import (
	"os"
	"os/exec"
	"sort"
	"testing"
	"time"
)

// sbxBench runs argv b.N times and reports the median wall time per run
// (the budget is a median), besides Go's mean ns/op.
func sbxBench(b *testing.B, dir string, env []string, argv ...string) {
	b.Helper()
	durs := make([]time.Duration, 0, b.N)
	b.ResetTimer()
	for range b.N {
		cmd := exec.Command(argv[0], argv[1:]...)
		cmd.Dir, cmd.Env = dir, env
		start := time.Now()
		if out, err := cmd.CombinedOutput(); err != nil {
			b.Fatalf("%v: %v\n%s", argv, err, out)
		}
		durs = append(durs, time.Since(start))
	}
	b.StopTimer()
	sort.Slice(durs, func(i, j int) bool { return durs[i] < durs[j] })
	b.ReportMetric(float64(durs[len(durs)/2].Microseconds())/1000, "median-ms")
}

func sbxBenchDir(b *testing.B) string {
	d, err := os.MkdirTemp("", "execwrap-bench-")
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { os.RemoveAll(d) })
	return d
}

// BenchmarkBareTrue is the baseline: fork+exec of /bin/true.
func BenchmarkBareTrue(b *testing.B) {
	sbxBench(b, sbxBenchDir(b), os.Environ(), "/bin/true")
}

// BenchmarkExecwrapRunTrueProxied is `execwrap run -- true` with the full
// sandbox and the proxied network through a running netproxy (register,
// event stream, bridge handoff, unregister included).
func BenchmarkExecwrapRunTrueProxied(b *testing.B) {
	p := StartProxy(b, StdConfig())
	sbxBench(b, sbxBenchDir(b), p.Env(), ExecwrapBin(b), "run", "--control", p.Control, "--", "true")
}

// BenchmarkExecwrapRunTrueNoNetwork is the sandbox alone (--network none).
func BenchmarkExecwrapRunTrueNoNetwork(b *testing.B) {
	sbxBench(b, sbxBenchDir(b), os.Environ(), ExecwrapBin(b), "run", "--network", "none", "--", "true")
}

// BenchmarkExecwrapRunTrueUnsandboxed is execwrap's own overhead (flag
// parsing, exec policy, rules) without a sandbox.
func BenchmarkExecwrapRunTrueUnsandboxed(b *testing.B) {
	sbxBench(b, sbxBenchDir(b), os.Environ(), ExecwrapBin(b), "run", "--sandbox", "danger-full-access", "--", "true")
}

// BenchmarkBwrapTrue is bubblewrap with comparable namespaces and mounts
// (and --cap-drop ALL, without which root keeps every capability).
func BenchmarkBwrapTrue(b *testing.B) {
	bwrap, err := exec.LookPath("bwrap")
	if err != nil {
		b.Fatal("bwrap (Debian bubblewrap) is required; run scripts/install-test-deps.sh")
	}
	dir := sbxBenchDir(b)
	sbxBench(b, dir, os.Environ(), bwrap, "--unshare-user", "--unshare-pid", "--unshare-net", "--unshare-ipc", "--unshare-uts",
		"--cap-drop", "ALL", "--die-with-parent", "--ro-bind", "/", "/", "--tmpfs", "/tmp", "--bind", dir, dir, "--dev", "/dev",
		"--proc", "/proc", "--tmpfs", "/dev/shm", "--chdir", dir, "true")
}
