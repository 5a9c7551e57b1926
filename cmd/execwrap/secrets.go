package main

import (
	"fmt"
	"os"
	"os/user"
	"path/filepath"
	"strconv"

	"github.com/netproxy/netproxy/internal/config"
)

// defaultDenyRead are the calling user's credential stores, relative to
// the home folder, that no sandbox may read (SPEC §6.5).
var defaultDenyRead = []string{".ssh", ".aws", ".config/gcloud", ".azure", ".kube", ".docker/config.json",
	".gnupg", ".netrc", ".git-credentials", ".config/gh"}

// userHomes are the calling user's home folders: $HOME and the password
// database's entry for the real uid (sudo and setpriv may keep a $HOME
// that is not theirs; both are hidden).
func userHomes() []string {
	var homes []string
	if h := os.Getenv("HOME"); filepath.IsAbs(h) {
		homes = append(homes, filepath.Clean(h))
	}
	if u, err := user.LookupId(strconv.Itoa(os.Getuid())); err == nil && filepath.IsAbs(u.HomeDir) &&
		(len(homes) == 0 || filepath.Clean(u.HomeDir) != homes[0]) {
		homes = append(homes, filepath.Clean(u.HomeDir))
	}
	return homes
}

// ownHiddenPaths are the paths execwrap hides without asking netproxy:
// $NETPROXY_HOME and what is usually in it, the control socket, the
// default deny-read list of every home of the caller, and --deny-read.
func ownHiddenPaths(control string, denyRead []string) []string {
	paths := append(config.HomeSecretPaths(config.HomeDir()), control)
	for _, h := range userHomes() {
		for _, d := range defaultDenyRead {
			paths = append(paths, filepath.Join(h, d))
		}
	}
	return append(paths, denyRead...)
}

// absPaths makes every --deny-read path absolute (against the current
// folder).
func absPaths(flag string, ps []string) ([]string, error) {
	out := make([]string, 0, len(ps))
	for _, p := range ps {
		a, err := filepath.Abs(p)
		if err != nil || p == "" {
			return nil, fmt.Errorf("%s %q: want a path", flag, p)
		}
		out = append(out, a)
	}
	return out, nil
}
