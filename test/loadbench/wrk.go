package main

import (
	"bufio"
	"bytes"
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// wrkRun is one wrk run's result.
type wrkRun struct {
	requests int64
	elapsed  time.Duration
	p50, p99 time.Duration
	bytes    int64 // read by wrk, heads included ("… MB read")
	non2xx   int64 // "Non-2xx or 3xx responses"
	sockErrs int64 // "Socket errors": connect + read + write + timeout
	errLine  string
}

// wrkScript writes the Lua script that makes wrk send exactly
// `GET <target> HTTP/1.1` with `Host: <host>`: absolute-form through the
// proxy, origin-form directly and through the null relay, the same Host
// everywhere.
//
// Extra headers (name, value pairs) are added to every request, e.g.
// "Connection", "close" to make wrk open a new connection per request.
func wrkScript(dir, name, target, host string, headers ...string) (string, error) {
	lua := fmt.Sprintf("wrk.method = \"GET\"\nwrk.path = %q\nwrk.headers[\"Host\"] = %q\n", target, host)
	for i := 0; i+1 < len(headers); i += 2 {
		lua += fmt.Sprintf("wrk.headers[%q] = %q\n", headers[i], headers[i+1])
	}
	path := filepath.Join(dir, name+".lua")
	return path, os.WriteFile(path, []byte(lua), 0o644)
}

// runWrk runs wrk with one thread and conns keep-alive connections against
// addr for dur. cpus, when set, pins wrk (taskset) to those CPUs.
func runWrk(wrk, script, addr string, conns int, dur time.Duration, cpus string) (wrkRun, error) {
	r, out, err := runWrkReport(wrk, script, addr, conns, dur, cpus)
	if err != nil {
		return r, err
	}
	if r.errLine != "" {
		return r, fmt.Errorf("wrk reported failures: %s\n%s", r.errLine, out)
	}
	return r, nil
}

// runWrkReport is runWrk without failing on wrk's error counts: they are
// in the result (non2xx, sockErrs) for the caller to judge. It returns
// wrk's output too.
func runWrkReport(wrk, script, addr string, conns int, dur time.Duration, cpus string) (wrkRun, []byte, error) {
	secs := max(1, int(dur.Round(time.Second)/time.Second)) // wrk's -d takes whole seconds
	args := []string{"-t1", "-c", strconv.Itoa(conns), "-d", fmt.Sprintf("%ds", secs), "--latency", "-s", script, "http://" + addr + "/"}
	name := wrk
	if cpus != "" {
		args = append([]string{"-c", cpus, wrk}, args...)
		name = "taskset"
	}
	out, err := exec.Command(name, args...).CombinedOutput()
	if err != nil {
		return wrkRun{}, out, fmt.Errorf("%s %s: %v\n%s", name, strings.Join(args, " "), err, out)
	}
	r, err := parseWrk(out)
	return r, out, err
}

// parseWrk reads wrk's --latency report. Error lines ("Non-2xx or 3xx
// responses: N", "Socket errors: connect N, read N, write N, timeout N")
// are counted into the result, and the first is kept in errLine.
func parseWrk(out []byte) (wrkRun, error) {
	var r wrkRun
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		switch {
		case len(f) == 2 && f[0] == "50%":
			r.p50, _ = parseWrkDuration(f[1])
		case len(f) == 2 && f[0] == "99%":
			r.p99, _ = parseWrkDuration(f[1])
		case len(f) >= 4 && f[1] == "requests" && f[2] == "in":
			r.requests, _ = strconv.ParseInt(f[0], 10, 64)
			r.elapsed, _ = parseWrkDuration(strings.TrimSuffix(f[3], ","))
			if len(f) >= 6 && f[5] == "read" {
				r.bytes, _ = parseWrkBytes(f[4])
			}
		case len(f) >= 1 && (f[0] == "Non-2xx" || f[0] == "Socket"):
			if r.errLine == "" {
				r.errLine = strings.TrimSpace(sc.Text())
			}
			if f[0] == "Non-2xx" {
				r.non2xx, _ = strconv.ParseInt(f[len(f)-1], 10, 64)
				break
			}
			// Socket errors: connect 0, read 12, write 0, timeout 0
			for i := 2; i+1 < len(f); i += 2 {
				n, _ := strconv.ParseInt(strings.TrimSuffix(f[i+1], ","), 10, 64)
				r.sockErrs += n
			}
		}
	}
	if r.requests == 0 || r.elapsed == 0 || r.p50 == 0 {
		return r, fmt.Errorf("could not read wrk's report:\n%s", out)
	}
	return r, nil
}

// parseWrkDuration reads wrk's "1.23ms", "812.00us", "1.02s", "2.00m".
func parseWrkDuration(s string) (time.Duration, error) {
	units := []struct {
		suffix string
		unit   time.Duration
	}{{"us", time.Microsecond}, {"ms", time.Millisecond}, {"s", time.Second}, {"m", time.Minute}}
	for _, u := range units {
		if v, ok := strings.CutSuffix(s, u.suffix); ok {
			f, err := strconv.ParseFloat(v, 64)
			if err != nil {
				return 0, err
			}
			return time.Duration(math.Round(f * float64(u.unit))), nil
		}
	}
	return 0, fmt.Errorf("duration %q", s)
}

// parseWrkBytes reads wrk's "150.00MB", "512.00KB", "1.02GB", "980B"
// (binary units).
func parseWrkBytes(s string) (int64, error) {
	units := []struct {
		suffix string
		unit   float64
	}{{"TB", 1 << 40}, {"GB", 1 << 30}, {"MB", 1 << 20}, {"KB", 1 << 10}, {"B", 1}}
	for _, u := range units {
		if v, ok := strings.CutSuffix(s, u.suffix); ok {
			f, err := strconv.ParseFloat(v, 64)
			if err != nil {
				return 0, err
			}
			return int64(f * u.unit), nil
		}
	}
	return 0, fmt.Errorf("byte count %q", s)
}
