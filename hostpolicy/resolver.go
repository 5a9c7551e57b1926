package hostpolicy

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"strings"
	"sync/atomic"
	"time"

	"github.com/netproxy/netproxy/hostpolicy/hostname"
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

var errNoResolver = errors.New("no resolver configured")

// ErrDNSTimeout: no answer within dns.timeout (cause dns_timeout).
var ErrDNSTimeout = errors.New("no answer within dns.timeout")

// lookupCause types a failed lookup: a timeout, or any other error answer
// (SERVFAIL, NXDOMAIN, no address, no resolver).
func lookupCause(err error) Cause {
	var de *net.DNSError
	if errors.Is(err, ErrDNSTimeout) || errors.Is(err, context.DeadlineExceeded) || (errors.As(err, &de) && de.IsTimeout) {
		return CauseDNSTimeout
	}
	return CauseDNSError
}

type staticThenSystem struct {
	static  map[string][]netip.Addr
	timeout time.Duration
	system  *net.Resolver
	// rooted sends every name as a fully qualified name (no search list):
	// set when dns.servers pins the resolver.
	rooted bool
}

// newDNSResolver is the resolver of [dns] without static answers: the
// system's (resolv.conf) when servers is empty, else Go's own resolver
// dialing only servers ("ip:port", tried in turn). Every lookup is bounded
// by timeout and fails closed.
func newDNSResolver(timeout time.Duration, servers []string) Resolver {
	if timeout <= 0 {
		timeout = DefaultDNSTimeout
	}
	r := &staticThenSystem{timeout: timeout, system: net.DefaultResolver}
	if len(servers) > 0 {
		list := append([]string(nil), servers...)
		var next atomic.Uint32
		r.rooted = true
		r.system = &net.Resolver{PreferGo: true, Dial: func(ctx context.Context, network, _ string) (net.Conn, error) {
			// The address Go asks for comes from resolv.conf; dns.servers
			// replaces it: no query ever goes elsewhere.
			srv := list[int(next.Add(1)-1)%len(list)]
			var d net.Dialer
			return d.DialContext(ctx, network, srv)
		}}
	}
	return r
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
	if host == "localhost" {
		// RFC 6761: localhost is loopback and is never sent to DNS.
		return []netip.Addr{netip.AddrFrom4([4]byte{127, 0, 0, 1}), netip.IPv6Loopback()}, nil
	}
	if r.system == nil {
		return nil, fmt.Errorf("lookup %s: no resolver", host)
	}
	ctx, cancel := context.WithTimeout(ctx, r.timeout)
	defer cancel()
	name := host
	if r.rooted && !strings.HasSuffix(name, ".") {
		name += "."
	}
	addrs, err := r.system.LookupNetIP(ctx, "ip", name)
	if err != nil {
		if ctx.Err() != nil && errors.Is(ctx.Err(), context.DeadlineExceeded) {
			return nil, fmt.Errorf("lookup %s: %w (%s)", host, ErrDNSTimeout, r.timeout)
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
