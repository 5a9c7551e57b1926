package admin

import (
	"errors"
	"fmt"
	"net/http"
	"net/netip"
	"strings"
)

// maxHostHeader bounds the Host header this package will look at; a longer
// one is refused (no DNS name is longer than 253 characters).
const maxHostHeader = 300

// hostAllow decides which Host headers the admin listener answers (SPEC
// §7.3): loopback literals, localhost, and the names an operator listed in
// admin.allowed_hosts. Anything else is a DNS-rebinding page or a
// misdirected request and is answered 421. It is immutable after New.
type hostAllow struct {
	names map[string]struct{} // canonical (lower-case, no trailing dot)
}

func newHostAllow(extra []string) hostAllow {
	h := hostAllow{names: map[string]struct{}{"localhost": {}}}
	for _, n := range extra {
		if c, err := canonicalAllowed(n); err == nil {
			h.names[c] = struct{}{}
		}
	}
	return h
}

// allowed reports whether a request's Host header may reach the admin API.
func (h hostAllow) allowed(hostHeader string) bool {
	name, err := HostOfHeader(hostHeader)
	if err != nil {
		return false
	}
	if a, err := netip.ParseAddr(name); err == nil {
		if a.Unmap().IsLoopback() && a.Zone() == "" {
			return true
		}
		_, ok := h.names[a.String()]
		return ok
	}
	_, ok := h.names[name]
	return ok
}

// HostOfHeader returns the host part of an HTTP Host header in canonical
// form: the port and IPv6 brackets removed, ASCII lower-cased, one trailing
// dot removed, IP literals in netip's canonical spelling. It is strict: an
// empty header, a bad port, characters outside a DNS name or an IP literal,
// or a non-ASCII name is an error (the caller refuses the request).
func HostOfHeader(v string) (string, error) {
	if v == "" {
		return "", errors.New("empty Host header")
	}
	if len(v) > maxHostHeader {
		return "", errors.New("Host header too long")
	}
	host := v
	if strings.HasPrefix(v, "[") {
		end := strings.IndexByte(v, ']')
		if end < 0 {
			return "", errors.New("unclosed '[' in Host header")
		}
		host = v[1:end]
		if rest := v[end+1:]; rest != "" {
			if rest[0] != ':' || !validPort(rest[1:]) {
				return "", errors.New("bad port in Host header")
			}
		}
		a, err := netip.ParseAddr(host)
		if err != nil || !a.Is6() || a.Zone() != "" {
			return "", errors.New("brackets in a Host header must hold an IPv6 address")
		}
		return a.String(), nil
	}
	if i := strings.LastIndexByte(v, ':'); i >= 0 {
		if strings.IndexByte(v[:i], ':') >= 0 {
			return "", errors.New("an IPv6 Host header needs brackets")
		}
		if !validPort(v[i+1:]) {
			return "", errors.New("bad port in Host header")
		}
		host = v[:i]
	}
	host = strings.TrimSuffix(strings.ToLower(host), ".")
	if host == "" {
		return "", errors.New("empty host in Host header")
	}
	if a, err := netip.ParseAddr(host); err == nil {
		return a.String(), nil
	}
	for i := 0; i < len(host); i++ {
		c := host[i]
		if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-' || c == '.' || c == '_') {
			return "", fmt.Errorf("character %q is not allowed in a Host header", c)
		}
	}
	if strings.Contains(host, "..") || host[0] == '.' || host[len(host)-1] == '.' {
		return "", errors.New("empty label in Host header")
	}
	return host, nil
}

func validPort(p string) bool {
	if p == "" || len(p) > 5 {
		return false
	}
	n := 0
	for i := 0; i < len(p); i++ {
		if p[i] < '0' || p[i] > '9' {
			return false
		}
		n = n*10 + int(p[i]-'0')
	}
	return n <= 65535
}

// canonicalAllowed is the canonical spelling of an admin.allowed_hosts entry.
func canonicalAllowed(n string) (string, error) {
	if strings.ContainsAny(n, ":[]") {
		if a, err := netip.ParseAddr(n); err == nil && a.Zone() == "" {
			return a.String(), nil
		}
		return "", errors.New("write a host name or an IP address without a port")
	}
	c, err := HostOfHeader(n)
	if err != nil {
		return "", err
	}
	return c, nil
}

// CheckAllowedHost validates one admin.allowed_hosts entry: a DNS name or
// an IP address, without a port or wildcard.
func CheckAllowedHost(n string) error {
	if strings.TrimSpace(n) != n || n == "" {
		return fmt.Errorf("%q: write a host name or an IP address", n)
	}
	if _, err := canonicalAllowed(n); err != nil {
		return fmt.Errorf("%q: %v", n, err)
	}
	return nil
}

// misdirected answers 421 to a request whose Host the listener does not
// serve. The body names the key to change, never the Host it got.
func misdirected(w http.ResponseWriter) {
	w.Header().Set("Cache-Control", "no-store")
	http.Error(w, "misdirected request: the admin listener answers only a loopback address, localhost or a name in admin.allowed_hosts", http.StatusMisdirectedRequest)
}
