package sandbox

import (
	"path/filepath"
	"strings"
	"testing"
)

// The hybrid layout of the CI machine: v2 with no controllers, pids and
// memory in v1 hierarchies, execwrap in a memory sub-cgroup.
const (
	testCgroupFile = "9:name=systemd:/\n8:pids:/\n4:memory:/process_api/abc\n0::/\n"
	testMountinfo  = `25 1 254:0 / / rw,relatime - ext4 /dev/vda rw
30 29 0:26 / /sys/fs/cgroup/pids rw,relatime - cgroup cgroup rw,pids
31 29 0:27 / /sys/fs/cgroup/memory rw,relatime - cgroup cgroup rw,memory
32 29 0:28 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw
33 29 0:29 /sub /mnt/scoped rw,relatime - cgroup cgroup rw,cpu
`
)

func TestParseCgroupHierarchies(t *testing.T) {
	hs := parseCgroupHierarchies(testCgroupFile, testMountinfo)
	got := map[string]string{}
	for _, h := range hs {
		key := "v2"
		if !h.v2 {
			key = strings.Join(h.controllers, ",")
		}
		got[key] = h.dir
	}
	want := map[string]string{"v2": "/sys/fs/cgroup/unified", "pids": "/sys/fs/cgroup/pids", "memory": "/sys/fs/cgroup/memory/process_api/abc"}
	if len(got) != len(want) {
		t.Fatalf("got %v, want %v", got, want)
	}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("%s: got %q, want %q", k, got[k], v)
		}
	}
	// A mount whose root is a sub-cgroup maps the path below it.
	if d := cgroupDir("/mnt/scoped", "/sub", "/sub/x"); d != "/mnt/scoped/x" {
		t.Fatalf("cgroupDir = %q", d)
	}
}

func FuzzParseCgroupHierarchies(f *testing.F) {
	f.Add(testCgroupFile, testMountinfo)
	f.Add("0::/../../etc\n", "1 1 0:1 / /sys/fs/cgroup rw - cgroup2 cgroup2 rw\n")
	f.Fuzz(func(t *testing.T, cg, mi string) {
		for _, h := range parseCgroupHierarchies(cg, mi) {
			if !filepath.IsAbs(h.dir) || filepath.Clean(h.dir) != h.dir {
				t.Fatalf("dir %q is not a clean absolute path", h.dir)
			}
		}
	})
}
