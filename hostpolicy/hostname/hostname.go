// Package hostname owns the textual half of the host policy (SPEC §3.1–3.2):
// turning a client-supplied host into its one canonical spelling, and turning
// a configured domain pattern into a canonical, typed pattern.
//
// It is a leaf package (standard library and x/net/idna only) so that both
// the configuration validator and the policy compiler use the same parser. It
// must never resolve names, classify addresses or decide anything.
package hostname

import (
	"errors"
	"fmt"
	"net/netip"
	"net/url"
	"strings"

	"golang.org/x/net/idna"
)

// ErrEmpty is returned for a host that normalises to nothing (SPEC §3.1:
// blocked as not_allowed).
var ErrEmpty = errors.New("empty host")

// idnaProfile maps Unicode names to A-labels (UTS #46 non-transitional, the
// lookup mapping browsers use). Hyphen and STD3 checks are off because real
// ASCII names break them ("r3---sn-x.googlevideo.com", "_dmarc"); ASCII
// characters are validated by checkName instead. The profile is immutable.
var idnaProfile = idna.New(
	idna.MapForLookup(),
	idna.Transitional(false),
	idna.BidiRule(),
	idna.StrictDomainName(false),
	idna.CheckHyphens(false),
)

// Normalize returns the canonical spelling of host (SPEC §3.1): trimmed, port
// and brackets removed, ASCII-lowercased, trailing dots removed, IP literals in
// canonical form (numeric IPv4 spellings such as 2130706433, 0x7f000001,
// 0177.0.0.1 and 127.1 included), scoped literals as ip%zone, and Unicode
// names as IDNA A-labels. Anything that is not a valid host is an error, and
// callers must treat an error as not_allowed.
func Normalize(host string) (string, error) {
	return normalize(host, true)
}

func normalize(host string, allowPercentDecode bool) (string, error) {
	s := strings.TrimSpace(host)
	if s == "" {
		return "", ErrEmpty
	}
	if s[0] == '[' {
		end := strings.IndexByte(s, ']')
		if end < 0 {
			return "", fmt.Errorf("host %q: unclosed '['", clip(host))
		}
		rest := s[end+1:]
		if rest != "" && (rest[0] != ':' || len(rest) > 6 || (len(rest) > 1 && !allDigits(rest[1:]))) {
			return "", fmt.Errorf("host %q: unexpected text after ']'", clip(host))
		}
		s = s[1:end]
		if strings.IndexByte(s, ':') < 0 && !strings.Contains(s, "%") {
			// [1.2.3.4] and [name] are not valid bracketed hosts.
			return "", fmt.Errorf("host %q: brackets may only enclose an IPv6 address", clip(host))
		}
	} else if strings.Count(s, ":") == 1 {
		i := strings.IndexByte(s, ':')
		if port := s[i+1:]; len(port) > 5 || (port != "" && !allDigits(port)) {
			// "a.test:b.test" is not host:port; refuse rather than guess.
			return "", fmt.Errorf("host %q: %q is not a port", clip(host), clip(port))
		}
		s = s[:i]
	}
	s = lowerASCII(s)
	s = strings.TrimRight(s, ".")
	if s == "" {
		return "", ErrEmpty
	}

	if strings.IndexByte(s, ':') >= 0 {
		return normalizeIPv6(s, host)
	}
	if strings.IndexByte(s, '%') >= 0 {
		// A percent-encoded name ("127%2e0%2e0%2e1") is decoded once, as a
		// browser does, so that it cannot smuggle an address past the
		// classifier. Double encoding is rejected.
		if !allowPercentDecode {
			return "", fmt.Errorf("host %q: percent-encoding inside percent-encoding", clip(host))
		}
		dec, err := url.PathUnescape(s)
		if err != nil {
			return "", fmt.Errorf("host %q: bad percent-encoding", clip(host))
		}
		return normalize(dec, false)
	}
	if !isASCII(s) {
		a, err := idnaProfile.ToASCII(s)
		if err != nil {
			return "", fmt.Errorf("host %q: not a valid internationalised name: %v", clip(host), err)
		}
		s = strings.TrimRight(lowerASCII(a), ".")
		if s == "" {
			return "", ErrEmpty
		}
		if strings.IndexByte(s, ':') >= 0 || strings.IndexByte(s, '%') >= 0 {
			return "", fmt.Errorf("host %q: invalid characters after IDNA mapping", clip(host))
		}
	}
	if endsInNumber(s) {
		a, err := ParseIPv4(s)
		if err != nil {
			return "", fmt.Errorf("host %q: %v", clip(host), err)
		}
		return canonical(a, s), nil
	}
	if err := checkName(s); err != nil {
		return "", fmt.Errorf("host %q: %v", clip(host), err)
	}
	return s, nil
}

// canonical is a.String(), without building it when s already spells it
// (the usual dotted quad): the data path normalises every request's host.
func canonical(a netip.Addr, s string) string {
	var buf [len("255.255.255.255")]byte
	if string(a.AppendTo(buf[:0])) == s {
		return s
	}
	return a.String()
}

// normalizeIPv6 canonicalises an IPv6 literal, keeping a zone ("%25" is the
// URL encoding of '%').
func normalizeIPv6(s, orig string) (string, error) {
	ipPart, zone, scoped := strings.Cut(s, "%")
	if scoped {
		if strings.HasPrefix(zone, "25") && len(zone) > 2 {
			zone = zone[2:]
		}
		if zone == "" || !validZone(zone) {
			return "", fmt.Errorf("host %q: invalid IPv6 zone", clip(orig))
		}
	}
	a, err := netip.ParseAddr(ipPart)
	if err != nil || !a.Is6() {
		return "", fmt.Errorf("host %q: not a valid IPv6 address", clip(orig))
	}
	if scoped {
		a = a.WithZone(zone)
	}
	return a.String(), nil
}

func validZone(z string) bool {
	if len(z) > 64 {
		return false
	}
	for i := 0; i < len(z); i++ {
		c := z[i]
		if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-' || c == '_' || c == '.') {
			return false
		}
	}
	return true
}

// endsInNumber reports whether the last label is numeric (decimal or 0x-hex),
// the WHATWG URL rule that makes a host an IPv4 address that must parse.
func endsInNumber(s string) bool {
	last := s
	if i := strings.LastIndexByte(s, '.'); i >= 0 {
		last = s[i+1:]
	}
	if last == "" {
		return false
	}
	if allDigits(last) {
		return true
	}
	if strings.HasPrefix(last, "0x") {
		return allHex(last[2:])
	}
	return false
}

// ParseIPv4 parses the IPv4 spellings browsers and curl accept (WHATWG URL
// "IPv4 parser"): one to four dot-separated parts, each decimal, octal (leading
// 0) or hex (0x), the last part filling the remaining bytes.
func ParseIPv4(s string) (netip.Addr, error) {
	var nums [4]uint64
	n := 0
	for rest := s; ; {
		part, tail, more := strings.Cut(rest, ".")
		if n == 4 {
			return netip.Addr{}, errors.New("IPv4 address with more than four parts")
		}
		v, ok := parseIPv4Part(part)
		if !ok {
			return netip.Addr{}, fmt.Errorf("invalid IPv4 part %q", clip(part))
		}
		nums[n] = v
		n++
		if !more {
			break
		}
		rest = tail
	}
	var v uint64
	for i := 0; i < n-1; i++ {
		if nums[i] > 255 {
			return netip.Addr{}, errors.New("IPv4 part out of range")
		}
		v |= nums[i] << (8 * (3 - i))
	}
	last := nums[n-1]
	if last >= 1<<(8*(5-n)) {
		return netip.Addr{}, errors.New("IPv4 address out of range")
	}
	v |= last
	return netip.AddrFrom4([4]byte{byte(v >> 24), byte(v >> 16), byte(v >> 8), byte(v)}), nil
}

func parseIPv4Part(p string) (uint64, bool) {
	if p == "" {
		return 0, false
	}
	base := uint64(10)
	switch {
	case strings.HasPrefix(p, "0x"):
		base, p = 16, p[2:]
		if p == "" {
			return 0, true // WHATWG: "0x" alone is zero
		}
	case len(p) > 1 && p[0] == '0':
		base, p = 8, p[1:]
	}
	var n uint64
	for i := 0; i < len(p); i++ {
		d, ok := digitVal(p[i])
		if !ok || d >= base {
			return 0, false
		}
		n = n*base + d
		if n > 0xffffffff {
			return 0, false
		}
	}
	return n, true
}

func digitVal(c byte) (uint64, bool) {
	switch {
	case c >= '0' && c <= '9':
		return uint64(c - '0'), true
	case c >= 'a' && c <= 'f':
		return uint64(c-'a') + 10, true
	}
	return 0, false
}

// checkName accepts letters, digits, '-' and '_' in non-empty labels of at
// most 63 bytes, 253 bytes in all.
func checkName(s string) error {
	if len(s) > 253 {
		return errors.New("name longer than 253 bytes")
	}
	label := 0
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c == '.':
			if label == 0 {
				return errors.New("empty label")
			}
			label = 0
			continue
		case c >= 'a' && c <= 'z', c >= '0' && c <= '9', c == '-', c == '_':
		default:
			return fmt.Errorf("invalid character %q", c)
		}
		label++
		if label > 63 {
			return errors.New("label longer than 63 bytes")
		}
	}
	if label == 0 {
		return errors.New("empty label")
	}
	return nil
}

func lowerASCII(s string) string {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c >= 'A' && c <= 'Z' {
			b := []byte(s)
			for j := i; j < len(b); j++ {
				if b[j] >= 'A' && b[j] <= 'Z' {
					b[j] += 'a' - 'A'
				}
			}
			return string(b)
		}
	}
	return s
}

func isASCII(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] >= 0x80 {
			return false
		}
	}
	return true
}

func allDigits(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return s != ""
}

func allHex(s string) bool {
	for i := 0; i < len(s); i++ {
		if _, ok := digitVal(s[i]); !ok {
			return false
		}
	}
	return true
}

// clip keeps error messages bounded when fed hostile input.
func clip(s string) string {
	if len(s) > 80 {
		return s[:80] + "…"
	}
	return s
}
