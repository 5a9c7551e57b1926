package config

import (
	"fmt"
	"regexp"
	"strings"

	"github.com/netproxy/netproxy/hostpolicy"
)

// ProxyAuth is [proxy_auth] (SPEC §4.4, docs/proxy.md "Proxy
// authentication"): clients that do not come through execwrap
// authenticate with a name and a secret and become their own session.
type ProxyAuth struct {
	// Required: every unframed connection must authenticate.
	Required bool              `toml:"required"`
	Clients  []ProxyAuthClient `toml:"clients"`
}

// ProxyAuthClient is one [[proxy_auth.clients]] entry. secret_file is
// relative to the config file's folder and re-read on reload.
type ProxyAuthClient struct {
	Name       string   `toml:"name"`
	SecretEnv  string   `toml:"secret_env"`
	SecretFile string   `toml:"secret_file"`
	Allow      []string `toml:"allow"`
	Deny       []string `toml:"deny"`
	Mode       string   `toml:"mode"`
}

// clientNameRe: a client name is the user part of Basic and RFC 1929
// credentials (no ':'; at most 255 bytes on SOCKS5) and part of a session
// id; kept to a plain token so it is safe in logs and the audit.
var clientNameRe = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_.@-]{0,63}$`)

var envNameRe = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]{0,127}$`)

// Scope is the client's narrower policy (nil when it narrows nothing).
func (c ProxyAuthClient) Scope() (*hostpolicy.Scope, error) {
	spec := hostpolicy.ScopeSpec{Allow: c.Allow, Deny: c.Deny, Mode: c.Mode}
	if spec.Empty() {
		return nil, nil
	}
	return hostpolicy.BuildScope(hostpolicy.LevelClient, spec)
}

// validateProxyAuth checks [proxy_auth]'s shape; every error names its
// key. Secrets are read by serve and reload, not here.
func validateProxyAuth(c *Config, file string) []error {
	var errs []error
	bad := func(key, format string, a ...any) {
		errs = append(errs, &Error{File: file, Key: key, Msg: fmt.Sprintf(format, a...)})
	}
	pa := c.ProxyAuth
	if pa.Required && len(pa.Clients) == 0 {
		bad("proxy_auth.required", "true needs at least one [[proxy_auth.clients]] (to admit only execwrap's executions, use attribution.required)")
	}
	seen := map[string]int{}
	for i, cl := range pa.Clients {
		key := fmt.Sprintf("proxy_auth.clients[%d]", i)
		switch {
		case cl.Name == "":
			bad(key+".name", `missing; name the client, e.g. "ci-runner" (its session is "client:NAME")`)
		case !clientNameRe.MatchString(cl.Name):
			bad(key+".name", "%q: 1–64 of A-Z a-z 0-9 _ . @ -, starting with a letter or digit", cl.Name)
		default:
			if j, dup := seen[cl.Name]; dup {
				bad(key+".name", "%q is already the name of proxy_auth.clients[%d]", cl.Name, j)
			} else {
				seen[cl.Name] = i
			}
		}
		switch {
		case cl.SecretEnv == "" && cl.SecretFile == "":
			bad(key+".secret_env", "missing; set secret_env (a variable of netproxy's environment) or secret_file")
		case cl.SecretEnv != "" && cl.SecretFile != "":
			bad(key+".secret_file", "set only one of secret_env and secret_file")
		case cl.SecretEnv != "" && !envNameRe.MatchString(cl.SecretEnv):
			bad(key+".secret_env", "%q is not a variable name", cl.SecretEnv)
		}
		switch cl.Mode {
		case "", hostpolicy.ModeFull, hostpolicy.ModeLimited:
		default:
			bad(key+".mode", "%q is not %q or %q", cl.Mode, hostpolicy.ModeLimited, hostpolicy.ModeFull)
			cl.Mode = "" // the lists are still checked
		}
		if _, err := cl.Scope(); err != nil {
			// One error per bad entry, each naming its key ("allow[2]: …").
			for _, line := range strings.Split(err.Error(), "\n") {
				if sub, msg, ok := strings.Cut(line, ": "); ok {
					bad(key+"."+sub, "%s", msg)
				} else {
					bad(key, "%s", line)
				}
			}
		}
	}
	return errs
}
