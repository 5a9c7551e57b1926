package hostpolicy

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"sync/atomic"
	"time"

	"github.com/netproxy/netproxy/hostpolicy/hostname"
	"github.com/netproxy/netproxy/internal/config"
)

// Resolver answers the addresses of a name. Implementations must fail closed:
// an error or no answer is an error.
type Resolver interface {
	LookupNetIP(ctx context.Context, host string) ([]netip.Addr, error)
}

// DefaultDNSTimeout is the lookup budget of SPEC §3.4.
const DefaultDNSTimeout = 2 * time.Second

// ErrNoAddresses is returned when a lookup succeeds with no address.
var ErrNoAddresses = errors.New("name resolved to no address")

type staticThenSystem struct {
	static  map[string][]netip.Addr
	timeout time.Duration
	system  *net.Resolver
}

// NewResolver returns a resolver that answers from static ([dns.hosts],
// keys normalised like hosts) first and from the system resolver otherwise,
// each system lookup bounded by timeout (≤0 means 2 s). IPv4-mapped answers
// are unmapped so the dialer and the classifier see one spelling.
func NewResolver(static map[string][]netip.Addr, timeout time.Duration) Resolver {
	if timeout <= 0 {
		timeout = DefaultDNSTimeout
	}
	s := make(map[string][]netip.Addr, len(static))
	for k, v := range static {
		key := k
		if n, err := hostname.Normalize(k); err == nil {
			key = n
		}
		s[key] = append(s[key], v...)
	}
	return &staticThenSystem{static: s, timeout: timeout, system: net.DefaultResolver}
}

func (r *staticThenSystem) LookupNetIP(ctx context.Context, host string) ([]netip.Addr, error) {
	if addrs, ok := r.static[host]; ok {
		if len(addrs) == 0 {
			return nil, fmt.Errorf("lookup %s: %w", host, ErrNoAddresses)
		}
		return append([]netip.Addr(nil), addrs...), nil
	}
	ctx, cancel := context.WithTimeout(ctx, r.timeout)
	defer cancel()
	addrs, err := r.system.LookupNetIP(ctx, "ip", host)
	if err != nil {
		if ctx.Err() != nil && errors.Is(ctx.Err(), context.DeadlineExceeded) {
			return nil, fmt.Errorf("lookup %s: timed out after %s", host, r.timeout)
		}
		return nil, err
	}
	if len(addrs) == 0 {
		return nil, fmt.Errorf("lookup %s: %w", host, ErrNoAddresses)
	}
	out := make([]netip.Addr, 0, len(addrs))
	for _, a := range addrs {
		out = append(out, a.Unmap())
	}
	return out, nil
}

// StaticHosts converts cfg's [dns.hosts] into resolver answers. Config
// validation has already rejected bad addresses; an address that still does
// not parse is an error naming its key.
func StaticHosts(cfg *config.Config) (map[string][]netip.Addr, error) {
	out := make(map[string][]netip.Addr, len(cfg.DNS.Hosts))
	for name, list := range cfg.DNS.Hosts {
		for i, s := range list {
			a, err := netip.ParseAddr(s)
			if err != nil {
				return nil, fmt.Errorf("dns.hosts.%q[%d]: %q is not an IP address", name, i, s)
			}
			out[name] = append(out[name], a.Unmap())
		}
	}
	return out, nil
}

// NewResolverFromConfig is NewResolver over cfg's [dns] table, wrapped so
// that a policy reload can replace it (ReloadableResolver.Reload).
func NewResolverFromConfig(cfg *config.Config) (*ReloadableResolver, error) {
	static, err := StaticHosts(cfg)
	if err != nil {
		return nil, err
	}
	r := &ReloadableResolver{}
	r.cur.Store(&resolverBox{NewResolver(static, cfg.DNS.Timeout.Duration)})
	return r, nil
}

// ReloadableResolver is the serving resolver: the engine and the proxy
// dialer keep one reference for the process lifetime, and a reload of
// [dns] (SIGHUP, POST /api/reload) swaps what it answers from.
type ReloadableResolver struct {
	cur atomic.Pointer[resolverBox]
}

type resolverBox struct{ r Resolver }

// LookupNetIP answers from the resolver of the latest successful Reload.
func (r *ReloadableResolver) LookupNetIP(ctx context.Context, host string) ([]netip.Addr, error) {
	return r.cur.Load().r.LookupNetIP(ctx, host)
}

// Prepare builds the answers of cfg's [dns] table without installing them,
// so a reload can fail before anything changes; Install makes them live.
func (r *ReloadableResolver) Prepare(cfg *config.Config) (Resolver, error) {
	static, err := StaticHosts(cfg)
	if err != nil {
		return nil, err
	}
	return NewResolver(static, cfg.DNS.Timeout.Duration), nil
}

// Install makes next (from Prepare) answer every later lookup.
func (r *ReloadableResolver) Install(next Resolver) { r.cur.Store(&resolverBox{next}) }
