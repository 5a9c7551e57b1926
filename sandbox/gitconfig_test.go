package sandbox

import (
	"os"
	"path/filepath"
	"slices"
	"testing"
)

func TestParseGitConfigListAndKeys(t *testing.T) {
	got := parseGitConfigList([]byte("global\x00user.name\nA B\x00local\x00filter.Evil.x.clean\ntouch m; cat\x00local\x00core.bare\nfalse\x00"))
	if len(got) != 3 || got[1].scope != "local" || got[1].key != "filter.Evil.x.clean" || got[1].value != "touch m; cat" {
		t.Fatalf("%+v", got)
	}
	sec, sub, name := splitGitKey(got[1].key)
	if sec != "filter" || sub != "Evil.x" || name != "clean" || !gitProgramKey(sec, sub, name) {
		t.Fatalf("%q %q %q", sec, sub, name)
	}
	for _, k := range []string{"diff.x.textconv", "diff.external", "merge.m.driver", "core.pager", "core.sshcommand", "alias.st", "remote.o.uploadpack", "gpg.program"} {
		if s, sb, n := splitGitKey(k); !gitProgramKey(s, sb, n) {
			t.Errorf("%s is a program key", k)
		}
	}
	for _, k := range []string{"core.bare", "core.fsmonitor", "core.hookspath", "diff.renames", "diff.x.xfuncname", "remote.o.url", "user.name"} {
		if s, sb, n := splitGitKey(k); gitProgramKey(s, sb, n) {
			t.Errorf("%s is not a program key", k)
		}
	}
}

func TestWithGitConfigAppends(t *testing.T) {
	env := []string{"GIT_CONFIG_COUNT=1", "GIT_CONFIG_KEY_0=core.fsmonitor", "GIT_CONFIG_VALUE_0=false"}
	out, err := WithGitConfig(env, gitNeutral("filter", "evil"))
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Contains(out, "GIT_CONFIG_COUNT=5") || !slices.Contains(out, "GIT_CONFIG_KEY_1=filter.evil.clean") ||
		!slices.Contains(out, "GIT_CONFIG_VALUE_4=false") || !slices.Contains(out, "GIT_CONFIG_KEY_0=core.fsmonitor") {
		t.Fatalf("%q", out)
	}
	if _, err := WithGitConfig([]string{"GIT_CONFIG_COUNT=x"}, gitNeutral("diff", "x")); err == nil {
		t.Fatal("a bad count must fail")
	}
}

func TestFindGitEntriesFailsClosedPastTheCap(t *testing.T) {
	root := t.TempDir()
	for _, d := range []string{"a/b/c/.git", "x/.git/modules/y/.git", ".git"} {
		os.MkdirAll(filepath.Join(root, d), 0o755)
	}
	os.Symlink("../.repo/p.git", filepath.Join(root, "a", ".git"))
	got, err := findGitEntries([]string{root}, 100)
	slices.Sort(got)
	want := []string{filepath.Join(root, "a/.git"), filepath.Join(root, "a/b/c/.git"), filepath.Join(root, "x/.git")}
	if err != nil || !slices.Equal(got, want) {
		t.Fatalf("%q %v, want %q", got, err, want)
	}
	if _, err := findGitEntries([]string{root}, 3); err == nil {
		t.Fatal("past the cap the scan must fail")
	}
}
