package envpolicy

import (
	"sort"
	"strconv"
	"strings"
)

// gitOverrides are the git configuration values every command execwrap
// runs gets, sandboxed or not, through GIT_CONFIG_COUNT/KEY_n/VALUE_n
// (git ≥ 2.31; the "command" scope, which outranks every configuration
// file and counts as protected configuration). They stop git from running
// programs a repository's own configuration names:
//
//   - safe.bareRepository=explicit: a bare repository found by discovery
//     (one planted in the workspace, with its own config and
//     info/attributes) is refused, so none of its configuration is read;
//     only protected configuration may set this key, and the command scope
//     is protected (git ≥ 2.38);
//   - core.fsmonitor=false: no file-system-monitor hook for status, diff,
//     add, …;
//   - core.hooksPath=/dev/null: no repository hooks.
//
// What configuration cannot switch off: an external diff command
// (diff.external, where an empty value is an error, not "off") and the
// per-driver diff.<name>.textconv, diff.<name>.command and
// filter.<name>.* selected by attributes (the names are the attacker's).
// Those are answered by execwrap's rule that git away from the workspace
// root (whose .git is protected) is never known-safe and never bypasses,
// and by GIT_EXTERNAL_DIFF being removed.
var gitOverrides = [][2]string{
	{"safe.bareRepository", "explicit"},
	{"core.fsmonitor", "false"},
	{"core.hooksPath", "/dev/null"},
}

// gitDropped are removed from every environment: GIT_EXTERNAL_DIFF names a
// program git runs for every diff, and GIT_CONFIG_PARAMETERS (the form
// `git -c` hands to child processes) is read after GIT_CONFIG_COUNT and
// could undo the overrides.
var gitDropped = []string{"GIT_EXTERNAL_DIFF", "GIT_CONFIG_PARAMETERS"}

// maxGitConfigCount bounds an inherited GIT_CONFIG_COUNT that is kept.
const maxGitConfigCount = 1000

// GitOverrides returns the fixed git configuration (key, value) pairs.
func GitOverrides() [][2]string { return append([][2]string(nil), gitOverrides...) }

// WithGitSafety returns env (sorted KEY=VALUE entries, as Build returns
// them) with the git overrides appended after any GIT_CONFIG_COUNT entries
// the environment already holds (later entries win in git, so ours do),
// and GIT_EXTERNAL_DIFF / GIT_CONFIG_PARAMETERS removed. An inherited count
// that is not a small non-negative integer, or whose keys are missing, is
// dropped with its entries (git would refuse to start with it).
func WithGitSafety(env []string) []string {
	vars := map[string]string{}
	for _, kv := range env {
		k, v, _ := strings.Cut(kv, "=")
		vars[k] = v
	}
	n, err := strconv.Atoi(vars["GIT_CONFIG_COUNT"])
	if _, present := vars["GIT_CONFIG_COUNT"]; !present {
		n, err = 0, nil
	}
	if err != nil || n < 0 || n > maxGitConfigCount {
		n = -1
	}
	for i := 0; i < n; i++ {
		if _, ok := vars["GIT_CONFIG_KEY_"+strconv.Itoa(i)]; !ok {
			n = -1
			break
		}
	}
	keep := n
	if keep < 0 {
		keep = 0
	}
	out := make([]string, 0, len(env)+2*len(gitOverrides)+1)
	for _, kv := range env {
		k, _, _ := strings.Cut(kv, "=")
		if dropGitVar(k, keep) {
			continue
		}
		out = append(out, kv)
	}
	for i, kv := range gitOverrides {
		idx := strconv.Itoa(keep + i)
		out = append(out, "GIT_CONFIG_KEY_"+idx+"="+kv[0], "GIT_CONFIG_VALUE_"+idx+"="+kv[1])
	}
	out = append(out, "GIT_CONFIG_COUNT="+strconv.Itoa(keep+len(gitOverrides)))
	sort.Strings(out)
	return out
}

// dropGitVar reports a variable WithGitSafety removes: the dropped names,
// the count itself (it is rewritten), and any KEY_n/VALUE_n at or beyond
// the kept count.
func dropGitVar(k string, keep int) bool {
	for _, d := range gitDropped {
		if k == d {
			return true
		}
	}
	if k == "GIT_CONFIG_COUNT" {
		return true
	}
	for _, prefix := range []string{"GIT_CONFIG_KEY_", "GIT_CONFIG_VALUE_"} {
		if rest, ok := strings.CutPrefix(k, prefix); ok {
			i, err := strconv.Atoi(rest)
			return err != nil || i < 0 || i >= keep || strconv.Itoa(i) != rest
		}
	}
	return false
}
