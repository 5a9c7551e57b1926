package sandbox

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"
)

// GitGuard is what execwrap learned, before a command that runs git, about
// the configuration of the repositories that git can reach: the workspace's
// own, and every nested one (submodules included, since git recurses into
// them). SPEC §6.5: no git execwrap runs, sandboxed or not, runs a program a
// repository's configuration names. GIT_CONFIG_COUNT cannot unset the
// attribute-selected drivers by name in general (the names are the
// repository's), but once the names are known each can be overridden.
type GitGuard struct {
	// Overrides are command-scope (key, value) pairs that neutralise every
	// driver a repository-scope configuration defines: filters become
	// pass-through, textconv `cat`, a diff command git's own diff, a merge
	// driver git's own merge-file.
	Overrides [][2]string
	// Programs are the repository-scope keys that name a program
	// ("DIR: KEY"), drivers included: a rule never lets such a git run
	// outside the sandbox (an override cannot cover a key set after the
	// inspection, nor one this list does not know).
	Programs []string
}

// gitInspectTimeout bounds the whole inspection.
const gitInspectTimeout = 10 * time.Second

// MentionsGit reports whether a command may run git: any argv word naming
// it. The inspection costs a git process per repository, so commands that
// do not name git skip it (their git, if any, gets only the fixed
// overrides).
func MentionsGit(argv []string) bool {
	for _, a := range argv {
		if strings.Contains(a, "git") {
			return true
		}
	}
	return false
}

// InspectGit reads, with env (the command's environment), the
// configuration git sees in cwd and in every repository nested in roots. An
// error means the repositories could not all be inspected: the caller must
// treat the result as unsafe (no bypass).
func InspectGit(ctx context.Context, env []string, cwd string, roots []string) (GitGuard, error) {
	var g GitGuard
	gitPath, err := exec.LookPath("git")
	if err != nil {
		return g, nil // no git on this host: nothing can run one
	}
	entries, err := findGitEntries(dedupeNested(roots), maxGitScanDirs)
	if err != nil {
		return g, err
	}
	dirs := []string{cwd}
	for _, e := range entries {
		if d := filepath.Dir(e); !slices.Contains(dirs, d) {
			dirs = append(dirs, d)
		}
	}
	ctx, cancel := context.WithTimeout(ctx, gitInspectTimeout)
	defer cancel()
	seen := map[string]bool{}
	for _, d := range dirs {
		cmd := exec.CommandContext(ctx, gitPath, "-C", d, "config", "--list", "--show-scope", "-z")
		cmd.Env = env
		var out, errb bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &errb
		if err := cmd.Run(); err != nil {
			return g, fmt.Errorf("git config --list in %s: %v: %s", d, err, strings.TrimSpace(errb.String()))
		}
		for _, kv := range parseGitConfigList(out.Bytes()) {
			if kv.scope != "local" && kv.scope != "worktree" {
				continue // system, global: the user's own; command: ours
			}
			section, sub, name := splitGitKey(kv.key)
			if !gitProgramKey(section, sub, name) {
				continue
			}
			g.Programs = append(g.Programs, d+": "+kv.key)
			if sub != "" && !seen[section+"."+sub] {
				seen[section+"."+sub] = true
				g.Overrides = append(g.Overrides, gitNeutral(section, sub)...)
			}
		}
	}
	return g, nil
}

type gitConfigEntry struct{ scope, key, value string }

// parseGitConfigList parses `git config --list --show-scope -z`: records
// "SCOPE\0KEY\nVALUE\0" (no "\nVALUE" for a key without a value).
func parseGitConfigList(b []byte) []gitConfigEntry {
	parts := strings.Split(string(b), "\x00")
	var out []gitConfigEntry
	for i := 0; i+1 < len(parts); i += 2 {
		k, v, _ := strings.Cut(parts[i+1], "\n")
		out = append(out, gitConfigEntry{scope: parts[i], key: k, value: v})
	}
	return out
}

// splitGitKey splits SECTION[.SUB].NAME (git prints section and name in
// lower case; a subsection may hold dots and keeps its case).
func splitGitKey(key string) (section, sub, name string) {
	i, j := strings.IndexByte(key, '.'), strings.LastIndexByte(key, '.')
	if i < 0 {
		return key, "", ""
	}
	if i == j {
		return key[:i], "", key[i+1:]
	}
	return key[:i], key[i+1 : j], key[j+1:]
}

// gitProgramKey reports a key whose value is (or chooses) a program git
// runs, or that redirects where git fetches or what it runs. core.fsmonitor
// and core.hooksPath are not listed: the fixed overrides pin them.
func gitProgramKey(section, sub, name string) bool {
	switch section {
	case "alias", "credential", "gpg", "sendemail", "protocol", "pager", "difftool", "mergetool", "url":
		return true
	case "filter":
		return sub != ""
	case "diff":
		return (sub == "" && name == "external") || (sub != "" && (name == "textconv" || name == "command"))
	case "merge":
		return sub != "" && name == "driver"
	case "core":
		return slices.Contains([]string{"pager", "editor", "sshcommand", "askpass", "gitproxy", "alternaterefscommand"}, name)
	case "sequence":
		return name == "editor"
	case "remote":
		return slices.Contains([]string{"uploadpack", "receivepack", "vcs"}, name)
	case "submodule":
		return name == "update"
	case "uploadpack":
		return name == "packobjectshook"
	}
	return false
}

// gitNeutral are the overrides that make a driver harmless: an empty filter
// command is no filter (and not required, or git would fail), the others
// get programs that are git's or the system's own.
func gitNeutral(section, sub string) [][2]string {
	k := func(name string) string { return section + "." + sub + "." + name }
	switch section {
	case "filter":
		return [][2]string{{k("clean"), ""}, {k("smudge"), ""}, {k("process"), ""}, {k("required"), "false"}}
	case "diff":
		return [][2]string{
			{k("textconv"), "cat"},
			// An external diff gets PATH OLD-FILE OLD-HEX OLD-MODE NEW-FILE
			// NEW-HEX NEW-MODE; git's own diff of the two files (1: they differ).
			{k("command"), `f() { git diff --no-index --no-ext-diff --no-textconv -- "$2" "$5"; [ $? -le 1 ]; }; f`},
		}
	case "merge":
		return [][2]string{{k("driver"), "git merge-file --marker-size=%L %A %O %B"}}
	}
	return nil
}

// WithGitConfig returns env with pairs appended to its GIT_CONFIG_COUNT
// entries (later entries win in git). env must hold a valid count (the
// environment execcore builds always does).
func WithGitConfig(env []string, pairs [][2]string) ([]string, error) {
	if len(pairs) == 0 {
		return env, nil
	}
	n := 0
	for _, kv := range env {
		if v, ok := strings.CutPrefix(kv, "GIT_CONFIG_COUNT="); ok {
			c, err := strconv.Atoi(v)
			if err != nil || c < 0 {
				return env, errors.New("GIT_CONFIG_COUNT is not a count")
			}
			n = c
		}
	}
	out := slices.Clone(env)
	for i, p := range pairs {
		idx := strconv.Itoa(n + i)
		out = SetEnv(out, "GIT_CONFIG_KEY_"+idx, p[0])
		out = SetEnv(out, "GIT_CONFIG_VALUE_"+idx, p[1])
	}
	return SetEnv(out, "GIT_CONFIG_COUNT", strconv.Itoa(n+len(pairs))), nil
}
