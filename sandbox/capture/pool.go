package capture

import (
	"errors"
	"fmt"
	"net/netip"
	"sync"
)

// DefaultPoolV4 is the IPv4 pool: 198.18.0.0/15 (RFC 2544 benchmarking),
// which no public host uses and which SPEC §3.3 classifies as non-public,
// so an address of it that reaches netproxy unmapped is blocked there.
var DefaultPoolV4 = netip.MustParsePrefix("198.18.0.0/15")

// DefaultPoolV6 is the IPv6 pool: a /64 of the unique-local range
// (RFC 4193). The sandbox's network namespace is isolated, so a fixed
// prefix cannot collide with anything it can reach.
var DefaultPoolV6 = netip.MustParsePrefix("fdc0:ca97:0:53::/64")

// DefaultMaxNames bounds the names one run may map (memory is O(names)).
const DefaultMaxNames = 1 << 16

// ErrPoolFull is returned once MaxNames names are mapped.
var ErrPoolFull = errors.New("capture pool full: the run looked up more distinct names than the pool holds")

// Pool maps names to addresses, one index per name and the same index in
// both families, stable for the pool's life (one run). Safe for concurrent
// use.
type Pool struct {
	v4, v6 netip.Prefix
	max    int

	mu     sync.Mutex
	byName map[string]int
	names  []string // index i-1 → name
}

// NewPool returns a pool over v4 and v6 holding at most max names. Each
// prefix must leave room for max hosts plus the network and last address.
func NewPool(v4, v6 netip.Prefix, max int) (*Pool, error) {
	if !v4.Addr().Is4() || !v6.Addr().Is6() || v6.Addr().Is4In6() {
		return nil, fmt.Errorf("capture pool %s, %s: want an IPv4 and an IPv6 prefix", v4, v6)
	}
	if max < 1 {
		return nil, fmt.Errorf("capture pool: max names %d < 1", max)
	}
	for _, p := range []netip.Prefix{v4, v6} {
		if hb := p.Addr().BitLen() - p.Bits(); hb < 63 && (1<<hb)-2 < max {
			return nil, fmt.Errorf("capture pool %s holds fewer than %d names: use a shorter prefix or fewer names", p, max)
		}
	}
	return &Pool{v4: v4.Masked(), v6: v6.Masked(), max: max, byName: map[string]int{}}, nil
}

// NewDefaultPool is NewPool over the default prefixes.
func NewDefaultPool() *Pool {
	p, err := NewPool(DefaultPoolV4, DefaultPoolV6, DefaultMaxNames)
	if err != nil {
		panic(err) // the defaults are constants
	}
	return p
}

// Addrs returns name's IPv4 and IPv6 pool addresses, mapping it first if it
// is new. name must already be normalised (hostname.Normalize).
func (p *Pool) Addrs(name string) (v4, v6 netip.Addr, err error) {
	p.mu.Lock()
	i, ok := p.byName[name]
	if !ok {
		if len(p.names) >= p.max {
			p.mu.Unlock()
			return netip.Addr{}, netip.Addr{}, ErrPoolFull
		}
		p.names = append(p.names, name)
		i = len(p.names)
		p.byName[name] = i
	}
	p.mu.Unlock()
	return addIndex(p.v4.Addr(), i), addIndex(p.v6.Addr(), i), nil
}

// Name returns the name mapped to a (either family), if any.
func (p *Pool) Name(a netip.Addr) (string, bool) {
	a = a.Unmap()
	var base netip.Prefix
	switch {
	case p.v4.Contains(a):
		base = p.v4
	case p.v6.Contains(a):
		base = p.v6
	default:
		return "", false
	}
	i, ok := indexOf(base.Addr(), a)
	if !ok {
		return "", false
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if i < 1 || i > len(p.names) {
		return "", false
	}
	return p.names[i-1], true
}

// Contains reports whether a lies in either pool prefix (mapped or not).
func (p *Pool) Contains(a netip.Addr) bool {
	a = a.Unmap()
	return p.v4.Contains(a) || p.v6.Contains(a)
}

// addIndex returns base + i (i small enough to stay inside the prefix).
func addIndex(base netip.Addr, i int) netip.Addr {
	b := base.AsSlice()
	carry := uint64(i)
	for k := len(b) - 1; k >= 0 && carry > 0; k-- {
		s := uint64(b[k]) + carry&0xff
		b[k] = byte(s)
		carry = carry>>8 + s>>8
	}
	a, _ := netip.AddrFromSlice(b)
	return a
}

// indexOf returns a - base when it fits an int of the pool's range.
func indexOf(base, a netip.Addr) (int, bool) {
	x, y := base.AsSlice(), a.AsSlice()
	var d uint64
	borrow := 0
	diff := make([]byte, len(x))
	for k := len(x) - 1; k >= 0; k-- {
		v := int(y[k]) - int(x[k]) - borrow
		borrow = 0
		if v < 0 {
			v += 256
			borrow = 1
		}
		diff[k] = byte(v)
	}
	if borrow != 0 {
		return 0, false
	}
	for k, v := range diff {
		if len(diff)-k > 4 {
			if v != 0 {
				return 0, false
			}
			continue
		}
		d = d<<8 | uint64(v)
	}
	return int(d), true
}
