package sandbox

import (
	"os"
	"path/filepath"
	"slices"
	"testing"
)

func TestFiles(t *testing.T) {
	dir := t.TempDir()
	roots := filepath.Join(dir, "roots.pem")
	os.WriteFile(roots, []byte("ROOTS"), 0o644)
	files := []File{{Name: "bundle.pem", PrependFirst: []string{filepath.Join(dir, "missing"), roots}, Data: []byte("CA\n"), Env: []string{"SSL_CERT_FILE", "PIP_CERT"}}}
	if err := checkFiles(files); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(dir, "out")
	os.Mkdir(out, 0o700)
	if err := writeFiles(out, files); err != nil {
		t.Fatal(err)
	}
	b, _ := os.ReadFile(filepath.Join(out, "bundle.pem"))
	if string(b) != "ROOTS\nCA\n" {
		t.Fatalf("bundle = %q", b)
	}
	// Never over an existing file (a symlink planted by the command, say).
	if err := writeFiles(out, files); err == nil {
		t.Fatal("an existing file was overwritten")
	}
	env := fileEnv([]string{"SSL_CERT_FILE=/etc/old", "A=1"}, "/tmp", files)
	if !slices.Contains(env, "SSL_CERT_FILE=/tmp/bundle.pem") || !slices.Contains(env, "PIP_CERT=/tmp/bundle.pem") || slices.Contains(env, "SSL_CERT_FILE=/etc/old") {
		t.Fatalf("env = %v", env)
	}
	for _, bad := range []string{"", "../x", "a/b", ".hidden"} {
		if checkFiles([]File{{Name: bad}}) == nil {
			t.Errorf("name %q accepted", bad)
		}
	}
}
