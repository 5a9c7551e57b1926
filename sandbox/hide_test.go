package sandbox

import (
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"testing"
)

// hideTree makes files (name ends without "/") and folders (ending "/")
// under a new temporary folder and returns it.
func hideTree(t *testing.T, entries ...string) string {
	t.Helper()
	root := t.TempDir()
	for _, e := range entries {
		p := filepath.Join(root, e)
		if e[len(e)-1] == '/' {
			if err := os.MkdirAll(p, 0o755); err != nil {
				t.Fatal(err)
			}
			continue
		}
		os.MkdirAll(filepath.Dir(p), 0o755)
		if err := os.WriteFile(p, []byte("x"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return root
}

func TestPlanHiddenResolvesAndDedupes(t *testing.T) {
	r := hideTree(t, "home/.ssh/id", "home/.netrc", "real/gh/hosts.yml", "ws/")
	if err := os.Symlink(filepath.Join(r, "real/gh"), filepath.Join(r, "home/link")); err != nil {
		t.Fatal(err)
	}
	got, notes, err := planHidden([]string{
		r + "/home/.ssh/id", r + "/home/.ssh", r + "/home/.netrc", r + "/home/link", r + "/home/missing", r + "/home/.netrc/x",
	}, []string{r + "/ws"}, osHideFS())
	if err != nil {
		t.Fatal(err)
	}
	want := []hiddenPath{{r + "/home/.netrc", false}, {r + "/home/.ssh", true}, {r + "/real/gh", true}}
	if !reflect.DeepEqual(got, want) || len(notes) != 0 {
		t.Fatalf("planHidden = %+v %v, want %+v (nested dropped, symlink at its target, missing skipped)", got, notes, want)
	}
	if _, _, err := planHidden([]string{"relative/x"}, nil, osHideFS()); err == nil {
		t.Fatal("a relative hidden path was accepted")
	}
}

// A hidden folder that holds the workspace is hidden around it; one that is
// the workspace keeps only what is listed inside it by name.
func TestPlanHiddenNarrowsAroundWorkspace(t *testing.T) {
	r := hideTree(t, "np/admin-token", "np/audit", "np/proj/notes", "np/proj/ws/.env", "np/proj/ws/main.go", "np/sub/")
	if err := os.Symlink("/etc/hostname", filepath.Join(r, "np/link")); err != nil {
		t.Fatal(err)
	}
	ws := r + "/np/proj/ws"
	got, notes, err := planHidden([]string{r + "/np", r + "/np/admin-token", ws, ws + "/.env"}, []string{ws}, osHideFS())
	if err != nil {
		t.Fatal(err)
	}
	want := []hiddenPath{
		{r + "/np/admin-token", false}, {r + "/np/audit", false}, {r + "/np/proj/notes", false},
		{ws + "/.env", false}, {r + "/np/sub", true},
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("planHidden = %+v\nwant %+v", got, want)
	}
	if !slices.Contains(notes, "hidden_narrowed:"+r+"/np") || !slices.Contains(notes, "hidden_narrowed:"+ws) {
		t.Fatalf("notes %v lack the narrowed folders", notes)
	}
}

func TestSplitGrant(t *testing.T) {
	r := hideTree(t, "a/x", "b", "c/secret/k", "c/keep", "d/e/f/.netrc", "d/e/f/g")
	if err := os.Symlink(filepath.Join(r, "c/secret"), filepath.Join(r, "link")); err != nil {
		t.Fatal(err)
	}
	hidden := []hiddenPath{{r + "/c/secret", true}, {r + "/d/e/f/.netrc", false}}
	const all, along, file = 0xff, 0xf7, 0x0f
	rights := splitRights{Access: all, File: file, ReadsFiles: 0x08, Writes: 0x30}
	got, err := splitGrant(r, rights, grantCuts{Hidden: hidden}, osHideFS())
	if err != nil {
		t.Fatal(err)
	}
	want := []pathGrant{
		{r, along, true}, {r + "/a", all, true}, {r + "/b", all & file, false},
		{r + "/c", along, true}, {r + "/c/keep", all & file, false},
		{r + "/d", along, true}, {r + "/d/e", along, true}, {r + "/d/e/f", along, true}, {r + "/d/e/f/g", all & file, false},
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("splitGrant =\n%+v\nwant\n%+v\n(hidden paths and symlinks get no rule; folders on the way lose the file reads)", got, want)
	}
	if g, _ := splitGrant(r+"/a", rights, grantCuts{Hidden: hidden}, osHideFS()); !reflect.DeepEqual(g, []pathGrant{{r + "/a", all, true}}) {
		t.Fatalf("a grant with nothing hidden below changed: %+v", g)
	}
	if g, _ := splitGrant(r+"/c/secret", rights, grantCuts{Hidden: hidden}, osHideFS()); g != nil {
		t.Fatalf("a hidden folder was granted: %+v", g)
	}
	// Landlock tier: a folder on the way to a hidden folder cannot be
	// listed (the right would be inherited into it); on the way to a
	// hidden file it can.
	rights.Lists = 0x04
	got, _ = splitGrant(r, rights, grantCuts{Hidden: hidden}, osHideFS())
	for _, g := range got {
		if lists := g.Access&0x04 != 0; (g.Path == r || g.Path == r+"/c") == lists {
			t.Fatalf("%s: access %#x (lists %v)", g.Path, g.Access, lists)
		}
	}
}

// The landlock tier's protected paths: the root and every folder on the
// way lose the writes, the protected paths keep only the reads, whether
// they exist or not; hidden and read-only cuts combine.
func TestSplitGrantReadOnly(t *testing.T) {
	r := hideTree(t, ".git/config", "top.txt", "src/main.go", "sub/.git/config", "sub/pkg/x", ".repo/p/x.git/config", ".repo/m.xml", "s/.netrc", "s/.git/config", "s/ok")
	const all, file, reads, writes = 0xff, 0x0f, 0x08, 0x30
	rights := splitRights{Access: all, File: file, ReadsFiles: reads, Writes: writes}
	cuts := grantCuts{
		Hidden:   []hiddenPath{{r + "/s/.netrc", false}},
		ReadOnly: []string{r + "/.git", r + "/.hg", r + "/sub/.git", r + "/.repo/p/x.git", r + "/s/.git", r + "/top.txt"},
	}
	got, err := splitGrant(r, rights, cuts, osHideFS())
	if err != nil {
		t.Fatal(err)
	}
	ro := uint64(all &^ writes)
	want := []pathGrant{
		{r, ro &^ reads, true}, // on the way to s/.netrc too
		{r + "/.git", ro, true},
		{r + "/.repo", ro, true}, {r + "/.repo/m.xml", all & file, false}, {r + "/.repo/p", ro, true}, {r + "/.repo/p/x.git", ro, true},
		{r + "/s", all &^ writes &^ reads, true}, {r + "/s/.git", ro, true}, {r + "/s/ok", all & file, false},
		{r + "/src", all, true},
		{r + "/sub", ro, true}, {r + "/sub/.git", ro, true}, {r + "/sub/pkg", all, true},
		{r + "/top.txt", ro & file, false},
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("splitGrant =\n%+v\nwant\n%+v", got, want)
	}
	// A root inside a protected path is read-only whole.
	if g, _ := splitGrant(r+"/.git", rights, cuts, osHideFS()); !reflect.DeepEqual(g, []pathGrant{{r + "/.git", ro, true}}) {
		t.Fatalf("a grant inside a protected path: %+v", g)
	}
	// Unlistable root: nothing below it is granted more than the root.
	fsys := osHideFS()
	fsys.ReadDir = func(string) ([]os.DirEntry, error) { return nil, os.ErrPermission }
	if g, _ := splitGrant(r, rights, cuts, fsys); !reflect.DeepEqual(g, []pathGrant{{r, ro &^ reads, true}}) {
		t.Fatalf("an unlistable root: %+v", g)
	}
}
