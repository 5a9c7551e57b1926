package replay

// A fast path for the audit lines netproxy itself writes: one flat JSON
// object of ASCII strings without escapes, numbers, null, the addrs array
// of strings and the shadow object. Anything else (an escape, a non-ASCII
// byte, a value of another shape, a grammar error) makes scanLine report
// false, and ParseLine falls back to encoding/json, which also produces
// the error message. The fast path never accepts what encoding/json would
// reject.

import "strings"

type scanner struct {
	b []byte
	i int
}

func (s *scanner) ws() {
	for s.i < len(s.b) {
		switch s.b[s.i] {
		case ' ', '\t', '\n', '\r':
			s.i++
		default:
			return
		}
	}
}

// str reads a string without escapes or non-ASCII bytes.
func (s *scanner) str() (string, bool) {
	if s.i >= len(s.b) || s.b[s.i] != '"' {
		return "", false
	}
	s.i++
	start := s.i
	for s.i < len(s.b) {
		c := s.b[s.i]
		switch {
		case c == '"':
			v := string(s.b[start:s.i])
			s.i++
			return v, true
		case c == '\\' || c < 0x20 || c >= 0x80:
			return "", false
		}
		s.i++
	}
	return "", false
}

// word is str for the few values an audit line repeats on every line
// (event, decision, reason, source, protocol, method, level): those come
// back as constants, without an allocation.
func (s *scanner) word() (string, bool) {
	start := s.i
	if !s.skipStr() {
		return "", false
	}
	b := s.b[start+1 : s.i-1]
	switch string(b) {
	case "":
		return "", true
	case "network_decision":
		return "network_decision", true
	case "allow":
		return "allow", true
	case "deny":
		return "deny", true
	case "ask":
		return "ask", true
	case "not_allowed":
		return "not_allowed", true
	case "denied":
		return "denied", true
	case "not_allowed_local":
		return "not_allowed_local", true
	case "policy_denied":
		return "policy_denied", true
	case "baseline_policy":
		return "baseline_policy", true
	case "decider":
		return "decider", true
	case "mode_guard":
		return "mode_guard", true
	case "http":
		return "http", true
	case "https":
		return "https", true
	case "socks5-tcp":
		return "socks5-tcp", true
	case "GET":
		return "GET", true
	case "CONNECT":
		return "CONNECT", true
	case "POST":
		return "POST", true
	case "execution":
		return "execution", true
	case "session":
		return "session", true
	}
	return string(b), true
}

// skipStr skips a string without escapes or non-ASCII bytes.
func (s *scanner) skipStr() bool {
	if s.i >= len(s.b) || s.b[s.i] != '"' {
		return false
	}
	s.i++
	for s.i < len(s.b) {
		c := s.b[s.i]
		switch {
		case c == '"':
			s.i++
			return true
		case c == '\\' || c < 0x20 || c >= 0x80:
			return false
		}
		s.i++
	}
	return false
}

// uint16Val reads a non-negative integer that fits 16 bits.
func (s *scanner) uint16Val() (uint16, bool) {
	start, n := s.i, 0
	for s.i < len(s.b) && s.b[s.i] >= '0' && s.b[s.i] <= '9' {
		n = n*10 + int(s.b[s.i]-'0')
		if n > 65535 {
			return 0, false
		}
		s.i++
	}
	if s.i == start || (s.b[start] == '0' && s.i-start > 1) {
		return 0, false
	}
	return uint16(n), true
}

func (s *scanner) lit(word string) bool {
	if len(s.b)-s.i < len(word) || string(s.b[s.i:s.i+len(word)]) != word {
		return false
	}
	s.i += len(word)
	return true
}

// skipValue skips a string, an unsigned integer, null/true/false, or a
// flat object of such values.
func (s *scanner) skipValue(depth int) bool {
	if s.i >= len(s.b) {
		return false
	}
	switch c := s.b[s.i]; {
	case c == '"':
		return s.skipStr()
	case c >= '0' && c <= '9':
		_, ok := s.uint16Val()
		return ok
	case c == 'n':
		return s.lit("null")
	case c == 't':
		return s.lit("true")
	case c == 'f':
		return s.lit("false")
	case c == '{' && depth == 0:
		s.i++
		s.ws()
		if s.i < len(s.b) && s.b[s.i] == '}' {
			s.i++
			return true
		}
		for {
			s.ws()
			if !s.skipStr() {
				return false
			}
			s.ws()
			if s.i >= len(s.b) || s.b[s.i] != ':' {
				return false
			}
			s.i++
			s.ws()
			if !s.skipValue(depth + 1) {
				return false
			}
			s.ws()
			if s.i >= len(s.b) {
				return false
			}
			if s.b[s.i] == '}' {
				s.i++
				return true
			}
			if s.b[s.i] != ',' {
				return false
			}
			s.i++
		}
	}
	return false
}

// strArray reads an array of plain strings (or null).
func (s *scanner) strArray() ([]string, bool) {
	if s.lit("null") {
		return nil, true
	}
	if s.i >= len(s.b) || s.b[s.i] != '[' {
		return nil, false
	}
	s.i++
	s.ws()
	var out []string
	if s.i < len(s.b) && s.b[s.i] == ']' {
		s.i++
		return out, true
	}
	for {
		s.ws()
		v, ok := s.str()
		if !ok {
			return nil, false
		}
		out = append(out, v)
		s.ws()
		if s.i >= len(s.b) {
			return nil, false
		}
		if s.b[s.i] == ']' {
			s.i++
			return out, true
		}
		if s.b[s.i] != ',' {
			return nil, false
		}
		s.i++
	}
}

// scanLine is the fast path of ParseLine (see the file comment).
func scanLine(b []byte, l *Line) bool {
	s := scanner{b: b}
	s.ws()
	if s.i >= len(b) || b[s.i] != '{' {
		return false
	}
	s.i++
	s.ws()
	if s.i < len(b) && b[s.i] == '}' {
		s.i++
		s.ws()
		return s.i == len(b)
	}
	for {
		s.ws()
		key, ok := s.str()
		if !ok {
			return false
		}
		s.ws()
		if s.i >= len(b) || b[s.i] != ':' {
			return false
		}
		s.i++
		s.ws()
		var dst *string
		intern := false
		switch key {
		case "event":
			dst, intern = &l.Event, true
		case "decision":
			dst, intern = &l.Decision, true
		case "reason":
			dst, intern = &l.Reason, true
		case "source":
			dst, intern = &l.Source, true
		case "protocol":
			dst, intern = &l.Protocol, true
		case "host":
			dst = &l.Host
		case "method":
			dst, intern = &l.Method, true
		case "pattern":
			dst = &l.Pattern
		case "level":
			dst, intern = &l.Level, true
		case "execution_id":
			dst = &l.ExecutionID
		}
		switch {
		case dst != nil:
			if s.lit("null") {
				break // encoding/json leaves the field as it was
			}
			var v string
			var ok bool
			if intern {
				v, ok = s.word()
			} else {
				v, ok = s.str()
			}
			if !ok {
				return false
			}
			*dst = v
		case key == "port":
			if s.lit("null") {
				break
			}
			v, ok := s.uint16Val()
			if !ok {
				return false
			}
			l.Port = v
		case key == "rule":
			if s.lit("null") {
				break
			}
			v, ok := s.uint16Val()
			if !ok {
				return false
			}
			r := int(v)
			l.Rule = &r
		case key == "addrs":
			v, ok := s.strArray()
			if !ok {
				return false
			}
			l.Addrs = v
		default:
			if foldsToKnown(key) {
				// encoding/json matches keys case-insensitively.
				return false
			}
			if !s.skipValue(0) {
				return false
			}
		}
		s.ws()
		if s.i >= len(b) {
			return false
		}
		if b[s.i] == '}' {
			s.i++
			s.ws()
			return s.i == len(b)
		}
		if b[s.i] != ',' {
			return false
		}
		s.i++
	}
}

// foldsToKnown reports a key that differs from a Line key only in case.
func foldsToKnown(key string) bool {
	switch strings.ToLower(key) {
	case "event", "decision", "reason", "source", "protocol", "host", "method", "pattern", "level", "execution_id", "port", "addrs", "rule":
		return true
	}
	return false
}
