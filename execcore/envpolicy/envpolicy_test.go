package envpolicy

import (
	"reflect"
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
