package shellparse

import (
	"strconv"
	"strings"
	"unicode/utf8"

	"mvdan.cc/sh/v3/expand"
	"mvdan.cc/sh/v3/syntax"
)

// maxBraceFields caps the brace expansion of one word.
const maxBraceFields = 256

// maxLiteralCommands caps how many commands one script contributes.
const maxLiteralCommands = 4096

// LiteralCommands returns the literal form of every simple command anywhere
// in a script: in lists and pipelines, `if`/`for`/`while`/`case` bodies,
// functions, subshells, groups, `$(...)`, backticks, process substitutions,
// arithmetic and parameter expansions, and heredoc bodies. The command name
// must be literal (after quote removal, escapes, `$'...'` decoding and
// brace expansion); literal arguments are kept with their shell value,
// dynamic arguments are dropped.
//
// Statements are read one at a time, as a shell does: when the script has a
// syntax error, the complete statements before the error are still
// returned (bash -c runs them before it reports the error). ok is false when
// not even one statement parsed.
func LiteralCommands(script string) (cmds [][]string, ok bool) {
	if len(script) > maxScriptBytes {
		script = script[:maxScriptBytes]
	}
	stmts, ok := parseStatements(script)
	if !ok {
		return nil, false
	}
	for _, st := range stmts {
		syntax.Walk(st, func(n syntax.Node) bool {
			if len(cmds) >= maxLiteralCommands {
				return false
			}
			call, isCall := n.(*syntax.CallExpr)
			if !isCall || len(call.Args) == 0 {
				return true
			}
			name, nameOK := literalFields(call.Args[0])
			if !nameOK || len(name) == 0 {
				return true
			}
			argv := append([]string(nil), name...)
			for _, w := range call.Args[1:] {
				if fields, ok := literalFields(w); ok {
					argv = append(argv, fields...)
				}
			}
			cmds = append(cmds, argv)
			return true
		})
	}
	return cmds, true
}

// parseStatements reads statements one at a time and keeps those before
// the first syntax error. The sequence is always drained: mvdan's iterator
// panics when its consumer stops early after an error.
func parseStatements(script string) (stmts []*syntax.Stmt, ok bool) {
	defer func() {
		if recover() != nil {
			stmts, ok = nil, false
		}
	}()
	p := syntax.NewParser(syntax.Variant(syntax.LangBash))
	var firstErr error
	for st, err := range p.StmtsSeq(strings.NewReader(script)) {
		if err != nil {
			if firstErr == nil {
				firstErr = err
			}
			continue
		}
		if firstErr == nil && st != nil {
			stmts = append(stmts, st)
		}
	}
	if firstErr != nil && len(stmts) == 0 {
		return nil, false
	}
	return stmts, true
}

// literalFields returns the fields a literal word expands to (several only
// through brace expansion), or false when any part is dynamic.
func literalFields(w *syntax.Word) ([]string, bool) {
	if _, ok := literalValue(w); !ok {
		return nil, false
	}
	cp := &syntax.Word{Parts: append([]syntax.WordPart(nil), w.Parts...)}
	if !syntax.SplitBraces(cp) {
		s, _ := literalValue(w)
		return []string{s}, true
	}
	var out []string
	for ew, err := range expand.BracesSeq(nil, cp) {
		if err != nil || len(out) >= maxBraceFields {
			break
		}
		if s, ok := literalValue(ew); ok {
			out = append(out, s)
		}
	}
	if len(out) == 0 {
		s, _ := literalValue(w)
		return []string{s}, true
	}
	return out, true
}

// literalValue is the shell value of a word without expansions: quotes
// removed, backslash escapes applied, `$'...'` decoded. Brace expansion
// nodes are rendered back to text (callers expand them separately).
func literalValue(w *syntax.Word) (string, bool) {
	var b strings.Builder
	for _, part := range w.Parts {
		switch p := part.(type) {
		case *syntax.Lit:
			b.WriteString(unescapeUnquoted(p.Value))
		case *syntax.SglQuoted:
			if p.Dollar {
				b.WriteString(decodeANSIC(p.Value))
			} else {
				b.WriteString(p.Value)
			}
		case *syntax.DblQuoted:
			for _, dp := range p.Parts {
				lit, ok := dp.(*syntax.Lit)
				if !ok {
					return "", false
				}
				b.WriteString(unescapeDoubleQuoted(lit.Value))
			}
		case *syntax.BraceExp:
			var inner []string
			for _, e := range p.Elems {
				s, ok := literalValue(e)
				if !ok {
					return "", false
				}
				inner = append(inner, s)
			}
			sep := ","
			if p.Sequence {
				sep = ".."
			}
			b.WriteString("{" + strings.Join(inner, sep) + "}")
		default:
			return "", false
		}
	}
	return b.String(), true
}

// WordValue is literalValue for callers outside the package.
func WordValue(w *syntax.Word) (string, bool) { return literalValue(w) }

func unescapeUnquoted(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+1 < len(s) {
			i++
			if s[i] == '\n' {
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

func unescapeDoubleQuoted(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+1 < len(s) {
			switch s[i+1] {
			case '$', '`', '"', '\\':
				b.WriteByte(s[i+1])
				i++
				continue
			case '\n':
				i++
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// decodeANSIC decodes the body of a bash `$'...'` string.
func decodeANSIC(s string) string {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c != '\\' || i+1 >= len(s) {
			b.WriteByte(c)
			continue
		}
		i++
		switch e := s[i]; e {
		case 'a':
			b.WriteByte('\a')
		case 'b':
			b.WriteByte('\b')
		case 'e', 'E':
			b.WriteByte(0x1b)
		case 'f':
			b.WriteByte('\f')
		case 'n':
			b.WriteByte('\n')
		case 'r':
			b.WriteByte('\r')
		case 't':
			b.WriteByte('\t')
		case 'v':
			b.WriteByte('\v')
		case '\\', '\'', '"', '?':
			b.WriteByte(e)
		case 'c':
			if i+1 < len(s) {
				i++
				b.WriteByte(s[i] & 0x1f)
			}
		case 'x', 'u', 'U':
			max := map[byte]int{'x': 2, 'u': 4, 'U': 8}[e]
			j := i + 1
			for j < len(s) && j < i+1+max && isHex(s[j]) {
				j++
			}
			if j == i+1 {
				b.WriteByte('\\')
				b.WriteByte(e)
				continue
			}
			n, _ := strconv.ParseUint(s[i+1:j], 16, 32)
			if e == 'x' {
				b.WriteByte(byte(n))
			} else if utf8.ValidRune(rune(n)) {
				b.WriteRune(rune(n))
			}
			i = j - 1
		default:
			if e >= '0' && e <= '7' {
				j := i
				for j < len(s) && j < i+3 && s[j] >= '0' && s[j] <= '7' {
					j++
				}
				n, _ := strconv.ParseUint(s[i:j], 8, 16)
				b.WriteByte(byte(n))
				i = j - 1
				continue
			}
			b.WriteByte('\\')
			b.WriteByte(e)
		}
	}
	return b.String()
}

func isHex(c byte) bool {
	return c >= '0' && c <= '9' || c >= 'a' && c <= 'f' || c >= 'A' && c <= 'F'
}
