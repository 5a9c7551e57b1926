package execpolicy

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net/netip"
	"strings"
	"unicode"
)

// NetworkRule is one network_rule(...) entry. Host is normalised (lower
// case, no port, no trailing dot, never a wildcard); Protocol is one of
// "http", "https", "socks5_tcp", "socks5_udp"; Decision is "allow",
// "prompt" or "deny". A network rule applies to the host on every port and
// protocol in netproxy's allow/deny lists.
type NetworkRule struct {
	Host          string
	Protocol      string
	Decision      string
	Justification string
	File          string
	Line          int
}

// ParseNetworkProtocol maps the accepted spellings to the canonical name.
func ParseNetworkProtocol(s string) (string, error) {
	switch s {
	case "http":
		return "http", nil
	case "https", "https_connect", "http-connect":
		return "https", nil
	case "socks5_tcp":
		return "socks5_tcp", nil
	case "socks5_udp":
		return "socks5_udp", nil
	}
	return "", fmt.Errorf("network_rule protocol must be one of http, https, socks5_tcp, socks5_udp (got %s)", s)
}

// ParseNetworkDecision accepts "deny" and the prefix-rule decisions;
// "forbidden" is stored as "deny".
func ParseNetworkDecision(s string) (string, error) {
	if s == "deny" {
		return "deny", nil
	}
	d, err := ParseDecision(s)
	if err != nil {
		return "", err
	}
	if d == Forbidden {
		return "deny", nil
	}
	return d.String(), nil
}

// NormalizeNetworkRuleHost applies the reference's network_rule host rules:
// a specific host name or IP literal, without scheme, path, port or
// wildcard; the result is lower case without trailing dots.
func NormalizeNetworkRuleHost(raw string) (string, error) {
	h := strings.TrimSpace(raw)
	if h == "" {
		return "", errors.New("network_rule host cannot be empty")
	}
	if strings.Contains(h, "://") || strings.ContainsAny(h, "/?#") {
		return "", fmt.Errorf("network_rule host must be a hostname or IP literal (without scheme or path) (got %s)", raw)
	}
	if strings.HasPrefix(h, "[") {
		end := strings.IndexByte(h, ']')
		if end < 0 {
			return "", fmt.Errorf("network_rule host has an invalid bracketed IPv6 literal (got %s)", raw)
		}
		suffix := h[end+1:]
		if suffix != "" && !(len(suffix) > 1 && suffix[0] == ':' && allDigits(suffix[1:])) {
			return "", fmt.Errorf("network_rule host has an unsupported suffix after the bracketed IPv6 literal (got %s)", raw)
		}
		h = h[1:end]
	} else if strings.Count(h, ":") == 1 {
		i := strings.IndexByte(h, ':')
		if allDigits(h[i+1:]) && i+1 < len(h) {
			h = h[:i]
		}
	}
	for {
		// Trailing dots and spaces, until neither is left (". ." is empty).
		t := strings.TrimSpace(strings.TrimRight(h, "."))
		if t == h {
			break
		}
		h = t
	}
	h = strings.ToLower(h)
	if h == "" {
		return "", errors.New("network_rule host cannot be empty")
	}
	if strings.Contains(h, "*") {
		return "", errors.New("network_rule host must be a specific host; wildcards are not allowed")
	}
	if strings.IndexFunc(h, unicode.IsSpace) >= 0 {
		return "", fmt.Errorf("network_rule host must not contain whitespace (got %q)", raw)
	}
	if strings.Contains(h, ":") {
		// Only an IPv6 literal may hold a colon.
		a, err := netip.ParseAddr(h)
		if err != nil || !a.Is6() {
			return "", fmt.Errorf("network_rule host must be a hostname or IP literal (got %q)", raw)
		}
		return h, nil
	}
	for _, label := range strings.Split(h, ".") {
		if label == "" {
			return "", fmt.Errorf("network_rule host has an empty label (got %q)", raw)
		}
	}
	for _, c := range h {
		// Letters, digits, '-', '_', '.', and non-ASCII (IDN) letters only:
		// quotes, backslashes and control bytes would also break the line
		// written by FormatNetworkRule.
		if !(c == '-' || c == '_' || c == '.' || unicode.IsLetter(c) || unicode.IsDigit(c) || c >= 0x80 && unicode.IsPrint(c)) {
			return "", fmt.Errorf("network_rule host contains an invalid character (got %q)", raw)
		}
	}
	return h, nil
}

func allDigits(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return true
}

// ValidateNetworkRule normalises and checks every field of r, returning the
// canonical rule. Errors start with "invalid network rule: ".
func ValidateNetworkRule(r NetworkRule) (NetworkRule, error) {
	host, err := NormalizeNetworkRuleHost(r.Host)
	if err != nil {
		return r, fmt.Errorf("invalid network rule: invalid rule: %v", err)
	}
	proto, err := ParseNetworkProtocol(r.Protocol)
	if err != nil {
		return r, fmt.Errorf("invalid network rule: %v", err)
	}
	dec, err := ParseNetworkDecision(r.Decision)
	if err != nil {
		return r, fmt.Errorf("invalid network rule: %v", err)
	}
	if r.Justification != "" && strings.TrimSpace(r.Justification) == "" {
		return r, errors.New("invalid network rule: invalid rule: justification cannot be empty")
	}
	out := r
	out.Host, out.Protocol, out.Decision = host, proto, dec
	return out, nil
}

// FormatNetworkRule renders the rules-file line for r (no trailing newline),
// e.g. network_rule(host="api.github.com", protocol="https", decision="allow").
// Values are JSON-encoded, which Starlark reads back as the same strings.
// r should already be validated (see ValidateNetworkRule).
func FormatNetworkRule(r NetworkRule) string {
	var b strings.Builder
	b.WriteString("network_rule(host=")
	b.WriteString(jsonString(r.Host))
	b.WriteString(", protocol=")
	b.WriteString(jsonString(r.Protocol))
	b.WriteString(", decision=")
	b.WriteString(jsonString(r.Decision))
	if r.Justification != "" {
		b.WriteString(", justification=")
		b.WriteString(jsonString(r.Justification))
	}
	b.WriteString(")")
	return b.String()
}

// FormatPrefixRule renders an allow amendment line for tokens, e.g.
// prefix_rule(pattern=["echo", "Hello, world!"], decision="allow").
func FormatPrefixRule(tokens []string) string {
	quoted := make([]string, len(tokens))
	for i, t := range tokens {
		quoted[i] = jsonString(t)
	}
	return `prefix_rule(pattern=[` + strings.Join(quoted, ", ") + `], decision="allow")`
}

// jsonString quotes s as JSON without HTML escaping. Starlark accepts the
// JSON escapes (\n, \t, \", \\, \uXXXX) inside double-quoted strings.
func jsonString(s string) string {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	_ = enc.Encode(s) // encoding a string cannot fail
	return strings.TrimSuffix(buf.String(), "\n")
}
