package sandbox

import (
	"bufio"
	"encoding/binary"
	"encoding/hex"
	"net"
	"net/netip"
	"os"
	"strconv"
	"strings"
	"sync/atomic"
)

// peerTree admits a loopback TCP connection only when the socket at its
// other end is held by a process of one tree: the run's init (landlock
// tier) or command (unsandboxed) and its descendants. Before the root is
// set, nothing is admitted. It reads /proc only: /proc/net/tcp to find the
// peer socket's inode, then the tree's /proc/<pid>/fd links.
type peerTree struct{ root atomic.Int64 }

func (t *peerTree) set(pid int) { t.root.Store(int64(pid)) }

// owns is the bridge's admission check.
func (t *peerTree) owns(c net.Conn) bool {
	root := int(t.root.Load())
	if root <= 0 {
		return false
	}
	la, lok := c.LocalAddr().(*net.TCPAddr)
	ra, rok := c.RemoteAddr().(*net.TCPAddr)
	if !lok || !rok {
		return false
	}
	// The peer's socket has our remote address as its local one.
	inode := tcpInode(ra.AddrPort(), la.AddrPort())
	if inode == "" {
		return false
	}
	link := "socket:[" + inode + "]"
	for _, pid := range processTree(root) {
		if holdsLink(pid, link) {
			return true
		}
	}
	return false
}

// tcpInode finds the inode of the IPv4 TCP socket local→remote in this
// network namespace's /proc/net/tcp ("" when absent).
func tcpInode(local, remote netip.AddrPort) string {
	f, err := os.Open("/proc/net/tcp")
	if err != nil {
		return ""
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Scan() // header
	local = netip.AddrPortFrom(local.Addr().Unmap(), local.Port())
	remote = netip.AddrPortFrom(remote.Addr().Unmap(), remote.Port())
	for sc.Scan() {
		fl := strings.Fields(sc.Text())
		if len(fl) < 10 {
			continue
		}
		l, lok := parseProcNetAddr(fl[1])
		r, rok := parseProcNetAddr(fl[2])
		if lok && rok && l == local && r == remote {
			return fl[9]
		}
	}
	return ""
}

// parseProcNetAddr parses "0100007F:1F90": the address is the raw
// (network-order) 32-bit word printed in host order, the port is in host
// order.
func parseProcNetAddr(s string) (netip.AddrPort, bool) {
	a, p, ok := strings.Cut(s, ":")
	if !ok || (len(a) != 8 && len(a) != 32) {
		return netip.AddrPort{}, false
	}
	raw, err := hex.DecodeString(a)
	if err != nil {
		return netip.AddrPort{}, false
	}
	// /proc/net/tcp6 prints the 16 bytes as four such words.
	b := make([]byte, len(raw))
	for i := 0; i < len(raw); i += 4 {
		binary.NativeEndian.PutUint32(b[i:], binary.BigEndian.Uint32(raw[i:]))
	}
	port, err := strconv.ParseUint(p, 16, 16)
	if err != nil {
		return netip.AddrPort{}, false
	}
	ip, _ := netip.AddrFromSlice(b)
	return netip.AddrPortFrom(ip, uint16(port)), true
}

// processTree lists root and its descendants (through every thread's
// children list), bounded so a fork storm cannot stall the bridge.
func processTree(root int) []int {
	seen := map[int]bool{root: true}
	queue := []int{root}
	for i := 0; i < len(queue) && len(queue) < 4096; i++ {
		pid := strconv.Itoa(queue[i])
		tasks, _ := os.ReadDir("/proc/" + pid + "/task")
		for _, t := range tasks {
			b, _ := os.ReadFile("/proc/" + pid + "/task/" + t.Name() + "/children")
			for _, k := range strings.Fields(string(b)) {
				if c, err := strconv.Atoi(k); err == nil && !seen[c] {
					seen[c] = true
					queue = append(queue, c)
				}
			}
		}
	}
	return queue
}

func holdsLink(pid int, link string) bool {
	dir := "/proc/" + strconv.Itoa(pid) + "/fd/"
	ents, err := os.ReadDir(dir)
	if err != nil {
		return false
	}
	for _, e := range ents {
		if l, err := os.Readlink(dir + e.Name()); err == nil && l == link {
			return true
		}
	}
	return false
}
