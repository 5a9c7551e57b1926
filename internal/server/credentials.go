package server

import (
	"fmt"
	"os"

	"golang.org/x/sys/unix"

	"github.com/netproxy/netproxy/attribution"
	"github.com/netproxy/netproxy/credentials"
	"github.com/netproxy/netproxy/internal/config"
)

// loadCredentials reads every [[credentials]] secret. An error names the
// configuration file, the credential and its key, never a secret.
func loadCredentials(cfg *config.Config) (*credentials.Set, error) {
	set, err := credentials.Load(cfg.CredentialSpecs(), credentials.Sources{})
	if err != nil {
		where := cfg.Path
		if where == "" {
			where = "configuration"
		}
		return nil, fmt.Errorf("%s: %w", where, err)
	}
	return set, nil
}

// credentialCA is the interception CA's certificate (PEM), handed to
// registering executions so their sandbox trusts it; "" without [mitm].
func credentialCA(cfg *config.Config) (string, error) {
	if !cfg.MITM.Enabled || len(cfg.Credentials) == 0 {
		return "", nil
	}
	b, err := os.ReadFile(cfg.MITM.CACert)
	if err != nil {
		return "", fmt.Errorf("mitm.ca_cert: cannot read %s: %w", cfg.MITM.CACert, err)
	}
	return string(b), nil
}

// mintCredentials is the control API's minter: the execution's
// placeholders and the CA certificate to trust.
func (s *Server) mintCredentials(id string) (attribution.Credentials, error) {
	ph, err := s.creds.Mint(id)
	if err != nil || len(ph) == 0 {
		return attribution.Credentials{}, err
	}
	out := attribution.Credentials{CACert: s.caPEM.Load().(string)}
	for _, p := range ph {
		out.Placeholders = append(out.Placeholders, attribution.Placeholder(p))
	}
	return out, nil
}

// protectSecrets makes this process non-dumpable once it holds secrets
// (credentials or proxy clients): no core dump, no ptrace by the same
// user, and /proc/<pid>/environ, mem and maps become root's (a sandbox
// running as the same user without a pid namespace cannot read secret_env
// there).
func protectSecrets(holds bool) error {
	if !holds {
		return nil
	}
	if err := unix.Prctl(unix.PR_SET_DUMPABLE, 0, 0, 0, 0); err != nil {
		return fmt.Errorf("credentials: prctl(PR_SET_DUMPABLE, 0): %w", err)
	}
	return nil
}
