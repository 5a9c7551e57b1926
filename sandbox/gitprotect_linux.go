package sandbox

import (
	"path/filepath"
	"slices"
	"strconv"
)

// gitProtection is the nested-repository part of the protected paths
// (SPEC §6.5): every `.git` below a writable root, and the resolved
// targets of every `.git` (a gitdir: file's target, a symlink's target, a
// linked worktree's commondir, the symlinks inside a git directory). It is
// found before the protected names are mounted (a symlinked .git reads as
// /dev/null afterwards) and applied after them.
type gitProtection struct {
	nested  []string
	targets []string
}

// planGitProtection scans the protected roots (fail closed past
// maxGitScanDirs folders). Only a plan that protects `.git` scans.
func planGitProtection(p mountPlan) (gitProtection, error) {
	var g gitProtection
	if len(p.ProtectedRoots) == 0 || !slices.Contains(p.ProtectedNames, ".git") {
		return g, nil
	}
	nested, err := findGitEntries(p.ProtectedRoots, maxGitScanDirs)
	if err != nil {
		return g, err
	}
	g.nested = nested
	entries := append([]string(nil), nested...)
	for _, r := range p.ProtectedRoots {
		entries = append(entries, filepath.Join(r, ".git"))
	}
	g.targets = gitProtectTargets(entries, p.ProtectedRoots)
	return g, nil
}

// apply binds the targets read-only, then each nested .git like a
// protected name (a symlink gets /dev/null on the link itself).
func (g gitProtection) apply() ([]string, error) {
	var notes []string
	for _, t := range g.targets {
		if err := bindReadOnly(t); err != nil {
			return nil, stepErr("protect_git_target "+t, err)
		}
	}
	for _, e := range g.nested {
		n, err := protectPath(filepath.Dir(e), e)
		if err != nil {
			return nil, err
		}
		notes = append(notes, n...)
	}
	if len(g.nested)+len(g.targets) > 0 {
		notes = append(notes, "protected_git_nested:"+strconv.Itoa(len(g.nested))+",targets:"+strconv.Itoa(len(g.targets)))
	}
	return notes, nil
}
