package proxy

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/netproxy/netproxy/hostpolicy"
	"github.com/netproxy/netproxy/metrics"
)

// Resolver is the lookup the dialer uses when the local guard was skipped
// (allow_local_binding): the same resolver the engine uses.
type Resolver interface {
	LookupNetIP(ctx context.Context, host string) ([]netip.Addr, error)
}

// Target is what the dialer may connect to: the decision's host, port and
// pinned addresses.
type Target struct {
	Host         string
	Port         uint16
	Addrs        []netip.Addr
	LocalLiteral bool
}

// TargetOf extracts the dial target of an allowed decision.
func TargetOf(d hostpolicy.Decision) Target {
	return Target{Host: d.Host, Port: d.Port, Addrs: d.Addrs, LocalLiteral: d.LocalLiteral}
}

func (t Target) hostPort() string {
	return net.JoinHostPort(t.Host, strconv.Itoa(int(t.Port)))
}

// Dial errors, mapped to SOCKS5 replies and metrics kinds.
var (
	ErrNonPublic   = errors.New("refusing to dial a non-public address")
	ErrNoAddresses = errors.New("no address to dial")
	ErrNoTarget    = errors.New("dial without an allowed decision")
)

// Dialer is the one way out of the proxy (SPEC §3.5): it dials exactly the
// addresses the chain checked, checks each again, bounds the connect time,
// and optionally goes through an http:// parent proxy.
type Dialer struct {
	ConnectTimeout time.Duration
	// Parent is an optional http:// parent proxy ("host:port"), dialed instead
	// of the target; the non-public check applies to the target.
	Parent string
	// AllowLocalBinding reports network.allow_local_binding now.
	AllowLocalBinding func() bool
	Resolver          Resolver
	// CheckAddr is the policy's dial-time re-check of one address
	// (hostpolicy.Engine.CheckDialAddr): deny-list address entries, the
	// local guard with allow-list prefixes, the kill switch. nil: only the
	// non-public check below.
	CheckAddr func(netip.AddrPort) (hostpolicy.Reason, bool)
	Meter     *metrics.Metrics
	// Via, when set, is sent on every CONNECT to the parent ("1.1
	// netproxy-<instance>") so a parent that sends it back is seen as a
	// loop, like a plain-HTTP request.
	Via string

	self atomic.Pointer[SelfAddrs]
}

// SetSelf installs the addresses netproxy listens on (after binding them);
// they are never dialed, neither as a target nor as the parent.
func (d *Dialer) SetSelf(s *SelfAddrs) { d.self.Store(s) }

// Self returns the listen addresses set with SetSelf (nil before).
func (d *Dialer) Self() *SelfAddrs {
	if d == nil {
		return nil
	}
	return d.self.Load()
}

// ParseParent validates network.upstream_proxy ("" → no parent).
func ParseParent(raw string) (string, error) {
	if raw == "" {
		return "", nil
	}
	u, err := url.Parse(raw)
	if err != nil || u.Scheme != "http" || u.Host == "" || u.User != nil || (u.Path != "" && u.Path != "/") {
		return "", fmt.Errorf("network.upstream_proxy %q: want http://host:port (no credentials, no path)", raw)
	}
	host := u.Host
	if u.Port() == "" {
		host = net.JoinHostPort(u.Hostname(), "80")
	}
	return host, nil
}

func (d *Dialer) allowLocal() bool {
	return d.AllowLocalBinding != nil && d.AllowLocalBinding()
}

// addrs returns the checked list of addresses for t.
func (d *Dialer) addrs(ctx context.Context, t Target) ([]netip.Addr, error) {
	addrs := t.Addrs
	if len(addrs) == 0 {
		if !d.allowLocal() {
			// The guard always pins addresses when it runs; nothing to dial
			// means the decision did not come from it. Fail closed.
			return nil, ErrNoAddresses
		}
		if a, err := netip.ParseAddr(t.Host); err == nil {
			addrs = []netip.Addr{a}
		} else if d.Resolver != nil {
			var err error
			addrs, err = d.Resolver.LookupNetIP(ctx, t.Host)
			if err != nil {
				return nil, &net.DNSError{Err: err.Error(), Name: t.Host, IsNotFound: true}
			}
		}
		if len(addrs) == 0 {
			return nil, ErrNoAddresses
		}
	}
	for _, a := range addrs {
		if d.CheckAddr != nil {
			// An exactly allow-listed local literal may be local, never denied.
			if r, ok := d.CheckAddr(netip.AddrPortFrom(a, t.Port)); !ok && (r != hostpolicy.ReasonNotAllowedLocal || !t.LocalLiteral) {
				return nil, fmt.Errorf("%w %s (%s)", ErrNonPublic, a, r)
			}
			continue
		}
		if !d.allowLocal() && !t.LocalLiteral && hostpolicy.IsNonPublic(a) {
			return nil, fmt.Errorf("%w %s", ErrNonPublic, a)
		}
	}
	if self := d.Self(); self.ContainsAny(addrs, t.Port) {
		return nil, fmt.Errorf("%w (%s port %d)", ErrSelf, t.Host, t.Port)
	}
	return addrs, nil
}

// DialTarget connects to t (through the parent when configured) and returns
// the raw TCP socket so tunnels can splice.
func (d *Dialer) DialTarget(ctx context.Context, t Target) (*net.TCPConn, error) {
	addrs, err := d.addrs(ctx, t)
	if err != nil {
		d.Meter.UpstreamError(errorKind(err))
		return nil, err
	}
	start := time.Now()
	var c *net.TCPConn
	if d.Parent != "" {
		c, err = d.dialViaParent(ctx, addrs, t.Port)
	} else {
		c, err = d.dialAddrs(ctx, addrs, t.Port)
	}
	if err != nil {
		d.Meter.UpstreamError(errorKind(err))
		return nil, err
	}
	d.Meter.UpstreamDial(time.Since(start))
	return c, nil
}

func (d *Dialer) timeout() time.Duration {
	if d.ConnectTimeout > 0 {
		return d.ConnectTimeout
	}
	return 10 * time.Second
}

// dialAddrs tries each pinned address in order within one connect timeout.
func (d *Dialer) dialAddrs(ctx context.Context, addrs []netip.Addr, port uint16) (*net.TCPConn, error) {
	ctx, cancel := context.WithTimeout(ctx, d.timeout())
	defer cancel()
	var nd net.Dialer
	var first error
	for _, a := range addrs {
		c, err := nd.DialContext(ctx, "tcp", netip.AddrPortFrom(a.Unmap(), port).String())
		if err == nil {
			return c.(*net.TCPConn), nil
		}
		if first == nil {
			first = err
		}
		if ctx.Err() != nil {
			break
		}
	}
	return nil, first
}

func (d *Dialer) dialParentRaw(ctx context.Context) (*net.TCPConn, error) {
	if d.parentIsSelf() {
		return nil, &parentError{fmt.Errorf("%w: network.upstream_proxy %s", ErrSelf, d.Parent)}
	}
	ctx, cancel := context.WithTimeout(ctx, d.timeout())
	defer cancel()
	var nd net.Dialer
	c, err := nd.DialContext(ctx, "tcp", d.Parent)
	if err != nil {
		return nil, &parentError{err}
	}
	return c.(*net.TCPConn), nil
}

// parentIsSelf reports whether the configured parent is one of our own
// listeners (a parent given as an IP literal or localhost).
func (d *Dialer) parentIsSelf() bool {
	self := d.Self()
	if self == nil {
		return false
	}
	host, portStr, err := net.SplitHostPort(d.Parent)
	if err != nil {
		return false
	}
	port, ok := parsePort(portStr)
	if !ok {
		return false
	}
	var addrs []netip.Addr
	if strings.EqualFold(host, "localhost") {
		addrs = []netip.Addr{netip.AddrFrom4([4]byte{127, 0, 0, 1}), netip.IPv6Loopback()}
	} else if a, err := netip.ParseAddr(host); err == nil {
		addrs = []netip.Addr{a}
	}
	return self.ContainsAny(addrs, port)
}

// pinnedHostPort is what the parent is told to connect to: a pinned
// address, never the name (SPEC §3.5), so it cannot resolve it again.
func pinnedHostPort(a netip.Addr, port uint16) string {
	return netip.AddrPortFrom(a.Unmap().WithZone(""), port).String()
}

// dialViaParent opens a CONNECT tunnel through the parent proxy to the
// first pinned address it reaches.
func (d *Dialer) dialViaParent(ctx context.Context, addrs []netip.Addr, port uint16) (*net.TCPConn, error) {
	var first error
	for _, a := range addrs {
		c, err := d.connectViaParent(ctx, pinnedHostPort(a, port))
		if err == nil {
			return c, nil
		}
		if first == nil {
			first = err
		}
		if ctx.Err() != nil {
			break
		}
	}
	if first == nil {
		first = ErrNoAddresses
	}
	return nil, first
}

func (d *Dialer) connectViaParent(ctx context.Context, hp string) (*net.TCPConn, error) {
	c, err := d.dialParentRaw(ctx)
	if err != nil {
		return nil, err
	}
	deadline := time.Now().Add(d.timeout())
	c.SetDeadline(deadline)
	via := ""
	if d.Via != "" {
		via = "Via: " + d.Via + "\r\n"
	}
	if _, err := fmt.Fprintf(c, "CONNECT %s HTTP/1.1\r\nHost: %s\r\n%s\r\n", hp, hp, via); err != nil {
		c.Close()
		return nil, &parentError{err}
	}
	// Read the reply one byte at a time so no tunnel byte is left in a buffer.
	br := bufio.NewReaderSize(oneByteReader{c}, 16)
	resp, err := http.ReadResponse(br, &http.Request{Method: http.MethodConnect})
	if err != nil {
		c.Close()
		return nil, &parentError{err}
	}
	if resp.StatusCode/100 != 2 {
		c.Close()
		return nil, &parentError{fmt.Errorf("parent proxy answered %s to CONNECT", resp.Status)}
	}
	c.SetDeadline(time.Time{})
	return c, nil
}

// PinForParent rewrites an allowed plain-HTTP request for the parent proxy:
// the request line names a pinned address (absolute-form
// http://203.0.113.7:80/path) and Host keeps the name (SPEC §3.5). It
// returns the target with the addresses checked (resolved now when the
// guard was skipped). The transport then writes the absolute form from
// URL.Opaque, which it does not replace with the Host header.
func (d *Dialer) PinForParent(ctx context.Context, req *http.Request, t Target, authority string) (Target, error) {
	addrs, err := d.addrs(ctx, t)
	if err != nil {
		return t, err
	}
	t.Addrs = addrs
	hp := pinnedHostPort(addrs[0], t.Port)
	path := req.URL.EscapedPath()
	if path == "" {
		path = "/"
	}
	req.URL.Scheme = "http"
	req.URL.Host = hp
	req.URL.Opaque = "//" + hp + path
	req.Host = authority
	return t, nil
}

// DialContext is the http.Transport dialer for plain HTTP. The decision
// travels in ctx (WithTarget); with a parent the transport asks for the
// parent's address, which is dialed after the target's addresses passed the
// check.
func (d *Dialer) DialContext(ctx context.Context, network, addr string) (net.Conn, error) {
	t, ok := ctx.Value(targetKey{}).(Target)
	if !ok {
		return nil, ErrNoTarget
	}
	if d.Parent != "" && addr == d.Parent {
		if _, err := d.addrs(ctx, t); err != nil {
			d.Meter.UpstreamError(errorKind(err))
			return nil, err
		}
		start := time.Now()
		c, err := d.dialParentRaw(ctx)
		if err != nil {
			d.Meter.UpstreamError(errorKind(err))
			return nil, err
		}
		d.Meter.UpstreamDial(time.Since(start))
		return c, nil
	}
	host, port, err := net.SplitHostPort(addr)
	if err != nil || port != strconv.Itoa(int(t.Port)) || !sameHost(host, t.Host) {
		return nil, fmt.Errorf("%w: transport asked for %s, decision is for %s", ErrNoTarget, addr, t.hostPort())
	}
	return d.DialTarget(ctx, t)
}

type targetKey struct{}

// WithTarget attaches an allowed decision's target to ctx for DialContext.
func WithTarget(ctx context.Context, t Target) context.Context {
	return context.WithValue(ctx, targetKey{}, t)
}

type parentError struct{ err error }

func (e *parentError) Error() string { return "parent proxy: " + e.err.Error() }
func (e *parentError) Unwrap() error { return e.err }

// errorKind names a dial error for upstream_errors_total.
func errorKind(err error) string {
	var pe *parentError
	var ne net.Error
	switch {
	case errors.As(err, &pe):
		return "parent_proxy"
	case errors.Is(err, syscall.ECONNREFUSED):
		return "refused"
	case errors.Is(err, context.DeadlineExceeded), errors.As(err, &ne) && ne.Timeout():
		return "timeout"
	case errors.Is(err, ErrNonPublic), errors.Is(err, ErrNoAddresses), errors.Is(err, ErrSelf):
		return "dial"
	}
	var oe *net.OpError
	if errors.As(err, &oe) && oe.Op == "dial" {
		return "dial"
	}
	return "other"
}

type oneByteReader struct{ c net.Conn }

func (r oneByteReader) Read(p []byte) (int, error) {
	if len(p) > 1 {
		p = p[:1]
	}
	return r.c.Read(p)
}
