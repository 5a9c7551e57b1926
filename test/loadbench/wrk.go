package main

import (
	"bufio"
	"bytes"
	"fmt"
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
}

// wrkScript writes the Lua script that makes wrk send exactly
// `GET <target> HTTP/1.1` with `Host: <host>`: absolute-form through the
// proxy, origin-form directly and through the null relay, the same Host
// everywhere.
func wrkScript(dir, name, target, host string) (string, error) {
	lua := fmt.Sprintf("wrk.method = \"GET\"\nwrk.path = %q\nwrk.headers[\"Host\"] = %q\n", target, host)
	path := filepath.Join(dir, name+".lua")
	return path, os.WriteFile(path, []byte(lua), 0o644)
}

// runWrk runs wrk with one thread and conns keep-alive connections against
// addr for dur. cpus, when set, pins wrk (taskset) to those CPUs.
func runWrk(wrk, script, addr string, conns int, dur time.Duration, cpus string) (wrkRun, error) {
	secs := max(1, int(dur.Round(time.Second)/time.Second)) // wrk's -d takes whole seconds
	args := []string{"-t1", "-c", strconv.Itoa(conns), "-d", fmt.Sprintf("%ds", secs), "--latency", "-s", script, "http://" + addr + "/"}
	name := wrk
	if cpus != "" {
		args = append([]string{"-c", cpus, wrk}, args...)
		name = "taskset"
	}
	out, err := exec.Command(name, args...).CombinedOutput()
	if err != nil {
		return wrkRun{}, fmt.Errorf("%s %s: %v\n%s", name, strings.Join(args, " "), err, out)
	}
	return parseWrk(out)
}

// parseWrk reads wrk's --latency report.
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
		case len(f) >= 1 && (f[0] == "Non-2xx" || f[0] == "Socket"):
			return r, fmt.Errorf("wrk reported failures: %s\n%s", sc.Text(), out)
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
			return time.Duration(f * float64(u.unit)), nil
		}
	}
	return 0, fmt.Errorf("duration %q", s)
}
