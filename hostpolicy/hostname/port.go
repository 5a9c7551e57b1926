package hostname

import (
	"fmt"
	"strconv"
	"strings"
)

// PortRange is the inclusive port range a list entry is scoped to (SPEC
// §3.2). The zero value is "every port".
type PortRange struct{ Lo, Hi uint16 }

// Any reports whether r is the unscoped range (every port).
func (r PortRange) Any() bool { return r.Lo == 0 }

// Contains reports whether port is in r. Port 0 (unknown) is only in the
// unscoped range.
func (r PortRange) Contains(port uint16) bool {
	return r.Lo == 0 || (port >= r.Lo && port <= r.Hi)
}

// String is the range's canonical suffix: "" for every port, ":443" or
// ":8000-8999".
func (r PortRange) String() string {
	switch {
	case r.Any():
		return ""
	case r.Lo == r.Hi:
		return ":" + strconv.Itoa(int(r.Lo))
	}
	return ":" + strconv.Itoa(int(r.Lo)) + "-" + strconv.Itoa(int(r.Hi))
}

// SplitEntryPort splits a list entry into its host part and the ports it is
// scoped to (SPEC §3.2): "host:443", "*.corp.test:8000-8999", "[fd00::1]:443",
// "10.0.0.0/8:5432", "[fd00::/8]:5432". An entry without a port — also a
// bare IPv6 literal or prefix such as "fe80::1" or "fd00::/8" — is scoped to
// every port. A malformed port (":0", ":70000", ":9-3", ":https", ":") is an
// error naming the entry. The host part is returned as written (brackets
// kept for an IPv6 literal, dropped for an IPv6 prefix).
func SplitEntryPort(raw string) (host string, ports PortRange, err error) {
	s := strings.TrimSpace(raw)
	var spec string
	switch {
	case strings.HasPrefix(s, "["):
		end := strings.IndexByte(s, ']')
		if end < 0 {
			return s, PortRange{}, nil // the host parser reports the bracket
		}
		host, rest := s[:end+1], s[end+1:]
		if strings.Contains(host, "/") {
			// "[fd00::/8]:5432": a prefix is written without brackets.
			host = strings.TrimSpace(s[1:end])
		}
		if rest == "" {
			return host, PortRange{}, nil
		}
		if rest[0] != ':' {
			return s, PortRange{}, nil // "[::1]x": the host parser reports it
		}
		s, spec = host, rest[1:]
	default:
		i := strings.IndexByte(s, ':')
		if i < 0 || strings.IndexByte(s[i+1:], ':') >= 0 {
			// No colon, or an unbracketed IPv6 literal or prefix.
			return s, PortRange{}, nil
		}
		s, spec = s[:i], s[i+1:]
	}
	r, perr := parsePortRange(spec)
	if perr != nil {
		return "", PortRange{}, fmt.Errorf("entry %q: %v", clip(raw), perr)
	}
	if s == "" {
		return "", PortRange{}, fmt.Errorf("entry %q: no host before the port", clip(raw))
	}
	return s, r, nil
}

func parsePortRange(spec string) (PortRange, error) {
	lo, hi, isRange := strings.Cut(spec, "-")
	a, err := parsePort(lo)
	if err != nil {
		return PortRange{}, err
	}
	if !isRange {
		return PortRange{a, a}, nil
	}
	b, err := parsePort(hi)
	if err != nil {
		return PortRange{}, err
	}
	if b < a {
		return PortRange{}, fmt.Errorf("port range %s: the first port must not be above the second (write %d-%d)", spec, b, a)
	}
	return PortRange{a, b}, nil
}

func parsePort(s string) (uint16, error) {
	if s == "" {
		return 0, fmt.Errorf("empty port; write a number 1-65535 or a range such as 8000-8999, or drop the ':' to match every port")
	}
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return 0, fmt.Errorf("port %q is not a number 1-65535 (service names are not accepted)", clip(s))
		}
	}
	n, err := strconv.Atoi(s)
	if err != nil || n < 1 || n > 65535 {
		return 0, fmt.Errorf("port %s is outside 1-65535", clip(s))
	}
	return uint16(n), nil
}

// ParseEntry parses a list entry that is a host pattern: the pattern of
// ParsePattern and the ports it is scoped to (SplitEntryPort).
func ParseEntry(raw string) (Pattern, PortRange, error) {
	host, ports, err := SplitEntryPort(raw)
	if err != nil {
		return Pattern{}, PortRange{}, err
	}
	p, err := ParsePattern(host)
	if err != nil {
		return Pattern{}, PortRange{}, err
	}
	return p, ports, nil
}
