package sandbox

import (
	"fmt"
	"path/filepath"
	"sort"
	"strings"
)

// mountPlan is the filesystem view of the namespaces tier, computed from the
// config alone so it can be checked without privileges.
type mountPlan struct {
	// Clones are taken (open_tree CLONE|RECURSIVE) before the root becomes
	// read-only and moved back afterwards, parents before children.
	Clones []cloneStep
	// Tmpfs are private, empty mounts (over host /tmp, /run, /dev/shm).
	Tmpfs []tmpfsStep
	// ProtectedRoots are the writable roots whose ProtectedNames are re-bound
	// read-only after the clones are in place.
	ProtectedRoots []string
	ProtectedNames []string
	// TmpfsSize is the size= of every private tmpfs ("" → kernel default).
	TmpfsSize string
	// Hidden are covered last (hide_linux.go).
	Hidden []hiddenPath
}

type cloneStep struct {
	Path     string
	ReadOnly bool
}

type tmpfsStep struct {
	Path string
	Mode string
}

// privateTmpfs are always replaced by empty tmpfs mounts when they exist
// (/dev/shm always does: it is created in the sandbox's own /dev).
var privateTmpfs = []tmpfsStep{{"/tmp", "1777"}, {"/run", "0755"}, {"/dev/shm", "1777"}}

// planMounts validates the roots and orders the steps. exists reports whether
// a path exists on the host (injected for tests).
func planMounts(cfg *initConfig, exists func(string) bool) (mountPlan, error) {
	var p mountPlan
	if !filepath.IsAbs(cfg.Cwd) {
		return p, fmt.Errorf("cwd %q is not absolute", cfg.Cwd)
	}
	var writable []string
	if cfg.Kind == KindWorkspaceWrite {
		writable = append(writable, cfg.Cwd)
	}
	for _, r := range cfg.WritableRoots {
		if !filepath.IsAbs(r) {
			return p, fmt.Errorf("writable root %q is not absolute", r)
		}
		writable = append(writable, r)
	}
	writable = dedupeNested(writable)
	for _, r := range writable {
		if r == "/" {
			return p, fmt.Errorf("writable root %q would make the whole filesystem writable; use --sandbox danger-full-access instead", r)
		}
		p.Clones = append(p.Clones, cloneStep{Path: r})
	}
	// The cwd must stay visible even where a private tmpfs would hide it
	// (a read-only run in /tmp/x): clone it read-only.
	if !underAny(cfg.Cwd, writable) {
		for _, t := range privateTmpfs {
			if within(cfg.Cwd, t.Path) {
				p.Clones = append(p.Clones, cloneStep{Path: cfg.Cwd, ReadOnly: true})
				break
			}
		}
	}
	sort.SliceStable(p.Clones, func(i, j int) bool { return depth(p.Clones[i].Path) < depth(p.Clones[j].Path) })
	for _, t := range privateTmpfs {
		if t.Path == "/dev/shm" || exists(t.Path) {
			p.Tmpfs = append(p.Tmpfs, t)
		}
	}
	p.TmpfsSize = cfg.TmpfsSize
	p.Hidden = cfg.Hidden
	if len(writable) > 0 {
		p.ProtectedRoots = writable
		p.ProtectedNames = cfg.ProtectedNames
	}
	return p, nil
}

// dedupeNested drops roots inside another root (a recursive clone of the
// parent already carries them) and exact duplicates.
func dedupeNested(roots []string) []string {
	clean := make([]string, 0, len(roots))
	for _, r := range roots {
		clean = append(clean, filepath.Clean(r))
	}
	sort.Slice(clean, func(i, j int) bool { return len(clean[i]) < len(clean[j]) })
	var out []string
	for _, r := range clean {
		if !underAny(r, out) {
			out = append(out, r)
		}
	}
	return out
}

func underAny(p string, roots []string) bool {
	for _, r := range roots {
		if within(p, r) {
			return true
		}
	}
	return false
}

// within reports whether p is root or below it.
func within(p, root string) bool {
	if root == "/" {
		return true
	}
	return p == root || strings.HasPrefix(p, root+"/")
}

func depth(p string) int { return strings.Count(filepath.Clean(p), "/") }

// gitdirTarget parses a `.git` file ("gitdir: PATH") and returns the target
// resolved against root, or "" when the content is not a gitdir pointer.
func gitdirTarget(root, content string) string {
	line, _, _ := strings.Cut(content, "\n")
	rest, ok := strings.CutPrefix(strings.TrimSpace(line), "gitdir:")
	if !ok {
		return ""
	}
	t := strings.TrimSpace(rest)
	if t == "" {
		return ""
	}
	if !filepath.IsAbs(t) {
		t = filepath.Join(root, t)
	}
	return filepath.Clean(t)
}
