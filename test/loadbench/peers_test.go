package main

import (
	"os"
	"testing"
	"time"
)

// wrk 4.1's report of a run with errors, as the peer bench must read it.
const wrkReportWithErrors = `Running 1s test @ http://127.0.0.1:4000/
  1 threads and 64 connections
  Thread Stats   Avg      Stdev     Max   +/- Stdev
    Latency     2.10ms  340.12us   9.80ms   91.00%
    Req/Sec    30.10k     1.20k   32.00k    80.00%
  Latency Distribution
     50%    2.05ms
     75%    2.20ms
     90%    2.40ms
     99%    3.10ms
  30123 requests in 1.00s, 33.45MB read
  Socket errors: connect 2, read 12, write 0, timeout 1
  Non-2xx or 3xx responses: 7
Requests/sec:  30100.00
Transfer/sec:     33.40MB
`

func TestParseWrkCountsErrors(t *testing.T) {
	r, err := parseWrk([]byte(wrkReportWithErrors))
	if err != nil {
		t.Fatal(err)
	}
	if r.requests != 30123 || r.elapsed != time.Second {
		t.Errorf("requests %d in %s, want 30123 in 1s", r.requests, r.elapsed)
	}
	if r.p50 != 2050*time.Microsecond || r.p99 != 3100*time.Microsecond {
		t.Errorf("p50 %s p99 %s", r.p50, r.p99)
	}
	if r.sockErrs != 15 || r.non2xx != 7 {
		t.Errorf("socket errors %d non-2xx %d, want 15 and 7", r.sockErrs, r.non2xx)
	}
	if f := 33.45; r.bytes != int64(f*(1<<20)) {
		t.Errorf("bytes %d, want %d", r.bytes, int64(f*(1<<20)))
	}
	if r.errLine != "Socket errors: connect 2, read 12, write 0, timeout 1" {
		t.Errorf("errLine %q", r.errLine)
	}
}

func TestFmtNum(t *testing.T) {
	for _, c := range []struct {
		v    float64
		d    int
		want string
	}{{39830, 0, "39 830"}, {1234567.891, 1, "1 234 567.9"}, {12, 2, "12.00"}, {-4500, 0, "-4 500"}, {999, 0, "999"}} {
		if got := fmtNum(c.v, c.d); got != c.want {
			t.Errorf("fmtNum(%v, %d) = %q, want %q", c.v, c.d, got, c.want)
		}
	}
}

func TestMedianF(t *testing.T) {
	if m := medianF([]float64{3, 1, 2}); m != 2 {
		t.Errorf("median of 3 = %v", m)
	}
	if m := medianF([]float64{4, 1, 2, 3}); m != 2.5 {
		t.Errorf("median of 4 = %v", m)
	}
}

// The process-tree readers see this test process and its CPU time.
func TestTreeAccountingOfSelf(t *testing.T) {
	pids, err := treePIDs(os.Getpid())
	if err != nil || len(pids) == 0 || pids[0] != os.Getpid() {
		t.Fatalf("treePIDs: %v %v", pids, err)
	}
	before, err := treeCPU(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	for end := time.Now().Add(100 * time.Millisecond); time.Now().Before(end); {
	}
	after, err := treeCPU(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	if after <= before {
		t.Errorf("CPU time did not grow over a 100 ms busy loop: %s → %s", before, after)
	}
	pss, err := treePss(os.Getpid())
	if err != nil || pss <= 0 {
		t.Errorf("treePss: %d %v", pss, err)
	}
}
