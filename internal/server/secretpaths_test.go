package server

import (
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/netproxy/netproxy/internal/config"
)

func TestSecretPaths(t *testing.T) {
	d := t.TempDir()
	audit := filepath.Join(d, "log", "audit.jsonl")
	os.MkdirAll(filepath.Dir(audit), 0o755)
	for _, n := range []string{"audit.jsonl", "audit.jsonl.1", "audit.jsonl-20261201.gz", "audit.jsonlx", "other.log"} {
		os.WriteFile(filepath.Join(d, "log", n), nil, 0o600)
	}
	cfg := config.Default()
	cfg.Path = filepath.Join(d, "netproxy.toml")
	cfg.Audit.Path = audit
	cfg.MITM.CACert, cfg.MITM.CAKey = filepath.Join(d, "ca.pem"), filepath.Join(d, "ca-key.pem")
	cfg.Control.Socket = filepath.Join(d, "control.sock")
	cfg.Credentials = []config.Credential{{Name: "a", SecretFile: "/srv/keys/a.secret"}, {Name: "b", SecretEnv: "B"}}
	home := filepath.Join(d, "home")
	got := secretPaths(cfg, home)
	want := []string{home, home + "/admin-token", home + "/rules", cfg.Path, cfg.MITM.CAKey, cfg.Control.Socket,
		"/srv/keys/a.secret", audit, audit + "-20261201.gz", audit + ".1"}
	slices.Sort(got)
	slices.Sort(want)
	if !slices.Equal(got, want) {
		t.Fatalf("secretPaths =\n%v\nwant\n%v (no CA certificate, no unrelated neighbour)", got, want)
	}
}
