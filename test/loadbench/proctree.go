package main

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// Process-tree accounting for the peer bench: Squid and Dante fork
// children, so every measure of "the proxy" (CPU time, memory, CPU pinning,
// shutdown) covers the root process and all its descendants. It only reads
// /proc and signals the processes of a tree this benchmark started.

// procStat is what /proc/PID/stat tells about one process.
type procStat struct {
	ppid int
	// cpu is utime+stime of the process (all its threads, live and
	// exited) plus cutime+cstime (its children that exited and were
	// waited for), so a tree's sum counts a reaped child once, in its
	// reaping parent.
	cpu time.Duration
}

func readProcStat(pid int) (procStat, error) {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return procStat{}, err
	}
	i := bytes.LastIndexByte(data, ')')
	if i < 0 {
		return procStat{}, fmt.Errorf("/proc/%d/stat: no command field", pid)
	}
	// Fields after the parenthesised command, from state (index 0): ppid
	// is 1, utime 11, stime 12, cutime 13, cstime 14.
	f := strings.Fields(string(data[i+1:]))
	if len(f) < 15 {
		return procStat{}, fmt.Errorf("/proc/%d/stat: %d fields", pid, len(f))
	}
	var s procStat
	if s.ppid, err = strconv.Atoi(f[1]); err != nil {
		return procStat{}, fmt.Errorf("/proc/%d/stat: ppid: %w", pid, err)
	}
	var ticks int64
	for _, k := range []int{11, 12, 13, 14} {
		v, err := strconv.ParseInt(f[k], 10, 64)
		if err != nil {
			return procStat{}, fmt.Errorf("/proc/%d/stat: field %d: %w", pid, k, err)
		}
		ticks += v
	}
	s.cpu = time.Duration(ticks) * (time.Second / clockTicks)
	return s, nil
}

// treePIDs returns root and every live descendant of it (root first).
func treePIDs(root int) ([]int, error) {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return nil, err
	}
	children := map[int][]int{}
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		st, err := readProcStat(pid)
		if err != nil {
			continue // exited meanwhile
		}
		children[st.ppid] = append(children[st.ppid], pid)
	}
	if _, err := os.Stat(fmt.Sprintf("/proc/%d", root)); err != nil {
		return nil, fmt.Errorf("process %d: %w", root, err)
	}
	out := []int{root}
	for i := 0; i < len(out); i++ {
		out = append(out, children[out[i]]...)
	}
	return out, nil
}

// treeCPU is the CPU time (user+system) used so far by root's tree,
// including its reaped children.
func treeCPU(root int) (time.Duration, error) {
	pids, err := treePIDs(root)
	if err != nil {
		return 0, err
	}
	var sum time.Duration
	for _, pid := range pids {
		st, err := readProcStat(pid)
		if err != nil {
			if pid == root {
				return 0, err
			}
			continue
		}
		sum += st.cpu
	}
	return sum, nil
}

// treePss is the proportional set size of root's tree in bytes: the sum of
// Pss over /proc/PID/smaps_rollup, so pages shared between Squid's or
// Dante's processes (and with anything else) are counted once overall.
func treePss(root int) (int64, error) {
	pids, err := treePIDs(root)
	if err != nil {
		return 0, err
	}
	var sum int64
	for _, pid := range pids {
		data, err := os.ReadFile(fmt.Sprintf("/proc/%d/smaps_rollup", pid))
		if err != nil {
			if pid == root {
				return 0, err
			}
			continue
		}
		found := false
		for _, line := range strings.Split(string(data), "\n") {
			if v, ok := strings.CutPrefix(line, "Pss:"); ok {
				kb, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
				if err != nil {
					return 0, fmt.Errorf("/proc/%d/smaps_rollup: Pss %q: %w", pid, v, err)
				}
				sum += kb << 10
				found = true
				break
			}
		}
		if !found {
			return 0, fmt.Errorf("/proc/%d/smaps_rollup: no Pss line", pid)
		}
	}
	return sum, nil
}

// pinTree pins every thread of every process of root's tree (nil: all
// CPUs). Processes forked later inherit the affinity of their parent.
func pinTree(root int, cpus []int) error {
	pids, err := treePIDs(root)
	if err != nil {
		return err
	}
	for _, pid := range pids {
		if err := pin(pid, cpus); err != nil && !errors.Is(err, os.ErrNotExist) {
			return err
		}
	}
	return nil
}

// killTree sends SIGTERM to every process of root's tree, waits up to
// grace for them to go, then SIGKILLs what is left. wait, when set, reaps
// root (it is this process's child).
func killTree(root int, grace time.Duration, wait func()) {
	pids, _ := treePIDs(root)
	if len(pids) == 0 {
		pids = []int{root}
	}
	for _, pid := range pids {
		syscall.Kill(pid, syscall.SIGTERM)
	}
	done := make(chan struct{})
	go func() {
		if wait != nil {
			wait()
		}
		close(done)
	}()
	deadline := time.Now().Add(grace)
	for time.Now().Before(deadline) && anyAlive(pids[1:]) {
		time.Sleep(50 * time.Millisecond)
	}
	select {
	case <-done:
	case <-time.After(time.Until(deadline)):
	}
	for _, pid := range pids {
		syscall.Kill(pid, syscall.SIGKILL)
	}
	<-done
}

// anyAlive reports whether one of pids still exists (zombies count as
// gone).
func anyAlive(pids []int) bool {
	for _, pid := range pids {
		data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
		if err != nil {
			continue
		}
		if i := bytes.LastIndexByte(data, ')'); i > 0 && i+2 < len(data) && data[i+2] != 'Z' {
			return true
		}
	}
	return false
}

// tcpOpens reads the machine's TCP ActiveOpens and PassiveOpens counters
// (/proc/net/snmp): the peer bench uses PassiveOpens to check that the
// new-connection row really opened a connection per request.
func tcpOpens() (active, passive int64, err error) {
	data, err := os.ReadFile("/proc/net/snmp")
	if err != nil {
		return 0, 0, err
	}
	var names []string
	for _, line := range strings.Split(string(data), "\n") {
		rest, ok := strings.CutPrefix(line, "Tcp:")
		if !ok {
			continue
		}
		f := strings.Fields(rest)
		if names == nil {
			names = f
			continue
		}
		for i, n := range names {
			if i >= len(f) {
				break
			}
			switch n {
			case "ActiveOpens":
				active, _ = strconv.ParseInt(f[i], 10, 64)
			case "PassiveOpens":
				passive, _ = strconv.ParseInt(f[i], 10, 64)
			}
		}
		return active, passive, nil
	}
	return 0, 0, errors.New("/proc/net/snmp: no Tcp lines")
}
