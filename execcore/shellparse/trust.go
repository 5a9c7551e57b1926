package shellparse

import (
	"path"
	"strings"
)

// SystemDirs are the directories whose programs are the system's own
// (SPEC §6.2): an absolute program path names a known tool or a trusted
// shell only when its directory is one of these, in this order (also the
// order `execwrap run` searches for a bare shell name).
var systemDirs = []string{"/usr/local/bin", "/usr/bin", "/bin", "/usr/sbin", "/sbin", "/opt/homebrew/bin"}

// SystemDirs returns the trusted system directories in search order.
func SystemDirs() []string { return append([]string(nil), systemDirs...) }

// Trust decides, from an argv alone, whether a program word names the
// system's own program (SPEC §6.2, 2026-12-01): a bare name, or an
// absolute, normalised path whose directory is a system directory and
// that is not inside a writable root. Anything else (`./bash`,
// `/proc/self/cwd/sh`, `/work/x/bash.py`, `/usr//bin/cat`) is an ordinary
// unknown program.
//
// Trust never consults the file system: the same argv gets the same answer
// on every host, and a planted file cannot change it.
type Trust struct {
	// WritableRoots are absolute folders a sandboxed command may write
	// (the workspace and every extra writable root). A system directory
	// inside one of them is not trusted.
	WritableRoots []string
}

// Program returns the name a trusted program word stands for (its base
// name), and false for anything else.
func (t Trust) Program(prog string) (string, bool) {
	if prog == "" || prog == "." || prog == ".." {
		return "", false
	}
	if !strings.Contains(prog, "/") {
		return prog, true
	}
	if !t.SystemPath(prog) {
		return "", false
	}
	return path.Base(prog), true
}

// SystemPath reports an absolute, normalised path in a system directory
// and outside every writable root.
func (t Trust) SystemPath(p string) bool {
	if !strings.HasPrefix(p, "/") || path.Clean(p) != p {
		return false
	}
	dir, base := path.Split(p)
	if base == "" || base == "." || base == ".." {
		return false
	}
	dir = strings.TrimSuffix(dir, "/")
	known := false
	for _, d := range systemDirs {
		if dir == d {
			known = true
			break
		}
	}
	if !known {
		return false
	}
	for _, r := range t.WritableRoots {
		// A root that is not absolute cannot be placed: fail closed.
		if !strings.HasPrefix(r, "/") || within(p, r) {
			return false
		}
	}
	return true
}

// volatileDirs hold paths whose file is not a fixed, operator-installed
// program: /proc and /dev name other processes' views (`/proc/self/cwd`,
// `/proc/self/root`, `/dev/fd/3`), the temp folders are writable by anyone.
var volatileDirs = []string{"/proc", "/dev", "/tmp", "/var/tmp"}

// FixedProgram reports a program word that may run outside the sandbox on
// an explicit rule: a trusted word (Program), or an absolute, normalised
// path outside every writable root and outside /proc, /dev, /tmp and
// /var/tmp (an operator-installed tool such as /home/u/bin/tool). A
// relative path, a workspace file or a `/proc/self/cwd/...` path is never
// fixed: a rule may allow it, but only inside the sandbox.
func (t Trust) FixedProgram(prog string) bool {
	if _, ok := t.Program(prog); ok {
		return true
	}
	return prog != "/" && t.FixedDir(prog)
}

// FixedDir reports an absolute, normalised path outside every writable
// root and outside /proc, /dev, /tmp and /var/tmp: a place whose programs
// the command cannot have written. It is also the test for a PATH entry
// that a command running outside the sandbox may search.
func (t Trust) FixedDir(p string) bool {
	if !strings.HasPrefix(p, "/") || path.Clean(p) != p {
		return false
	}
	for _, d := range volatileDirs {
		if within(p, d) {
			return false
		}
	}
	for _, r := range t.WritableRoots {
		if !strings.HasPrefix(r, "/") || within(p, r) {
			return false
		}
	}
	return true
}

// FixedPATH returns the value of a PATH variable with every entry that is
// not a FixedDir removed (relative entries, "" — the current directory —,
// workspace folders, temp folders): a bare command name run outside the
// sandbox then never finds a program the sandboxed command planted.
func (t Trust) FixedPATH(value string) string {
	var kept []string
	for _, dir := range strings.Split(value, ":") {
		if t.FixedDir(dir) && dir != "/" {
			kept = append(kept, dir)
		}
	}
	return strings.Join(kept, ":")
}

// Shell returns the family of a trusted shell: exactly bash, zsh or sh by
// name (no file-stem matching), as a bare word or a trusted system path.
func (t Trust) Shell(prog string) (ShellType, bool) {
	name, ok := t.Program(prog)
	if !ok {
		return "", false
	}
	switch name {
	case "bash":
		return Bash, true
	case "zsh":
		return Zsh, true
	case "sh":
		return Sh, true
	}
	return "", false
}

// within reports whether p is root or below it (both absolute; root is
// cleaned here so a trailing slash does not matter).
func within(p, root string) bool {
	if root == "" {
		return false
	}
	root = path.Clean(root)
	if root == "/" {
		return true
	}
	return p == root || strings.HasPrefix(p, root+"/")
}
