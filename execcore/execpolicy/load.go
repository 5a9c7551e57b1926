package execpolicy

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"go.starlark.net/resolve"
	"go.starlark.net/starlark"
	"go.starlark.net/syntax"

	"github.com/netproxy/netproxy/execcore/shlex"
)

// RuleExtension is the file extension of rules files.
const RuleExtension = ".rules"

// DefaultRulesFile is the file amendments are appended to, relative to a
// rules directory.
const DefaultRulesFile = "default.rules"

// maxSteps bounds the work of one rules file so a `while True` cannot hang
// execwrap or netproxy.
const maxSteps = 20_000_000

// maxFileSize bounds one rules file (a generated list of 100 000 rules is
// about 8 MiB).
const maxFileSize = 64 << 20

// LoadError is a rules-file error with its location.
type LoadError struct {
	File string
	Line int // 0 when unknown
	Msg  string
}

func (e *LoadError) Error() string {
	if e.Line > 0 {
		return fmt.Sprintf("%s:%d: %s (problem is on or around line %d)", e.File, e.Line, e.Msg, e.Line)
	}
	return fmt.Sprintf("%s: %s", e.File, e.Msg)
}

// RulesFiles lists the `*.rules` files of dir, sorted by path. A missing
// directory contributes nothing; a path that exists but is not a directory
// is an error. Symlinks to regular files are followed (upstream silently
// ignores them, which users reported as a bug).
func RulesFiles(dir string) ([]string, error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return nil, nil
		}
		return nil, fmt.Errorf("failed to read rules files from %s: %w", dir, err)
	}
	var files []string
	for _, e := range entries {
		if !strings.HasSuffix(e.Name(), RuleExtension) {
			continue
		}
		p := filepath.Join(dir, e.Name())
		st, err := os.Stat(p)
		if err != nil {
			return nil, fmt.Errorf("failed to read rules file %s: %w", p, err)
		}
		if !st.Mode().IsRegular() {
			continue
		}
		// Anyone who can write a rules file can allow any command outside
		// the sandbox: refuse world-writable files instead of trusting them.
		if st.Mode().Perm()&0o002 != 0 {
			return nil, fmt.Errorf("rules file %s is writable by every user; run chmod o-w on it", p)
		}
		files = append(files, p)
	}
	sort.Strings(files)
	return files, nil
}

// LoadDirs loads every `*.rules` file of every directory, in the order the
// directories are given and sorted by path within one directory. Any error
// (unreadable file, syntax error, invalid rule, failing example) fails the
// whole load: the caller never receives a partial policy.
func LoadDirs(dirs ...string) (*Policy, error) {
	var files []string
	seen := map[string]bool{}
	for _, d := range dirs {
		if d == "" {
			continue
		}
		clean := filepath.Clean(d)
		if seen[clean] {
			continue
		}
		seen[clean] = true
		fs, err := RulesFiles(clean)
		if err != nil {
			return nil, err
		}
		files = append(files, fs...)
	}
	return LoadFiles(files...)
}

// LoadFiles loads the given rules files in order.
func LoadFiles(files ...string) (*Policy, error) {
	l := newLoader()
	for _, f := range files {
		src, err := readBounded(f)
		if err != nil {
			return nil, &LoadError{File: f, Msg: err.Error()}
		}
		if err := l.loadSource(f, src); err != nil {
			return nil, err
		}
	}
	return l.policy(), nil
}

// LoadSource parses one rules file held in memory (used by tests, fuzzing
// and tools that embed rules).
func LoadSource(filename string, src []byte) (*Policy, error) {
	l := newLoader()
	if err := l.loadSource(filename, src); err != nil {
		return nil, err
	}
	return l.policy(), nil
}

func readBounded(path string) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	buf, err := io.ReadAll(io.LimitReader(f, maxFileSize+1))
	if err != nil {
		return nil, err
	}
	if len(buf) > maxFileSize {
		return nil, fmt.Errorf("rules file is larger than %d bytes; split it", maxFileSize)
	}
	return buf, nil
}

// pendingExamples are validated after their file has been evaluated.
type pendingExamples struct {
	rules    []PrefixRule
	match    [][]string
	notMatch [][]string
	line     int
}

type loader struct {
	rules    map[string][]PrefixRule
	network  []NetworkRule
	hostExec map[string][]string
	files    []string
	count    int

	// per file
	file    string
	pending []pendingExamples
}

func newLoader() *loader {
	return &loader{rules: map[string][]PrefixRule{}, hostExec: map[string][]string{}}
}

func (l *loader) policy() *Policy {
	return &Policy{rules: l.rules, network: l.network, hostExec: l.hostExec, files: l.files, count: l.count}
}

// ruleError carries a builtin's error with the line of its call.
type ruleError struct {
	line int
	msg  string
}

func (e *ruleError) Error() string { return e.msg }

var fileOptions = &syntax.FileOptions{
	Set:             true,
	While:           true,
	TopLevelControl: true,
	GlobalReassign:  true,
}

func (l *loader) loadSource(filename string, src []byte) error {
	l.file = filename
	l.pending = nil
	thread := &starlark.Thread{
		Name: filename,
		Load: func(*starlark.Thread, string) (starlark.StringDict, error) {
			return nil, errors.New("load() is not supported in rules files")
		},
		Print: func(*starlark.Thread, string) {},
	}
	thread.SetMaxExecutionSteps(maxSteps)
	predeclared := starlark.StringDict{
		"prefix_rule":     starlark.NewBuiltin("prefix_rule", l.prefixRule),
		"network_rule":    starlark.NewBuiltin("network_rule", l.networkRule),
		"host_executable": starlark.NewBuiltin("host_executable", l.hostExecutable),
	}
	if _, err := starlark.ExecFileOptions(fileOptions, thread, filename, src, predeclared); err != nil {
		return l.wrapStarlarkError(err)
	}
	for _, p := range l.pending {
		if err := l.validateExamples(p); err != nil {
			return err
		}
	}
	l.files = append(l.files, filename)
	return nil
}

func (l *loader) wrapStarlarkError(err error) error {
	var re *ruleError
	if errors.As(err, &re) {
		return &LoadError{File: l.file, Line: re.line, Msg: re.msg}
	}
	var se syntax.Error
	if errors.As(err, &se) {
		return &LoadError{File: l.file, Line: int(se.Pos.Line), Msg: "starlark error: " + se.Msg}
	}
	var rl resolve.ErrorList
	if errors.As(err, &rl) && len(rl) > 0 {
		return &LoadError{File: l.file, Line: int(rl[0].Pos.Line), Msg: "starlark error: " + rl[0].Msg}
	}
	var ee *starlark.EvalError
	if errors.As(err, &ee) {
		line := 0
		for i := 0; i < len(ee.CallStack); i++ {
			pos := ee.CallStack.At(i).Pos
			if pos.IsValid() && pos.Filename() == l.file {
				line = int(pos.Line)
				break
			}
		}
		return &LoadError{File: l.file, Line: line, Msg: "starlark error: " + ee.Msg}
	}
	return &LoadError{File: l.file, Msg: "starlark error: " + err.Error()}
}

func callerLine(thread *starlark.Thread) int {
	return int(thread.CallFrame(1).Pos.Line)
}

func typeName(v starlark.Value) string {
	if v == nil {
		return "NoneType"
	}
	return v.Type()
}

// optionalString unpacks an optional string argument; None means absent.
// optionalJustification reads a rule's justification= argument: absent or
// None is "", anything else must be a non-blank string. Its errors carry the
// reference's prefixes ("starlark error:", "invalid rule:").
func optionalJustification(fn string, v starlark.Value) (string, error) {
	just, present, err := optionalString(fn, "justification", v)
	if err != nil {
		return "", fmt.Errorf("starlark error: %v", err)
	}
	if present && strings.TrimSpace(just) == "" {
		return "", errors.New("invalid rule: justification cannot be empty")
	}
	return just, nil
}

func optionalString(fn, name string, v starlark.Value) (string, bool, error) {
	if v == nil || v == starlark.None {
		return "", false, nil
	}
	s, ok := starlark.AsString(v)
	if !ok {
		return "", false, fmt.Errorf("%s: for parameter %s: got %s, want string", fn, name, v.Type())
	}
	return s, true, nil
}

func listItems(v starlark.Value) ([]starlark.Value, bool) {
	switch x := v.(type) {
	case *starlark.List:
		out := make([]starlark.Value, x.Len())
		for i := range out {
			out[i] = x.Index(i)
		}
		return out, true
	case starlark.Tuple:
		return []starlark.Value(x), true
	}
	return nil, false
}

func (l *loader) prefixRule(thread *starlark.Thread, b *starlark.Builtin, args starlark.Tuple, kwargs []starlark.Tuple) (starlark.Value, error) {
	line := callerLine(thread)
	fail := func(format string, a ...any) (starlark.Value, error) {
		return nil, &ruleError{line: line, msg: fmt.Sprintf(format, a...)}
	}
	var pattern, decisionV, matchV, notMatchV, justV starlark.Value
	if err := starlark.UnpackArgs(b.Name(), args, kwargs,
		"pattern", &pattern, "decision?", &decisionV, "match?", &matchV,
		"not_match?", &notMatchV, "justification?", &justV); err != nil {
		return fail("starlark error: %v", err)
	}
	elems, ok := listItems(pattern)
	if !ok {
		return fail("invalid pattern element: pattern must be a list (got %s)", typeName(pattern))
	}
	if len(elems) == 0 {
		return fail("invalid pattern element: pattern cannot be empty")
	}
	tokens := make([]PatternToken, 0, len(elems))
	for _, e := range elems {
		if s, ok := starlark.AsString(e); ok {
			tokens = append(tokens, PatternToken{Alternatives: []string{s}})
			continue
		}
		alts, ok := listItems(e)
		if !ok {
			return fail("invalid pattern element: pattern element must be a string or list of strings (got %s)", typeName(e))
		}
		if len(alts) == 0 {
			return fail("invalid pattern element: pattern alternatives cannot be empty")
		}
		var strs []string
		for _, a := range alts {
			s, ok := starlark.AsString(a)
			if !ok {
				return fail("invalid pattern element: pattern alternative must be a string (got %s)", typeName(a))
			}
			strs = append(strs, s)
		}
		tokens = append(tokens, PatternToken{Alternatives: strs})
	}
	decision := Allow
	if ds, present, err := optionalString(b.Name(), "decision", decisionV); err != nil {
		return fail("starlark error: %v", err)
	} else if present {
		d, err := ParseDecision(ds)
		if err != nil {
			return fail("%v", err)
		}
		decision = d
	}
	just, err := optionalJustification(b.Name(), justV)
	if err != nil {
		return fail("%v", err)
	}
	match, err := parseExamples(matchV)
	if err != nil {
		return fail("%v", err)
	}
	notMatch, err := parseExamples(notMatchV)
	if err != nil {
		return fail("%v", err)
	}
	// Alternatives in the first position produce one rule per program.
	var produced []PrefixRule
	for _, prog := range tokens[0].Alternatives {
		r := PrefixRule{
			Program: prog, Rest: tokens[1:], Decision: decision,
			Justification: just, File: l.file, Line: line,
		}
		produced = append(produced, r)
		l.rules[prog] = append(l.rules[prog], r)
		l.count++
	}
	if len(match) > 0 || len(notMatch) > 0 {
		l.pending = append(l.pending, pendingExamples{rules: produced, match: match, notMatch: notMatch, line: line})
	}
	return starlark.None, nil
}

func parseExamples(v starlark.Value) ([][]string, error) {
	if v == nil || v == starlark.None {
		return nil, nil
	}
	items, ok := listItems(v)
	if !ok {
		return nil, fmt.Errorf("invalid example: examples must be a list (got %s)", typeName(v))
	}
	var out [][]string
	for _, it := range items {
		if s, ok := starlark.AsString(it); ok {
			if s == "" {
				return nil, errors.New("invalid example: example cannot be an empty string")
			}
			toks, err := shlex.Split(s)
			if err != nil {
				return nil, errors.New("invalid example: example string has invalid shell syntax")
			}
			if len(toks) == 0 {
				return nil, errors.New("invalid example: example cannot be an empty string")
			}
			out = append(out, toks)
			continue
		}
		list, ok := listItems(it)
		if !ok {
			return nil, fmt.Errorf("invalid example: example must be a string or list of strings (got %s)", typeName(it))
		}
		if len(list) == 0 {
			return nil, errors.New("invalid example: example cannot be an empty list")
		}
		var toks []string
		for _, t := range list {
			s, ok := starlark.AsString(t)
			if !ok {
				return nil, fmt.Errorf("invalid example: example tokens must be strings (got %s)", typeName(t))
			}
			toks = append(toks, s)
		}
		out = append(out, toks)
	}
	return out, nil
}

// validateExamples checks one prefix_rule call's examples against only the
// rules that call produced, plus every host executable known so far.
func (l *loader) validateExamples(p pendingExamples) error {
	tmp := &Policy{rules: map[string][]PrefixRule{}, hostExec: l.hostExec}
	for _, r := range p.rules {
		tmp.rules[r.Program] = append(tmp.rules[r.Program], r)
	}
	opts := MatchOptions{ResolveHostExecutables: true}
	for _, ex := range p.notMatch {
		if ms := tmp.Matches(ex, opts); len(ms) > 0 {
			rule := p.rules[0]
			for _, r := range p.rules {
				if r.Program == ex[0] || filepath.Base(ex[0]) == r.Program {
					rule = r
					break
				}
			}
			return &LoadError{File: l.file, Line: p.line, Msg: fmt.Sprintf(
				"expected example to not match rule `%s`: %s", rule, shlex.JoinLossy(ex))}
		}
	}
	var unmatched []string
	for _, ex := range p.match {
		if ms := tmp.Matches(ex, opts); len(ms) == 0 {
			unmatched = append(unmatched, fmt.Sprintf("%q", shlex.JoinLossy(ex)))
		}
	}
	if len(unmatched) > 0 {
		var rs []string
		for _, r := range p.rules {
			rs = append(rs, r.String())
		}
		return &LoadError{File: l.file, Line: p.line, Msg: fmt.Sprintf(
			"expected every example to match at least one rule. rules: [%s]; unmatched examples: [%s]",
			strings.Join(rs, ", "), strings.Join(unmatched, ", "))}
	}
	return nil
}

func (l *loader) networkRule(thread *starlark.Thread, b *starlark.Builtin, args starlark.Tuple, kwargs []starlark.Tuple) (starlark.Value, error) {
	line := callerLine(thread)
	fail := func(format string, a ...any) (starlark.Value, error) {
		return nil, &ruleError{line: line, msg: fmt.Sprintf(format, a...)}
	}
	var host, protocol, decision string
	var justV starlark.Value
	if err := starlark.UnpackArgs(b.Name(), args, kwargs,
		"host", &host, "protocol", &protocol, "decision", &decision, "justification?", &justV); err != nil {
		return fail("starlark error: %v", err)
	}
	just, err := optionalJustification(b.Name(), justV)
	if err != nil {
		return fail("%v", err)
	}
	h, err := NormalizeNetworkRuleHost(host)
	if err != nil {
		return fail("invalid rule: %v", err)
	}
	proto, err := ParseNetworkProtocol(protocol)
	if err != nil {
		return fail("invalid rule: %v", err)
	}
	dec, err := ParseNetworkDecision(decision)
	if err != nil {
		return fail("%v", err)
	}
	l.network = append(l.network, NetworkRule{
		Host: h, Protocol: proto, Decision: dec, Justification: just, File: l.file, Line: line,
	})
	return starlark.None, nil
}

func (l *loader) hostExecutable(thread *starlark.Thread, b *starlark.Builtin, args starlark.Tuple, kwargs []starlark.Tuple) (starlark.Value, error) {
	line := callerLine(thread)
	fail := func(format string, a ...any) (starlark.Value, error) {
		return nil, &ruleError{line: line, msg: fmt.Sprintf(format, a...)}
	}
	var name string
	var pathsV starlark.Value
	if err := starlark.UnpackArgs(b.Name(), args, kwargs, "name", &name, "paths", &pathsV); err != nil {
		return fail("starlark error: %v", err)
	}
	if name == "" {
		return fail("invalid rule: host_executable name cannot be empty")
	}
	if strings.ContainsAny(name, `/\`) || name == "." || name == ".." {
		return fail("invalid rule: host_executable name must be a bare executable name (got %s)", name)
	}
	items, ok := listItems(pathsV)
	if !ok {
		return fail("invalid rule: host_executable paths must be a list of strings (got %s)", typeName(pathsV))
	}
	paths := []string{}
	seen := map[string]bool{}
	for _, it := range items {
		p, ok := starlark.AsString(it)
		if !ok {
			return fail("invalid rule: host_executable paths must be strings (got %s)", typeName(it))
		}
		abs := p
		if strings.HasPrefix(p, "~/") {
			home, err := os.UserHomeDir()
			if err != nil || home == "" {
				return fail("invalid rule: host_executable path %s uses `~/` but the home directory is unknown", p)
			}
			abs = filepath.Join(home, p[2:])
		}
		if !filepath.IsAbs(abs) {
			return fail("invalid rule: host_executable paths must be absolute or use `~/...` home-relative syntax (got %s)", p)
		}
		abs = filepath.Clean(abs)
		if filepath.Base(abs) != name {
			return fail("invalid rule: host_executable path `%s` must have basename `%s`", p, name)
		}
		if !seen[abs] {
			seen[abs] = true
			paths = append(paths, abs)
		}
	}
	// The last definition of a name wins, across files too.
	l.hostExec[name] = paths
	return starlark.None, nil
}

func sortTokenLists(lists [][]string) {
	sort.Slice(lists, func(i, j int) bool {
		a, b := lists[i], lists[j]
		for k := 0; k < len(a) && k < len(b); k++ {
			if a[k] != b[k] {
				return a[k] < b[k]
			}
		}
		return len(a) < len(b)
	})
}
