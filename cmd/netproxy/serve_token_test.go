package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestAnnounceTokenNotATerminal(t *testing.T) {
	home := filepath.Join(t.TempDir(), "home")
	var out bytes.Buffer
	if isTerminal(&out) {
		t.Fatal("a buffer is not a terminal")
	}
	if err := announceToken(&out, false, home, "TOK_ENV", "127.0.0.1:9091", "deadbeef"); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(out.String(), "deadbeef") {
		t.Fatalf("token printed: %s", out.String())
	}
	path := filepath.Join(home, "admin-token")
	if !strings.Contains(out.String(), path) {
		t.Fatalf("file not named: %s", out.String())
	}
	st, err := os.Stat(path)
	if err != nil || st.Mode().Perm() != 0o600 {
		t.Fatalf("stat: %v %v", st, err)
	}
	if b, _ := os.ReadFile(path); string(b) != "deadbeef\n" {
		t.Fatalf("file holds %q", b)
	}
	// A second run replaces the file whole.
	if err := announceToken(&out, false, home, "TOK_ENV", "127.0.0.1:9091", "cafe"); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(path); string(b) != "cafe\n" {
		t.Fatalf("file holds %q", b)
	}
	ents, _ := os.ReadDir(home)
	if len(ents) != 1 {
		t.Fatalf("leftover files: %v", ents)
	}
}

func TestAnnounceTokenTerminal(t *testing.T) {
	home := t.TempDir()
	var out bytes.Buffer
	if err := announceToken(&out, true, home, "TOK_ENV", "127.0.0.1:9091", "deadbeef"); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out.String(), "http://127.0.0.1:9091/#token=deadbeef") {
		t.Fatalf("no link: %s", out.String())
	}
	if _, err := os.Stat(filepath.Join(home, "admin-token")); !os.IsNotExist(err) {
		t.Fatalf("file written on a terminal: %v", err)
	}
}

func TestAnnounceTokenUnwritableFailsClosed(t *testing.T) {
	dir := t.TempDir()
	blocker := filepath.Join(dir, "file")
	os.WriteFile(blocker, nil, 0o600)
	var out bytes.Buffer
	err := announceToken(&out, false, filepath.Join(blocker, "home"), "TOK_ENV", "127.0.0.1:9091", "deadbeef")
	if err == nil || strings.Contains(err.Error(), "deadbeef") || strings.Contains(out.String(), "deadbeef") {
		t.Fatalf("err %v out %q", err, out.String())
	}
}
