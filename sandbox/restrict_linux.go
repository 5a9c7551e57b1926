package sandbox

import (
	"fmt"
	"os"
	"runtime"
	"strconv"
	"strings"
	"unsafe"

	"github.com/landlock-lsm/go-landlock/landlock"
	llsys "github.com/landlock-lsm/go-landlock/landlock/syscall"
	"golang.org/x/sys/unix"
)

// Everything here acts on the calling OS thread only. The init locks its
// main goroutine to one thread, restricts that thread, and forks the command
// from it: the child inherits exactly that thread's credentials, no_new_privs,
// Landlock domain and seccomp filter. The thread is never unlocked.

// Securebits: NOROOT, NO_SETUID_FIXUP, NO_CAP_AMBIENT_RAISE and the lock bits
// of all four plus KEEP_CAPS_LOCKED, so root in the namespace gains nothing
// on execve.
const secureBitsLocked = 0x01 | 0x02 | 0x04 | 0x08 | 0x20 | 0x40 | 0x80

// dropCapabilities empties every capability set of this thread, sets
// no_new_privs and verifies the result from /proc/thread-self/status.
func dropCapabilities() error {
	hasSetpcap := false
	if st, err := threadCapState(); err == nil {
		hasSetpcap = st.Eff&(1<<unix.CAP_SETPCAP) != 0
	}
	if hasSetpcap {
		last := lastCap()
		for c := 0; c <= last; c++ {
			if err := unix.Prctl(unix.PR_CAPBSET_DROP, uintptr(c), 0, 0, 0); err != nil {
				return fmt.Errorf("PR_CAPBSET_DROP %d: %w", c, err)
			}
		}
		if err := unix.Prctl(unix.PR_SET_SECUREBITS, secureBitsLocked, 0, 0, 0); err != nil {
			return fmt.Errorf("PR_SET_SECUREBITS: %w", err)
		}
	}
	if err := unix.Prctl(unix.PR_CAP_AMBIENT, unix.PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0); err != nil {
		return fmt.Errorf("PR_CAP_AMBIENT_CLEAR_ALL: %w", err)
	}
	hdr := unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}
	var data [2]unix.CapUserData
	if err := unix.Capset(&hdr, &data[0]); err != nil {
		return fmt.Errorf("capset(0): %w", err)
	}
	if err := unix.Prctl(unix.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0); err != nil {
		return fmt.Errorf("PR_SET_NO_NEW_PRIVS: %w", err)
	}
	st, err := threadCapState()
	if err != nil {
		return err
	}
	return verifyDropped(st, os.Getuid())
}

func threadCapState() (capState, error) {
	b, err := os.ReadFile("/proc/thread-self/status")
	if err != nil {
		return capState{}, fmt.Errorf("read /proc/thread-self/status: %w", err)
	}
	return parseCapStatus(string(b))
}

func lastCap() int {
	if b, err := os.ReadFile("/proc/sys/kernel/cap_last_cap"); err == nil {
		if n, err := strconv.Atoi(strings.TrimSpace(string(b))); err == nil && n > 0 && n < 64 {
			return n
		}
	}
	return unix.CAP_LAST_CAP
}

// LandlockABI returns the kernel's Landlock ABI version, 0 when unavailable.
func LandlockABI() int {
	v, err := llsys.LandlockGetABIVersion()
	if err != nil {
		return 0
	}
	return v
}

// landlockRules describes one Landlock domain.
type landlockRules struct {
	RWDirs       []string
	ConnectPorts []uint16 // only with HandleNet
	HandleNet    bool     // restrict TCP bind/connect (landlock tier)
	Required     bool     // fail instead of best effort
	MinABI       int
	// HostDev: the host's /dev is in view (landlock tier). "/" is then
	// granted entry by entry without /dev, and /dev only for the usual
	// nodes and OwnPTY (the command's pty), so no other terminal (or
	// /dev/kmsg, loop, …) can be read or written.
	HostDev bool
	OwnPTY  string
	// Hidden are paths no rule may cover (SPEC §6.5): the grants are split
	// around them (hide_linux.go). SplitRW splits the read-write grants
	// too (the landlock tier, which has no mounts to hide them), also
	// around ReadOnly: the paths it protects in the writable roots
	// (llprotect_linux.go).
	Hidden   []hiddenPath
	ReadOnly []string
	SplitRW  bool
}

// applyLandlock restricts this thread. It returns the ABI in force (0 when
// Landlock is unavailable and not required).
func applyLandlock(r landlockRules) (int, error) {
	abi := LandlockABI()
	if abi < r.MinABI {
		if r.Required {
			return abi, fmt.Errorf("landlock ABI %d < %d required", abi, r.MinABI)
		}
		return abi, nil
	}
	if abi == 0 {
		return 0, nil
	}
	cfg := landlock.Config{HandledAccessFS: landlock.V11.HandledAccessFS, Scoped: landlock.V11.Scoped}
	if r.HandleNet {
		cfg.HandledAccessNet = landlock.V4.HandledAccessNet
	}
	cfg = cfg.BestEffort()
	rwDirs, split, err := r.splitRWDirs()
	if err != nil {
		return abi, err
	}
	rules := []landlock.Rule{
		landlock.RWDirs(rwDirs...).IgnoreIfMissing(),
		landlock.RWFiles("/dev/null", "/dev/zero", "/dev/full", "/dev/random", "/dev/urandom").IgnoreIfMissing(),
		landlock.RWFiles("/dev/tty", "/dev/ptmx").WithIoctlDev().IgnoreIfMissing(),
	}
	if r.HostDev {
		ro, roSplit := readOnlyRootWithoutDev(r.Hidden)
		rules, split = append(rules, ro...), append(split, roSplit...)
		if r.OwnPTY != "" {
			rules = append(rules, landlock.RWFiles(r.OwnPTY).WithIoctlDev())
		}
	} else {
		// The namespaces tier's /dev is its own (pts a new instance).
		roSplit, err := splitRO("/", r.Hidden, true)
		if err != nil {
			return abi, err
		}
		split = append(split, roSplit...)
		rules = append(rules, landlock.RWDirs("/dev/pts").WithIoctlDev().IgnoreIfMissing())
	}
	for _, p := range r.ConnectPorts {
		rules = append(rules, landlock.ConnectTCP(p))
	}
	fd, flags, err := cfg.NewRulesetFD(rules...)
	if err != nil {
		return abi, fmt.Errorf("landlock ruleset: %w", err)
	}
	if fd < 0 {
		if r.Required {
			return abi, fmt.Errorf("landlock: nothing enforceable at ABI %d", abi)
		}
		return abi, nil
	}
	defer unix.Close(fd)
	if err := addGrants(fd, split, handledFS(abi)); err != nil {
		return abi, err
	}
	if err := llsys.LandlockRestrictSelf(fd, flags); err != nil {
		return abi, fmt.Errorf("landlock_restrict_self: %w", err)
	}
	return abi, nil
}

// readOnlyRootWithoutDev grants read access to every top-level entry of
// "/" except /dev; entries holding a hidden path are split around it.
func readOnlyRootWithoutDev(hidden []hiddenPath) ([]landlock.Rule, []pathGrant) {
	ents, err := os.ReadDir("/")
	if err != nil {
		// Cannot list: the whole root, split around the hidden paths.
		split, _ := splitRO("/", hidden, false)
		return nil, split
	}
	var dirs, files []string
	var split []pathGrant
	for _, e := range ents {
		if e.Name() == "dev" {
			continue
		}
		p := "/" + e.Name()
		if anyHiddenBelow(hidden, p) {
			g, _ := splitRO(p, hidden, false)
			split = append(split, g...)
			continue
		}
		if fi, err := os.Stat(p); err == nil && fi.IsDir() {
			dirs = append(dirs, p)
		} else if err == nil {
			files = append(files, p)
		}
	}
	return []landlock.Rule{landlock.RODirs(dirs...).IgnoreIfMissing(), landlock.ROFiles(files...).IgnoreIfMissing()}, split
}

// installSeccomp loads the filter on this thread (no TSYNC, on purpose).
func installSeccomp(o FilterOptions) error {
	o.Arch = runtime.GOARCH
	raw, err := BuildFilter(o)
	if err != nil {
		return err
	}
	filt := make([]unix.SockFilter, len(raw))
	for i, in := range raw {
		filt[i] = unix.SockFilter{Code: in.Op, Jt: in.Jt, Jf: in.Jf, K: in.K}
	}
	prog := unix.SockFprog{Len: uint16(len(filt)), Filter: &filt[0]}
	if err := unix.Prctl(unix.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0); err != nil {
		return fmt.Errorf("PR_SET_NO_NEW_PRIVS: %w", err)
	}
	if _, _, e := unix.RawSyscall(unix.SYS_SECCOMP, unix.SECCOMP_SET_MODE_FILTER, 0, uintptr(unsafe.Pointer(&prog))); e != 0 {
		return fmt.Errorf("seccomp(SET_MODE_FILTER): %w", e)
	}
	runtime.KeepAlive(filt)
	return nil
}
