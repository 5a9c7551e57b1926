package test

// End-to-end reproductions of issue 22 items 3, 4, 5 and the SIGPIPE part
// of 9: a sandboxed run must not leave anything that makes a later git — on
// the host, or one a rule lets run outside the sandbox — run a program, and
// the placeholders of missing protected names must hold while any run
// relies on them and be gone after the last one, however execwrap ends.

import (
	"bytes"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// gitTiers are the tiers a test runs in: both where the host has them.
var gitTiers = []string{"namespaces", "landlock"}

// hostGit runs git on the host as root in dir (test setup), failing the
// test on an error.
func hostGit(t *testing.T, dir string, args ...string) string {
	t.Helper()
	cmd := exec.Command("git", append([]string{"-c", "user.name=t", "-c", "user.email=t@t", "-c", "protocol.file.allow=always", "-c", "init.defaultBranch=main", "-c", "safe.directory=*"}, args...)...)
	cmd.Dir = dir
	cmd.Env = etEnv(dir)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("git %q in %s: %v\n%s", args, dir, err, out)
	}
	return string(out)
}

// chownTree gives dir and everything in it to u.
func chownTree(t *testing.T, u escUser, dir string) {
	t.Helper()
	if u != asNobody {
		return
	}
	filepath.Walk(dir, func(p string, _ os.FileInfo, err error) error {
		if err == nil {
			os.Lchown(p, 65534, 65534)
		}
		return nil
	})
}

// gitWorkspace is a repository with a committed file and a submodule `sub`
// (sub/.git = "gitdir: ../.git/modules/sub") holding s.txt and t.txt.
func gitWorkspace(t *testing.T, u escUser) string {
	t.Helper()
	dir := escDir(t, u)
	src := t.TempDir()
	hostGit(t, src, "init", "-q", ".")
	os.WriteFile(filepath.Join(src, "s.txt"), []byte("sub one\n"), 0o644)
	os.WriteFile(filepath.Join(src, "t.txt"), []byte("sub two\n"), 0o644)
	hostGit(t, src, "add", ".")
	hostGit(t, src, "commit", "-qm", "sub")
	hostGit(t, dir, "init", "-q", ".")
	os.WriteFile(filepath.Join(dir, "a.txt"), []byte("root\n"), 0o644)
	hostGit(t, dir, "add", "a.txt")
	hostGit(t, dir, "submodule", "add", "-q", src, "sub")
	hostGit(t, dir, "commit", "-qm", "root")
	if b, _ := os.ReadFile(filepath.Join(dir, "sub", ".git")); !strings.HasPrefix(string(b), "gitdir: ../.git/modules/sub") {
		t.Fatalf("fixture: sub/.git is %q", b)
	}
	chownTree(t, u, dir)
	return dir
}

// runGitBypass runs `bash -lc SCRIPT` under prefix_rule(RULE) the way the
// docs' example allows it: unsandboxed (a rule bypass as root, which needs
// netproxy; danger-full-access as nobody, who cannot reach the test's
// control socket). Either way git runs outside any sandbox.
func runGitBypass(t *testing.T, u escUser, dir, rule, script string) sbxResult {
	t.Helper()
	if u == asRoot {
		p := StartProxy(t, StdConfig())
		rules := etRules(t, `prefix_rule(pattern=`+rule+`, decision="allow")`)
		cmd := exec.Command(ExecwrapBin(t), "run", "--json", "--control", p.Control, "--rules", rules, "--", "bash", "-lc", script)
		cmd.Dir, cmd.Env = dir, p.Env()
		var out, errb bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &errb
		cmd.Run()
		var r sbxResult
		if err := json.Unmarshal(out.Bytes(), &r); err != nil {
			t.Fatalf("no result: %v\nstdout %s\nstderr %s", err, out.String(), errb.String())
		}
		return r
	}
	r, _, _ := escRun(t, u, false, dir, nil, "--sandbox", "danger-full-access", "--network", "host", "--", "bash", "-lc", script)
	return r
}

// Item 3: a sandboxed run retargets sub/.git to a git dir it planted with
// filter.evil.clean and diff.x.textconv; a rule-allowed git status / git
// diff --submodule=diff must not run either.
func TestSandboxGitPlantedSubmoduleDrivers(t *testing.T) {
	for _, u := range escUsers(t) {
		for _, tier := range gitTiers {
			t.Run(string(u)+"/"+tier, func(t *testing.T) {
				dir := gitWorkspace(t, u)
				if u == asRoot && tier == "namespaces" {
					// No regression: a clean repository's git status still
					// takes the rule's bypass.
					if r := runGitBypass(t, u, dir, `["git","status"]`, "git status"); len(r.Attempts) != 1 || r.Attempts[0].Sandboxed || r.Sandbox.Tier != "none" {
						t.Fatalf("clean repository: attempts %+v tier %s signals %v", r.Attempts, r.Sandbox.Tier, r.Sandbox.Signals)
					}
				}
				out := etOutside(t)
				markF, markT := filepath.Join(out, "filter-ran"), filepath.Join(out, "textconv-ran")
				// The git dir is planted in a subfolder: the landlock tier
				// makes nothing new at the workdir's top.
				if err := os.Mkdir(filepath.Join(dir, "work"), 0o755); err != nil {
					t.Fatal(err)
				}
				chownTree(t, u, filepath.Join(dir, "work"))
				attack := `cp -r .git/modules/sub work/planted 2>&1
git config -f work/planted/config --unset core.worktree
git config -f work/planted/config filter.evil.clean "touch ` + markF + `; cat"
git config -f work/planted/config diff.x.textconv "touch ` + markT + `; cat"
printf 'gitdir: ../work/planted\n' > sub/.git
printf '* filter=evil diff=x\n' > sub/.gitattributes
touch sub/t.txt; echo more >> sub/s.txt; exit 0`
				ra, _, _ := escRun(t, u, false, dir, nil, "--tier", tier, "--network", "none", "--", "sh", "-c", attack)
				t.Logf("attack: %q %q", ra.Stdout, ra.Stderr)
				r := runGitBypass(t, u, dir, `["git","status"]`, "git status")
				if _, err := os.Stat(markF); err == nil {
					t.Fatalf("git status ran the planted clean filter (attempts %+v, stdout %q, stderr %q)", r.Attempts, r.Stdout, r.Stderr)
				}
				t.Logf("status: %+v %q %q", r.Attempts, r.Stdout, r.Stderr)
				if b, _ := os.ReadFile(filepath.Join(dir, "sub", ".git")); !strings.HasPrefix(string(b), "gitdir: ../.git/modules/sub") {
					// Both tiers keep a nested .git read-only (the landlock
					// tier by its grant split).
					t.Fatalf("sub/.git was retargeted in the sandbox: %q", b)
				}
				r = runGitBypass(t, u, dir, `["git","diff"]`, "git diff --submodule=diff")
				if _, err := os.Stat(markT); err == nil {
					t.Fatalf("git diff --submodule=diff ran the planted textconv (attempts %+v, stdout %q, stderr %q)", r.Attempts, r.Stdout, r.Stderr)
				}
			})
		}
	}
}

// Item 3: inside the sandbox, git log -p must not run a textconv the
// repository's configuration names.
func TestSandboxGitLogTextconvInside(t *testing.T) {
	for _, u := range escUsers(t) {
		for _, tier := range gitTiers {
			t.Run(string(u)+"/"+tier, func(t *testing.T) {
				dir := escDir(t, u)
				hostGit(t, dir, "init", "-q", ".")
				os.WriteFile(filepath.Join(dir, ".gitattributes"), []byte("*.txt diff=x\n"), 0o644)
				os.WriteFile(filepath.Join(dir, "a.txt"), []byte("one\n"), 0o644)
				hostGit(t, dir, "add", ".")
				hostGit(t, dir, "commit", "-qm", "1")
				os.WriteFile(filepath.Join(dir, "a.txt"), []byte("two\n"), 0o644)
				hostGit(t, dir, "commit", "-qam", "2")
				hostGit(t, dir, "config", "diff.x.textconv", "touch textconv-ran; cat")
				chownTree(t, u, dir)
				r, code, stderr := escRun(t, u, false, dir, nil, "--tier", tier, "--network", "none", "--", "git", "log", "-p")
				if _, err := os.Stat(filepath.Join(dir, "textconv-ran")); err == nil {
					t.Fatalf("git log -p in the sandbox ran the repository's textconv (exit %d %q %s)", code, r.Stderr, stderr)
				}
				if code != 0 || !strings.Contains(r.Stdout, "+two") {
					t.Fatalf("git log -p: exit %d stdout %q stderr %q %s", code, r.Stdout, r.Stderr, stderr)
				}
			})
		}
	}
}

// Item 5: an embedded sub/.git directory and the target of a
// .git -> .repo/projects/x.git symlink are read-only like .git itself.
func TestSandboxGitNestedAndSymlinkTargets(t *testing.T) {
	for _, u := range escUsers(t) {
		t.Run(string(u), func(t *testing.T) {
			dir := escDir(t, u)
			hostGit(t, dir, "init", "-q", ".")
			hostGit(t, dir, "init", "-q", "embedded")
			os.MkdirAll(filepath.Join(dir, ".repo", "projects"), 0o755)
			hostGit(t, dir, "init", "-q", "--bare", ".repo/projects/x.git")
			os.MkdirAll(filepath.Join(dir, "deep", "er", "proj"), 0o755)
			if err := os.Symlink("../../../.repo/projects/x.git", filepath.Join(dir, "deep", "er", "proj", ".git")); err != nil {
				t.Fatal(err)
			}
			chownTree(t, u, dir)
			cfgs := []string{filepath.Join(dir, "embedded", ".git", "config"), filepath.Join(dir, ".repo", "projects", "x.git", "config")}
			var before []string
			for _, c := range cfgs {
				b, _ := os.ReadFile(c)
				before = append(before, string(b))
			}
			r, _, _ := escRun(t, u, false, dir, nil, "--network", "none", "--", "sh", "-c",
				`git -C embedded config core.fsmonitor "touch pwned" 2>&1; echo '[core]fsmonitor=touch pwned' >> embedded/.git/config 2>&1
echo '[core]fsmonitor=touch pwned' >> .repo/projects/x.git/config 2>&1; mkdir .repo/projects/x.git/hooks/x 2>&1; exit 0`)
			for i, c := range cfgs {
				if b, _ := os.ReadFile(c); string(b) != before[i] {
					t.Fatalf("%s was written in the sandbox: %q (output %q)", c, b, r.Stdout)
				}
			}
			if _, err := os.Stat(filepath.Join(dir, ".repo", "projects", "x.git", "hooks", "x")); err == nil {
				t.Fatal("the .git symlink target's hooks folder was writable")
			}
		})
	}
}

// Item 4: run B reuses run A's placeholders; A ends first; B's git init and
// core.fsmonitor must still fail and nothing may be left behind.
func TestSandboxGitConcurrentPlaceholders(t *testing.T) {
	for _, u := range escUsers(t) {
		t.Run(string(u), func(t *testing.T) {
			dir := escDir(t, u)
			var wg sync.WaitGroup
			var rb sbxResult
			wg.Add(2)
			go func() {
				defer wg.Done()
				cmd := escCmd(t, u, false, dir, "run", "--json", "--network", "none", "--", "sleep", "1.5")
				cmd.Run()
			}()
			go func() {
				defer wg.Done()
				time.Sleep(700 * time.Millisecond)
				cmd := escCmd(t, u, false, dir, "run", "--json", "--network", "none", "--", "sh", "-c",
					`sleep 2; git init -q . 2>&1; git config core.fsmonitor "touch pwned" 2>&1; mkdir .hg/x 2>&1; exit 0`)
				out, _ := cmd.Output()
				json.Unmarshal(out, &rb)
			}()
			wg.Wait()
			for _, n := range []string{".git", ".hg", ".svn", ".codex", ".execwrap", ".netproxy"} {
				if _, err := os.Lstat(filepath.Join(dir, n)); err == nil {
					t.Fatalf("%s was left in the workdir after both runs (B's output %q)", n, rb.Stdout)
				}
			}
		})
	}
}

// Item 9 (SIGPIPE) and item 4 (SIGKILL): the placeholders are gone however
// execwrap ends, and a later git init works.
func TestSandboxGitPlaceholdersSurviveNoEnding(t *testing.T) {
	names := []string{".git", ".hg", ".svn", ".codex", ".execwrap", ".netproxy"}
	left := func(dir string) []string {
		var l []string
		for _, n := range names {
			if _, err := os.Lstat(filepath.Join(dir, n)); err == nil {
				l = append(l, n)
			}
		}
		return l
	}
	for _, u := range escUsers(t) {
		t.Run(string(u)+"/sigpipe", func(t *testing.T) {
			dir := escDir(t, u)
			ew, _ := escBins(t)
			pre := ""
			if u == asNobody {
				pre = "setpriv --reuid=65534 --regid=65534 --clear-groups -- "
			}
			sh := exec.Command("bash", "-c", pre+ew+" run --network none -- sh -c 'echo a; echo b; sleep 0.3; yes' | head -1")
			sh.Dir = dir
			sh.Env = escCmd(t, u, false, dir).Env
			done := make(chan []byte, 1)
			go func() { b, _ := sh.CombinedOutput(); done <- b }()
			select {
			case b := <-done:
				if !strings.HasPrefix(string(b), "a") {
					t.Fatalf("output %q", b)
				}
			case <-time.After(30 * time.Second):
				sh.Process.Kill()
				t.Fatal("execwrap run … | head -1 did not end")
			}
			if l := left(dir); len(l) > 0 {
				t.Fatalf("left behind after SIGPIPE: %v", l)
			}
		})
		t.Run(string(u)+"/sigkill", func(t *testing.T) {
			dir := escDir(t, u)
			cmd := escCmd(t, u, false, dir, "run", "--network", "none", "--", "sleep", "30")
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			deadline := time.Now().Add(10 * time.Second)
			for len(left(dir)) == 0 && time.Now().Before(deadline) {
				time.Sleep(20 * time.Millisecond)
			}
			if len(left(dir)) == 0 {
				cmd.Process.Kill()
				t.Fatal("no placeholders appeared")
			}
			time.Sleep(300 * time.Millisecond)
			// setpriv execs execwrap: the pid is execwrap's either way.
			cmd.Process.Signal(syscall.SIGKILL)
			cmd.Wait()
			deadline = time.Now().Add(5 * time.Second)
			for len(left(dir)) > 0 && time.Now().Before(deadline) {
				time.Sleep(50 * time.Millisecond)
			}
			if l := left(dir); len(l) > 0 {
				t.Fatalf("left behind 5s after execwrap was SIGKILLed: %v", l)
			}
			init := escCmd(t, u, false, dir)
			init.Args = []string{"git", "init", "-q", "."}
			if u == asNobody {
				init.Args = []string{"setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", "--", "git", "init", "-q", "."}
			}
			init.Path, _ = exec.LookPath(init.Args[0])
			if out, err := init.CombinedOutput(); err != nil {
				t.Fatalf("git init after the killed run: %v %s", err, out)
			}
		})
	}
}
