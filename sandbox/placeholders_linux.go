package sandbox

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// Placeholders of missing protected names (SPEC §6.5) are shared by every
// run in a workspace and must outlive all of them, however each ends. The
// state lives per writable root in a host folder the sandbox cannot reach
// (its /run and /tmp are private), as three files:
//
//	KEY.lock    mutex for creating and removing; its content lists the
//	            placeholders made (so a later process can remove them)
//	KEY.users   each run holds a shared flock for as long as it relies on
//	            them; the kernel drops it when the process dies, SIGKILL
//	            included
//	KEY.janitor held exclusively by the janitor while it lives
//
// The users lock is only ever tested (never waited for exclusively) while
// holding the mutex, so a run that starts and one that ends are ordered.
// The last run to end removes the placeholders; a run killed before it
// could leaves that to the janitor, a detached process (started by the run
// that made the first placeholders when none is alive) that polls and
// removes them once no run holds the users lock.

// janitorEnv makes the init binary run as the placeholder janitor for the
// state path prefix it names.
const janitorEnv = "EXECWRAP_SANDBOX_PLACEHOLDER_JANITOR"

const (
	janitorPoll = 100 * time.Millisecond
	// janitorIdle is how long the janitor stays for the next run after
	// the last placeholders went (consecutive runs then start none).
	janitorIdle = 2 * time.Second
)

// placeholderLease is one run's hold on the placeholders of its roots.
type placeholderLease struct {
	users []*os.File // one per root, each holding LOCK_SH
	bases []string
}

// placeholderStateDir is the host folder of the placeholder state: owned by
// the caller, mode 0700, not a symlink (anything else fails closed).
func placeholderStateDir() (string, error) {
	dir := filepath.Join(os.TempDir(), "execwrap-placeholders-"+strconv.Itoa(os.Geteuid()))
	if x := os.Getenv("XDG_RUNTIME_DIR"); filepath.IsAbs(x) {
		dir = filepath.Join(x, "execwrap-placeholders")
	}
	if err := os.Mkdir(dir, 0o700); err != nil && !errors.Is(err, os.ErrExist) {
		return "", err
	}
	var st unix.Stat_t
	if err := unix.Lstat(dir, &st); err != nil {
		return "", err
	}
	if st.Mode&unix.S_IFMT != unix.S_IFDIR || int(st.Uid) != os.Geteuid() || st.Mode&0o077 != 0 {
		return "", fmt.Errorf("%s must be a folder owned by uid %d with mode 0700; remove it", dir, os.Geteuid())
	}
	return dir, nil
}

func placeholderBase(dir, root string) string {
	h := sha256.Sum256([]byte(filepath.Clean(root)))
	return filepath.Join(dir, hex.EncodeToString(h[:16]))
}

func openState(path string) (*os.File, error) {
	return os.OpenFile(path, os.O_RDWR|os.O_CREATE|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o600)
}

func flock(f *os.File, how int) error {
	for {
		err := unix.Flock(int(f.Fd()), how)
		if !errors.Is(err, unix.EINTR) {
			return err
		}
	}
}

// acquirePlaceholders makes a placeholder (an empty mode-0 directory the
// init mounts read-only over) for every protected name missing under each
// root and takes the run's hold on them. start runs the janitor when one is
// needed and none is alive.
func acquirePlaceholders(roots, names []string, start func(base string)) (*placeholderLease, error) {
	dir, err := placeholderStateDir()
	if err != nil {
		return nil, fmt.Errorf("placeholder state: %w", err)
	}
	l := &placeholderLease{}
	roots = slices.Clone(roots)
	slices.Sort(roots) // one order for every run: no lock-order deadlock
	for _, r := range slices.Compact(roots) {
		base := placeholderBase(dir, r)
		users, needJanitor, err := acquireRoot(base, r, names)
		if err != nil {
			l.release()
			return nil, err
		}
		l.users, l.bases = append(l.users, users), append(l.bases, base)
		if needJanitor {
			start(base)
		}
	}
	return l, nil
}

func acquireRoot(base, root string, names []string) (users *os.File, needJanitor bool, err error) {
	mu, err := openState(base + ".lock")
	if err != nil {
		return nil, false, err
	}
	defer mu.Close() // closing drops the mutex
	if err := flock(mu, unix.LOCK_EX); err != nil {
		return nil, false, err
	}
	users, err = openState(base + ".users")
	if err != nil {
		return nil, false, err
	}
	// Only a holder of the mutex takes the users lock exclusively (and
	// then only with LOCK_NB), so this never waits.
	if err := flock(users, unix.LOCK_SH); err != nil {
		users.Close()
		return nil, false, err
	}
	list := readList(mu)
	for _, n := range names {
		p := filepath.Join(root, n)
		if unix.Mkdirat(unix.AT_FDCWD, p, 0) == nil && !slices.Contains(list, p) {
			list = append(list, p)
		}
	}
	if err := writeList(mu, list); err != nil {
		users.Close()
		return nil, false, err
	}
	return users, len(list) > 0 && !janitorAlive(base), nil
}

func readList(f *os.File) []string {
	b, err := os.ReadFile(f.Name())
	if err != nil {
		return nil
	}
	var out []string
	for _, l := range strings.Split(string(b), "\n") {
		if filepath.IsAbs(l) {
			out = append(out, l)
		}
	}
	return out
}

func writeList(f *os.File, list []string) error {
	var b bytes.Buffer
	for _, l := range list {
		b.WriteString(l + "\n")
	}
	if err := f.Truncate(0); err != nil {
		return err
	}
	_, err := f.WriteAt(b.Bytes(), 0)
	return err
}

// removeIfLast removes the listed placeholders when no run holds the
// users lock (the caller holds the mutex) and reports whether none is left.
func removeIfLast(mu, users *os.File) bool {
	if flock(users, unix.LOCK_EX|unix.LOCK_NB) != nil {
		return false
	}
	defer flock(users, unix.LOCK_UN)
	for _, p := range readList(mu) {
		_ = unix.Rmdir(p) // only while still an empty directory
	}
	_ = writeList(mu, nil)
	return true
}

// release drops the run's hold; the last run removes the placeholders.
func (l *placeholderLease) release() {
	if l == nil {
		return
	}
	for i, users := range l.users {
		if mu, err := openState(l.bases[i] + ".lock"); err == nil {
			if flock(mu, unix.LOCK_EX) == nil {
				_ = flock(users, unix.LOCK_UN)
				removeIfLast(mu, users)
			}
			mu.Close()
		}
		users.Close()
	}
	l.users, l.bases = nil, nil
}

func janitorAlive(base string) bool {
	f, err := openState(base + ".janitor")
	if err != nil {
		return false // fail towards starting one
	}
	defer f.Close()
	return flock(f, unix.LOCK_EX|unix.LOCK_NB) != nil
}

// startJanitor runs the init binary detached (own session, no stdio, no
// parent-death signal) as the janitor for base.
func startJanitor(initPath string, initArgs []string, base string) {
	cmd := exec.Command(initPath, initArgs...)
	cmd.Env = []string{janitorEnv + "=" + base}
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if cmd.Start() == nil {
		_ = cmd.Process.Release()
	}
}

// placeholderJanitor removes the placeholders of base once no run holds
// them (two polls in a row, so a SIGKILLed execwrap's sandbox, killed by
// its parent-death signal, is gone) and exits after janitorIdle without
// any.
func placeholderJanitor(base string) int {
	me, err := openState(base + ".janitor")
	if err != nil || flock(me, unix.LOCK_EX|unix.LOCK_NB) != nil {
		return 0 // another janitor is alive
	}
	var freeSince time.Time
	for {
		time.Sleep(janitorPoll)
		mu, err := openState(base + ".lock")
		if err != nil {
			return 1
		}
		users, err := openState(base + ".users")
		if err != nil || flock(mu, unix.LOCK_EX) != nil {
			mu.Close()
			return 1
		}
		free := flock(users, unix.LOCK_EX|unix.LOCK_NB) == nil
		if free {
			_ = flock(users, unix.LOCK_UN)
		}
		done := false
		switch {
		case !free:
			freeSince = time.Time{}
		case freeSince.IsZero():
			freeSince = time.Now()
		default:
			removeIfLast(mu, users)
			// Exit only while holding the mutex: a run that starts next
			// then sees no janitor and starts one.
			done = time.Since(freeSince) >= janitorIdle
			if done {
				me.Close()
			}
		}
		users.Close()
		mu.Close()
		if done {
			return 0
		}
	}
}
