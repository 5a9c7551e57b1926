package sandbox

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"golang.org/x/sys/unix"
)

// stepError names the init step that failed so the parent can report it.
type stepError struct {
	Step string
	Err  error
}

func (e *stepError) Error() string { return e.Step + ": " + e.Err.Error() }
func (e *stepError) Unwrap() error { return e.Err }

func stepErr(step string, err error) error {
	if err == nil {
		return nil
	}
	return &stepError{Step: step, Err: err}
}

// applyMounts builds the filesystem view (reference sandbox.md §3.2 step 1)
// and returns setup notes.
// prepared, when non-nil, is called before the protected names are bound:
// it waits until the parent has created the placeholders.
func applyMounts(p mountPlan, prepared func() error) (notes []string, err error) {
	if err := unix.Mount("", "/", "", unix.MS_REC|unix.MS_PRIVATE, ""); err != nil {
		return nil, stepErr("mount_private_root", err)
	}
	type clone struct {
		cloneStep
		fd int
	}
	var clones []clone
	defer func() {
		for _, c := range clones {
			unix.Close(c.fd)
		}
	}()
	for _, c := range p.Clones {
		fd, err := unix.OpenTree(unix.AT_FDCWD, c.Path, unix.OPEN_TREE_CLONE|unix.OPEN_TREE_CLOEXEC|unix.AT_RECURSIVE)
		if err != nil {
			return nil, stepErr("open_tree "+c.Path, err)
		}
		clones = append(clones, clone{c, fd})
		attr := &unix.MountAttr{Attr_set: unix.MOUNT_ATTR_NOSUID | unix.MOUNT_ATTR_NODEV}
		if c.ReadOnly {
			attr.Attr_set |= unix.MOUNT_ATTR_RDONLY
		}
		if err := unix.MountSetattr(fd, "", unix.AT_EMPTY_PATH|unix.AT_RECURSIVE, attr); err != nil {
			return nil, stepErr("mount_setattr "+c.Path, err)
		}
	}
	if err := unix.MountSetattr(unix.AT_FDCWD, "/", unix.AT_RECURSIVE,
		&unix.MountAttr{Attr_set: unix.MOUNT_ATTR_RDONLY | unix.MOUNT_ATTR_NOSUID}); err != nil {
		return nil, stepErr("mount_setattr_readonly_root", err)
	}
	devNotes, err := buildMinimalDev(p.TmpfsSize)
	if err != nil {
		return nil, err
	}
	notes = append(notes, devNotes...)
	for _, t := range p.Tmpfs {
		if err := unix.Mount("tmpfs", t.Path, "tmpfs", unix.MS_NOSUID|unix.MS_NODEV, tmpfsData(t.Mode, p.TmpfsSize)); err != nil {
			return nil, stepErr("tmpfs "+t.Path, err)
		}
	}
	// /dev itself is read-only once populated (its pts, shm and the bound
	// device nodes are mounts of their own).
	if err := unix.MountSetattr(unix.AT_FDCWD, "/dev", 0, &unix.MountAttr{Attr_set: unix.MOUNT_ATTR_RDONLY}); err != nil {
		return nil, stepErr("dev_readonly", err)
	}
	for _, c := range clones {
		if err := os.MkdirAll(c.Path, 0o755); err != nil {
			return nil, stepErr("mkdir "+c.Path, err)
		}
		if err := unix.MoveMount(c.fd, "", unix.AT_FDCWD, c.Path, unix.MOVE_MOUNT_F_EMPTY_PATH); err != nil {
			return nil, stepErr("move_mount "+c.Path, err)
		}
	}
	// Nested repositories are found while the parent makes the
	// placeholders, and resolved before anything is mounted on a .git.
	gitProt, gitErr := planGitProtection(p)
	if prepared != nil {
		if err := prepared(); err != nil {
			return nil, stepErr("await_prepared", err)
		}
	}
	if gitErr != nil {
		return nil, stepErr("git_scan", gitErr)
	}
	for _, root := range p.ProtectedRoots {
		for _, name := range p.ProtectedNames {
			n, err := protectPath(root, filepath.Join(root, name))
			if err != nil {
				return nil, err
			}
			notes = append(notes, n...)
		}
	}
	gitNotes, err := gitProt.apply()
	if err != nil {
		return nil, err
	}
	notes = append(notes, gitNotes...)
	// Secrets last: a hidden path inside a protected .git target or a
	// writable root is covered after everything else is mounted.
	n, err := hideMounts(p.Hidden)
	if err != nil {
		return nil, err
	}
	notes = append(notes, n...)
	if err := unix.Mount("proc", "/proc", "proc", unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, ""); err != nil {
		// Host /proc stays, read-only; the command then sees host pids.
		notes = append(notes, "proc_fallback:"+errnoName(err))
	}
	return notes, nil
}

// devNodes are the host device nodes the sandbox's /dev gets (bound, since
// a user namespace cannot mknod), as `bwrap --dev` does.
var devNodes = []string{"null", "zero", "full", "random", "urandom", "tty"}

// devLinks are the usual /dev symlinks.
var devLinks = [][2]string{
	{"pts/ptmx", "/dev/ptmx"}, {"/proc/self/fd", "/dev/fd"},
	{"/proc/self/fd/0", "/dev/stdin"}, {"/proc/self/fd/1", "/dev/stdout"}, {"/proc/self/fd/2", "/dev/stderr"},
}

// buildMinimalDev replaces the host's /dev with a small tmpfs holding only
// devNodes, a new devpts instance (no other user's terminal is visible),
// an empty shm directory (its tmpfs comes with the private tmpfs mounts)
// and devLinks. The host nodes are cloned before /dev is covered. A host
// without some node just lacks it inside; a failing devpts mount is
// reported (no ptys inside) rather than falling back to the host's.
func buildMinimalDev(size string) (notes []string, err error) {
	type node struct {
		name string
		fd   int
	}
	var nodes []node
	defer func() {
		for _, n := range nodes {
			unix.Close(n.fd)
		}
	}()
	for _, n := range devNodes {
		fd, err := unix.OpenTree(unix.AT_FDCWD, "/dev/"+n, unix.OPEN_TREE_CLONE|unix.OPEN_TREE_CLOEXEC)
		if err != nil {
			notes = append(notes, "dev_missing:"+n)
			continue
		}
		nodes = append(nodes, node{n, fd})
	}
	if err := unix.Mount("tmpfs", "/dev", "tmpfs", unix.MS_NOSUID|unix.MS_NOEXEC, tmpfsData("0755", "1m")); err != nil {
		return nil, stepErr("dev_tmpfs", err)
	}
	for _, d := range []string{"/dev/pts", "/dev/shm"} {
		if err := unix.Mkdir(d, 0o755); err != nil {
			return nil, stepErr("mkdir "+d, err)
		}
	}
	for _, n := range nodes {
		path := "/dev/" + n.name
		fd, err := unix.Open(path, unix.O_CREAT|unix.O_EXCL|unix.O_WRONLY|unix.O_CLOEXEC, 0o666)
		if err != nil {
			return nil, stepErr("create "+path, err)
		}
		unix.Close(fd)
		if err := unix.MoveMount(n.fd, "", unix.AT_FDCWD, path, unix.MOVE_MOUNT_F_EMPTY_PATH); err != nil {
			return nil, stepErr("bind "+path, err)
		}
	}
	for _, l := range devLinks {
		if err := unix.Symlink(l[0], l[1]); err != nil {
			return nil, stepErr("symlink "+l[1], err)
		}
	}
	if err := unix.Mount("devpts", "/dev/pts", "devpts", unix.MS_NOSUID|unix.MS_NOEXEC, "newinstance,ptmxmode=0666,mode=620"); err != nil {
		notes = append(notes, "devpts_unavailable:"+errnoName(err))
	}
	return notes, nil
}

// tmpfsData is a tmpfs mount's option string; size "" or "0" means the
// kernel default (half the RAM).
func tmpfsData(mode, size string) string {
	if size == "" || size == "0" {
		return "mode=" + mode
	}
	return "mode=" + mode + ",size=" + size
}

// protectPath re-binds path read-only. A symlink gets /dev/null mounted on
// the link itself so it cannot be swapped; a `.git` file's gitdir target is
// protected too. A missing path is reported, not created (creating it would
// leave a file in the user's tree).
func protectPath(root, path string) ([]string, error) {
	fi, err := os.Lstat(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, stepErr("protect "+path, err)
	}
	var notes []string
	switch {
	case fi.Mode()&os.ModeSymlink != 0:
		if err := mountDevNullOn(path); err != nil {
			return nil, stepErr("protect_symlink "+path, err)
		}
		return []string{"protected_symlink:" + path}, nil
	case fi.Mode().IsRegular() && filepath.Base(path) == ".git":
		if b, rerr := os.ReadFile(path); rerr == nil {
			if t := gitdirTarget(root, string(b)); t != "" {
				if _, serr := os.Stat(t); serr == nil {
					if err := bindReadOnly(t); err != nil {
						return nil, stepErr("protect_gitdir "+t, err)
					}
					notes = append(notes, "protected_gitdir:"+t)
				}
			}
		}
	}
	if err := bindReadOnly(path); err != nil {
		return nil, stepErr("protect "+path, err)
	}
	return notes, nil
}

func bindReadOnly(path string) error {
	fd, err := unix.OpenTree(unix.AT_FDCWD, path, unix.OPEN_TREE_CLONE|unix.OPEN_TREE_CLOEXEC|unix.AT_RECURSIVE|unix.AT_SYMLINK_NOFOLLOW)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	if err := unix.MountSetattr(fd, "", unix.AT_EMPTY_PATH|unix.AT_RECURSIVE,
		&unix.MountAttr{Attr_set: unix.MOUNT_ATTR_RDONLY | unix.MOUNT_ATTR_NOSUID | unix.MOUNT_ATTR_NODEV}); err != nil {
		return err
	}
	return unix.MoveMount(fd, "", unix.AT_FDCWD, path, unix.MOVE_MOUNT_F_EMPTY_PATH)
}

// mountDevNullOn mounts a clone of /dev/null over path without following a
// final symlink (move_mount without MOVE_MOUNT_T_SYMLINKS).
func mountDevNullOn(path string) error {
	fd, err := unix.OpenTree(unix.AT_FDCWD, "/dev/null", unix.OPEN_TREE_CLONE|unix.OPEN_TREE_CLOEXEC)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	if err := unix.MountSetattr(fd, "", unix.AT_EMPTY_PATH, &unix.MountAttr{Attr_set: unix.MOUNT_ATTR_RDONLY}); err != nil {
		return err
	}
	return unix.MoveMount(fd, "", unix.AT_FDCWD, path, unix.MOVE_MOUNT_F_EMPTY_PATH)
}

func errnoName(err error) string {
	var en unix.Errno
	if errors.As(err, &en) {
		if n := unix.ErrnoName(en); n != "" {
			return n
		}
	}
	return fmt.Sprint(err)
}
