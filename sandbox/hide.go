package sandbox

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"syscall"
)

// Host secrets are invisible in the sandbox (SPEC §6.5): $NETPROXY_HOME,
// netproxy's secret files and the deny-read list. This file plans what to
// hide from the host's view alone; hide_linux.go hides it (mounts in the
// namespaces tier, a Landlock grant split around it in both tiers).

// hiddenPath is one path the command must not read, as the host resolved it
// (no symlink left in it).
type hiddenPath struct {
	Path string `json:"path"`
	Dir  bool   `json:"dir"`
}

// hideFS is the host file system as the planning sees it (a fake in tests).
type hideFS struct {
	EvalSymlinks func(string) (string, error)
	Lstat        func(string) (fs.FileInfo, error)
	ReadDir      func(string) ([]fs.DirEntry, error)
}

func osHideFS() hideFS {
	return hideFS{EvalSymlinks: filepath.EvalSymlinks, Lstat: os.Lstat, ReadDir: os.ReadDir}
}

// absentOrUnreachable: nothing to hide, since the command (the same user,
// with fewer privileges) cannot reach the path either.
func absentOrUnreachable(err error) bool {
	return errors.Is(err, fs.ErrNotExist) || errors.Is(err, syscall.ENOTDIR) || errors.Is(err, fs.ErrPermission)
}

// planHidden resolves the candidate paths (absolute) on the host and returns
// what to hide, parents never listed with their children. A symlink is
// hidden at its target. keep are the folders the command must work in (the
// workspace, the writable roots, a private TMPDIR): a candidate that is one
// of them or holds one cannot be hidden whole, so every entry of it that
// does not lead to them is hidden instead and a note says so. Notes never
// hold a secret, only paths.
func planHidden(candidates, keep []string, fsys hideFS) (hidden []hiddenPath, notes []string, err error) {
	var keepReal []string
	for _, k := range keep {
		if r, err := fsys.EvalSymlinks(k); err == nil {
			keepReal = append(keepReal, r)
		} else {
			keepReal = append(keepReal, filepath.Clean(k))
		}
	}
	var resolved []hiddenPath
	for _, c := range candidates {
		if !filepath.IsAbs(c) {
			return nil, nil, fmt.Errorf("hidden path %q is not absolute", c)
		}
		real, err := fsys.EvalSymlinks(filepath.Clean(c))
		if err == nil {
			var fi fs.FileInfo
			if fi, err = fsys.Lstat(real); err == nil {
				resolved = append(resolved, hiddenPath{Path: real, Dir: fi.IsDir()})
				continue
			}
		}
		if !absentOrUnreachable(err) {
			return nil, nil, fmt.Errorf("hidden path %s: %w; fix or remove it (--deny-read, netproxy's secret paths) so it can be hidden", c, err)
		}
	}
	// Shorter first: a folder is placed before what it holds.
	sort.Slice(resolved, func(i, j int) bool { return len(resolved[i].Path) < len(resolved[j].Path) })
	for _, h := range resolved {
		if coveredBy(h.Path, hidden) {
			continue
		}
		if !anyWithin(keepReal, h.Path) {
			hidden = append(hidden, h)
			continue
		}
		notes = append(notes, "hidden_narrowed:"+h.Path)
		more, err := hideAround(h.Path, keepReal, fsys)
		if err != nil {
			return nil, nil, err
		}
		hidden = append(hidden, more...)
	}
	// An expansion may list what another candidate listed too.
	sort.Slice(hidden, func(i, j int) bool { return hidden[i].Path < hidden[j].Path })
	var out []hiddenPath
	for _, h := range hidden {
		if !coveredBy(h.Path, out) {
			out = append(out, h)
		}
	}
	return out, notes, nil
}

// hideAround lists the entries of dir that lead to no keep folder (each to
// be hidden whole) and descends into those that do. A keep folder itself
// stays visible; symlinks are left alone (what they point at is hidden
// where it lives, if listed).
func hideAround(dir string, keep []string, fsys hideFS) ([]hiddenPath, error) {
	if anyEqual(keep, dir) {
		return nil, nil
	}
	ents, err := fsys.ReadDir(dir)
	if err != nil {
		if absentOrUnreachable(err) {
			return nil, nil
		}
		return nil, fmt.Errorf("hidden path %s: %w", dir, err)
	}
	var out []hiddenPath
	for _, e := range ents {
		p := filepath.Join(dir, e.Name())
		switch {
		case e.Type()&fs.ModeSymlink != 0:
		case anyWithin(keep, p):
			more, err := hideAround(p, keep, fsys)
			if err != nil {
				return nil, err
			}
			out = append(out, more...)
		default:
			out = append(out, hiddenPath{Path: p, Dir: e.IsDir()})
		}
	}
	return out, nil
}

// coveredBy reports whether p is one of the hidden paths or inside one.
func coveredBy(p string, hidden []hiddenPath) bool {
	for _, h := range hidden {
		if within(p, h.Path) {
			return true
		}
	}
	return false
}

// anyWithin reports whether some path of ps is root or below it.
func anyWithin(ps []string, root string) bool {
	for _, p := range ps {
		if within(p, root) {
			return true
		}
	}
	return false
}

func anyEqual(ps []string, x string) bool {
	for _, p := range ps {
		if p == x {
			return true
		}
	}
	return false
}

// pathGrant is one Landlock path-beneath rule.
type pathGrant struct {
	Path   string
	Access uint64
	Dir    bool
}

// splitGrant is the grant of access on root cut around the hidden paths:
// unchanged when none lies below root; otherwise root keeps only along
// (rights that read no file) and each entry gets access, except hidden
// ones, symlinks (their targets have rules of their own) and those holding
// a hidden path, which are split the same way. fileAccess masks the
// rights of a non-directory entry. Landlock grants are inherited by a
// whole hierarchy, so this is the only way to leave a hole in one.
func splitGrant(root string, access, along, fileAccess uint64, hidden []hiddenPath, fsys hideFS) ([]pathGrant, error) {
	if coveredBy(root, hidden) {
		return nil, nil // hidden whole: no grant at all
	}
	var below []hiddenPath
	for _, h := range hidden {
		if within(h.Path, root) && h.Path != root {
			below = append(below, h)
		}
	}
	if len(below) == 0 {
		return []pathGrant{{Path: root, Access: access, Dir: true}}, nil
	}
	out := []pathGrant{{Path: root, Access: along, Dir: true}}
	ents, err := fsys.ReadDir(root)
	if err != nil {
		// Unlistable: its entries get nothing (fail closed).
		return out, nil
	}
	for _, e := range ents {
		p := filepath.Join(root, e.Name())
		switch {
		case e.Type()&fs.ModeSymlink != 0, coveredBy(p, below):
		case anyHiddenBelow(below, p):
			more, err := splitGrant(p, access, along, fileAccess, below, fsys)
			if err != nil {
				return nil, err
			}
			out = append(out, more...)
		case e.IsDir():
			out = append(out, pathGrant{Path: p, Access: access, Dir: true})
		default:
			out = append(out, pathGrant{Path: p, Access: access & fileAccess})
		}
	}
	return out, nil
}

func anyHiddenBelow(hidden []hiddenPath, dir string) bool {
	for _, h := range hidden {
		if within(h.Path, dir) {
			return true
		}
	}
	return false
}

// keepVisible are the folders the command works in: its cwd, the writable
// roots and the landlock tier's private TMPDIR.
func keepVisible(s Spec, privateTmp string) []string {
	keep := append([]string{s.Cwd}, s.WritableRoots...)
	if privateTmp != "" {
		keep = append(keep, privateTmp)
	}
	return keep
}
