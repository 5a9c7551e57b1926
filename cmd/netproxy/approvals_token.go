package main

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"strings"
)

// maxTokenFile bounds what is read from the token file (a token is 48 hex
// characters; anything far larger is not one).
const maxTokenFile = 4096

// adminToken finds the token `netproxy approvals` sends: $NETPROXY_ADMIN_TOKEN
// when set, else the file `netproxy serve` writes when it generates a token
// and its stdout is not a terminal ($NETPROXY_HOME/admin-token, SPEC §7.3).
// from names where it came from, for error messages; it never holds the token.
func (c *approvalsCLI) adminToken() (token, from string, err error) {
	if t := c.getenv(adminTokenEnv); t != "" {
		return t, "$" + adminTokenEnv, nil
	}
	if c.tokenFile == "" {
		return "", "", fmt.Errorf("%s is not set: export the admin token that `netproxy serve` printed (or the value of the variable named by admin.token_env)", adminTokenEnv)
	}
	t, err := readTokenFile(c.tokenFile)
	if errors.Is(err, fs.ErrNotExist) {
		return "", "", fmt.Errorf("%s is not set and there is no %s (serve writes it only when it generated the token and its stdout was not a terminal): export the admin token that `netproxy serve` printed (or the value of the variable named by admin.token_env), or set NETPROXY_HOME to the folder serve uses", adminTokenEnv, c.tokenFile)
	}
	if err != nil {
		return "", "", fmt.Errorf("%s is not set and the token file cannot be used: %v", adminTokenEnv, err)
	}
	return t, c.tokenFile, nil
}

// readTokenFile reads a token file as serve writes it (mode 0600). A file
// that others may read or write is refused, as ssh refuses such a key: its
// token must be taken as leaked, and a token someone else could have
// written is not this reviewer's.
func readTokenFile(path string) (string, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return "", err
	}
	if !fi.Mode().IsRegular() {
		return "", fmt.Errorf("%s is not a regular file", path)
	}
	if perm := fi.Mode().Perm(); perm&0o077 != 0 {
		return "", fmt.Errorf("%s has mode %04o: others may read or change it; run chmod 600 %s and restart netproxy serve so it generates a new token", path, perm, path)
	}
	b, err := io.ReadAll(io.LimitReader(f, maxTokenFile+1))
	if err != nil {
		return "", err
	}
	if len(b) > maxTokenFile {
		return "", fmt.Errorf("%s is larger than %d bytes: not a token file", path, maxTokenFile)
	}
	t := strings.TrimSpace(string(b))
	if t == "" || strings.ContainsAny(t, " \t\r\n") {
		return "", fmt.Errorf("%s holds no single token", path)
	}
	return t, nil
}
