package hostpolicy

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"path"
	"path/filepath"
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
}

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
		errs = append(errs, ReadDomainFile(p, df.Decision, func(e Entry) error { return b.add(e) })...)
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
	}, nil
}

// maxDomainFileErrors bounds the errors reported for one domain file so a
// wrong file (a binary, a CSV) gives a readable answer.
const maxDomainFileErrors = 20

// ReadDomainFile reads a domain file (one pattern per line, '#' comments,
// blank lines ignored) and calls add for each pattern. It returns every error,
// each naming path:line; an unreadable file is one error naming the file.
func ReadDomainFile(p, decision string, add func(Entry) error) []error {
	f, err := os.Open(p)
	if err != nil {
		return []error{fmt.Errorf("domain file %s: %v", p, unwrapPathErr(err))}
	}
	defer f.Close()
	var errs []error
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64*1024), 1024*1024)
	line := 0
	for sc.Scan() {
		line++
		text := sc.Text()
		if i := strings.IndexByte(text, '#'); i >= 0 {
			text = text[:i]
		}
		text = strings.TrimSpace(text)
		if text == "" {
			continue
		}
		if err := add(Entry{Pattern: text, Decision: decision, Origin: p + ":" + strconv.Itoa(line)}); err != nil {
			errs = append(errs, err)
			if len(errs) >= maxDomainFileErrors {
				errs = append(errs, fmt.Errorf("%s: too many errors, stopping", p))
				return errs
			}
		}
	}
	if err := sc.Err(); err != nil {
		errs = append(errs, fmt.Errorf("domain file %s:%d: %v", p, line+1, err))
	}
	return errs
}

func unwrapPathErr(err error) error {
	var pe *os.PathError
	if errors.As(err, &pe) {
		return pe.Err
	}
	return err
}

type builder struct{ allow, deny *matcherBuilder }

func newBuilder() *builder {
	return &builder{allow: newMatcherBuilder(), deny: newMatcherBuilder()}
}

func (b *builder) add(e Entry) error {
	where := e.Origin
	if where == "" {
		where = "pattern " + strconv.Quote(e.Pattern)
	}
	p, err := hostname.ParsePattern(e.Pattern)
	if err != nil {
		return fmt.Errorf("%s: %v", where, err)
	}
	switch e.Decision {
	case "allow":
		b.allow.add(p)
	case "deny":
		if err := hostname.CheckDeny(p); err != nil {
			return fmt.Errorf("%s: %q: %v", where, e.Pattern, err)
		}
		b.deny.add(p)
	default:
		return fmt.Errorf("%s: decision %q is not \"allow\" or \"deny\"", where, e.Decision)
	}
	return nil
}

// matcher answers "does host match any pattern" without scanning the list
// for exact and suffix patterns: exact and apex hosts are map keys, "*.d"
// and "**.d" suffixes are map keys probed once per label of the host, and
// globs are bucketed by the literal domain they must end with.
type matcher struct {
	count      int
	all        bool
	exact      map[string]string // host → pattern text (exact entries only)
	apex       map[string]string // d → "**.d"
	suffix     map[string]string // d → "*.d" or "**.d"
	globBucket map[string][]glob // literal suffix → globs
	globScan   []glob            // globs without a literal suffix
}

type glob struct{ expr, text string }

type matcherBuilder struct {
	m    *matcher
	seen map[string]struct{}
}

func newMatcherBuilder() *matcherBuilder {
	return &matcherBuilder{m: &matcher{
		exact: map[string]string{}, apex: map[string]string{}, suffix: map[string]string{},
		globBucket: map[string][]glob{},
	}, seen: map[string]struct{}{}}
}

func (mb *matcherBuilder) add(p hostname.Pattern) {
	if _, dup := mb.seen[p.Text]; dup {
		return
	}
	mb.seen[p.Text] = struct{}{}
	m := mb.m
	m.count++
	switch p.Kind {
	case hostname.All:
		m.all = true
	case hostname.Exact:
		m.exact[p.Domain] = p.Text
	case hostname.Subdomains:
		if _, ok := m.suffix[p.Domain]; !ok {
			m.suffix[p.Domain] = p.Text
		}
	case hostname.ApexAndSubdomains:
		m.apex[p.Domain] = p.Text
		m.suffix[p.Domain] = p.Text
	case hostname.Glob:
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

func (mb *matcherBuilder) build() *matcher { m := mb.m; mb.seen = nil; return m }

// match returns the most specific matching pattern: exact, then apex, then
// the longest suffix, then globs, then "*".
func (m *matcher) match(host string) (string, bool) {
	if m == nil {
		return "", false
	}
	if t, ok := m.exact[host]; ok {
		return t, true
	}
	if t, ok := m.apex[host]; ok {
		return t, true
	}
	if len(m.suffix) > 0 || len(m.globBucket) > 0 {
		for i := 0; ; {
			j := strings.IndexByte(host[i:], '.')
			if j < 0 {
				break
			}
			i += j + 1
			suf := host[i:]
			if t, ok := m.suffix[suf]; ok {
				return t, true
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
	t, ok := m.exact[host]
	return t, ok
}
