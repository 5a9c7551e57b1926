package shellparse

import (
	"fmt"
	"strings"

	"mvdan.cc/sh/v3/syntax"
)

// maxScriptBytes bounds what is parsed; a longer script is never lowered
// (it falls back to the whole wrapper argv, which is the safe direction).
const maxScriptBytes = 1 << 20

// Parse parses a script with the bash grammar (also used for zsh and sh,
// as the reference does), keeping comments so they can be rejected.
func Parse(script string) (f *syntax.File, err error) {
	defer func() {
		// A parser panic on hostile input is a parse error (fail closed:
		// the script is then evaluated whole).
		if r := recover(); r != nil {
			f, err = nil, fmt.Errorf("shell parser failed: %v", r)
		}
	}()
	p := syntax.NewParser(syntax.Variant(syntax.LangBash), syntax.KeepComments(true))
	return p.Parse(strings.NewReader(script), "")
}

// PlainCommands is the strict word-only lowering: a script made only of
// simple commands of plain words, joined by `&&`, `||`, `;`, `|` or
// newlines, becomes one argv per command in source order. ok is false for
// anything else: parse errors, redirections, assignments, expansions of
// any kind, subshells, groups, control flow, comments, background `&`,
// `!`, `|&`. The result may be empty (an empty or blank script).
//
// Words are hardened (reference profile R3, recommended): an unquoted word
// must not start with `=` or contain `{ } * ? [ ] \ ~ ^ # $` or a backtick,
// and a double-quoted string must not hold a backslash escape of `$`, a
// backtick, `"`, `\` or a newline. So every lowered word is exactly the
// string the shell will pass to the program: no expansion, no unescaping.
func PlainCommands(script string) ([][]string, bool) {
	if len(script) > maxScriptBytes {
		return nil, false
	}
	f, err := Parse(script)
	if err != nil {
		return nil, false
	}
	if len(f.Last) > 0 {
		return nil, false
	}
	var out [][]string
	for _, st := range f.Stmts {
		if !lowerStmt(st, &out) {
			return nil, false
		}
	}
	return out, true
}

func lowerStmt(st *syntax.Stmt, out *[][]string) bool {
	if st == nil || len(st.Comments) > 0 || st.Negated || st.Background || st.Coprocess || st.Disown || len(st.Redirs) > 0 {
		return false
	}
	switch c := st.Cmd.(type) {
	case *syntax.CallExpr:
		if len(c.Assigns) > 0 || len(c.Args) == 0 {
			return false
		}
		argv := make([]string, 0, len(c.Args))
		for i, w := range c.Args {
			s, ok := plainWord(w, i == 0)
			if !ok {
				return false
			}
			argv = append(argv, s)
		}
		*out = append(*out, argv)
		return true
	case *syntax.BinaryCmd:
		switch c.Op {
		case syntax.AndStmt, syntax.OrStmt, syntax.Pipe:
		default:
			return false
		}
		return lowerStmt(c.X, out) && lowerStmt(c.Y, out)
	default:
		return false
	}
}

// hardenedUnquoted lists the bytes an unquoted plain word must not hold.
const hardenedUnquoted = "{}*?[]\\~^#$`"

// plainWord returns the literal value of a word made of unquoted text,
// single-quoted and double-quoted strings without expansions. The command
// name must be one unquoted word (tree-sitter's command_name rule).
func plainWord(w *syntax.Word, isName bool) (string, bool) {
	if len(w.Parts) == 0 {
		return "", false
	}
	if isName {
		if len(w.Parts) != 1 {
			return "", false
		}
		if _, ok := w.Parts[0].(*syntax.Lit); !ok {
			return "", false
		}
	}
	var b strings.Builder
	for i, part := range w.Parts {
		switch p := part.(type) {
		case *syntax.Lit:
			if elided(p) || strings.ContainsAny(p.Value, hardenedUnquoted) {
				return "", false
			}
			if i == 0 && strings.HasPrefix(p.Value, "=") {
				return "", false
			}
			b.WriteString(p.Value)
		case *syntax.SglQuoted:
			if p.Dollar {
				return "", false
			}
			b.WriteString(p.Value)
		case *syntax.DblQuoted:
			if p.Dollar {
				return "", false
			}
			for _, dp := range p.Parts {
				lit, ok := dp.(*syntax.Lit)
				if !ok {
					return "", false
				}
				if elided(lit) || hasSpecialDoubleQuoteEscape(lit.Value) {
					return "", false
				}
				b.WriteString(lit.Value)
			}
		default:
			return "", false
		}
	}
	return b.String(), true
}

// elided reports a literal whose value is shorter than its source text: the
// parser dropped a backslash-newline line continuation.
func elided(l *syntax.Lit) bool {
	return l.ValuePos.IsValid() && l.ValueEnd.IsValid() && int(l.ValueEnd.Offset()-l.ValuePos.Offset()) != len(l.Value)
}

// hasSpecialDoubleQuoteEscape reports a backslash that the shell would
// consume inside double quotes.
func hasSpecialDoubleQuoteEscape(s string) bool {
	for i := 0; i+1 < len(s); i++ {
		if s[i] == '\\' {
			switch s[i+1] {
			case '$', '`', '"', '\\', '\n':
				return true
			}
		}
	}
	return false
}

// HeredocPrefix is the reference's single-command heredoc lowering: a script
// of exactly one simple command whose name and arguments are plain unquoted
// words, with at least one `<<`/`<<-` heredoc, no other redirection (no file
// redirect, no here-string), no assignment, and a heredoc body without
// expansions or substitutions. It returns the command's words.
func HeredocPrefix(script string) ([]string, bool) {
	if len(script) > maxScriptBytes {
		return nil, false
	}
	f, err := Parse(script)
	if err != nil || len(f.Stmts) != 1 {
		return nil, false
	}
	st := f.Stmts[0]
	if st.Negated || st.Background || st.Coprocess || st.Disown {
		return nil, false
	}
	call, ok := st.Cmd.(*syntax.CallExpr)
	if !ok || len(call.Assigns) > 0 || len(call.Args) == 0 {
		return nil, false
	}
	heredoc := false
	for _, r := range st.Redirs {
		switch r.Op {
		case syntax.Hdoc, syntax.DashHdoc:
			heredoc = true
			if r.Hdoc != nil && !onlyLiterals(r.Hdoc) {
				return nil, false
			}
		default:
			return nil, false
		}
	}
	if !heredoc {
		return nil, false
	}
	words := make([]string, 0, len(call.Args))
	for _, w := range call.Args {
		if len(w.Parts) != 1 {
			return nil, false
		}
		lit, ok := w.Parts[0].(*syntax.Lit)
		if !ok || elided(lit) || strings.ContainsAny(lit.Value, hardenedUnquoted) || strings.HasPrefix(lit.Value, "=") {
			return nil, false
		}
		words = append(words, lit.Value)
	}
	return words, true
}

// onlyLiterals reports whether a heredoc body holds plain text only: an
// unquoted delimiter lets the body run `$(...)`, arithmetic and parameter
// expansions, which the single-command prefix would hide.
func onlyLiterals(w *syntax.Word) bool {
	for _, p := range w.Parts {
		if _, ok := p.(*syntax.Lit); !ok {
			return false
		}
	}
	return true
}

// Origin tells which lowering produced the commands.
type Origin string

const OriginGeneric Origin = "generic"

// Projection is projection B: the commands the exec policy evaluates.
type Projection struct {
	Commands           [][]string
	UsedComplexParsing bool
	Origin             Origin
}

// CommandsForExecPolicy lowers a handler argv: a bash-like wrapper whose
// script is plain words becomes one argv per command; a single literal
// command with a heredoc becomes its words (used_complex_parsing); anything
// else is the whole argv as one command.
//
// Only a trusted shell (see Trust) is a wrapper.
func CommandsForExecPolicy(argv []string, tr Trust) Projection {
	if w, ok := ExtractWrapper(argv, tr); ok {
		if cmds, ok := PlainCommands(w.Script); ok && len(cmds) > 0 {
			return Projection{Commands: cmds, Origin: OriginGeneric}
		}
		if prefix, ok := HeredocPrefix(w.Script); ok {
			return Projection{Commands: [][]string{prefix}, UsedComplexParsing: true, Origin: OriginGeneric}
		}
	}
	return Projection{Commands: [][]string{append([]string(nil), argv...)}, Origin: OriginGeneric}
}

// ShellScriptSentinel is the first token of the approval identity of any
// shell script that is not a single plain command.
const ShellScriptSentinel = "__shell_script__"

// PowerShellScriptSentinel is the same for PowerShell wrappers.
const PowerShellScriptSentinel = "__powershell_script__"

// CanonicalizeForApproval is projection C's command: a single plain command
// is unwrapped to its argv (dropping the shell path and -c/-lc); any other
// bash-like wrapper becomes [__shell_script__, flag, script]; a PowerShell
// wrapper becomes [__powershell_script__, script]; other argvs are kept.
// Only a trusted shell (see Trust) is unwrapped: the shell of any other
// argv stays part of the identity.
func CanonicalizeForApproval(argv []string, tr Trust) []string {
	if w, ok := ExtractWrapper(argv, tr); ok {
		if cmds, ok := PlainCommands(w.Script); ok && len(cmds) == 1 {
			return cmds[0]
		}
		return []string{ShellScriptSentinel, w.Flag, w.Script}
	}
	if script, ok := powerShellScript(argv, tr); ok {
		return []string{PowerShellScriptSentinel, script}
	}
	return append([]string(nil), argv...)
}

// powerShellScript recognises `pwsh|powershell [-NoLogo|-NoProfile]...
// -Command|-c SCRIPT` with a trusted program word.
func powerShellScript(argv []string, tr Trust) (string, bool) {
	if len(argv) < 3 {
		return "", false
	}
	if name, ok := tr.Program(argv[0]); !ok || DetectShellType(name) != PowerShell {
		return "", false
	}
	for i := 1; i < len(argv); i++ {
		switch strings.ToLower(argv[i]) {
		case "-nologo", "-noprofile":
			continue
		case "-command", "-c":
			if i+1 < len(argv) {
				return argv[i+1], true
			}
			return "", false
		default:
			return "", false
		}
	}
	return "", false
}
