package sandbox

import (
	"bufio"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// ProcessTCPListeners lists the TCP sockets in LISTEN state that process
// pid holds (IPv4 and IPv6, as bound: a wildcard stays 0.0.0.0 or ::). It
// reads /proc/<pid>/fd and the process's own /proc/<pid>/net/tcp{,6}, so it
// needs the right to read that process's fd links (same user, or root).
func ProcessTCPListeners(pid int) ([]netip.AddrPort, error) {
	dir := "/proc/" + strconv.Itoa(pid) + "/fd/"
	ents, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("list the sockets of pid %d: %w", pid, err)
	}
	inodes := map[string]bool{}
	for _, e := range ents {
		if l, err := os.Readlink(dir + e.Name()); err == nil {
			if in, ok := strings.CutPrefix(l, "socket:["); ok {
				inodes[strings.TrimSuffix(in, "]")] = true
			}
		}
	}
	var out []netip.AddrPort
	for _, t := range []string{"tcp", "tcp6"} {
		f, err := os.Open("/proc/" + strconv.Itoa(pid) + "/net/" + t)
		if err != nil {
			continue // no IPv6 in this kernel
		}
		sc := bufio.NewScanner(f)
		sc.Scan() // header
		for sc.Scan() {
			fl := strings.Fields(sc.Text())
			const listen = "0A"
			if len(fl) < 10 || fl[3] != listen || !inodes[fl[9]] {
				continue
			}
			if a, ok := parseProcNetAddr(fl[1]); ok {
				out = append(out, a)
			}
		}
		f.Close()
	}
	return out, nil
}

// UnderAny reports whether path p is one of roots or below one.
func UnderAny(p string, roots []string) bool {
	clean := make([]string, len(roots))
	for i, r := range roots {
		clean[i] = filepath.Clean(r)
	}
	return underAny(filepath.Clean(p), clean)
}
