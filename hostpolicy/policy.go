package hostpolicy

import (
	"fmt"
	"hash/maphash"
	"net/netip"
	"path"
	"slices"
	"strings"
	"unsafe"

	"github.com/netproxy/netproxy/hostpolicy/hostname"
)

// Snapshot is one immutable, compiled state of the whole chain: the allow
// and deny lists with their address entries, the static answers, the
// resolver, the mode, the kill switch, MITM admission, netproxy's listen
// addresses and the live amendments. The Engine swaps it with one atomic
// store, so a request sees all of one snapshot or all of the next. Build it
// with Build or Load; share it freely.
type Snapshot struct {
	// allow and deny are the two lists (names, address entries, and the
	// allow list's CIDR prefixes), each with its port-scoped entries.
	allow, deny       *list
	allowLocalBinding bool
	mode              string
	// enabled is network.enabled, the operator's kill switch. The zero
	// value is off: a Snapshot not built by Build blocks everything.
	enabled bool
	mitm    bool
	// checkTLSName is network.check_tls_name (SPEC §3.11).
	checkTLSName bool
	// static are the [dns.hosts] answers (local, readable at any step);
	// dns is asked only for a name the allow list or a reviewer allowed.
	static map[string][]netip.Addr
	dns    Resolver
	listen []string
	// self are the listen addresses the own_listener stage refuses.
	self   *SelfAddrs
	amends *amendments
	// requests are the request rules (SPEC §3.10); nil when none.
	requests *requestRules
}

// Enabled reports network.enabled: false means every request is blocked
// with proxy_disabled (source proxy_state) before any other step.
func (p *Snapshot) Enabled() bool { return p.enabled }

// PatternCounts returns how many entries (patterns and address entries)
// each list holds.
func (p *Snapshot) PatternCounts() (allow, deny int) {
	return p.allow.count, p.deny.count
}

// AllowLocalBinding reports network.allow_local_binding.
func (p *Snapshot) AllowLocalBinding() bool { return p.allowLocalBinding }

// Mode is network.mode ("full" or "limited").
func (p *Snapshot) Mode() string { return p.mode }

// MITM reports whether limited-mode CONNECTs are admitted to interception.
func (p *Snapshot) MITM() bool { return p.mitm }

// ListenAddrs are netproxy's own listen addresses ("host:port").
func (p *Snapshot) ListenAddrs() []string { return append([]string(nil), p.listen...) }

type builder struct {
	allow, deny *listBuilder
}

func newBuilder() *builder {
	return &builder{allow: newListBuilder(""), deny: newListBuilder("")}
}

// add adds one entry; its error names the entry's origin.
func (b *builder) add(e Entry) error {
	err := b.addPattern(e.Pattern, e.Decision)
	switch {
	case err == nil:
		return nil
	case e.Origin != "":
		return fmt.Errorf("%s: %w", e.Origin, err)
	}
	return fmt.Errorf("pattern %q: %w", e.Pattern, err)
}

func (b *builder) addPattern(pattern, decision string) error {
	pe, err := parseEntry(pattern, decision)
	if err != nil {
		return err
	}
	if decision == EntryDeny {
		b.deny.add(pe, false)
	} else {
		b.allow.add(pe, true)
	}
	return nil
}

// matcher answers "does host match any pattern" without scanning the list
// for exact and suffix patterns. Every domain of an exact, "*.d" or "**.d"
// pattern is one entry in a pointer-free table (a hash → entry index map, an
// entry array and one byte arena), so a lookup is one hash probe per label
// of the host and 100 000 patterns cost the garbage collector nothing to
// scan. Globs are bucketed by the literal domain they must end with.
type matcher struct {
	count int
	all   bool

	seed    maphash.Seed
	index   map[uint64]uint32 // hash(domain) → entry index + 1 (chain head)
	entries []domainEntry
	// text holds each domain as the text a wildcard match reports,
	// "**." + domain + suffix, back to back; an entry's off is its domain.
	// A match reports a slice of it rather than building a string on every
	// request.
	text    string
	allText string // "*" + suffix, reported by the all pattern

	globBucket map[string][]glob // literal suffix → globs
	globScan   []glob            // globs without a literal suffix

	// suffix is appended to every reported match: the port scope of the
	// entries (":443"), "" for unscoped ones.
	suffix string
}

// domainEntry flags.
const (
	flagExact     = 1 << iota // "d"
	flagApex                  // "**.d" matches d itself
	flagSubStar               // "*.d"
	flagSubDouble             // "**.d" matches subdomains
)

type domainEntry struct {
	off, n uint32
	next   uint32 // next entry with the same hash, index + 1
	flags  uint8
}

type glob struct{ expr, text string }

type matcherBuilder struct {
	m *matcher
	// arena is text while it is built: m.text aliases it (bytes are only
	// appended, never rewritten) until build copies it to its exact size.
	arena    []byte
	seenGlob map[string]struct{}
}

func newMatcherBuilder() *matcherBuilder {
	return &matcherBuilder{m: &matcher{
		seed: maphash.MakeSeed(), index: map[uint64]uint32{}, globBucket: map[string][]glob{},
	}, seenGlob: map[string]struct{}{}}
}

func (mb *matcherBuilder) add(p hostname.Pattern) {
	m := mb.m
	switch p.Kind {
	case hostname.All:
		if !m.all {
			m.all = true
			m.count++
		}
	case hostname.Exact:
		mb.addDomain(p.Domain, flagExact)
	case hostname.Subdomains:
		mb.addDomain(p.Domain, flagSubStar)
	case hostname.ApexAndSubdomains:
		mb.addDomain(p.Domain, flagApex|flagSubDouble)
	case hostname.Glob:
		if _, dup := mb.seenGlob[p.Text]; dup {
			return
		}
		mb.seenGlob[p.Text] = struct{}{}
		m.count++
		for _, g := range p.Globs {
			gl := glob{expr: g, text: p.Text + m.suffix}
			if key := hostname.GlobSuffixKey(g); key != "" {
				m.globBucket[key] = append(m.globBucket[key], gl)
			} else {
				m.globScan = append(m.globScan, gl)
			}
		}
	}
}

func (mb *matcherBuilder) addDomain(d string, flags uint8) {
	m := mb.m
	if i, ok := m.lookup(d); ok {
		e := &m.entries[i]
		if e.flags&flags != flags {
			m.count++
		}
		e.flags |= flags
		return
	}
	h := maphash.String(m.seed, d)
	mb.arena = append(mb.arena, "**."...)
	m.entries = append(m.entries, domainEntry{off: uint32(len(mb.arena)), n: uint32(len(d)), next: m.index[h], flags: flags})
	mb.arena = append(mb.arena, d...)
	mb.arena = append(mb.arena, m.suffix...)
	m.text = unsafe.String(unsafe.SliceData(mb.arena), len(mb.arena))
	m.index[h] = uint32(len(m.entries))
	m.count++
}

func (mb *matcherBuilder) build() *matcher {
	m := mb.m
	mb.seenGlob = nil
	// Trim the growth slack: the policy lives until the next reload.
	m.entries = slices.Clip(m.entries)
	m.text = strings.Clone(m.text) // its own exact-size copy: the arena's slack is freed
	mb.arena = nil
	m.allText = "*" + m.suffix
	return m
}

// The texts entry i reports: exact ("d"), "*." + d and "**." + d, each
// with the port suffix.
func (m *matcher) exactText(i int) string {
	e := &m.entries[i]
	return m.text[e.off : int(e.off+e.n)+len(m.suffix)]
}

func (m *matcher) starText(i int) string {
	e := &m.entries[i]
	return m.text[e.off-2 : int(e.off+e.n)+len(m.suffix)]
}

func (m *matcher) doubleText(i int) string {
	e := &m.entries[i]
	return m.text[e.off-3 : int(e.off+e.n)+len(m.suffix)]
}

// lookup returns the entry index of domain d.
func (m *matcher) lookup(d string) (int, bool) {
	if len(m.entries) == 0 {
		return 0, false
	}
	for i := m.index[maphash.String(m.seed, d)]; i != 0; {
		e := &m.entries[i-1]
		if int(e.n) == len(d) && m.text[e.off:e.off+e.n] == d {
			return int(i - 1), true
		}
		i = e.next
	}
	return 0, false
}

// match returns the most specific matching pattern: exact, then apex, then
// the longest suffix, then globs, then "*".
func (m *matcher) match(host string) (string, bool) {
	if m == nil {
		return "", false
	}
	if i, ok := m.lookup(host); ok {
		switch f := m.entries[i].flags; {
		case f&flagExact != 0:
			return m.exactText(i), true
		case f&flagApex != 0:
			return m.doubleText(i), true
		}
	}
	if len(m.entries) > 0 || len(m.globBucket) > 0 {
		for i := 0; ; {
			j := strings.IndexByte(host[i:], '.')
			if j < 0 {
				break
			}
			i += j + 1
			suf := host[i:]
			if k, ok := m.lookup(suf); ok {
				switch f := m.entries[k].flags; {
				case f&flagSubDouble != 0:
					return m.doubleText(k), true
				case f&flagSubStar != 0:
					return m.starText(k), true
				}
			}
			for _, g := range m.globBucket[suf] {
				if ok, _ := path.Match(g.expr, host); ok {
					return g.text, true
				}
			}
		}
	}
	for _, g := range m.globScan {
		if ok, _ := path.Match(g.expr, host); ok {
			return g.text, true
		}
	}
	if m.all {
		return m.allText, true
	}
	return "", false
}

// matchExact reports an exact (non-wildcard) entry equal to host.
func (m *matcher) matchExact(host string) (string, bool) {
	if m == nil {
		return "", false
	}
	if i, ok := m.lookup(host); ok && m.entries[i].flags&flagExact != 0 {
		return m.exactText(i), true
	}
	return "", false
}
