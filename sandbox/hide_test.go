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
	const all, along, file = 0xff, 0x08, 0x0f
	got, err := splitGrant(r, all, along, file, hidden, osHideFS())
	if err != nil {
		t.Fatal(err)
	}
	want := []pathGrant{
		{r, along, true}, {r + "/a", all, true}, {r + "/b", all & file, false},
		{r + "/c", along, true}, {r + "/c/keep", all & file, false},
		{r + "/d", along, true}, {r + "/d/e", along, true}, {r + "/d/e/f", along, true}, {r + "/d/e/f/g", all & file, false},
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("splitGrant =\n%+v\nwant\n%+v\n(hidden paths and symlinks get no rule; folders on the way only `along`)", got, want)
	}
	if g, _ := splitGrant(r+"/a", all, along, file, hidden, osHideFS()); !reflect.DeepEqual(g, []pathGrant{{r + "/a", all, true}}) {
		t.Fatalf("a grant with nothing hidden below changed: %+v", g)
	}
	if g, _ := splitGrant(r+"/c/secret", all, along, file, hidden, osHideFS()); g != nil {
		t.Fatalf("a hidden folder was granted: %+v", g)
	}
}
