package hostpolicy

import (
	"errors"
	"fmt"
	"hash/maphash"
	"os"
	"path"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"

	"github.com/netproxy/netproxy/hostpolicy/hostname"
	"github.com/netproxy/netproxy/internal/config"
)

// Entry is one pattern with its decision and where it came from.
type Entry struct {
	Pattern  string
	Decision string // "allow" | "deny"
	Origin   string // e.g. "network.domains.\"a.test\"" or "deny.txt:12", used in errors
}

// Policy is a compiled, immutable pair of allow and deny lists plus the
// settings the chain needs. Build it with Compile; share it freely.
type Policy struct {
	allow, deny       *matcher
	allowLocalBinding bool
	mode              string
	// enabled is network.enabled, the operator's kill switch. The zero
	// value is off: a Policy not built by Compile blocks everything.
	enabled bool
}

// Enabled reports network.enabled: false means every request is blocked
// with proxy_disabled (source proxy_state) before any other step.
func (p *Policy) Enabled() bool { return p.enabled }

// PatternCounts returns how many patterns each list holds.
func (p *Policy) PatternCounts() (allow, deny int) { return p.allow.count, p.deny.count }

// AllowLocalBinding reports network.allow_local_binding.
func (p *Policy) AllowLocalBinding() bool { return p.allowLocalBinding }

// Mode is network.mode ("full" or "limited").
func (p *Policy) Mode() string { return p.mode }

// Compile builds a Policy from cfg's [network.domains], its domain_files
// (relative paths resolve against the folder of cfg.Path) and extra entries
// (network_rule()s from rules files). Every bad entry is reported; the error
// joins them all, each naming its key or file:line.
func Compile(cfg *config.Config, extra ...Entry) (*Policy, error) {
	if cfg == nil {
		return nil, errors.New("hostpolicy: nil config")
	}
	b := newBuilder()
	var errs []error

	keys := make([]string, 0, len(cfg.Network.Domains))
	for k := range cfg.Network.Domains {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		if err := b.add(Entry{Pattern: k, Decision: cfg.Network.Domains[k], Origin: "network.domains." + strconv.Quote(k)}); err != nil {
			errs = append(errs, err)
		}
	}
	for i, df := range cfg.Network.DomainFiles {
		key := fmt.Sprintf("network.domain_files[%d]", i)
		if df.Decision != "allow" && df.Decision != "deny" {
			errs = append(errs, fmt.Errorf("%s.decision: %q is not \"allow\" or \"deny\"", key, df.Decision))
			continue
		}
		p := df.Path
		if p == "" {
			errs = append(errs, fmt.Errorf("%s.path: missing; give the file of patterns", key))
			continue
		}
		if !filepath.IsAbs(p) && cfg.Path != "" {
			p = filepath.Join(filepath.Dir(cfg.Path), p)
		}
		if f, err := os.Open(p); err != nil {
			var pe *os.PathError
			if errors.As(err, &pe) {
				err = pe.Err
			}
			errs = append(errs, fmt.Errorf("%s.path: cannot read domain file %s: %v", key, p, err))
			continue
		} else {
			f.Close()
		}
		errs = append(errs, ReadDomainFile(p, df.Decision, func(e Entry) error { return b.addPattern(e.Pattern, e.Decision) })...)
	}
	for _, e := range extra {
		if err := b.add(e); err != nil {
			errs = append(errs, err)
		}
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	return &Policy{
		allow:             b.allow.build(),
		deny:              b.deny.build(),
		allowLocalBinding: cfg.Network.AllowLocalBinding,
		mode:              cfg.Network.Mode,
		enabled:           cfg.Network.Enabled,
	}, nil
}

// ReadDomainFile reads a domain file (see hostname.ReadPatternFile) and
// calls add with each pattern and decision (Origin "path:line"). add's error
// should not repeat the origin: every returned error is prefixed path:line.
func ReadDomainFile(path, decision string, add func(Entry) error) []error {
	return hostname.ReadPatternFile(path, func(line int, pattern string) error {
		return add(Entry{Pattern: pattern, Decision: decision, Origin: path + ":" + strconv.Itoa(line)})
	})
}

type builder struct{ allow, deny *matcherBuilder }

func newBuilder() *builder {
	return &builder{allow: newMatcherBuilder(), deny: newMatcherBuilder()}
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
	p, err := hostname.ParsePattern(pattern)
	if err != nil {
		return err
	}
	switch decision {
	case "allow":
		b.allow.add(p)
	case "deny":
		if err := hostname.CheckDeny(p); err != nil {
			return fmt.Errorf("%q: %w", pattern, err)
		}
		b.deny.add(p)
	default:
		return fmt.Errorf("decision %q is not \"allow\" or \"deny\"", decision)
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
	arena   []byte // the domains, back to back

	globBucket map[string][]glob // literal suffix → globs
	globScan   []glob            // globs without a literal suffix
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
	m        *matcher
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
			gl := glob{expr: g, text: p.Text}
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
	m.entries = append(m.entries, domainEntry{off: uint32(len(m.arena)), n: uint32(len(d)), next: m.index[h], flags: flags})
	m.arena = append(m.arena, d...)
	m.index[h] = uint32(len(m.entries))
	m.count++
}

func (mb *matcherBuilder) build() *matcher {
	m := mb.m
	mb.seenGlob = nil
	// Trim the growth slack: the policy lives until the next reload.
	m.entries = slices.Clip(m.entries)
	m.arena = slices.Clip(m.arena)
	return m
}

// lookup returns the entry index of domain d.
func (m *matcher) lookup(d string) (int, bool) {
	if len(m.entries) == 0 {
		return 0, false
	}
	for i := m.index[maphash.String(m.seed, d)]; i != 0; {
		e := &m.entries[i-1]
		if int(e.n) == len(d) && string(m.arena[e.off:e.off+e.n]) == d {
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
			return host, true
		case f&flagApex != 0:
			return "**." + host, true
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
					return "**." + suf, true
				case f&flagSubStar != 0:
					return "*." + suf, true
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
		return "*", true
	}
	return "", false
}

// matchExact reports an exact (non-wildcard) entry equal to host.
func (m *matcher) matchExact(host string) (string, bool) {
	if m == nil {
		return "", false
	}
	if i, ok := m.lookup(host); ok && m.entries[i].flags&flagExact != 0 {
		return host, true
	}
	return "", false
}
