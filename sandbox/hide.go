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

// grantCuts are the holes a split leaves in a grant.
type grantCuts struct {
	// Hidden paths get no rule at all (SPEC §6.5).
	Hidden []hiddenPath
	// ReadOnly paths (the landlock tier's protected names, nested .git and
	// their targets) keep only the grant's rights that write nothing.
	ReadOnly []string
}

func (c grantCuts) empty() bool { return len(c.Hidden) == 0 && len(c.ReadOnly) == 0 }

// below is what of c lies strictly below dir.
func (c grantCuts) below(dir string) grantCuts {
	var b grantCuts
	for _, h := range c.Hidden {
		if within(h.Path, dir) && h.Path != dir {
			b.Hidden = append(b.Hidden, h)
		}
	}
	for _, p := range c.ReadOnly {
		if within(p, dir) && p != dir {
			b.ReadOnly = append(b.ReadOnly, p)
		}
	}
	return b
}

// cutsAt reports whether something must be cut at p or below it.
func (c grantCuts) cutsAt(p string) bool {
	return anyHiddenBelow(c.Hidden, p) || anyWithin(c.ReadOnly, p)
}

// splitRights are the Landlock rights of a split grant.
type splitRights struct {
	Access uint64 // the grant
	File   uint64 // the rights a non-directory entry can hold
	// ReadsFiles are dropped from a folder on the way to a hidden path;
	// Writes from a folder on the way to a read-only path and from the
	// read-only path itself; Lists from a folder on the way to a hidden
	// folder (its names would be listed through the inherited right; 0
	// where a mount hides them anyway).
	ReadsFiles, Writes, Lists uint64
}

// splitGrant is the grant of r.Access on root cut around cuts: unchanged
// when nothing is cut below root; otherwise root keeps only the rights
// that reach nothing cut (no file reads on the way to a hidden path, no
// writes on the way to a read-only one) and each entry gets the grant,
// except hidden ones, symlinks (their targets have rules of their own) and
// those holding a cut path, which are split the same way; a read-only
// entry gets the grant without r.Writes. Landlock grants are inherited by
// a whole hierarchy, so this is the only way to leave a hole in one.
func splitGrant(root string, r splitRights, cuts grantCuts, fsys hideFS) ([]pathGrant, error) {
	if coveredBy(root, cuts.Hidden) {
		return nil, nil // hidden whole: no grant at all
	}
	if underAny(root, cuts.ReadOnly) {
		r.Access &^= r.Writes
	}
	below := cuts.below(root)
	if below.empty() {
		return []pathGrant{{Path: root, Access: r.Access, Dir: true}}, nil
	}
	along := r.Access
	for _, h := range below.Hidden {
		along &^= r.ReadsFiles
		if h.Dir {
			along &^= r.Lists
		}
	}
	if len(below.ReadOnly) > 0 {
		along &^= r.Writes
	}
	out := []pathGrant{{Path: root, Access: along, Dir: true}}
	ents, err := fsys.ReadDir(root)
	if err != nil {
		// Unlistable: its entries get nothing more (fail closed).
		return out, nil
	}
	for _, e := range ents {
		p := filepath.Join(root, e.Name())
		switch {
		case e.Type()&fs.ModeSymlink != 0, coveredBy(p, below.Hidden):
		case e.IsDir() && below.cutsAt(p):
			more, err := splitGrant(p, r, below, fsys)
			if err != nil {
				return nil, err
			}
			out = append(out, more...)
		case e.IsDir():
			out = append(out, pathGrant{Path: p, Access: r.Access, Dir: true})
		case anyEqual(below.ReadOnly, p):
			out = append(out, pathGrant{Path: p, Access: r.Access &^ r.Writes & r.File})
		default:
			out = append(out, pathGrant{Path: p, Access: r.Access & r.File})
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
