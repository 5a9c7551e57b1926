package sandbox

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
)

// maxGitScanDirs bounds the walk for nested repositories (SPEC §6.5). The
// walk has no depth limit — a repository planted one level deeper than a
// limit would otherwise go unprotected — so a larger tree fails closed.
const maxGitScanDirs = 100000

// errGitScanTooLarge is the fail-closed answer of findGitEntries.
var errGitScanTooLarge = errors.New("more than 100000 folders under the writable roots: nested repositories cannot all be found to protect them; run with a narrower --cwd or --writable-root")

// findGitEntries returns every `.git` (directory, file or symlink) strictly
// below each root (a root's own .git is a protected name already). It does
// not descend into a .git directory nor follow symlinks. An unreadable
// folder is skipped: the command cannot list it either.
func findGitEntries(roots []string, maxDirs int) ([]string, error) {
	var found []string
	budget := maxDirs
	for _, root := range roots {
		stack := []string{root}
		for len(stack) > 0 {
			dir := stack[len(stack)-1]
			stack = stack[:len(stack)-1]
			if budget--; budget < 0 {
				return nil, errGitScanTooLarge
			}
			entries, err := readDirUnsorted(dir)
			if err != nil {
				continue
			}
			for _, e := range entries {
				p := filepath.Join(dir, e.Name())
				if e.Name() == ".git" {
					if dir != root {
						found = append(found, p)
					}
					continue
				}
				if e.IsDir() {
					stack = append(stack, p)
				}
			}
		}
	}
	return found, nil
}

func readDirUnsorted(dir string) ([]fs.DirEntry, error) {
	f, err := os.Open(dir)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return f.ReadDir(-1)
}

// gitDirsOf resolves a `.git` entry to the git directories git would use
// through it: the directory itself, a `gitdir:` file's target, a symlink's
// target, and each one's `commondir` (a linked worktree's shared
// repository). Missing targets are left out.
func gitDirsOf(entry string) []string {
	fi, err := os.Lstat(entry)
	if err != nil {
		return nil
	}
	var dir string
	switch {
	case fi.Mode()&os.ModeSymlink != 0:
		dir, err = filepath.EvalSymlinks(entry)
		if err != nil {
			return nil
		}
	case fi.Mode().IsRegular():
		b, rerr := os.ReadFile(entry)
		if rerr != nil {
			return nil
		}
		t := gitdirTarget(filepath.Dir(entry), string(b))
		if t == "" {
			return nil
		}
		if dir, err = filepath.EvalSymlinks(t); err != nil {
			return nil
		}
	case fi.IsDir():
		dir = entry
	default:
		return nil
	}
	dirs := []string{dir}
	if b, err := os.ReadFile(filepath.Join(dir, "commondir")); err == nil {
		c := strings.TrimSpace(string(b))
		if c != "" && !filepath.IsAbs(c) {
			c = filepath.Join(dir, c)
		}
		if c != "" {
			if c, err = filepath.EvalSymlinks(c); err == nil && c != dir {
				dirs = append(dirs, c)
			}
		}
	}
	return dirs
}

// gitDirLinks are the resolved targets of the symlinks directly inside a
// git directory (the Android `repo` layout links hooks, objects, rr-cache…
// into .repo/): protected with the directory, since git follows them.
func gitDirLinks(dir string) []string {
	entries, err := readDirUnsorted(dir)
	if err != nil {
		return nil
	}
	var out []string
	for _, e := range entries {
		if e.Type()&fs.ModeSymlink == 0 {
			continue
		}
		if t, err := filepath.EvalSymlinks(filepath.Join(dir, e.Name())); err == nil {
			out = append(out, t)
		}
	}
	return out
}

// gitProtectTargets lists, for the `.git` entries, every path outside the
// entry itself that must be read-only so no repository's configuration,
// hooks or attributes can be changed through them, limited to paths under
// a writable root (the rest of the file system is read-only already).
func gitProtectTargets(entries, writable []string) []string {
	seen := map[string]bool{}
	var out []string
	add := func(p string) {
		if !seen[p] && underAny(p, writable) {
			seen[p] = true
			out = append(out, p)
		}
	}
	for _, e := range entries {
		for _, d := range gitDirsOf(e) {
			if d != e {
				add(d)
			}
			for _, l := range gitDirLinks(d) {
				add(l)
			}
		}
	}
	return out
}
