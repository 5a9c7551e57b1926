package server

import (
	"fmt"

	"github.com/netproxy/netproxy/attribution"
	"github.com/netproxy/netproxy/credentials"
	"github.com/netproxy/netproxy/hostpolicy"
	"github.com/netproxy/netproxy/internal/config"
)

// Client identity (SPEC §4.4, docs/proxy.md "Proxy authentication"):
// [[proxy_auth.clients]] read at start and on every reload. The secrets
// go to the data path's attribution.Clients (as digests), each client's
// narrower policy to the pipeline's scopes store under its session id.

// proxyAuth is one configuration's clients, read and compiled, not yet in
// force.
type proxyAuth struct {
	required bool
	specs    []attribution.ClientSpec
	scopes   map[string]*hostpolicy.Scope
}

// loadProxyAuth reads every client's secret and compiles its narrower
// policy. An error names the configuration file and the client's key,
// never a secret; nothing is applied then (a reload keeps the previous
// clients).
func loadProxyAuth(cfg *config.Config) (proxyAuth, error) {
	where := cfg.Path
	if where == "" {
		where = "configuration"
	}
	pa := proxyAuth{required: cfg.ProxyAuth.Required, scopes: map[string]*hostpolicy.Scope{}}
	for i, cl := range cfg.ProxyAuth.Clients {
		secret, err := credentials.ReadSecret(cl.SecretEnv, cl.SecretFile, credentials.Sources{})
		if err != nil {
			return proxyAuth{}, fmt.Errorf("%s: proxy_auth.clients[%d].%w", where, i, err)
		}
		sc, err := cl.Scope()
		if err != nil { // validated at load; say so anyway
			return proxyAuth{}, fmt.Errorf("%s: proxy_auth.clients[%d]: %w", where, i, err)
		}
		pa.specs = append(pa.specs, attribution.ClientSpec{Name: cl.Name, Secret: secret})
		if sc != nil {
			pa.scopes[attribution.ClientSessionPrefix+cl.Name] = sc
		}
	}
	return pa, nil
}

// applyProxyAuth puts pa in force: the data path's clients (each keeps
// its budget's usage) and their narrower policies (open connections are
// re-checked).
func (s *Server) applyProxyAuth(pa proxyAuth, limits attribution.BudgetLimits) {
	s.clients.Set(pa.required, pa.specs, limits)
	s.scopeAPI.scopes.SetClients(pa.scopes)
}
