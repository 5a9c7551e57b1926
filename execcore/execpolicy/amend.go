package execpolicy

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	"golang.org/x/sys/unix"
)

// ErrEmptyPrefix is returned for an amendment without tokens.
var ErrEmptyPrefix = errors.New("prefix rule requires at least one token")

// AppendNetworkRule validates r and appends its network_rule(...) line to
// the rules file at path. It returns added=false when an identical line is
// already present. See appendLine for the atomicity guarantees.
func AppendNetworkRule(path string, r NetworkRule) (bool, error) {
	v, err := ValidateNetworkRule(r)
	if err != nil {
		return false, err
	}
	return appendLine(path, FormatNetworkRule(v))
}

// AppendPrefixRule appends prefix_rule(pattern=[...], decision="allow") for
// tokens to the rules file at path (an exec-policy amendment). It returns
// added=false when an identical line is already present.
func AppendPrefixRule(path string, tokens []string) (bool, error) {
	if len(tokens) == 0 {
		return false, ErrEmptyPrefix
	}
	return appendLine(path, FormatPrefixRule(tokens))
}

// appendLine adds line to the file unless an identical line exists. The
// folder is created (0700) when missing. Writers are serialised by an
// exclusive flock on a sibling lock file, and the new content is written to
// a temporary file in the same folder, fsynced, and renamed over the old
// file, so a reader (or a crash) sees either the old or the new file, never
// a torn one.
func appendLine(path, line string) (bool, error) {
	if path == "" {
		return false, errors.New("rules file path is empty")
	}
	if bytes.ContainsAny([]byte(line), "\n\r") {
		return false, errors.New("rule line must not contain a newline")
	}
	dir := filepath.Dir(path)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return false, fmt.Errorf("create rules folder %s: %w", dir, err)
	}
	lock, err := os.OpenFile(path+".lock", os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		return false, fmt.Errorf("open lock file for %s: %w", path, err)
	}
	defer lock.Close()
	if err := unix.Flock(int(lock.Fd()), unix.LOCK_EX); err != nil {
		return false, fmt.Errorf("lock %s: %w", path, err)
	}
	defer func() { _ = unix.Flock(int(lock.Fd()), unix.LOCK_UN) }()

	mode := fs.FileMode(0o600)
	old, err := os.ReadFile(path)
	switch {
	case err == nil:
		if st, serr := os.Stat(path); serr == nil {
			mode = st.Mode().Perm()
		}
	case errors.Is(err, fs.ErrNotExist):
		old = nil
	default:
		return false, fmt.Errorf("read %s: %w", path, err)
	}
	for _, l := range bytes.Split(old, []byte("\n")) {
		if string(bytes.TrimSuffix(l, []byte("\r"))) == line {
			return false, nil
		}
	}
	var buf bytes.Buffer
	buf.Grow(len(old) + len(line) + 2)
	buf.Write(old)
	if len(old) > 0 && old[len(old)-1] != '\n' {
		buf.WriteByte('\n')
	}
	buf.WriteString(line)
	buf.WriteByte('\n')

	tmp, err := os.CreateTemp(dir, "."+filepath.Base(path)+".tmp-*")
	if err != nil {
		return false, fmt.Errorf("create temporary file in %s: %w", dir, err)
	}
	tmpName := tmp.Name()
	cleanup := func() { _ = os.Remove(tmpName) }
	if _, err := tmp.Write(buf.Bytes()); err != nil {
		tmp.Close()
		cleanup()
		return false, fmt.Errorf("write %s: %w", tmpName, err)
	}
	if err := tmp.Chmod(mode); err != nil {
		tmp.Close()
		cleanup()
		return false, fmt.Errorf("chmod %s: %w", tmpName, err)
	}
	if err := tmp.Sync(); err != nil {
		tmp.Close()
		cleanup()
		return false, fmt.Errorf("sync %s: %w", tmpName, err)
	}
	if err := tmp.Close(); err != nil {
		cleanup()
		return false, fmt.Errorf("close %s: %w", tmpName, err)
	}
	if err := os.Rename(tmpName, path); err != nil {
		cleanup()
		return false, fmt.Errorf("rename %s to %s: %w", tmpName, path, err)
	}
	if d, err := os.Open(dir); err == nil {
		_ = d.Sync() // make the rename durable; best effort on filesystems without dir fsync
		d.Close()
	}
	return true, nil
}
