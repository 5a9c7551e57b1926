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
func applyMounts(p mountPlan) (notes []string, err error) {
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
	for _, t := range p.Tmpfs {
		if err := unix.Mount("tmpfs", t.Path, "tmpfs", unix.MS_NOSUID|unix.MS_NODEV, "mode="+t.Mode); err != nil {
			return nil, stepErr("tmpfs "+t.Path, err)
		}
	}
	for _, c := range clones {
		if err := os.MkdirAll(c.Path, 0o755); err != nil {
			return nil, stepErr("mkdir "+c.Path, err)
		}
		if err := unix.MoveMount(c.fd, "", unix.AT_FDCWD, c.Path, unix.MOVE_MOUNT_F_EMPTY_PATH); err != nil {
			return nil, stepErr("move_mount "+c.Path, err)
		}
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
	if err := unix.Mount("proc", "/proc", "proc", unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, ""); err != nil {
		// Host /proc stays, read-only; the command then sees host pids.
		notes = append(notes, "proc_fallback:"+errnoName(err))
	}
	return notes, nil
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
