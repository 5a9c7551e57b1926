package attribution

import (
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"strings"
	"sync/atomic"
)

// Client identity (SPEC §4.4): clients that do not come through execwrap
// authenticate to the proxy with a name and a secret ([[proxy_auth.clients]];
// Basic Proxy-Authorization on HTTP and CONNECT, RFC 1929 on SOCKS5). An
// authenticated client is its own session ("client:NAME"): its approvals,
// caches, narrower policy, budget and audit lines are its own. An
// attribution frame, when present, identifies the execution and wins.
//
// The secrets live here only as SHA-256 digests: a comparison is over two
// digests of equal length with crypto/subtle, and an unknown name is
// compared against a random dummy digest, so neither the secret nor
// whether the name exists shows in the time an answer takes.

// ClientSessionPrefix starts an authenticated client's session id.
const ClientSessionPrefix = "client:"

// ClientSpec is one configured client with its secret read.
type ClientSpec struct {
	Name   string
	Secret string
}

// Client is an authenticated client as the data path holds it: immutable,
// never carrying the secret.
type Client struct {
	Name string
	// SessionID is ClientSessionPrefix + Name.
	SessionID string
	// Budget is the client's egress budget under the host-wide [budgets]
	// (SPEC §3.12); nil: unbudgeted.
	Budget *Budget
}

type clientEntry struct {
	client *Client
	digest [sha256.Size]byte
}

// clientSet is one configuration's clients; swapped whole on reload.
type clientSet struct {
	required bool
	byName   map[string]*clientEntry
	dummy    [sha256.Size]byte
}

// Clients is the configured clients. Safe for concurrent use; the zero
// value has none (proxy authentication off).
type Clients struct {
	set atomic.Pointer[clientSet]
}

// Set replaces the clients (start and reload). A client whose name was
// configured before keeps its *Budget (its usage over its lifetime) when
// limits are unchanged; new limits give it a budget that carries the usage
// on. required: every unframed connection must authenticate.
func (c *Clients) Set(required bool, specs []ClientSpec, limits BudgetLimits) {
	old := c.set.Load()
	next := &clientSet{required: required, byName: make(map[string]*clientEntry, len(specs))}
	rand.Read(next.dummy[:])
	for _, s := range specs {
		cl := &Client{Name: s.Name, SessionID: ClientSessionPrefix + s.Name}
		var prev *Budget
		if old != nil {
			if e, ok := old.byName[s.Name]; ok {
				prev = e.client.Budget
			}
		}
		cl.Budget = carryBudget(prev, limits)
		next.byName[s.Name] = &clientEntry{client: cl, digest: sha256.Sum256([]byte(s.Secret))}
	}
	c.set.Store(next)
}

// carryBudget is a client's budget under limits: prev itself when its
// limits are the same, else a new one that starts from prev's usage.
func carryBudget(prev *Budget, limits BudgetLimits) *Budget {
	if prev != nil && prev.limits == limits {
		return prev
	}
	b := NewBudget(limits)
	if b == nil || prev == nil {
		return b
	}
	b.bytesOut.Store(prev.bytesOut.Load())
	b.bytesIn.Store(prev.bytesIn.Load())
	b.requests.Store(prev.requests.Load())
	prev.hosts.Range(func(k, _ any) bool {
		b.hosts.Store(k, struct{}{})
		b.nhosts.Add(1)
		return true
	})
	return b
}

// Enabled reports whether proxy authentication is on: a client is
// configured (or required is set). Off, Proxy-Authorization is ignored
// (and still never forwarded) and SOCKS5 offers no authentication only.
func (c *Clients) Enabled() bool {
	s := c.set.Load()
	return s != nil && (len(s.byName) > 0 || s.required)
}

// Required reports proxy_auth.required.
func (c *Clients) Required() bool {
	s := c.set.Load()
	return s != nil && s.required
}

// Len is the number of configured clients.
func (c *Clients) Len() int {
	if s := c.set.Load(); s != nil {
		return len(s.byName)
	}
	return 0
}

// Authenticate returns the client named name when secret is its secret.
// The time it takes does not depend on the secret, nor on whether name is
// configured.
func (c *Clients) Authenticate(name, secret string) (*Client, bool) {
	s := c.set.Load()
	if s == nil {
		return nil, false
	}
	got := sha256.Sum256([]byte(secret))
	e, known := s.byName[name]
	want := &s.dummy
	if known {
		want = &e.digest
	}
	if subtle.ConstantTimeCompare(got[:], want[:]) != 1 || !known {
		return nil, false
	}
	return e.client, true
}

// ParseBasic splits a Proxy-Authorization value of the Basic scheme into
// name and secret; ok is false for another scheme or a malformed value.
func ParseBasic(v string) (name, secret string, ok bool) {
	const prefix = "basic "
	v = strings.TrimSpace(v)
	if len(v) < len(prefix) || !strings.EqualFold(v[:len(prefix)], prefix) {
		return "", "", false
	}
	raw, err := base64.StdEncoding.DecodeString(strings.TrimSpace(v[len(prefix):]))
	if err != nil {
		return "", "", false
	}
	name, secret, ok = strings.Cut(string(raw), ":")
	if !ok {
		return "", "", false
	}
	return name, secret, true
}
