package server

import (
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
	"strings"

	"github.com/netproxy/netproxy/attribution"
	"github.com/netproxy/netproxy/internal/config"
)

// secretPaths lists every path whose content is netproxy's secret or
// holds one (SPEC §6.5), for execwrap to hide from its sandbox: the whole
// $NETPROXY_HOME and, by name, what is usually in it (the folder cannot
// be hidden whole when a workspace lies inside it), the configuration
// files (they may carry webhook or Redis URLs with credentials), the MITM
// CA key (the certificate is public), the control socket, every
// credential's and proxy client's secret_file, and the audit log with its rotated copies
// (NAME.1, NAME-20261201, …: listed when asked, since rotation makes new
// ones).
func secretPaths(cfg *config.Config, home string) []string {
	paths := config.HomeSecretPaths(home)
	for _, p := range []string{cfg.Path, cfg.Shadow.Config, cfg.MITM.CAKey, cfg.Control.Socket} {
		if p != "" {
			paths = append(paths, p)
		}
	}
	for _, c := range cfg.Credentials {
		if c.SecretFile != "" {
			paths = append(paths, c.SecretFile)
		}
	}
	for _, c := range cfg.ProxyAuth.Clients {
		if c.SecretFile != "" {
			paths = append(paths, c.SecretFile)
		}
	}
	if a := cfg.Audit.Path; a != "" {
		paths = append(paths, a)
		dir, base := filepath.Split(a)
		ents, _ := os.ReadDir(dir)
		for _, e := range ents {
			if n := e.Name(); strings.HasPrefix(n, base+".") || strings.HasPrefix(n, base+"-") {
				paths = append(paths, filepath.Join(dir, n))
			}
		}
	}
	for i, p := range paths {
		if abs, err := filepath.Abs(p); err == nil {
			paths[i] = abs
		}
	}
	return paths
}

// serveSecretPaths answers GET /v1/secret-paths from the configuration in
// force (a reload that changes a secret_file changes the answer).
func (s *Server) serveSecretPaths(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", "application/json")
	json.NewEncoder(w).Encode(attribution.SecretPaths{Paths: secretPaths(s.liveCfg.Load(), config.HomeDir())})
}
