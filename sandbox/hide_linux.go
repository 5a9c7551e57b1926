package sandbox

import (
	"errors"
	"fmt"

	"github.com/landlock-lsm/go-landlock/landlock"
	llsys "github.com/landlock-lsm/go-landlock/landlock/syscall"
	"golang.org/x/sys/unix"
)

// openNoFollow opens path as O_PATH without following any symlink on the
// way: a path that changed into a symlink since the host planned it must
// not move a mount or a grant somewhere else.
func openNoFollow(path string) (int, error) {
	return unix.Openat2(unix.AT_FDCWD, path, &unix.OpenHow{
		Flags:   unix.O_PATH | unix.O_CLOEXEC | unix.O_NOFOLLOW,
		Resolve: unix.RESOLVE_NO_SYMLINKS | unix.RESOLVE_NO_MAGICLINKS,
	})
}

// hideMounts covers every hidden path of the namespaces tier's view: a
// folder with an empty, read-only tmpfs, anything else with a read-only
// /dev/null (it reads as empty). It runs after the clones and the
// protected names, so a path inside a writable root is covered too; the
// command has no CAP_SYS_ADMIN to unmount, and a mount point cannot be
// renamed or removed in the namespace that holds it (EBUSY). A path absent
// from the view (under the private /tmp) needs nothing.
func hideMounts(hidden []hiddenPath) (notes []string, err error) {
	emptyFS := -1
	defer func() {
		if emptyFS >= 0 {
			unix.Close(emptyFS)
		}
	}()
	for _, h := range hidden {
		fd, err := openNoFollow(h.Path)
		if err != nil {
			if absentOrUnreachable(err) {
				continue
			}
			return nil, stepErr("hide "+h.Path, err)
		}
		err = hideOne(fd, h.Path, &emptyFS)
		unix.Close(fd)
		if err != nil {
			return nil, stepErr("hide "+h.Path, err)
		}
		notes = append(notes, "hidden:"+h.Path)
	}
	return notes, nil
}

func hideOne(target int, path string, emptyFS *int) error {
	var st unix.Stat_t
	if err := unix.Fstat(target, &st); err != nil {
		return err
	}
	var src int
	var err error
	switch st.Mode & unix.S_IFMT {
	case unix.S_IFLNK:
		return fmt.Errorf("%s became a symlink since the run started", path)
	case unix.S_IFDIR:
		if *emptyFS < 0 {
			if *emptyFS, err = emptyTmpfs(); err != nil {
				return fmt.Errorf("empty tmpfs: %w", err)
			}
		}
		src, err = unix.OpenTree(*emptyFS, "", unix.OPEN_TREE_CLONE|unix.OPEN_TREE_CLOEXEC|unix.AT_EMPTY_PATH)
	default:
		src, err = unix.OpenTree(unix.AT_FDCWD, "/dev/null", unix.OPEN_TREE_CLONE|unix.OPEN_TREE_CLOEXEC)
		if err == nil {
			err = unix.MountSetattr(src, "", unix.AT_EMPTY_PATH, &unix.MountAttr{Attr_set: unix.MOUNT_ATTR_RDONLY})
			if err != nil {
				unix.Close(src)
			}
		}
	}
	if err != nil {
		return err
	}
	defer unix.Close(src)
	return unix.MoveMount(src, "", target, "", unix.MOVE_MOUNT_F_EMPTY_PATH|unix.MOVE_MOUNT_T_EMPTY_PATH)
}

// emptyTmpfs is a detached, read-only, empty tmpfs (mode 0) whose clones
// cover hidden folders.
func emptyTmpfs() (int, error) {
	fsfd, err := unix.Fsopen("tmpfs", unix.FSOPEN_CLOEXEC)
	if err != nil {
		return -1, err
	}
	defer unix.Close(fsfd)
	for _, kv := range [][2]string{{"mode", "0"}, {"size", "4k"}, {"nr_inodes", "1"}} {
		if err := unix.FsconfigSetString(fsfd, kv[0], kv[1]); err != nil {
			return -1, fmt.Errorf("%s=%s: %w", kv[0], kv[1], err)
		}
	}
	if err := unix.FsconfigCreate(fsfd); err != nil {
		return -1, err
	}
	return unix.Fsmount(fsfd, unix.FSMOUNT_CLOEXEC,
		unix.MOUNT_ATTR_RDONLY|unix.MOUNT_ATTR_NOSUID|unix.MOUNT_ATTR_NODEV|unix.MOUNT_ATTR_NOEXEC)
}

// Landlock rights used by the split.
const (
	llRead      = llsys.AccessFSExecute | llsys.AccessFSReadFile | llsys.AccessFSReadDir
	llReadFiles = llsys.AccessFSExecute | llsys.AccessFSReadFile
	llWrite     = llsys.AccessFSWriteFile | llsys.AccessFSRemoveDir | llsys.AccessFSRemoveFile | llsys.AccessFSMakeChar |
		llsys.AccessFSMakeDir | llsys.AccessFSMakeReg | llsys.AccessFSMakeSock | llsys.AccessFSMakeFifo |
		llsys.AccessFSMakeBlock | llsys.AccessFSMakeSym | llsys.AccessFSTruncate
	llFile = llsys.AccessFSExecute | llsys.AccessFSWriteFile | llsys.AccessFSReadFile | llsys.AccessFSTruncate | llsys.AccessFSIoctlDev
)

// roRights and rwRights are the rights of a split read-only and
// read-write grant. A read-write grant is Landlock's RWDirs (REFER too, so
// files move between the workspace's folders); what a protected path
// keeps of it reads only. Both are the landlock tier's, where nothing but
// Landlock hides a folder's names: a folder on the way to a hidden folder
// cannot be listed either.
var (
	roRights = splitRights{Access: llRead, File: llFile, ReadsFiles: llReadFiles, Writes: llWrite | llsys.AccessFSRefer,
		Lists: llsys.AccessFSReadDir}
	rwRights = splitRights{Access: llRead | llWrite | llsys.AccessFSRefer | llsys.AccessFSIoctlDev, File: llFile,
		ReadsFiles: llReadFiles, Writes: llWrite | llsys.AccessFSRefer, Lists: llsys.AccessFSReadDir}
)

// splitRO is splitGrant for a read-only grant: folders on the way to a
// hidden path can be listed (in the namespaces tier, mountsHide: the
// hidden folders are empty mounts), nothing more.
func splitRO(root string, hidden []hiddenPath, mountsHide bool) ([]pathGrant, error) {
	r := roRights
	if mountsHide {
		r.Lists = 0
	}
	return splitGrant(root, r, grantCuts{Hidden: hidden}, osHideFS())
}

// splitRW is splitGrant for a read-write grant: folders on the way to a
// hidden path keep every right but reading and executing files, so a
// file made directly in such a folder during the run cannot be read back;
// folders on the way to a protected path, and the protected paths, keep
// only the rights that write nothing, so nothing can be made, removed or
// renamed in them (the price of Landlock's inherited grants; see
// docs/sandbox.md §3 and §7.1).
func splitRW(root string, cuts grantCuts) ([]pathGrant, error) {
	return splitGrant(root, rwRights, cuts, osHideFS())
}

// handledFS is the file-system rights the ruleset handles at this ABI (the
// config is V11's, narrowed by BestEffort to what the kernel knows).
func handledFS(abi int) uint64 {
	versions := []landlock.Config{landlock.V1, landlock.V2, landlock.V3, landlock.V4, landlock.V5,
		landlock.V6, landlock.V7, landlock.V8, landlock.V9, landlock.V10, landlock.V11}
	if abi <= 0 {
		return 0
	}
	if abi > len(versions) {
		abi = len(versions)
	}
	return uint64(versions[abi-1].HandledAccessFS)
}

// addGrants adds the split's rules to the ruleset. Each path is opened
// without following symlinks (one that became a symlink gets no rule; one
// that is gone needs none).
func addGrants(rulesetFD int, grants []pathGrant, handled uint64) error {
	for _, g := range grants {
		access := g.Access & handled
		if access == 0 {
			continue
		}
		fd, err := openNoFollow(g.Path)
		if err != nil {
			if absentOrUnreachable(err) || errors.Is(err, unix.ELOOP) {
				continue
			}
			return fmt.Errorf("landlock rule for %s: %w", g.Path, err)
		}
		var st unix.Stat_t
		err = unix.Fstat(fd, &st)
		if err == nil {
			switch st.Mode & unix.S_IFMT {
			case unix.S_IFLNK:
				access = 0
			case unix.S_IFDIR:
			default:
				access &= llFile
			}
			if access != 0 {
				err = llsys.LandlockAddPathBeneathRule(rulesetFD, &llsys.PathBeneathAttr{ParentFd: fd, AllowedAccess: access}, 0)
			}
		}
		unix.Close(fd)
		if err != nil {
			return fmt.Errorf("landlock rule for %s: %w", g.Path, err)
		}
	}
	return nil
}

// splitRWDirs returns the read-write folders granted whole and, with
// SplitRW, the split grants of those holding (or inside) a hidden or
// read-only path.
func (r landlockRules) splitRWDirs() (whole []string, split []pathGrant, err error) {
	cuts := grantCuts{Hidden: r.Hidden, ReadOnly: r.ReadOnly}
	if !r.SplitRW || cuts.empty() {
		return r.RWDirs, nil, nil
	}
	for _, d := range r.RWDirs {
		if !cuts.cutsAt(d) && !underAny(d, r.ReadOnly) {
			whole = append(whole, d)
			continue
		}
		g, err := splitRW(d, cuts)
		if err != nil {
			return nil, nil, err
		}
		split = append(split, g...)
	}
	return whole, split, nil
}
