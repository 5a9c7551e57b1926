package sandbox

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"

	"golang.org/x/sys/unix"
)

// runCgroup is the cgroup of one run: a cgroup v2 directory (kill with
// cgroup.kill, pids.max and memory.max where the parent delegates those
// controllers) and, on hybrid hosts whose pids or memory controller lives
// in a v1 hierarchy, a directory there for the limit. It is created next to
// execwrap's own cgroup, named execwrap-<pid>-<n>, and removed at the end
// of the run. It never moves any process but the run's init into itself.
type runCgroup struct {
	v2     string   // "" when there is no v2 cgroup
	v1     []string // v1 directories holding a limit (pids, memory)
	limits []string // what is enforced: "pids", "memory"
}

// Limits bounds one run's resources. Zero fields mean no limit.
type Limits struct {
	MemoryBytes int64 // memory.max (v2) or memory.limit_in_bytes (v1)
	Pids        int   // pids.max
	TmpfsBytes  int64 // size= of /tmp, /run, /dev/shm (namespaces tier)
}

var cgroupSeq atomic.Int64

// cgroupHierarchy is one mounted cgroup hierarchy and execwrap's place in it.
type cgroupHierarchy struct {
	v2          bool
	controllers []string // v1: the controllers of the hierarchy
	dir         string   // execwrap's own cgroup directory
}

// hostCgroups reads /proc/self/cgroup and /proc/self/mountinfo.
func hostCgroups() ([]cgroupHierarchy, error) {
	own, err := os.ReadFile("/proc/self/cgroup")
	if err != nil {
		return nil, err
	}
	mi, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return nil, err
	}
	return parseCgroupHierarchies(string(own), string(mi)), nil
}

// parseCgroupHierarchies pairs the lines of /proc/self/cgroup with the
// cgroup mounts of /proc/self/mountinfo: the v2 hierarchy and every v1
// hierarchy carrying pids or memory, each with execwrap's own directory.
func parseCgroupHierarchies(cgroupFile, mountinfo string) []cgroupHierarchy {
	own := map[string]string{} // "" for v2, else the v1 controller list
	for line := range strings.SplitSeq(strings.TrimSpace(cgroupFile), "\n") {
		parts := strings.SplitN(line, ":", 3)
		if len(parts) == 3 && strings.HasPrefix(parts[2], "/") {
			own[parts[1]] = parts[2]
		}
	}
	var hs []cgroupHierarchy
	for line := range strings.SplitSeq(mountinfo, "\n") {
		pre, post, ok := strings.Cut(line, " - ")
		if !ok {
			continue
		}
		pf, qf := strings.Fields(pre), strings.Fields(post)
		if len(pf) < 5 || len(qf) < 3 || !strings.HasPrefix(pf[4], "/") {
			continue
		}
		root, mnt := pf[3], pf[4]
		switch qf[0] {
		case "cgroup2":
			if p, ok := own[""]; ok {
				hs = append(hs, cgroupHierarchy{v2: true, dir: cgroupDir(mnt, root, p)})
			}
		case "cgroup":
			var ctrls []string
			for _, o := range strings.Split(qf[2], ",") {
				if o == "pids" || o == "memory" {
					ctrls = append(ctrls, o)
				}
			}
			for key, p := range own {
				if key != "" && len(ctrls) > 0 && containsAll(strings.Split(key, ","), ctrls) {
					hs = append(hs, cgroupHierarchy{controllers: ctrls, dir: cgroupDir(mnt, root, p)})
				}
			}
		}
	}
	return hs
}

func containsAll(have, want []string) bool {
	for _, w := range want {
		if !contains(have, w) {
			return false
		}
	}
	return true
}

// cgroupDir maps a /proc/self/cgroup path to a directory under the mount
// point of a hierarchy whose mounted root is root.
func cgroupDir(mnt, root, p string) string {
	rel := p
	if root != "/" {
		rel = strings.TrimPrefix(p, root)
	}
	return filepath.Join(mnt, filepath.Clean("/"+rel))
}

// newRunCgroup creates the run's cgroup(s) and writes the limits. A host
// without a writable cgroup hierarchy gives (nil, note, nil): the run goes
// on without a cgroup and the note says why.
func newRunCgroup(l Limits) (*runCgroup, string, error) {
	hs, err := hostCgroups()
	if err != nil {
		return nil, "cgroup_unavailable:" + errnoName(err), nil
	}
	name := fmt.Sprintf("execwrap-%d-%d", os.Getpid(), cgroupSeq.Add(1))
	c := &runCgroup{}
	need := map[string]bool{"pids": l.Pids > 0, "memory": l.MemoryBytes > 0}
	var firstErr error
	for _, h := range hs {
		if !h.v2 {
			continue
		}
		gcStaleCgroups(h.dir)
		dir := filepath.Join(h.dir, name)
		if err := os.Mkdir(dir, 0o755); err != nil {
			firstErr = err
			break
		}
		c.v2 = dir
		if _, err := os.Stat(filepath.Join(dir, "cgroup.kill")); err != nil {
			// Before Linux 5.14: keep it for the limits, kill by listing.
			c.limits = append(c.limits, "no_cgroup_kill")
		}
		sub, _ := os.ReadFile(filepath.Join(h.dir, "cgroup.subtree_control"))
		ctrls := strings.Fields(string(sub))
		if need["pids"] && contains(ctrls, "pids") {
			if err := writeCgroupFile(dir, "pids.max", strconv.Itoa(l.Pids)); err != nil {
				c.remove()
				return nil, "", err
			}
			need["pids"] = false
			c.limits = append(c.limits, "pids")
		}
		if need["memory"] && contains(ctrls, "memory") {
			if err := writeCgroupFile(dir, "memory.max", strconv.FormatInt(l.MemoryBytes, 10)); err != nil {
				c.remove()
				return nil, "", err
			}
			_ = writeCgroupFile(dir, "memory.swap.max", "0")
			need["memory"] = false
			c.limits = append(c.limits, "memory")
		}
		break
	}
	for _, h := range hs {
		if h.v2 {
			continue
		}
		var files [][2]string
		for _, ctrl := range h.controllers {
			switch {
			case ctrl == "pids" && need["pids"]:
				files = append(files, [2]string{"pids.max", strconv.Itoa(l.Pids)})
			case ctrl == "memory" && need["memory"]:
				files = append(files, [2]string{"memory.limit_in_bytes", strconv.FormatInt(l.MemoryBytes, 10)})
			}
		}
		if len(files) == 0 {
			continue
		}
		gcStaleCgroups(h.dir)
		dir := filepath.Join(h.dir, name)
		if err := os.Mkdir(dir, 0o755); err != nil {
			if firstErr == nil {
				firstErr = err
			}
			continue
		}
		c.v1 = append(c.v1, dir)
		for _, f := range files {
			if err := writeCgroupFile(dir, f[0], f[1]); err != nil {
				c.remove()
				return nil, "", err
			}
			ctrl, _, _ := strings.Cut(f[0], ".")
			need[ctrl] = false
			c.limits = append(c.limits, ctrl)
		}
		if contains(h.controllers, "memory") {
			_ = writeCgroupFile(dir, "memory.memsw.limit_in_bytes", strconv.FormatInt(l.MemoryBytes, 10))
		}
	}
	if c.v2 == "" && len(c.v1) == 0 {
		if firstErr == nil {
			firstErr = errors.New("no cgroup hierarchy")
		}
		return nil, "cgroup_unavailable:" + errnoName(firstErr), nil
	}
	var notes []string
	if c.v2 == "" {
		notes = append(notes, "cgroup_v2_unavailable")
	}
	for ctrl, missing := range need {
		if missing {
			notes = append(notes, "limit_unavailable:"+ctrl)
		}
	}
	return c, strings.Join(notes, ","), nil
}

func writeCgroupFile(dir, name, value string) error {
	if err := os.WriteFile(filepath.Join(dir, name), []byte(value), 0); err != nil {
		return fmt.Errorf("cgroup %s/%s: %w", dir, name, err)
	}
	return nil
}

// gcStaleCgroups removes empty run cgroups whose execwrap is gone (a run
// that ended before its init had left the cgroup).
func gcStaleCgroups(parent string) {
	ents, err := os.ReadDir(parent)
	if err != nil {
		return
	}
	for _, e := range ents {
		rest, ok := strings.CutPrefix(e.Name(), "execwrap-")
		if !ok || !e.IsDir() {
			continue
		}
		pidStr, _, _ := strings.Cut(rest, "-")
		pid, err := strconv.Atoi(pidStr)
		if err != nil || pid == os.Getpid() {
			continue
		}
		if unix.Kill(pid, 0) == unix.ESRCH {
			_ = unix.Rmdir(filepath.Join(parent, e.Name()))
		}
	}
}

// v2DirFD opens the v2 cgroup directory for CLONE_INTO_CGROUP (-1: none).
func (c *runCgroup) v2DirFD() int {
	if c == nil || c.v2 == "" {
		return -1
	}
	fd, err := unix.Open(c.v2, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return -1
	}
	return fd
}

// openJoinFiles opens, for the init to write "0" to: the `tasks` file of
// every v1 cgroup (moving only the writing thread — the one that forks the
// command — takes no global lock, unlike cgroup.procs) and, with v2, the
// v2 cgroup.procs. All close-on-exec.
func (c *runCgroup) openJoinFiles(v2 bool) ([]int, error) {
	var paths []string
	if v2 && c.v2 != "" {
		paths = append(paths, filepath.Join(c.v2, "cgroup.procs"))
	}
	for _, d := range c.v1 {
		paths = append(paths, filepath.Join(d, "tasks"))
	}
	var fds []int
	for _, p := range paths {
		fd, err := unix.Open(p, unix.O_WRONLY|unix.O_CLOEXEC, 0)
		if err != nil {
			for _, f := range fds {
				unix.Close(f)
			}
			return nil, fmt.Errorf("cgroup %s: %w", p, err)
		}
		fds = append(fds, fd)
	}
	return fds, nil
}

// kill SIGKILLs every process of the run, wherever it moved in its session
// or process tree.
func (c *runCgroup) kill() {
	if c.v2 != "" && writeCgroupFile(c.v2, "cgroup.kill", "1") == nil {
		return
	}
	for _, d := range append([]string{c.v2}, c.v1...) {
		if d == "" {
			continue
		}
		for range 8 {
			b, err := os.ReadFile(filepath.Join(d, "cgroup.procs"))
			pids := strings.Fields(string(b))
			if err != nil || len(pids) == 0 {
				break
			}
			for _, p := range pids {
				if n, err := strconv.Atoi(p); err == nil {
					_ = unix.Kill(n, unix.SIGKILL)
				}
			}
		}
		return
	}
}

// remove kills what is left and removes the directories. One whose
// processes have not finished exiting yet (EBUSY) is left to a later run's
// gcStaleCgroups rather than waited for: the run's result must not wait for
// the kernel to tear the sandbox down.
func (c *runCgroup) remove() {
	c.kill()
	for _, d := range append([]string{c.v2}, c.v1...) {
		if d != "" {
			_ = unix.Rmdir(d)
		}
	}
}

// CgroupSupport is what `execwrap doctor` reports about per-run cgroups.
type CgroupSupport struct {
	OK     bool     `json:"ok"`
	Kill   bool     `json:"cgroup_kill"`
	Limits []string `json:"limits,omitempty"` // enforceable: pids, memory
	Note   string   `json:"note,omitempty"`
}

// ProbeCgroups really creates (and removes) a run cgroup with both limits.
func ProbeCgroups() CgroupSupport {
	c, note, err := newRunCgroup(Limits{Pids: 4096, MemoryBytes: 1 << 30})
	if err != nil {
		return CgroupSupport{Note: err.Error()}
	}
	if c == nil {
		return CgroupSupport{Note: note}
	}
	defer c.remove()
	s := CgroupSupport{OK: true, Kill: c.v2 != "" && !contains(c.limits, "no_cgroup_kill"), Note: note}
	for _, l := range c.limits {
		if l == "pids" || l == "memory" {
			s.Limits = append(s.Limits, l)
		}
	}
	return s
}
