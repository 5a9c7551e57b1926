package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// runCLIWithFile runs the CLI with $NETPROXY_ADMIN_TOKEN = env and the
// token file at file.
func runCLIWithFile(t *testing.T, env, file string, args ...string) (int, string, string) {
	t.Helper()
	cli, out, errb := newCLI(strings.NewReader(""), env, false)
	cli.tokenFile = file
	return runBuiltCLI(cli, out, errb, args...)
}

// With $NETPROXY_ADMIN_TOKEN unset, the CLI uses the token file serve
// writes (SPEC §7.3); the variable wins when set; a file others may read,
// an empty one or a stale one is refused with what to do.
func TestApprovalsTokenFile(t *testing.T) {
	q := newTestQueue(t)
	q.add(t, "filetoken.test", 443)
	dir := t.TempDir()
	file := filepath.Join(dir, adminTokenFile)
	if err := writeTokenFile(file, cliTestToken); err != nil {
		t.Fatal(err)
	}

	code, out, errs := runCLIWithFile(t, "", file, "--admin", q.srv.URL, "list")
	if code != 0 || !strings.Contains(out, "filetoken.test:443") {
		t.Fatalf("list with the token file: %d %s %s", code, out, errs)
	}
	// The variable wins over the file.
	code, _, errs = runCLIWithFile(t, "wrong-token", file, "--admin", q.srv.URL, "list")
	if code != 1 || !strings.Contains(errs, "set NETPROXY_ADMIN_TOKEN to") {
		t.Fatalf("variable set to a wrong token: %d %s", code, errs)
	}

	// A token file from another run names the file.
	stale := filepath.Join(t.TempDir(), adminTokenFile)
	if err := writeTokenFile(stale, "stale-token"); err != nil {
		t.Fatal(err)
	}
	code, _, errs = runCLIWithFile(t, "", stale, "--admin", q.srv.URL, "list")
	if code != 1 || !strings.Contains(errs, "admin token from "+stale+" rejected") || strings.Contains(errs, "stale-token") {
		t.Fatalf("stale token file: %d %s", code, errs)
	}

	for _, tc := range []struct {
		name, content string
		mode          os.FileMode
		want          string
	}{
		{"world readable", cliTestToken + "\n", 0o644, "mode 0644"},
		{"group writable", cliTestToken + "\n", 0o620, "mode 0620"},
		{"empty", "\n", 0o600, "holds no single token"},
		{"two words", "a b\n", 0o600, "holds no single token"},
		{"huge", strings.Repeat("a", maxTokenFile+1), 0o600, "not a token file"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := filepath.Join(t.TempDir(), adminTokenFile)
			if err := os.WriteFile(p, []byte(tc.content), tc.mode); err != nil {
				t.Fatal(err)
			}
			os.Chmod(p, tc.mode) // past the umask
			code, _, errs := runCLIWithFile(t, "", p, "--admin", q.srv.URL, "list")
			if code != 2 || !strings.Contains(errs, tc.want) || !strings.Contains(errs, "NETPROXY_ADMIN_TOKEN is not set") {
				t.Fatalf("exit %d, stderr %q; want 2 and %q", code, errs, tc.want)
			}
		})
	}
	code, _, errs = runCLIWithFile(t, "", filepath.Join(dir, "missing"), "--admin", q.srv.URL, "list")
	if code != 2 || !strings.Contains(errs, "there is no "+filepath.Join(dir, "missing")) {
		t.Fatalf("missing file: %d %s", code, errs)
	}
	code, _, errs = runCLIWithFile(t, "", dir, "--admin", q.srv.URL, "list")
	if code != 2 || !strings.Contains(errs, "not a regular file") {
		t.Fatalf("a folder: %d %s", code, errs)
	}
}
