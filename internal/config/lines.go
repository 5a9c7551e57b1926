package config

import (
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
	var cur strings.Builder
	quote := byte(0)
	flush := func() {
		p := strings.TrimSpace(cur.String())
		if len(p) >= 2 && p[0] == '"' {
			if u, err := strconv.Unquote(p); err == nil {
				p = u
			}
		} else if len(p) >= 2 && p[0] == '\'' {
			p = p[1 : len(p)-1]
		}
		parts = append(parts, p)
		cur.Reset()
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case quote != 0:
			cur.WriteByte(c)
			if c == '\\' && quote == '"' && i+1 < len(s) {
				i++
				cur.WriteByte(s[i])
			} else if c == quote {
				quote = 0
			}
		case c == '"' || c == '\'':
			quote = c
			cur.WriteByte(c)
		case c == '.':
			flush()
		default:
			cur.WriteByte(c)
		}
	}
	flush()
	return keyPath(parts)
}

func indexOutsideQuotes(s string, target byte) int {
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
			return i
		}
	}
	return -1
}

func lastIndexOutsideQuotes(s string, target byte) int {
	last := -1
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
			last = i
		}
	}
	return last
}
