package config

import (
	"iter"
	"regexp"
	"strconv"
	"strings"
)

// keyLines maps each key path written in a TOML document (rendered like
// keyPath, array tables as name[i]) to the line that sets it. go-toml gives
// positions only for decode errors; this lets semantic errors name a line
// too. It is best effort: a key it cannot place simply has no line.
func keyLines(data []byte) map[string]int {
	out := map[string]int{}
	table := ""
	arrays := map[string]int{}
	for i, raw := range strings.Split(string(data), "\n") {
		line := strings.TrimSpace(raw)
		if line == "" || line[0] == '#' {
			continue
		}
		n := i + 1
		switch {
		case strings.HasPrefix(line, "[["):
			end := strings.Index(line, "]]")
			if end < 0 {
				continue
			}
			name := renderDotted(line[2:end])
			idx := arrays[name]
			arrays[name] = idx + 1
			table = name + "[" + strconv.Itoa(idx) + "]"
			setOnce(out, table, n)
		case line[0] == '[':
			end := strings.LastIndexByte(line, ']')
			if end < 0 {
				continue
			}
			table = renderDotted(line[1:end])
			setOnce(out, table, n)
		default:
			eq := indexOutsideQuotes(line, '=')
			if eq < 0 {
				continue
			}
			key := renderDotted(line[:eq])
			if table != "" {
				key = table + "." + key
			}
			setOnce(out, key, n)
		}
	}
	return out
}

var trailingIndex = regexp.MustCompile(`\[\d+\]$`)

// lineFor finds the line of key or of its nearest written parent.
func lineFor(lines map[string]int, key string) int {
	for key != "" {
		if n, ok := lines[key]; ok {
			return n
		}
		if trailingIndex.MatchString(key) {
			key = trailingIndex.ReplaceAllString(key, "")
			continue
		}
		dot := lastIndexOutsideQuotes(key, '.')
		if dot < 0 {
			return 0
		}
		key = key[:dot]
	}
	return 0
}

func setOnce(m map[string]int, k string, n int) {
	if _, ok := m[k]; !ok {
		m[k] = n
	}
}

// renderDotted turns a written dotted key (`network . "a.b"`) into keyPath form.
func renderDotted(s string) string {
	var parts []string
	start := 0
	for dot := range outsideQuotes(s, '.') {
		parts = append(parts, unquoteKeyPart(s[start:dot]))
		start = dot + 1
	}
	parts = append(parts, unquoteKeyPart(s[start:]))
	return keyPath(parts)
}

// unquoteKeyPart returns one written key part as its bare name.
func unquoteKeyPart(p string) string {
	p = strings.TrimSpace(p)
	if len(p) >= 2 && p[0] == '"' {
		if u, err := strconv.Unquote(p); err == nil {
			return u
		}
	} else if len(p) >= 2 && p[0] == '\'' {
		return p[1 : len(p)-1]
	}
	return p
}

// outsideQuotes yields the index of every target byte of s that is not
// inside a TOML basic ("…", with backslash escapes) or literal ('…') string.
func outsideQuotes(s string, target byte) iter.Seq[int] {
	return func(yield func(int) bool) {
		quote := byte(0)
		for i := 0; i < len(s); i++ {
			c := s[i]
			switch {
			case quote != 0:
				if c == '\\' && quote == '"' {
					i++
				} else if c == quote {
					quote = 0
				}
			case c == '"' || c == '\'':
				quote = c
			case c == target:
				if !yield(i) {
					return
				}
			}
		}
	}
}

func indexOutsideQuotes(s string, target byte) int {
	for i := range outsideQuotes(s, target) {
		return i
	}
	return -1
}

func lastIndexOutsideQuotes(s string, target byte) int {
	last := -1
	for i := range outsideQuotes(s, target) {
		last = i
	}
	return last
}
