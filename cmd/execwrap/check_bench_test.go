package main

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"
)

// BenchmarkCheckProcess1000Rules execs the real `execwrap check --json`
// binary with 1 000 prefix rules loaded and reports the median wall time
// from process start to exit (budget: 20 ms).
func BenchmarkCheckProcess1000Rules(b *testing.B) {
	dir := b.TempDir()
	bin := filepath.Join(dir, "execwrap")
	build := exec.Command("go", "build", "-o", bin, ".")
	if out, err := build.CombinedOutput(); err != nil {
		b.Fatalf("build: %v\n%s", err, out)
	}
	rulesDir := filepath.Join(dir, "rules")
	if err := os.MkdirAll(rulesDir, 0o755); err != nil {
		b.Fatal(err)
	}
	var src strings.Builder
	decisions := []string{"allow", "prompt", "forbidden"}
	for i := 0; i < 997; i++ {
		fmt.Fprintf(&src, "prefix_rule(pattern=[\"tool-%03d\", [\"sub-%d\", \"alt-%d\"], \"--flag\"], decision=%q, justification=\"rule %d\")\n", i/3, i, i, decisions[i%3], i)
	}
	src.WriteString("prefix_rule(pattern=[\"git\", [\"status\", \"diff\", \"log\"]])\nprefix_rule(pattern=[\"cargo\", \"test\"])\nprefix_rule(pattern=[\"rm\"], decision=\"forbidden\")\n")
	if err := os.WriteFile(filepath.Join(rulesDir, "bench.rules"), []byte(src.String()), 0o644); err != nil {
		b.Fatal(err)
	}
	home := filepath.Join(dir, "home")
	args := []string{"check", "--json", "--rules", rulesDir, "--", "/bin/bash", "-lc", "git status && cargo test -p core"}
	var samples []time.Duration
	b.ResetTimer()
	for b.Loop() {
		cmd := exec.Command(bin, args...)
		cmd.Env = []string{"NETPROXY_HOME=" + home, "HOME=" + home, "PATH=/usr/bin:/bin"}
		start := time.Now()
		out, err := cmd.Output()
		samples = append(samples, time.Since(start))
		if err != nil || !strings.Contains(string(out), `"kind":"skip"`) {
			b.Fatalf("check: %v %s", err, out)
		}
	}
	sort.Slice(samples, func(i, j int) bool { return samples[i] < samples[j] })
	b.ReportMetric(float64(samples[len(samples)/2].Microseconds())/1000, "median-ms")
}
