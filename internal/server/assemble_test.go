package server

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/netproxy/netproxy/internal/config"
	"github.com/netproxy/netproxy/metrics"
)

func assembleConfig(t *testing.T, toml string) *config.Config {
	t.Helper()
	dir := t.TempDir()
	t.Setenv("NETPROXY_HOME", dir)
	path := filepath.Join(dir, "netproxy.toml")
	base := "[listen]\nhttp = \"127.0.0.1:0\"\nsocks5 = \"127.0.0.1:0\"\nadmin = \"127.0.0.1:0\"\n[control]\nsocket = \"" + filepath.Join(dir, "control.sock") + "\"\n"
	if err := os.WriteFile(path, []byte(base+toml), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg, err := config.Load(path)
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}

// A part that fails while netproxy is assembled fails Assemble, closes
// what was built, and an unopenable audit file is told apart (exit 1).
func TestAssembleFailsClosed(t *testing.T) {
	// A regular file where the audit log's directory should be.
	notDir := filepath.Join(t.TempDir(), "file")
	if err := os.WriteFile(notDir, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	cfg := assembleConfig(t, "[audit]\npath = \""+filepath.Join(notDir, "audit.log")+"\"\n")
	if n, err := Assemble(cfg, nil, metrics.New(10)); err == nil || n != nil || !errors.Is(err, ErrOpen) || !strings.Contains(err.Error(), "audit.path") {
		t.Fatalf("bad audit path: %v %v", n, err)
	}
	// A part after the Server: the cluster's Redis is unreachable.
	key := filepath.Join(t.TempDir(), "cluster.key")
	if err := os.WriteFile(key, []byte("0123456789abcdef0123456789abcdef"), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg = assembleConfig(t, "[audit]\npath = \""+filepath.Join(t.TempDir(), "audit.log")+"\"\n[cluster]\nredis = \"redis://127.0.0.1:1/0\"\nkey_prefix = \"t:\"\nkey_file = \""+key+"\"\n")
	if n, err := Assemble(cfg, nil, metrics.New(10)); err == nil || n != nil || errors.Is(err, ErrOpen) || !strings.Contains(err.Error(), "cluster.redis") {
		t.Fatalf("unreachable Redis: %v %v", n, err)
	}
}

func TestAssembleStartsAndShutsDown(t *testing.T) {
	cfg := assembleConfig(t, "[audit]\npath = \""+filepath.Join(t.TempDir(), "audit.log")+"\"\n[approvals]\nenabled = true\n")
	n, err := Assemble(cfg, nil, metrics.New(10))
	if err != nil {
		t.Fatal(err)
	}
	if err := n.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	n.Hangup()
	if err := n.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
}
