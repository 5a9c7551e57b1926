package envpolicy

import (
	"reflect"
	"strconv"
	"strings"
	"testing"
)

// Reference §10.9 (non-Windows rows), adapted: the default excludes apply
// unless IgnoreDefaultExcludes is set (stricter than the reference).
func TestBuildReferenceTable(t *testing.T) {
	thread := map[string]string{"THREAD_ID": "T"}
	cases := []struct {
		name   string
		parent []string
		p      Policy
		extra  map[string]string
		want   []string
	}{
		{"default inherit keeps sensitive vars when excludes are off", []string{"PATH=/bin", "HOME=/h", "API_KEY=k", "SECRET_TOKEN=s"},
			Policy{Inherit: InheritAll, IgnoreDefaultExcludes: true}, thread, []string{"API_KEY=k", "HOME=/h", "PATH=/bin", "SECRET_TOKEN=s", "THREAD_ID=T"}},
		{"core with default excludes (our default)", []string{"PATH=/bin", "HOME=/h", "API_KEY=k", "SECRET_TOKEN=s"},
			Policy{Inherit: InheritCore}, thread, []string{"HOME=/h", "PATH=/bin", "THREAD_ID=T"}},
		{"include only", []string{"PATH=/bin", "FOO=x"}, Policy{IncludeOnly: []string{"*PATH"}}, thread, []string{"PATH=/bin", "THREAD_ID=T"}},
		{"set overrides", []string{"PATH=/bin"}, Policy{Set: map[string]string{"NEW_VAR": "42", "PATH": "/x"}}, thread, []string{"NEW_VAR=42", "PATH=/x", "THREAD_ID=T"}},
		{"no thread id", []string{"PATH=/bin"}, Policy{}, nil, []string{"PATH=/bin"}},
		{"inherit all, excludes off", []string{"PATH=/bin", "FOO=x"}, Policy{Inherit: InheritAll, IgnoreDefaultExcludes: true}, thread, []string{"FOO=x", "PATH=/bin", "THREAD_ID=T"}},
		{"inherit all with excludes", []string{"PATH=/bin", "API_KEY=k"}, Policy{Inherit: InheritAll}, thread, []string{"PATH=/bin", "THREAD_ID=T"}},
		{"inherit none", []string{"PATH=/bin", "HOME=/h"}, Policy{Inherit: InheritNone, Set: map[string]string{"ONLY_VAR": "yes"}}, thread, []string{"ONLY_VAR=yes", "THREAD_ID=T"}},
		{"core is case-insensitive", []string{"path=/bin", "home=/h", "TmpDir=/t", "OPENAI_API_KEY=k"}, Policy{Inherit: InheritCore}, nil, []string{"TmpDir=/t", "home=/h", "path=/bin"}},
		{"excludes are case-insensitive globs", []string{"aws_secret=x", "MyToken=y", "passkey=z", "FOO_BAR=1", "FOO=2"}, Policy{Exclude: []string{"foo_?ar"}}, nil, []string{"FOO=2"}},
		{"include_only filters set too", []string{"PATH=/bin"}, Policy{Set: map[string]string{"X": "1"}, IncludeOnly: []string{"PATH"}}, nil, []string{"PATH=/bin"}},
		{"malformed parent entries are skipped", []string{"NOEQUALS", "=x", "A=b=c"}, Policy{}, nil, []string{"A=b=c"}},
	}
	for _, c := range cases {
		if got := Build(c.p, c.parent, c.extra); !reflect.DeepEqual(got, c.want) {
			t.Errorf("%s: %q, want %q", c.name, got, c.want)
		}
	}
}

func TestValidate(t *testing.T) {
	if err := (Policy{Exclude: []string{"["}}).Validate(); err == nil {
		t.Error("bad pattern accepted")
	}
	if err := (Policy{Set: map[string]string{"A=B": "x"}}).Validate(); err == nil {
		t.Error("bad name accepted")
	}
	if err := (Policy{Inherit: "some"}).Validate(); err == nil {
		t.Error("bad inherit accepted")
	}
	if err := (Policy{Inherit: InheritCore, Exclude: []string{"*X*"}}).Validate(); err != nil {
		t.Error(err)
	}
}

func TestWithGitSafety(t *testing.T) {
	cases := []struct {
		in   []string
		keep int
	}{
		{nil, 0},
		{[]string{"GIT_CONFIG_COUNT=1", "GIT_CONFIG_KEY_0=a.b", "GIT_CONFIG_VALUE_0=c"}, 1},
		{[]string{"GIT_CONFIG_COUNT=2", "GIT_CONFIG_KEY_0=a.b", "GIT_CONFIG_VALUE_0=c"}, 0},
		{[]string{"GIT_CONFIG_COUNT=x", "GIT_CONFIG_KEY_0=a.b"}, 0},
		{[]string{"GIT_CONFIG_COUNT=-1"}, 0},
		{[]string{"GIT_CONFIG_COUNT=1", "GIT_CONFIG_KEY_0=a.b", "GIT_CONFIG_KEY_5=core.fsmonitor", "GIT_CONFIG_VALUE_05=x"}, 1},
		{[]string{"GIT_EXTERNAL_DIFF=x", "GIT_CONFIG_PARAMETERS=y", "PATH=/bin"}, 0},
	}
	for _, c := range cases {
		out := WithGitSafety(c.in)
		checkGitSafety(t, c.in, out, c.keep)
	}
}

func checkGitSafety(t *testing.T, in, out []string, keep int) {
	t.Helper()
	env := map[string]string{}
	for _, kv := range out {
		k, v, _ := strings.Cut(kv, "=")
		if _, dup := env[k]; dup {
			t.Fatalf("%q: duplicate %s in %q", in, k, out)
		}
		env[k] = v
	}
	for _, k := range []string{"GIT_EXTERNAL_DIFF", "GIT_CONFIG_PARAMETERS"} {
		if _, ok := env[k]; ok {
			t.Errorf("%q: %s kept", in, k)
		}
	}
	n, err := strconv.Atoi(env["GIT_CONFIG_COUNT"])
	if err != nil || (keep >= 0 && n != keep+len(gitOverrides)) {
		t.Fatalf("%q: count %q (want %d) in %q", in, env["GIT_CONFIG_COUNT"], keep+len(gitOverrides), out)
	}
	for i := 0; i < n; i++ {
		if _, ok := env["GIT_CONFIG_KEY_"+strconv.Itoa(i)]; !ok {
			t.Fatalf("%q: key %d missing in %q", in, i, out)
		}
	}
	for i, kv := range gitOverrides {
		idx := strconv.Itoa(n - len(gitOverrides) + i)
		if env["GIT_CONFIG_KEY_"+idx] != kv[0] || env["GIT_CONFIG_VALUE_"+idx] != kv[1] {
			t.Errorf("%q: override %s not last in %q", in, kv[0], out)
		}
	}
	for k := range env {
		for _, p := range []string{"GIT_CONFIG_KEY_", "GIT_CONFIG_VALUE_"} {
			if rest, ok := strings.CutPrefix(k, p); ok {
				if i, err := strconv.Atoi(rest); err != nil || i >= n || strconv.Itoa(i) != rest {
					t.Errorf("%q: stray %s in %q", in, k, out)
				}
			}
		}
	}
}

// FuzzWithGitSafety: whatever the inherited environment, the overrides
// are the last GIT_CONFIG entries and no stray entry survives.
func FuzzWithGitSafety(f *testing.F) {
	f.Add("GIT_CONFIG_COUNT=1\nGIT_CONFIG_KEY_0=a.b\nGIT_CONFIG_VALUE_0=c")
	f.Add("GIT_CONFIG_COUNT=99999999999999999999\nGIT_EXTERNAL_DIFF=x")
	f.Fuzz(func(t *testing.T, s string) {
		seen := map[string]bool{}
		var in []string
		for _, kv := range strings.Split(s, "\n") {
			k, _, _ := strings.Cut(kv, "=")
			if k == "" || seen[k] {
				continue
			}
			seen[k] = true
			in = append(in, kv)
		}
		checkGitSafety(t, in, WithGitSafety(in), -1)
	})
}
