// Package envpolicy builds the environment of a command (projection A's
// env) from the parent environment and a shell-environment policy:
// inherit all|core|none, the default secret excludes, excludes, set, and
// include_only (reference codex-execpolicy.md §9).
//
// Unlike the reference, the default excludes `*KEY*`, `*SECRET*`, `*TOKEN*`
// apply unless IgnoreDefaultExcludes is set: secrets are not inherited by
// default. The package is pure: it never reads os.Environ itself and never
// logs a value.
package envpolicy

import (
	"fmt"
	"path"
	"sort"
	"strings"
)

// Inherit selects the starting set of variables.
type Inherit string

const (
	InheritAll  Inherit = "all"
	InheritCore Inherit = "core"
	InheritNone Inherit = "none"
)

// ParseInherit accepts all, core or none.
func ParseInherit(s string) (Inherit, error) {
	switch i := Inherit(s); i {
	case InheritAll, InheritCore, InheritNone:
		return i, nil
	}
	return "", fmt.Errorf("invalid environment inherit %q (want all, core or none)", s)
}

// coreVars are kept by inherit = core (matched case-insensitively).
var coreVars = []string{"PATH", "SHELL", "TMPDIR", "TEMP", "TMP", "HOME", "LANG", "LC_ALL", "LC_CTYPE", "LOGNAME", "USER"}

// defaultExcludes are dropped unless IgnoreDefaultExcludes is true.
var defaultExcludes = []string{"*KEY*", "*SECRET*", "*TOKEN*"}

// Policy is the shell-environment policy. The zero value inherits
// everything except the default excludes.
type Policy struct {
	Inherit               Inherit
	IgnoreDefaultExcludes bool
	Exclude               []string
	Set                   map[string]string
	IncludeOnly           []string
}

// Validate checks the patterns and variable names.
func (p Policy) Validate() error {
	if p.Inherit != "" {
		if _, err := ParseInherit(string(p.Inherit)); err != nil {
			return err
		}
	}
	for _, list := range [][]string{p.Exclude, p.IncludeOnly} {
		for _, pat := range list {
			if _, err := path.Match(strings.ToUpper(pat), ""); err != nil {
				return fmt.Errorf("invalid environment pattern %q: %v", pat, err)
			}
		}
	}
	for k := range p.Set {
		if k == "" || strings.ContainsAny(k, "=\x00") {
			return fmt.Errorf("invalid environment variable name %q", k)
		}
	}
	return nil
}

// Match reports whether name matches a case-insensitive wildcard pattern
// with `*` and `?`.
func Match(pattern, name string) bool {
	// path.Match treats '/' specially and supports [...]; variable names
	// never hold '/', and [...] is a harmless extension.
	ok, err := path.Match(strings.ToUpper(pattern), strings.ToUpper(name))
	return err == nil && ok
}

func matchAny(patterns []string, name string) bool {
	for _, p := range patterns {
		if Match(p, name) {
			return true
		}
	}
	return false
}

// Build derives the environment from parent (KEY=VALUE entries, as
// os.Environ returns them) in the reference's order: start set, default
// excludes, excludes, set, include_only; then extra (e.g. a session id or
// fixed overrides) is inserted last and survives include_only. The result
// is sorted KEY=VALUE entries.
func Build(p Policy, parent []string, extra map[string]string) []string {
	env := map[string]string{}
	var order []string
	put := func(k, v string) {
		if _, ok := env[k]; !ok {
			order = append(order, k)
		}
		env[k] = v
	}
	inherit := p.Inherit
	if inherit == "" {
		inherit = InheritAll
	}
	for _, kv := range parent {
		k, v, ok := strings.Cut(kv, "=")
		if !ok || k == "" {
			continue
		}
		switch inherit {
		case InheritAll:
			put(k, v)
		case InheritCore:
			for _, c := range coreVars {
				if strings.EqualFold(c, k) {
					put(k, v)
					break
				}
			}
		}
	}
	drop := func(keep func(string) bool) {
		for k := range env {
			if !keep(k) {
				delete(env, k)
			}
		}
	}
	if !p.IgnoreDefaultExcludes {
		drop(func(k string) bool { return !matchAny(defaultExcludes, k) })
	}
	if len(p.Exclude) > 0 {
		drop(func(k string) bool { return !matchAny(p.Exclude, k) })
	}
	for k, v := range p.Set {
		put(k, v)
	}
	if len(p.IncludeOnly) > 0 {
		drop(func(k string) bool { return matchAny(p.IncludeOnly, k) })
	}
	for k, v := range extra {
		put(k, v)
	}
	out := make([]string, 0, len(env))
	for k, v := range env {
		out = append(out, k+"="+v)
	}
	sort.Strings(out)
	return out
}

// CoreVars returns the names kept by inherit = core.
func CoreVars() []string { return append([]string(nil), coreVars...) }

// DefaultExcludes returns the patterns dropped unless IgnoreDefaultExcludes.
func DefaultExcludes() []string { return append([]string(nil), defaultExcludes...) }

// UnifiedExecOverrides returns the fixed variables of an exec_command
// (non-interactive, predictable output), reference §8.2 without the
// vendor-specific names. Each call returns a fresh map.
func UnifiedExecOverrides() map[string]string {
	out := make(map[string]string, len(unifiedExecOverrides))
	for k, v := range unifiedExecOverrides {
		out[k] = v
	}
	return out
}

var unifiedExecOverrides = map[string]string{
	"NO_COLOR":  "1",
	"TERM":      "dumb",
	"LANG":      "C.UTF-8",
	"LC_CTYPE":  "C.UTF-8",
	"LC_ALL":    "C.UTF-8",
	"COLORTERM": "",
	"PAGER":     "cat",
	"GIT_PAGER": "cat",
	"GH_PAGER":  "cat",
}
