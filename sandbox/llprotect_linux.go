package sandbox

import (
	"path/filepath"
	"strconv"
)

// The landlock tier has no mount namespace to bind .git & co. read-only,
// and Landlock cannot deny below a grant: a writable root granted whole
// would let the command write .git/config (core.fsmonitor), plant hooks or
// create a missing .git, which the host's next git runs. So its grant is
// split (hide.go's splitGrant): the root's own folder keeps only read
// rights (nothing can be made, removed or renamed in it), each entry of it
// gets the full grant except the protected ones, which get read rights,
// and folders on the way to a nested protected path are split the same
// way. The price: nothing new can be made at a writable root's top
// (docs/sandbox.md §3).

// landlockProtection resolves the writable roots (the split opens every
// path without following symlinks, and the protected paths are compared
// with them as resolved paths) and lists what the landlock tier keeps
// read-only in them: the protected names of each outermost root (present
// or not), every nested .git and the resolved targets of every .git that
// lie in a writable root — the namespaces tier's list (mounts_linux.go,
// gitprotect_linux.go). It fails closed when the git scan does.
func landlockProtection(writable, names []string) (roots, protected []string, notes []string, err error) {
	for _, r := range writable {
		if real, err := filepath.EvalSymlinks(r); err == nil {
			r = real
		}
		roots = append(roots, filepath.Clean(r))
	}
	outer := dedupeNested(roots)
	for _, r := range outer {
		for _, n := range names {
			protected = append(protected, filepath.Join(r, n))
		}
	}
	g, err := planGitProtection(mountPlan{ProtectedRoots: outer, ProtectedNames: names})
	if err != nil {
		return nil, nil, nil, err
	}
	protected = append(append(protected, g.nested...), g.targets...)
	if len(protected) > 0 {
		notes = append(notes, "landlock_protected:"+strconv.Itoa(len(protected))+
			",git_nested:"+strconv.Itoa(len(g.nested))+",targets:"+strconv.Itoa(len(g.targets)))
	}
	return roots, protected, notes, nil
}
