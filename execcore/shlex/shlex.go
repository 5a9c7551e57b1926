// Package shlex splits and joins POSIX shell words the way the reference's
// Rust `shlex` crate does. It owns only quoting: it never expands variables,
// globs or command substitutions, and never runs a shell.
package shlex

import (
	"errors"
	"strings"
)

// ErrSyntax reports unbalanced quotes or a trailing backslash.
var ErrSyntax = errors.New("invalid shell syntax")

// ErrNUL reports a NUL byte, which no POSIX word can hold.
var ErrNUL = errors.New("word contains a NUL byte")

// Split breaks s into words with POSIX quoting rules: whitespace separates
// words, single quotes are literal, double quotes allow backslash escapes of
// $ ` " \ and newline, an unquoted backslash escapes the next byte, and an
// unquoted # at the start of a word starts a comment.
func Split(s string) ([]string, error) {
	var words []string
	var cur strings.Builder
	inWord := false
	i := 0
	for i < len(s) {
		c := s[i]
		switch {
		case c == ' ' || c == '\t' || c == '\n':
			if inWord {
				words = append(words, cur.String())
				cur.Reset()
				inWord = false
			}
			i++
		case c == '#' && !inWord:
			// A comment runs to the end of the line.
			for i < len(s) && s[i] != '\n' {
				i++
			}
		case c == '\\':
			if i+1 >= len(s) {
				return nil, ErrSyntax
			}
			if s[i+1] != '\n' {
				cur.WriteByte(s[i+1])
				inWord = true
			}
			i += 2
		case c == '\'':
			end := strings.IndexByte(s[i+1:], '\'')
			if end < 0 {
				return nil, ErrSyntax
			}
			cur.WriteString(s[i+1 : i+1+end])
			inWord = true
			i += end + 2
		case c == '"':
			i++
			closed := false
			for i < len(s) {
				d := s[i]
				if d == '"' {
					closed = true
					i++
					break
				}
				if d == '\\' && i+1 < len(s) {
					switch s[i+1] {
					case '$', '`', '"', '\\':
						cur.WriteByte(s[i+1])
						i += 2
						continue
					case '\n':
						i += 2
						continue
					}
				}
				cur.WriteByte(d)
				i++
			}
			if !closed {
				return nil, ErrSyntax
			}
			inWord = true
		default:
			cur.WriteByte(c)
			inWord = true
			i++
		}
	}
	if inWord {
		words = append(words, cur.String())
	}
	return words, nil
}

// Join quotes every word and joins them with single spaces. A word holding a
// NUL byte cannot be quoted and yields ErrNUL.
func Join(words []string) (string, error) {
	var b strings.Builder
	for i, w := range words {
		q, err := Quote(w)
		if err != nil {
			return "", err
		}
		if i > 0 {
			b.WriteByte(' ')
		}
		b.WriteString(q)
	}
	return b.String(), nil
}

// JoinLossy is Join that falls back to joining the raw words with spaces when
// a word cannot be quoted (the reference's behaviour for reason strings).
func JoinLossy(words []string) string {
	s, err := Join(words)
	if err != nil {
		return strings.Join(words, " ")
	}
	return s
}

const (
	unquotedOK     = 1
	singleQuotedOK = 2
	doubleQuotedOK = 4
)

// Quote returns w quoted for a POSIX shell using the cheapest strategy per
// chunk: unquoted, single quotes, or double quotes.
func Quote(w string) (string, error) {
	if w == "" {
		return "''", nil
	}
	if strings.IndexByte(w, 0) >= 0 {
		return "", ErrNUL
	}
	var out strings.Builder
	rest := w
	for rest != "" {
		n, strategy := quotingStrategy(rest)
		chunk := rest[:n]
		rest = rest[n:]
		switch strategy {
		case unquotedOK:
			if rest == "" && out.Len() == 0 {
				return w, nil
			}
			out.WriteString(chunk)
		case singleQuotedOK:
			out.WriteByte('\'')
			out.WriteString(chunk)
			out.WriteByte('\'')
		default:
			out.WriteByte('"')
			for j := 0; j < len(chunk); j++ {
				switch chunk[j] {
				case '$', '`', '"', '\\':
					out.WriteByte('\\')
				}
				out.WriteByte(chunk[j])
			}
			out.WriteByte('"')
		}
	}
	return out.String(), nil
}

func quotingStrategy(s string) (int, int) {
	prev := unquotedOK | singleQuotedOK | doubleQuotedOK
	i := 0
	if s[0] == '^' {
		// zsh treats a leading ^ specially; only single quotes are safe.
		prev = singleQuotedOK
		i = 1
	}
	for i < len(s) {
		c := s[i]
		cur := prev
		if c >= 0x80 {
			cur &^= unquotedOK
		} else {
			if !unquotedByte(c) {
				cur &^= unquotedOK
			}
			if c == '\'' || c == '^' || c == '\\' {
				cur &^= singleQuotedOK
			}
			if c == '!' {
				// history expansion happens inside double quotes
				cur &^= doubleQuotedOK
			}
		}
		if cur == 0 {
			break
		}
		prev = cur
		i++
	}
	switch {
	case prev&unquotedOK != 0:
		return i, unquotedOK
	case prev&singleQuotedOK != 0:
		return i, singleQuotedOK
	default:
		return i, doubleQuotedOK
	}
}

func unquotedByte(c byte) bool {
	switch {
	case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9':
		return true
	}
	switch c {
	case '+', '-', '.', '/', ':', '@', ']', '_':
		return true
	}
	return false
}
