// Package execpolicy is the one Starlark rules language of netproxy and
// execwrap: it loads `*.rules` files (prefix_rule, network_rule,
// host_executable), validates them with errors naming file:line, matches
// argvs against prefix rules, and appends amendments atomically.
//
// It owns rule storage and matching only. It must never run a command, never
// decide an approval requirement on its own (that is execcore's job), and
// never hand out a partially loaded policy: a load error returns no Policy.
package execpolicy

import (
	"fmt"
	"path/filepath"
	"sort"
	"strings"
	"unicode/utf8"
)

// Decision is the verdict of a prefix rule; the order is the strictness
// order (Allow < Prompt < Forbidden).
type Decision int

const (
	Allow Decision = iota
	Prompt
	Forbidden
)

// String returns the lower-case name used in rules files and JSON.
func (d Decision) String() string {
	switch d {
	case Allow:
		return "allow"
	case Prompt:
		return "prompt"
	case Forbidden:
		return "forbidden"
	}
	return fmt.Sprintf("decision(%d)", int(d))
}

// MarshalText renders the decision as its lower-case name.
func (d Decision) MarshalText() ([]byte, error) { return []byte(d.String()), nil }

// ParseDecision accepts exactly "allow", "prompt" or "forbidden".
func ParseDecision(s string) (Decision, error) {
	switch s {
	case "allow":
		return Allow, nil
	case "prompt":
		return Prompt, nil
	case "forbidden":
		return Forbidden, nil
	}
	return Allow, fmt.Errorf("invalid decision: %s", s)
}

// PatternToken is one position of a prefix pattern: a single literal or a
// set of alternatives, any of which matches.
type PatternToken struct {
	Alternatives []string
}

// Matches reports whether tok is one of the alternatives.
func (p PatternToken) Matches(tok string) bool {
	for _, a := range p.Alternatives {
		if a == tok {
			return true
		}
	}
	return false
}

// String renders a single token as itself and alternatives as [a|b].
func (p PatternToken) String() string {
	if len(p.Alternatives) == 1 {
		return p.Alternatives[0]
	}
	return "[" + strings.Join(p.Alternatives, "|") + "]"
}

// PrefixRule matches an argv whose first token equals Program and whose next
// tokens match Rest position by position.
type PrefixRule struct {
	Program       string
	Rest          []PatternToken
	Decision      Decision
	Justification string
	File          string
	Line          int
}

func (r PrefixRule) String() string {
	parts := []string{r.Program}
	for _, t := range r.Rest {
		parts = append(parts, t.String())
	}
	return fmt.Sprintf("prefix_rule(%q, %s)", parts, r.Decision)
}

// match returns the matched prefix of cmd, or nil.
func (r PrefixRule) match(cmd []string) []string {
	if len(cmd) < 1+len(r.Rest) || cmd[0] != r.Program {
		return nil
	}
	for i, t := range r.Rest {
		if !t.Matches(cmd[1+i]) {
			return nil
		}
	}
	return append([]string(nil), cmd[:1+len(r.Rest)]...)
}

// MatchKind tells an explicit rule match from a heuristics fallback.
type MatchKind string

const (
	KindPrefix     MatchKind = "prefix"
	KindHeuristics MatchKind = "heuristics"
)

// RuleMatch is one entry of an evaluation.
type RuleMatch struct {
	Kind MatchKind
	// MatchedPrefix is the command's tokens covered by the rule (prefix).
	MatchedPrefix []string
	// Command is the evaluated argv (heuristics).
	Command         []string
	Decision        Decision
	Justification   string
	ResolvedProgram string
	File            string
	Line            int
}

// Evaluation is the strictest decision over all matches, and the matches in
// command order.
type Evaluation struct {
	Decision     Decision
	MatchedRules []RuleMatch
}

// IsPolicyMatch reports whether any explicit rule matched.
func (e Evaluation) IsPolicyMatch() bool {
	for _, m := range e.MatchedRules {
		if m.Kind == KindPrefix {
			return true
		}
	}
	return false
}

// Policy is an immutable, fully validated set of rules.
type Policy struct {
	rules    map[string][]PrefixRule
	network  []NetworkRule
	hostExec map[string][]string
	files    []string
	count    int
}

// Empty returns a policy without rules.
func Empty() *Policy {
	return &Policy{rules: map[string][]PrefixRule{}, hostExec: map[string][]string{}}
}

// Files lists the rules files the policy was loaded from, in load order.
func (p *Policy) Files() []string { return append([]string(nil), p.files...) }

// PrefixRuleCount is the number of stored prefix rules (after first-token
// alternative expansion).
func (p *Policy) PrefixRuleCount() int { return p.count }

// NetworkRules returns the network_rule entries in load order.
func (p *Policy) NetworkRules() []NetworkRule {
	return append([]NetworkRule(nil), p.network...)
}

// NetworkDomains compiles the network rules into ordered allow and deny
// host lists: the last word on a host wins; prompt rules are ignored.
func (p *Policy) NetworkDomains() (allowed, denied []string) {
	remove := func(list []string, h string) []string {
		out := list[:0]
		for _, x := range list {
			if x != h {
				out = append(out, x)
			}
		}
		return out
	}
	for _, r := range p.network {
		switch r.Decision {
		case "allow":
			denied = remove(denied, r.Host)
			allowed = append(remove(allowed, r.Host), r.Host)
		case "deny":
			allowed = remove(allowed, r.Host)
			denied = append(remove(denied, r.Host), r.Host)
		}
	}
	return allowed, denied
}

// HostExecutable returns the allowed absolute paths for a bare program
// name, and whether a host_executable entry exists for it.
func (p *Policy) HostExecutable(name string) ([]string, bool) {
	paths, ok := p.hostExec[name]
	return append([]string(nil), paths...), ok
}

// RulesFor returns the prefix rules stored under a program name.
func (p *Policy) RulesFor(program string) []PrefixRule {
	return append([]PrefixRule(nil), p.rules[program]...)
}

// AllowedPrefixes returns every Allow prefix rule as a token list, sorted
// and de-duplicated (alternatives render as [a|b]).
func (p *Policy) AllowedPrefixes() [][]string {
	seen := map[string]bool{}
	var out [][]string
	for _, list := range p.rules {
		for _, r := range list {
			if r.Decision != Allow {
				continue
			}
			toks := []string{r.Program}
			for _, t := range r.Rest {
				toks = append(toks, t.String())
			}
			key := strings.Join(toks, "\x00")
			if !seen[key] {
				seen[key] = true
				out = append(out, toks)
			}
		}
	}
	sortTokenLists(out)
	return out
}

// WithPrefixRule returns a copy of p with one more rule appended (used to
// test a proposed amendment without touching p).
func (p *Policy) WithPrefixRule(r PrefixRule) *Policy {
	q := p.shallowCopy()
	q.rules[r.Program] = append(append([]PrefixRule(nil), q.rules[r.Program]...), r)
	q.count++
	return q
}

// WithoutAllowPrefixRules returns a copy without Allow prefix rules (the
// reference's IgnoreForCyberModel filter); network rules and host
// executables are kept.
func (p *Policy) WithoutAllowPrefixRules() *Policy {
	q := p.shallowCopy()
	q.count = 0
	for prog, list := range p.rules {
		var kept []PrefixRule
		for _, r := range list {
			if r.Decision != Allow {
				kept = append(kept, r)
			}
		}
		if len(kept) > 0 {
			q.rules[prog] = kept
			q.count += len(kept)
		} else {
			delete(q.rules, prog)
		}
	}
	return q
}

func (p *Policy) shallowCopy() *Policy {
	q := &Policy{
		rules:    make(map[string][]PrefixRule, len(p.rules)+1),
		network:  p.network,
		hostExec: p.hostExec,
		files:    p.files,
		count:    p.count,
	}
	for k, v := range p.rules {
		q.rules[k] = v
	}
	return q
}

// MatchOptions tunes matching.
type MatchOptions struct {
	// ResolveHostExecutables enables the basename fallback for absolute
	// program paths (gated by host_executable entries).
	ResolveHostExecutables bool
	// TrustedPath, when set, restricts what the basename fallback may
	// allow: for a path no host_executable entry lists, an allow rule on
	// its basename applies only when TrustedPath(path) is true (the
	// system's own program, SPEC §6.2). Prompt and forbidden rules always
	// apply: a stricter decision is never lost.
	TrustedPath func(path string) bool
}

// Matches returns the explicit rule matches for one argv: rules stored under
// cmd[0] verbatim first; only when none match, and cmd[0] is an absolute
// path, the rules of its basename (if a host_executable entry for that name
// exists, the path must be one of its listed paths; otherwise, with
// opts.TrustedPath set, an untrusted path keeps only the prompt and
// forbidden matches).
func (p *Policy) Matches(cmd []string, opts MatchOptions) []RuleMatch {
	if len(cmd) == 0 {
		return nil
	}
	if out := p.matchExact(cmd, ""); len(out) > 0 {
		return out
	}
	if !opts.ResolveHostExecutables {
		return nil
	}
	prog := cmd[0]
	// Only already-absolute paths fall back to basename rules: a relative
	// `./git` is a workspace file and must not inherit the trust of `git`.
	if !filepath.IsAbs(prog) {
		return nil
	}
	abs := filepath.Clean(prog)
	base := filepath.Base(abs)
	if base == "" || base == "/" || base == "." || base == prog {
		return nil
	}
	if _, ok := p.rules[base]; !ok {
		return nil
	}
	if paths, ok := p.hostExec[base]; ok {
		listed := false
		for _, pth := range paths {
			if pth == abs {
				listed = true
				break
			}
		}
		if !listed {
			return nil
		}
	} else if opts.TrustedPath != nil && !opts.TrustedPath(prog) {
		// An arbitrary path (`/proc/self/cwd/ls`, a workspace file) is
		// not the program a bare-name allow rule names.
		var strict []RuleMatch
		for _, m := range p.matchExact(append([]string{base}, cmd[1:]...), abs) {
			if m.Decision != Allow {
				strict = append(strict, m)
			}
		}
		return strict
	}
	rewritten := append([]string{base}, cmd[1:]...)
	return p.matchExact(rewritten, abs)
}

func (p *Policy) matchExact(cmd []string, resolved string) []RuleMatch {
	var out []RuleMatch
	for _, r := range p.rules[cmd[0]] {
		if pre := r.match(cmd); pre != nil {
			out = append(out, RuleMatch{
				Kind: KindPrefix, MatchedPrefix: pre, Decision: r.Decision,
				Justification: r.Justification, ResolvedProgram: resolved,
				File: r.File, Line: r.Line,
			})
		}
	}
	return out
}

// Fallback decides an argv that no explicit rule matched.
type Fallback func(cmd []string) Decision

// Check evaluates several argvs (the lowered commands of one script):
// matches are concatenated in command order and the strictest decision
// wins. With a fallback, an unmatched argv yields one heuristics match;
// without one it yields nothing.
func (p *Policy) Check(cmds [][]string, opts MatchOptions, fallback Fallback) Evaluation {
	var ev Evaluation
	for _, cmd := range cmds {
		ms := p.Matches(cmd, opts)
		if len(ms) == 0 && fallback != nil {
			ms = []RuleMatch{{Kind: KindHeuristics, Command: append([]string(nil), cmd...), Decision: fallback(cmd)}}
		}
		ev.MatchedRules = append(ev.MatchedRules, ms...)
	}
	for _, m := range ev.MatchedRules {
		if m.Decision > ev.Decision {
			ev.Decision = m.Decision
		}
	}
	return ev
}

// Limits of FormatAllowPrefixes.
const (
	maxAllowPrefixes     = 100
	maxAllowPrefixChars  = 5000
	allowPrefixTruncated = "...\n[Some commands were truncated]"
)

// FormatAllowPrefixes renders approved prefixes for display (for example
// to tell a model which commands run without approval): sorted by token
// count, then total length, then lexicographically; at most 100 lines of
// `- ["tok", "tok"]`, at most 5 000 characters; a truncation appends
// "...\n[Some commands were truncated]".
func FormatAllowPrefixes(prefixes [][]string) string {
	sorted := append([][]string(nil), prefixes...)
	total := func(p []string) int {
		n := 0
		for _, t := range p {
			n += len(t)
		}
		return n
	}
	sort.SliceStable(sorted, func(i, j int) bool {
		a, b := sorted[i], sorted[j]
		if len(a) != len(b) {
			return len(a) < len(b)
		}
		if ta, tb := total(a), total(b); ta != tb {
			return ta < tb
		}
		return strings.Join(a, "\x00") < strings.Join(b, "\x00")
	})
	truncated := false
	if len(sorted) > maxAllowPrefixes {
		sorted, truncated = sorted[:maxAllowPrefixes], true
	}
	lines := make([]string, len(sorted))
	for i, p := range sorted {
		q := make([]string, len(p))
		for k, t := range p {
			q[k] = jsonString(t)
		}
		lines[i] = "- [" + strings.Join(q, ", ") + "]"
	}
	out := strings.Join(lines, "\n")
	if len(out) > maxAllowPrefixChars {
		cut := maxAllowPrefixChars
		for cut > 0 && !utf8.RuneStart(out[cut]) {
			cut--
		}
		out, truncated = out[:cut], true
	}
	if truncated {
		out += allowPrefixTruncated
	}
	return out
}
