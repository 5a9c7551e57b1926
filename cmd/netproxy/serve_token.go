package main

import (
	"fmt"
	"io"
	"os"
	"path/filepath"

	"golang.org/x/sys/unix"

	"github.com/netproxy/netproxy/internal/config"
)

// adminTokenFile is where a generated admin token goes when stdout is not a
// terminal (SPEC §7.3), relative to $NETPROXY_HOME (also listed among the
// secret paths of the control API).
const adminTokenFile = config.AdminTokenFile

// isTerminal reports whether w is a terminal (a generated token may be
// printed there; anywhere else — a pipe, a file, journald — it must not).
func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	_, err := unix.IoctlGetTermios(int(f.Fd()), unix.TCGETS)
	return err == nil
}

// writeTokenFile writes token to path with mode 0600, atomically: a reader
// sees the old file or the whole new one, never a partial token, and never
// a moment where the file is readable by others.
func writeTokenFile(path, token string) error {
	dir := filepath.Dir(path)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	tmp, err := os.CreateTemp(dir, ".admin-token-*") // created 0600
	if err != nil {
		return err
	}
	name := tmp.Name()
	defer os.Remove(name) // a no-op once renamed
	if err := tmp.Chmod(0o600); err != nil {
		tmp.Close()
		return err
	}
	if _, err := tmp.WriteString(token + "\n"); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Sync(); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	if err := os.Rename(name, path); err != nil {
		return err
	}
	if d, err := os.Open(dir); err == nil {
		d.Sync()
		d.Close()
	}
	return nil
}

// announceToken tells the operator where a generated admin token is: in
// the printed page link on a terminal, else in a 0600 file whose path is
// printed (the token itself never reaches a log). It returns an error when
// the file cannot be written; serve then refuses to start.
func announceToken(stdout io.Writer, tty bool, home, tokenEnv, adminAddr, token string) error {
	page := "http://" + adminAddr + "/"
	if tty {
		fmt.Fprintf(stdout, "netproxy: approvals page %s#token=%s\n", page, token)
		fmt.Fprintf(stdout, "netproxy: no token in $%s; generated one for this run (it is in the approvals page link)\n", tokenEnv)
		return nil
	}
	path := filepath.Join(home, adminTokenFile)
	if err := writeTokenFile(path, token); err != nil {
		return fmt.Errorf("no token in $%s and stdout is not a terminal: cannot write the generated admin token to %s: %v", tokenEnv, path, err)
	}
	fmt.Fprintf(stdout, "netproxy: approvals page %s\n", page)
	fmt.Fprintf(stdout, "netproxy: no token in $%s; generated one for this run and wrote it to %s (mode 0600); paste it into the approvals page or send it as Authorization: Bearer\n", tokenEnv, path)
	return nil
}
