package server

import (
	"context"
	"path/filepath"

	"github.com/netproxy/netproxy/approvalsvc"
	"github.com/netproxy/netproxy/attribution"
	"github.com/netproxy/netproxy/cluster"
	"github.com/netproxy/netproxy/credentials"
	"github.com/netproxy/netproxy/internal/config"
)

// openCluster joins the cluster named by [cluster] (nil, nil when cluster
// mode is off): executions, amendments (mirrored into this host's rules
// file) and /readyz are wired here; the approval service is attached by
// the caller once built.
func (s *Server) openCluster() (*cluster.Cluster, error) {
	logger := s.logger
	cs := s.Config().Cluster.Settings()
	if !cs.Enabled() {
		return nil, nil
	}
	opts := cluster.Options{
		Settings:   cs,
		Executions: s.Registry(),
		Amender:    s.Engine(),
		Rules:      approvalsvc.RulesFile{Path: filepath.Join(config.HomeDir(), "rules", "default.rules")},
		Logger:     logger.With("component", "cluster"),
	}
	if reg := s.Metrics().Registry(); reg != nil {
		opts.Registerer = reg
	}
	c, err := cluster.Open(context.Background(), opts)
	if err != nil {
		return nil, err
	}
	s.AddReadyDetail(c.Status)
	// Placeholders minted on any replica are honoured and guarded here.
	s.creds.SetRemote(placeholderStore{c})
	logger.Info("cluster mode", "node", c.NodeID())
	return c, nil
}

// advertised is what registrations hand out as the proxy addresses: in
// cluster mode behind a load balancer, cluster.advertise_http and
// advertise_socks5 (the balancer's), so an execution registered on this
// replica reaches any replica; otherwise this replica's listeners.
func (s *Server) advertised(own attribution.ProxyInfo) attribution.ProxyInfo {
	cs := s.Config().Cluster.Settings()
	if !cs.Enabled() {
		return own
	}
	if cs.AdvertiseHTTP != "" {
		own.HTTP = cs.AdvertiseHTTP
	}
	if cs.AdvertiseSOCKS5 != "" {
		own.SOCKS5 = cs.AdvertiseSOCKS5
	}
	return own
}

// placeholderStore adapts the cluster's placeholder records to the
// credential broker (neither package imports the other).
type placeholderStore struct{ c *cluster.Cluster }

func (p placeholderStore) Publish(execID string, bodies map[string]string) {
	p.c.PublishPlaceholders(execID, bodies)
}

func (p placeholderStore) Lookup(bodies []string) (map[string]credentials.Bound, error) {
	found, err := p.c.LookupPlaceholders(bodies)
	if err != nil {
		return nil, err
	}
	out := make(map[string]credentials.Bound, len(found))
	for b, o := range found {
		out[b] = credentials.Bound{Exec: o.Exec, Cred: o.Cred, Keep: o.Held}
	}
	return out, nil
}
