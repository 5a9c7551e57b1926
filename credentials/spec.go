// Package credentials owns netproxy's credential broker (docs/credentials.md):
// the [[credentials]] entries' shape and checks, the secrets read from the
// environment or a file, the placeholders minted per execution, and the
// decision for one outgoing request — replace the placeholder in the
// credential's header with the formatted secret on a request to the
// credential's hosts, or block a request that carries a live placeholder
// anywhere netproxy can see it toward any other host or from another
// execution.
//
// It must never log, return in an error, format with %v or marshal a secret
// (the secret type prints as "[redacted]"), never rewrite a body, and never
// inject a secret toward a host outside its credential's patterns.
package credentials

import (
	"errors"
	"fmt"
	"net/http"
	"regexp"
	"strings"

	"github.com/netproxy/netproxy/hostpolicy/hostname"
)

// Spec is one [[credentials]] entry as configured.
type Spec struct {
	Name       string
	Hosts      []string // host patterns (SPEC §3.2); a ":port" is dropped
	Header     string   // the request header whose placeholder is replaced
	Format     string   // the header's value with the secret: "Bearer {secret}"
	SecretEnv  string   // variable of netproxy's environment holding the secret
	SecretFile string   // or a file holding it (re-read on reload)
	Env        string   // the variable execwrap sets in the sandbox to the placeholder
	// PlaceholderPrefix and PlaceholderLength give placeholders the shape
	// of a real key (defaults DefaultPrefix, DefaultLength).
	PlaceholderPrefix string
	PlaceholderLength int
}

// Defaults of a placeholder's shape.
const (
	DefaultPrefix = "np-"
	DefaultLength = 51
	// MinRandom is the fewest random base62 characters a placeholder
	// carries after its prefix (≈143 bits).
	MinRandom = 24
	maxLength = 256
	// SecretMarker is where Format takes the secret.
	SecretMarker = "{secret}"
)

var (
	nameRe   = regexp.MustCompile(`^[a-z0-9][a-z0-9_-]{0,62}$`)
	envRe    = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]{0,127}$`)
	prefixRe = regexp.MustCompile(`^[A-Za-z0-9_.-]{0,32}$`)
)

// forbiddenHeaders are headers a credential may not claim: hop-by-hop
// ones, the proxy's own, and framing.
var forbiddenHeaders = map[string]bool{
	"Host": true, "Connection": true, "Proxy-Connection": true, "Keep-Alive": true,
	"Proxy-Authorization": true, "Proxy-Authenticate": true, "Te": true, "Trailer": true,
	"Transfer-Encoding": true, "Upgrade": true, "Content-Length": true, "Via": true,
}

// KeyError is one problem of an entry, under its TOML key (relative to the
// entry: "hosts[1]", "format").
type KeyError struct {
	Key string
	Msg string
}

func (e *KeyError) Error() string { return e.Key + ": " + e.Msg }

// Normalized returns s with defaults filled in and the header canonical.
func (s Spec) Normalized() Spec {
	if s.PlaceholderPrefix == "" && s.PlaceholderLength == 0 {
		s.PlaceholderPrefix = DefaultPrefix
	}
	if s.PlaceholderLength == 0 {
		s.PlaceholderLength = DefaultLength
	}
	s.Header = http.CanonicalHeaderKey(strings.TrimSpace(s.Header))
	return s
}

// Check returns every problem of one entry (nil when it is valid). It
// reads neither the environment nor the secret file: Load does.
func (s Spec) Check() []*KeyError {
	var errs []*KeyError
	bad := func(key, format string, a ...any) {
		errs = append(errs, &KeyError{Key: key, Msg: fmt.Sprintf(format, a...)})
	}
	if !nameRe.MatchString(s.Name) {
		bad("name", "%q: give a name of lower-case letters, digits, '-' and '_' (it is audited)", s.Name)
	}
	if len(s.Hosts) == 0 {
		bad("hosts", `missing; list the host patterns the secret belongs to, e.g. ["api.openai.com"]`)
	}
	for i, h := range s.Hosts {
		if _, err := HostPattern(h); err != nil {
			bad(fmt.Sprintf("hosts[%d]", i), "%v", err)
		}
	}
	hdr := http.CanonicalHeaderKey(strings.TrimSpace(s.Header))
	switch {
	case s.Header == "":
		bad("header", `missing; name the header that carries the key, e.g. "Authorization"`)
	case !validToken(hdr):
		bad("header", "%q is not a header name", s.Header)
	case forbiddenHeaders[hdr]:
		bad("header", "%q cannot carry a credential (hop-by-hop, framing or the proxy's own)", s.Header)
	}
	switch n := strings.Count(s.Format, SecretMarker); {
	case s.Format == "":
		bad("format", `missing; e.g. "Bearer {secret}"`)
	case n != 1:
		bad("format", "must contain {secret} exactly once (found %d)", n)
	case strings.ContainsAny(s.Format, "\r\n\x00"):
		bad("format", "must not contain CR, LF or NUL")
	}
	switch {
	case s.SecretEnv == "" && s.SecretFile == "":
		bad("secret_env", "missing; set secret_env (a variable of netproxy's environment) or secret_file")
	case s.SecretEnv != "" && s.SecretFile != "":
		bad("secret_file", "set only one of secret_env and secret_file")
	case s.SecretEnv != "" && !envRe.MatchString(s.SecretEnv):
		bad("secret_env", "%q is not a variable name", s.SecretEnv)
	}
	if s.Env != "" && !envRe.MatchString(s.Env) {
		bad("env", "%q is not a variable name", s.Env)
	}
	n := s.Normalized()
	if !prefixRe.MatchString(n.PlaceholderPrefix) {
		bad("placeholder_prefix", "%q: up to 32 of A-Z a-z 0-9 _ . -", s.PlaceholderPrefix)
	}
	if min := len(n.PlaceholderPrefix) + MinRandom; n.PlaceholderLength < min || n.PlaceholderLength > maxLength {
		bad("placeholder_length", "%d: must be %d–%d (the prefix plus at least %d random characters)", n.PlaceholderLength, min, maxLength, MinRandom)
	}
	return errs
}

// HostPattern parses one hosts entry; patterns that match every host are
// refused (a secret sent everywhere is no broker).
func HostPattern(raw string) (hostname.Pattern, error) {
	p, err := hostname.ParsePattern(raw)
	if err != nil {
		return p, err
	}
	if hostname.CheckDeny(p) != nil {
		return p, errors.New("a pattern matching every host cannot hold a credential")
	}
	return p, nil
}

// PatternKey is the form under which two entries' patterns are compared:
// the canonical pattern (lower case, A-labels, no port, no trailing dot).
func PatternKey(raw string) string {
	if p, err := hostname.ParsePattern(raw); err == nil {
		return p.Text
	}
	return strings.ToLower(strings.TrimSpace(raw))
}

// Conflict is a host pattern claimed by two entries for the same header.
type Conflict struct {
	First, Second int // entry indexes
	HostIndex     int // index in Second's hosts
	Pattern       string
	Header        string
}

// Conflicts lists every host pattern two entries share for the same
// header, and every repeated name (HostIndex -1).
func Conflicts(specs []Spec) []Conflict {
	var out []Conflict
	seen := map[string]int{}
	names := map[string]int{}
	for i, s := range specs {
		if j, ok := names[s.Name]; ok && s.Name != "" {
			out = append(out, Conflict{First: j, Second: i, HostIndex: -1, Pattern: s.Name})
		} else {
			names[s.Name] = i
		}
		hdr := http.CanonicalHeaderKey(strings.TrimSpace(s.Header))
		for k, h := range s.Hosts {
			key := hdr + "\x00" + PatternKey(h)
			if j, ok := seen[key]; ok && j != i {
				out = append(out, Conflict{First: j, Second: i, HostIndex: k, Pattern: h, Header: hdr})
				continue
			}
			seen[key] = i
		}
	}
	return out
}

func validToken(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c <= ' ' || c >= 0x7f || strings.IndexByte(`"(),/:;<=>?@[\]{}`, c) >= 0 {
			return false
		}
	}
	return true
}
