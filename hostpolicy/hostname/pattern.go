package hostname

import (
	"errors"
	"fmt"
	"path"
	"strings"
)

// Kind is the shape of a domain pattern (SPEC §3.2).
type Kind int

const (
	// Exact matches one host ("example.com", "127.0.0.1", "fe80::1%eth0").
	Exact Kind = iota
	// Subdomains matches every subdomain at any depth, never the apex ("*.d").
	Subdomains
	// ApexAndSubdomains matches the apex and every subdomain ("**.d").
	ApexAndSubdomains
	// Glob is any other wildcard pattern, matched case-insensitively; '*'
	// and '?' also match '.'.
	Glob
	// All is the global wildcard "*" (allow list only).
	All
)

// Pattern is a parsed, canonical domain pattern.
type Pattern struct {
	Kind Kind
	// Text is the canonical spelling reported as the matching pattern
	// ("*.example.com", "127.0.0.1").
	Text string
	// Domain is the canonical host of Exact, Subdomains and
	// ApexAndSubdomains patterns.
	Domain string
	// Globs are the path.Match patterns a Glob matches against (already
	// lowercased); a "**."-prefixed glob yields two.
	Globs []string
}

// ErrGlobalWildcard is returned by CheckDeny for patterns matching every host.
var ErrGlobalWildcard = errors.New(`unsupported global wildcard domain pattern in the deny list; use exact hosts or scoped wildcards like *.example.com or **.example.com`)

const globMeta = "*?[]{}\\"

// ParsePattern parses one host pattern. A ":port" suffix is dropped (a
// credential's hosts, for instance, apply on every port); list entries,
// whose port scopes them, are parsed with ParseEntry. The rest is
// normalised like a host.
func ParsePattern(raw string) (Pattern, error) {
	s := strings.TrimSpace(raw)
	if s == "" {
		return Pattern{}, errors.New("empty pattern")
	}
	if s == "*" || s == "[*]" {
		return Pattern{Kind: All, Text: "*"}, nil
	}
	prefix := ""
	rest := s
	switch {
	case strings.HasPrefix(s, "**."):
		prefix, rest = "**.", s[3:]
	case strings.HasPrefix(s, "*."):
		prefix, rest = "*.", s[2:]
	}
	if rest == "[*]" {
		rest = "*"
	}
	if !hasGlobMeta(rest) || isBracketedLiteral(rest) {
		host, err := Normalize(rest)
		if err != nil {
			if errors.Is(err, ErrEmpty) {
				return Pattern{}, fmt.Errorf("invalid pattern %q: no host after %q", clip(raw), prefix)
			}
			return Pattern{}, fmt.Errorf("invalid pattern: %v", err)
		}
		switch prefix {
		case "**.":
			return Pattern{Kind: ApexAndSubdomains, Text: prefix + host, Domain: host}, nil
		case "*.":
			return Pattern{Kind: Subdomains, Text: prefix + host, Domain: host}, nil
		}
		return Pattern{Kind: Exact, Text: host, Domain: host}, nil
	}
	glob, err := normalizeGlob(rest)
	if err != nil {
		return Pattern{}, fmt.Errorf("invalid glob pattern %q: %v", clip(raw), err)
	}
	if prefix == "" && glob == "*" {
		// "*" in another spelling (e.g. "*:0", the port dropped): the
		// global wildcard, so that its canonical text parses back to it.
		return Pattern{Kind: All, Text: "*"}, nil
	}
	p := Pattern{Kind: Glob, Text: prefix + glob}
	switch prefix {
	case "**.":
		p.Globs = []string{glob, "?*." + glob}
	case "*.":
		p.Globs = []string{"?*." + glob}
	default:
		p.Globs = []string{glob}
	}
	for _, g := range p.Globs {
		if _, err := path.Match(g, ""); err != nil {
			return Pattern{}, fmt.Errorf("invalid glob pattern %q: %v", clip(raw), err)
		}
	}
	return p, nil
}

// CheckDeny rejects patterns that cannot be in a deny list: the global
// wildcard in any spelling ("*", "[*]", "**.[*]", "**", "?*", …).
func CheckDeny(p Pattern) error {
	if p.Kind == All {
		return ErrGlobalWildcard
	}
	if p.Kind == Glob && matchesEverything(p) {
		return ErrGlobalWildcard
	}
	return nil
}

// matchesEverything probes a glob with hosts of every shape; one that
// matches them all denies (or allows) every host and is a global wildcard.
func matchesEverything(p Pattern) bool {
	for _, probe := range []string{"a", "example.com", "x.y.example.org", "127.0.0.1", "::1", "z9"} {
		if !p.Match(probe) {
			return false
		}
	}
	return true
}

// Match reports whether the canonical host h matches p. Policy lookups use
// hash tables instead (hostpolicy); this is the reference semantics.
func (p Pattern) Match(h string) bool {
	switch p.Kind {
	case All:
		return true
	case Exact:
		return h == p.Domain
	case Subdomains:
		return len(h) > len(p.Domain)+1 && strings.HasSuffix(h, p.Domain) && h[len(h)-len(p.Domain)-1] == '.'
	case ApexAndSubdomains:
		return h == p.Domain || (len(h) > len(p.Domain)+1 && strings.HasSuffix(h, p.Domain) && h[len(h)-len(p.Domain)-1] == '.')
	case Glob:
		for _, g := range p.Globs {
			if ok, _ := path.Match(g, h); ok {
				return true
			}
		}
	}
	return false
}

// normalizeGlob lowercases a glob, drops a ":port" and trailing dots, and
// converts Unicode labels without wildcards to A-labels.
func normalizeGlob(s string) (string, error) {
	s = strings.TrimRight(s, ".") // "*:0." has a port too
	if strings.Count(s, ":") == 1 {
		host, port, _ := strings.Cut(s, ":")
		if allDigits(port) {
			s = host
		}
	}
	s = strings.TrimRight(lowerASCII(s), ".")
	if s == "" {
		return "", errors.New("empty pattern")
	}
	if s == "[*]" {
		s = "*" // as ParsePattern spells it before a port is split off
	}
	if !isASCII(s) {
		labels := strings.Split(s, ".")
		for i, l := range labels {
			if isASCII(l) {
				continue
			}
			if hasGlobMeta(l) {
				return "", errors.New("a label with a wildcard must be ASCII")
			}
			a, err := idnaProfile.ToASCII(l)
			if err != nil {
				return "", fmt.Errorf("not a valid internationalised label: %v", err)
			}
			labels[i] = lowerASCII(a)
		}
		// IDNA may map a label to nothing (a soft hyphen): no trailing dot.
		if s = strings.TrimRight(strings.Join(labels, "."), "."); s == "" {
			return "", errors.New("empty pattern")
		}
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c >= 'a' && c <= 'z', c >= '0' && c <= '9', c == '-', c == '_', c == '.', c == ':':
		case c == '{' || c == '}':
			return "", errors.New("alternation {a,b} is not supported; list each pattern separately")
		case strings.IndexByte(globMeta, c) >= 0, c == '!', c == '^', c == ',':
		default:
			return "", fmt.Errorf("invalid character %q", c)
		}
	}
	return s, nil
}

// GlobSuffixKey returns the literal domain every host matching glob g must
// end with (".glob.test" for "region*.glob.test" → "glob.test"), or "" when
// there is none. It lets lookups bucket globs by suffix instead of scanning.
func GlobSuffixKey(g string) string {
	i := strings.LastIndexAny(g, globMeta)
	tail := g[i+1:]
	dot := strings.IndexByte(tail, '.')
	if dot < 0 || dot == len(tail)-1 {
		return ""
	}
	return tail[dot+1:]
}

func hasGlobMeta(s string) bool { return strings.ContainsAny(s, globMeta) }

// isBracketedLiteral reports "[v6]" and "[v6]:port" so that their brackets
// are not read as a glob character class.
func isBracketedLiteral(s string) bool {
	if !strings.HasPrefix(s, "[") {
		return false
	}
	end := strings.IndexByte(s, ']')
	if end < 0 {
		return false
	}
	inner := s[1:end]
	return strings.IndexByte(inner, ':') >= 0 && !strings.ContainsAny(inner, "*?[{}\\")
}
