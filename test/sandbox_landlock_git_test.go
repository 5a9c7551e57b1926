package test

// End-to-end test of issue 22's landlock-tier gap: without a mount
// namespace, a writable root used to be granted read-write as a whole, and
// Landlock grants are inherited by the whole hierarchy, so the sandbox
// could write .git/config (core.fsmonitor), plant .git/hooks/*, or create a
// missing .git (a directory, or a `gitdir:` file) — and the host's next
// `git status` ran it. The root's own folder is now read-only and each
// entry but the protected ones read-write (docs/sandbox.md §3): every
// attack must fail, nothing outside the workspace's existing subfolders may
// change on the host, and ordinary work in a subfolder must still work.

import (
	"crypto/sha256"
	"encoding/hex"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"testing"
)

// llWorkScript is the ordinary work every case also does, in the existing
// subfolder work/, on an existing file at the top and in $TMPDIR; it
// prints WORK-ok when every step worked.
const llWorkScript = `
w=ok
echo edited >> notes.txt || w=fail
echo new > work/new.txt || w=fail
echo edited >> work/old.txt || w=fail
rm work/gone.txt || w=fail
mkdir work/d2 || w=fail
echo f > work/d2/f || w=fail
rmdir work/empty || w=fail
mv work/new.txt work/renamed.txt || w=fail
mkdir -p work/deep/er && echo z > work/deep/er/z || w=fail
echo t > "$TMPDIR/top" && cat "$TMPDIR/top" >/dev/null || w=fail
echo WORK-$w
`

// llWorkFixture makes work/ with old.txt, gone.txt and an empty folder,
// and notes.txt at the top.
func llWorkFixture(t *testing.T, dir string) {
	t.Helper()
	os.WriteFile(filepath.Join(dir, "notes.txt"), []byte("notes\n"), 0o644)
	os.MkdirAll(filepath.Join(dir, "work", "empty"), 0o755)
	os.WriteFile(filepath.Join(dir, "work", "old.txt"), []byte("old\n"), 0o644)
	os.WriteFile(filepath.Join(dir, "work", "gone.txt"), []byte("gone\n"), 0o644)
}

// llCheckWork checks that the ordinary work reached the host.
func llCheckWork(t *testing.T, dir string, out string) {
	t.Helper()
	if !strings.Contains(out, "WORK-ok") {
		t.Errorf("ordinary work in a subfolder failed:\n%s", out)
	}
	for p, want := range map[string]string{"notes.txt": "notes\nedited\n", "work/renamed.txt": "new\n", "work/old.txt": "old\nedited\n", "work/d2/f": "f\n", "work/deep/er/z": "z\n"} {
		if b, err := os.ReadFile(filepath.Join(dir, p)); err != nil || string(b) != want {
			t.Errorf("%s on the host: %q %v, want %q", p, b, err, want)
		}
	}
	for _, p := range []string{"work/gone.txt", "work/empty", "work/new.txt"} {
		if _, err := os.Lstat(filepath.Join(dir, p)); err == nil {
			t.Errorf("%s is still on the host", p)
		}
	}
}

// llSnapshot maps every path of dir outside work/ and notes.txt to its
// type, mode and content (a symlink to its target).
func llSnapshot(t *testing.T, dir string) map[string]string {
	t.Helper()
	snap := map[string]string{}
	filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			snap[p] = "error " + err.Error()
			return nil
		}
		rel, _ := filepath.Rel(dir, p)
		switch rel {
		case "work":
			return filepath.SkipDir
		case "notes.txt":
			return nil
		}
		fi, err := d.Info()
		if err != nil {
			return nil
		}
		v := fi.Mode().String()
		switch {
		case fi.Mode()&fs.ModeSymlink != 0:
			l, _ := os.Readlink(p)
			v += " -> " + l
		case fi.Mode().IsRegular():
			b, _ := os.ReadFile(p)
			h := sha256.Sum256(b)
			v += " " + hex.EncodeToString(h[:8])
		}
		snap[rel] = v
		return nil
	})
	return snap
}

func llDiff(before, after map[string]string) []string {
	var d []string
	for k, v := range after {
		if before[k] != v {
			d = append(d, k+": "+before[k]+" => "+v)
		}
	}
	for k := range before {
		if _, ok := after[k]; !ok {
			d = append(d, k+": removed")
		}
	}
	sort.Strings(d)
	return d
}

// llHostGitStatus runs the host's git status in dir as root (what a user
// does after the run); a planted fsmonitor or hook would touch the marker.
func llHostGitStatus(dir string) {
	cmd := exec.Command("git", "-c", "safe.directory=*", "status")
	cmd.Dir, cmd.Env = dir, etEnv(dir)
	cmd.Run()
}

func TestSandboxLandlockProtectsGit(t *testing.T) {
	type llCase struct {
		name string
		// setup fills the workspace (work/ is added by the test); extra
		// is a second workspace given with --writable-root ("" for none).
		setup  func(t *testing.T, dir, extra string)
		extra  bool
		attack string // PWN is the marker path a planted program would touch
		// gitDirs are where the host's git status runs afterwards.
		gitDirs []string
	}
	fsmon := `'[core]
	fsmonitor = touch PWN'`
	cases := []llCase{
		{
			name: "git",
			setup: func(t *testing.T, dir, _ string) {
				hostGit(t, dir, "init", "-q", ".")
				os.WriteFile(filepath.Join(dir, "a.txt"), []byte("a\n"), 0o644)
				hostGit(t, dir, "add", "a.txt")
				hostGit(t, dir, "commit", "-qm", "a")
				hostGit(t, dir, "init", "-q", "sub")
			},
			attack: `echo ` + fsmon + ` >> .git/config 2>&1
git config core.fsmonitor "touch PWN" 2>&1
printf '#!/bin/sh\ntouch PWN\n' > .git/hooks/pre-commit 2>&1; chmod +x .git/hooks/pre-commit 2>&1
mkdir .git/hooks/x 2>&1; rm .git/description 2>&1
mv .git .git-old 2>&1; mkdir .git 2>&1
echo ` + fsmon + ` >> sub/.git/config 2>&1
git -C sub config core.fsmonitor "touch PWN" 2>&1
printf '#!/bin/sh\ntouch PWN\n' > sub/.git/hooks/pre-commit 2>&1
mv sub/.git sub/.git-old 2>&1; mv sub sub-old 2>&1
ln .git/config work/hard 2>&1 && echo ` + fsmon + ` >> work/hard
echo x > top.txt 2>&1; rm a.txt 2>&1`,
			gitDirs: []string{".", "sub"},
		},
		{
			name:  "no-git-dir",
			setup: func(t *testing.T, dir, _ string) {},
			attack: `mkdir .git 2>&1; git init -q . 2>&1; git config core.fsmonitor "touch PWN" 2>&1
mkdir .hg .svn .codex .execwrap .netproxy 2>&1`,
			gitDirs: []string{"."},
		},
		{
			name:  "no-git-file",
			setup: func(t *testing.T, dir, _ string) {},
			attack: `git init -q work/planted 2>&1 && git -C work/planted config core.fsmonitor "touch PWN" 2>&1
printf 'gitdir: work/planted/.git\n' > .git 2>&1; ln -s work/planted/.git .git 2>&1`,
			gitDirs: []string{"."},
		},
		{
			name: "git-symlink",
			setup: func(t *testing.T, dir, _ string) {
				os.MkdirAll(filepath.Join(dir, ".repo", "projects"), 0o755)
				os.WriteFile(filepath.Join(dir, ".repo", "manifest.xml"), []byte("<manifest/>\n"), 0o644)
				hostGit(t, dir, "init", "-q", "--bare", ".repo/projects/x.git")
				hostGit(t, dir, "config", "-f", ".repo/projects/x.git/config", "core.bare", "false")
				if err := os.Symlink(".repo/projects/x.git", filepath.Join(dir, ".git")); err != nil {
					t.Fatal(err)
				}
			},
			attack: `echo ` + fsmon + ` >> .repo/projects/x.git/config 2>&1
git config core.fsmonitor "touch PWN" 2>&1
printf '#!/bin/sh\ntouch PWN\n' > .repo/projects/x.git/hooks/pre-commit 2>&1
mkdir .repo/projects/x.git/hooks/x 2>&1
mv .repo/projects/x.git .repo/projects/y.git 2>&1; mkdir .repo/projects/x.git 2>&1
ln .repo/projects/x.git/config work/hard 2>&1 && echo ` + fsmon + ` >> work/hard
rm .git 2>&1; ln -sf work .git 2>&1`,
			gitDirs: []string{"."},
		},
		{
			// The same rule for a --writable-root: its own folder is
			// read-only, its .git protected, its subfolders writable.
			name:  "writable-root",
			extra: true,
			setup: func(t *testing.T, dir, extra string) {
				hostGit(t, extra, "init", "-q", ".")
				llWorkFixture(t, extra)
			},
			attack: `echo ` + fsmon + ` >> XROOT/.git/config 2>&1
git -C XROOT config core.fsmonitor "touch PWN" 2>&1
mkdir XROOT/.hg 2>&1; echo x > XROOT/top.txt 2>&1
echo y > XROOT/work/y.txt && echo EXTRA-WORK-ok`,
			gitDirs: []string{"XROOT"},
		},
	}
	for _, u := range escUsers(t) {
		for _, c := range cases {
			t.Run(string(u)+"/"+c.name, func(t *testing.T) {
				dir := escDir(t, u)
				extra := ""
				if c.extra {
					extra = escDir(t, u)
				}
				c.setup(t, dir, extra)
				llWorkFixture(t, dir)
				chownTree(t, u, dir)
				if extra != "" {
					chownTree(t, u, extra)
				}
				marker := filepath.Join(etOutside(t), "pwned")
				before, beforeExtra := llSnapshot(t, dir), map[string]string{}
				if extra != "" {
					beforeExtra = llSnapshot(t, extra)
				}
				script := strings.NewReplacer("PWN", marker, "XROOT", extra).Replace(c.attack) + llWorkScript
				args := []string{"--tier", "landlock", "--network", "none"}
				if extra != "" {
					args = append(args, "--writable-root", extra)
				}
				r, code, stderr := escRun(t, u, false, dir, nil, append(args, "--", "sh", "-c", script)...)
				if r.Sandbox.Tier != "landlock" {
					t.Fatalf("ran in tier %q (exit %d, stderr %s)", r.Sandbox.Tier, code, stderr)
				}
				out := r.Stdout + r.Stderr
				t.Logf("sandbox output:\n%s", out)
				if d := llDiff(before, llSnapshot(t, dir)); len(d) > 0 {
					t.Errorf("the sandbox changed the workspace outside its subfolders:\n%s", strings.Join(d, "\n"))
				}
				if extra != "" {
					if d := llDiff(beforeExtra, llSnapshot(t, extra)); len(d) > 0 {
						t.Errorf("the sandbox changed the --writable-root outside its subfolders:\n%s", strings.Join(d, "\n"))
					}
					if b, _ := os.ReadFile(filepath.Join(extra, "work", "y.txt")); string(b) != "y\n" || !strings.Contains(out, "EXTRA-WORK-ok") {
						t.Errorf("work in the --writable-root's subfolder failed: %q", b)
					}
				}
				llCheckWork(t, dir, out)
				for _, g := range c.gitDirs {
					if g == "XROOT" {
						llHostGitStatus(extra)
					} else {
						llHostGitStatus(filepath.Join(dir, g))
					}
				}
				if _, err := os.Stat(marker); err == nil {
					t.Error("the host's git status ran a program the sandbox planted")
				}
			})
		}
	}
}
