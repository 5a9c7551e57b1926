package hostpolicy

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"strings"

	"github.com/netproxy/netproxy/hostpolicy/hostname"
)

// Request rules (SPEC §3.10): [[network.requests]] refine a host the chain
// (or a reviewer) allowed, by method and path. They never allow a host: the
// request stage runs after the decider and only on an allowed decision.

// Actions of a request rule.
const (
	ActionAllow = "allow"
	ActionDeny  = "deny"
	ActionAsk   = "ask"
)

// RequestRule is one [[network.requests]] table as written.
type RequestRule struct {
	Hosts   []string // patterns of §3.2, ports allowed
	Methods []string // empty: any method
	Paths   []string // empty: any path; `*` one segment, `**` any number
	Action  string   // allow | deny | ask
	Message string   // the client-facing message ("" → the default)
	// Key names the rule in errors, e.g. "network.requests[2]".
	Key string
}

// RuleError is one problem of a request rule: the key it names
// ("network.requests[2].paths[0]") and what is wrong.
type RuleError struct{ Key, Msg string }

func (e RuleError) Error() string { return e.Key + ": " + e.Msg }

// CheckRequestRule validates one rule exactly as Build does; config
// validation calls it so that both agree.
func CheckRequestRule(r RequestRule) []RuleError {
	_, errs := compileRule(r, 0)
	return errs
}

// requestRule is a compiled rule.
type requestRule struct {
	index   int
	action  string
	message string
	methods []string // upper case; nil: any
	paths   [][]string
}

// hostRef ties a rule to one of its host patterns' port scope.
type hostRef struct {
	rule  int
	ports hostname.PortRange
}

// requestRules is the compiled set, indexed by host like the list matcher:
// exact names in a map, `*.d`/`**.d` by their domain (probed once per
// label of the request's host), and only globs, `*` and address prefixes
// scanned (there are few). A lookup therefore costs the same for 10 rules
// or 100 000.
type requestRules struct {
	rules    []requestRule
	exact    map[string][]hostRef
	sub      map[string][]hostRef // *.d: strict subdomains of d
	apexSub  map[string][]hostRef // **.d: d and its subdomains
	globs    []globRef
	prefixes []prefixRef
}

type globRef struct {
	p   hostname.Pattern
	ref hostRef
}

type prefixRef struct {
	p   netip.Prefix
	ref hostRef
}

// Len is the number of rules.
func (rr *requestRules) Len() int {
	if rr == nil {
		return 0
	}
	return len(rr.rules)
}

func compileRule(r RequestRule, index int) (requestRule, []RuleError) {
	var kerrs []RuleError
	bad := func(key, format string, a ...any) {
		kerrs = append(kerrs, RuleError{Key: r.Key + key, Msg: fmt.Sprintf(format, a...)})
	}
	out := requestRule{index: index, action: r.Action, message: r.Message}
	switch r.Action {
	case ActionAllow, ActionDeny, ActionAsk:
	case "":
		bad(".action", `missing; write "allow", "deny" or "ask"`)
	default:
		bad(".action", `%q is not "allow", "deny" or "ask"`, r.Action)
	}
	if len(r.Hosts) == 0 {
		bad(".hosts", "missing; a request rule names the hosts it refines (patterns of the domain lists, ports allowed)")
	}
	for i, h := range r.Hosts {
		if _, err := parseRuleHost(h); err != nil {
			bad(fmt.Sprintf(".hosts[%d]", i), "%v", err)
		}
	}
	for i, m := range r.Methods {
		if m == "" || strings.IndexFunc(m, func(c rune) bool { return !isTokenChar(c) }) >= 0 {
			bad(fmt.Sprintf(".methods[%d]", i), "%q is not an HTTP method (a token such as POST)", m)
			continue
		}
		out.methods = append(out.methods, strings.ToUpper(m))
	}
	for i, p := range r.Paths {
		segs, err := compilePathPattern(p)
		if err != nil {
			bad(fmt.Sprintf(".paths[%d]", i), "%v", err)
			continue
		}
		out.paths = append(out.paths, segs)
	}
	return out, kerrs
}

func isTokenChar(c rune) bool {
	return c < 0x7f && c > ' ' && !strings.ContainsRune(`"(),/:;<=>?@[\]{}`, c)
}

// ruleHost is one parsed host entry of a rule.
type ruleHost struct {
	pattern   hostname.Pattern
	prefix    netip.Prefix
	hasPrefix bool
	ports     hostname.PortRange
}

func parseRuleHost(raw string) (ruleHost, error) {
	pe, err := parseEntry(raw, EntryAllow)
	if err != nil {
		return ruleHost{}, err
	}
	h := ruleHost{ports: pe.ports}
	if pe.pattern != nil {
		h.pattern = *pe.pattern
	} else {
		h.prefix, h.hasPrefix = pe.prefix, true
	}
	return h, nil
}

// buildRequestRules compiles rules; errors name each rule's key.
func buildRequestRules(rules []RequestRule) (*requestRules, []error) {
	if len(rules) == 0 {
		return nil, nil
	}
	rr := &requestRules{exact: map[string][]hostRef{}, sub: map[string][]hostRef{}, apexSub: map[string][]hostRef{}}
	var errs []error
	for i, r := range rules {
		if r.Key == "" {
			r.Key = fmt.Sprintf("network.requests[%d]", i)
		}
		c, kerrs := compileRule(r, i)
		for _, ke := range kerrs {
			errs = append(errs, ke)
		}
		rr.rules = append(rr.rules, c)
		for _, raw := range r.Hosts {
			h, err := parseRuleHost(raw)
			if err != nil {
				continue
			}
			ref := hostRef{rule: i, ports: h.ports}
			if h.hasPrefix {
				rr.prefixes = append(rr.prefixes, prefixRef{p: h.prefix, ref: ref})
				continue
			}
			switch h.pattern.Kind {
			case hostname.Exact:
				rr.exact[h.pattern.Domain] = append(rr.exact[h.pattern.Domain], ref)
			case hostname.Subdomains:
				rr.sub[h.pattern.Domain] = append(rr.sub[h.pattern.Domain], ref)
			case hostname.ApexAndSubdomains:
				rr.apexSub[h.pattern.Domain] = append(rr.apexSub[h.pattern.Domain], ref)
			default:
				rr.globs = append(rr.globs, globRef{p: h.pattern, ref: ref})
			}
		}
	}
	return rr, errs
}

// forHost calls fn with every rule (by index, in no particular order, a
// rule possibly more than once) one of whose host entries matches host on
// port. It stops when fn returns false.
func (rr *requestRules) forHost(host string, port uint16, fn func(int) bool) {
	if rr == nil {
		return
	}
	each := func(refs []hostRef) bool {
		for _, r := range refs {
			if r.ports.Contains(port) && !fn(r.rule) {
				return false
			}
		}
		return true
	}
	if !each(rr.exact[host]) || !each(rr.apexSub[host]) {
		return
	}
	// Parents of host: a.b.c → b.c → c.
	for d := host; ; {
		i := strings.IndexByte(d, '.')
		if i < 0 {
			break
		}
		d = d[i+1:]
		if !each(rr.sub[d]) || !each(rr.apexSub[d]) {
			return
		}
	}
	for _, g := range rr.globs {
		if g.ref.ports.Contains(port) && g.p.Match(host) && !fn(g.ref.rule) {
			return
		}
	}
	if len(rr.prefixes) > 0 {
		if a, ok := parseLiteral(host); ok {
			a = a.WithZone("").Unmap()
			for _, p := range rr.prefixes {
				if p.ref.ports.Contains(port) && p.p.Contains(a) && !fn(p.ref.rule) {
					return
				}
			}
		}
	}
}

// HasRules reports whether any request rule names host on port: such a
// host is intercepted on CONNECT and SOCKS5 port 443 in every mode.
func (s *Snapshot) HasRules(host string, port uint16) bool {
	found := false
	s.requests.forHost(host, port, func(int) bool { found = true; return false })
	return found
}

// RequestRuleCount is the number of request rules.
func (s *Snapshot) RequestRuleCount() int { return s.requests.Len() }

// ruleMatch is what the rules say about one request.
type ruleMatch struct {
	action  string // "" when none matched
	rule    int    // the deciding rule's index
	message string
}

// judge finds every rule matching host, port, method and the normalised
// path: any deny wins, else any ask, else any allow (the lowest index of
// the winning action is reported).
func (rr *requestRules) judge(host string, port uint16, method string, segs []string) ruleMatch {
	best := ruleMatch{rule: -1}
	rank := func(a string) int {
		switch a {
		case ActionDeny:
			return 3
		case ActionAsk:
			return 2
		case ActionAllow:
			return 1
		}
		return 0
	}
	rr.forHost(host, port, func(i int) bool {
		r := &rr.rules[i]
		if !r.matches(method, segs) {
			return true
		}
		if k, b := rank(r.action), rank(best.action); k > b || (k == b && i < best.rule) {
			best = ruleMatch{action: r.action, rule: i, message: r.message}
		}
		return true
	})
	return best
}

func (r *requestRule) matches(method string, segs []string) bool {
	if r.methods != nil {
		ok := false
		for _, m := range r.methods {
			if strings.EqualFold(m, method) {
				ok = true
				break
			}
		}
		if !ok {
			return false
		}
	}
	if r.paths == nil {
		return true
	}
	for _, p := range r.paths {
		if matchSegments(p, segs) {
			return true
		}
	}
	return false
}

// matchSegments matches path segments against a pattern's: `**` any
// number of segments (a trailing slash's empty last segment included), `*`
// exactly one non-empty segment, a segment holding `*` a glob within the
// segment, anything else byte for byte (case-sensitive).
func matchSegments(pat, segs []string) bool {
	for len(pat) > 0 {
		switch p := pat[0]; {
		case p == "**":
			if len(pat) == 1 {
				return true
			}
			for i := 0; i <= len(segs); i++ {
				if matchSegments(pat[1:], segs[i:]) {
					return true
				}
			}
			return false
		case len(segs) == 0:
			return false
		case p == "*":
			if segs[0] == "" {
				return false
			}
		case strings.Contains(p, "*"):
			if !matchStar(p, segs[0]) {
				return false
			}
		case p != segs[0]:
			return false
		}
		pat, segs = pat[1:], segs[1:]
	}
	return len(segs) == 0
}

// matchStar matches s against p where `*` stands for any run of bytes.
func matchStar(p, s string) bool {
	parts := strings.Split(p, "*")
	if !strings.HasPrefix(s, parts[0]) {
		return false
	}
	s = s[len(parts[0]):]
	for i, part := range parts[1:] {
		if i == len(parts)-2 {
			return len(s) >= len(part) && strings.HasSuffix(s, part)
		}
		j := strings.Index(s, part)
		if j < 0 {
			return false
		}
		s = s[j+len(part):]
	}
	return true
}

func compilePathPattern(p string) ([]string, error) {
	if !strings.HasPrefix(p, "/") {
		return nil, fmt.Errorf("%q must start with '/' (e.g. \"/*/*/git-receive-pack\")", p)
	}
	if strings.ContainsAny(p, "?#") {
		return nil, fmt.Errorf("%q: a path pattern has no query or fragment (the query is never matched)", p)
	}
	segs, ok := normalisePath(p, nil)
	if !ok {
		return nil, fmt.Errorf("%q does not normalise (dot-segments above the root, ';', '\\', control bytes or a bad %%-escape); write the path as a server would see it", p)
	}
	for _, s := range segs {
		if strings.Contains(s, "**") && s != "**" {
			return nil, fmt.Errorf("%q: `**` must be a whole segment (\"/repos/**\")", p)
		}
	}
	return segs, nil
}

// ErrPathNotNormal is the detail of a path that does not normalise.
var ErrPathNotNormal = errors.New("the request path does not normalise")

// NormalisePath is the path the request rules match (SPEC §3.10): the
// query and fragment dropped, percent-decoded once (%2F counts as '/'),
// repeated slashes and dot-segments removed, the trailing slash kept. It
// fails — the request is then request_denied — on a path that is not
// origin-form, a bad or double %-escape, a NUL or other control byte, a
// backslash (some servers read it as '/'), a ';' (servers that strip
// matrix parameters would see another path than the rules), or a ".."
// above the root.
func NormalisePath(raw string) (string, bool) {
	segs, ok := normalisePath(raw, nil)
	if !ok {
		return "", false
	}
	return "/" + strings.Join(segs, "/"), true
}

// normalisePath returns the segments of the normalised path (a trailing
// slash is an empty last segment; "/" is one empty segment), appended to
// buf.
func normalisePath(raw string, buf []string) ([]string, bool) {
	if i := strings.IndexAny(raw, "?#"); i >= 0 {
		raw = raw[:i]
	}
	if !strings.HasPrefix(raw, "/") {
		return nil, false
	}
	dec, ok := decodePath(raw)
	if !ok {
		return nil, false
	}
	segs := buf[:0]
	trailing := false
	for rest := dec[1:]; ; {
		seg, more, found := strings.Cut(rest, "/")
		switch seg {
		case "", ".":
			// a repeated slash or ".": nothing
		case "..":
			if len(segs) == 0 {
				return nil, false
			}
			segs = segs[:len(segs)-1]
		default:
			segs = append(segs, seg)
		}
		if !found {
			// The trailing slash is kept: "/a/", "/a/." and "/a/b/.." end in
			// an empty segment.
			trailing = seg == "" || seg == "." || seg == ".."
			break
		}
		rest = more
	}
	if trailing {
		segs = append(segs, "")
	}
	return segs, true
}

// decodePath percent-decodes a path once ("%2F" becomes '/'), refusing
// what must not reach a rule decision: a bad escape, a decoded '%' that
// starts another escape (double encoding), control bytes, '\\' and ';'.
func decodePath(s string) (string, bool) {
	if !strings.ContainsAny(s, "%\\;") {
		for i := 0; i < len(s); i++ {
			if s[i] < 0x20 || s[i] == 0x7f {
				return "", false
			}
		}
		return s, true
	}
	b := make([]byte, 0, len(s))
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c == '%' {
			if i+2 >= len(s) || !isHex(s[i+1]) || !isHex(s[i+2]) {
				return "", false
			}
			c = unhex(s[i+1])<<4 | unhex(s[i+2])
			i += 2
			if c == '%' && i+2 < len(s) && isHex(s[i+1]) && isHex(s[i+2]) {
				return "", false
			}
		}
		if c < 0x20 || c == 0x7f || c == '\\' || c == ';' {
			return "", false
		}
		b = append(b, c)
	}
	return string(b), true
}

func isHex(c byte) bool {
	return ('0' <= c && c <= '9') || ('a' <= c && c <= 'f') || ('A' <= c && c <= 'F')
}

func unhex(c byte) byte {
	switch {
	case '0' <= c && c <= '9':
		return c - '0'
	case 'a' <= c && c <= 'f':
		return c - 'a' + 10
	}
	return c - 'A' + 10
}

// requests is the request stage: on an allowed decision of a host with
// rules, the matching rules decide — deny → request_denied, ask → the
// decider with the rule, allow → exempt from the mode guard. A re-check
// has no request to judge.
func (p *pass) requests(ctx context.Context, live *Decision) bool {
	if p.o.Resolve == ResolvePinned || !p.d.Allowed() {
		return false
	}
	if p.s.requests == nil {
		// No rules at all: no step either (a rule-free trace is unchanged).
		return false
	}
	if p.req.Method == "" || (p.req.Protocol != ProtoHTTP && !p.o.Inner) || strings.EqualFold(p.req.Method, methodConnect) {
		// A CONNECT, or SOCKS5 to port 443, toward a host with rules is
		// intercepted in every mode (SPEC §3.10): its inner requests are
		// judged here one by one. Other SOCKS5 ports carry no HTTP to judge.
		tunnel := p.req.Protocol == ProtoHTTPS || (p.req.Protocol == ProtoSOCKS5 && p.t.port == 443)
		if tunnel && p.s.HasRules(p.d.Host, p.t.port) {
			p.d.Intercept, p.d.Cause = true, CauseRequestRules
			p.d.addStep(Step{Step: StepRequest, Result: ResultPass, Detail: "intercepted: inner requests judged"})
		}
		return false
	}
	if p.o.Resolve == ResolveOffline && p.req.Path == "" {
		// replay: the audit holds no path (it may carry a token), so the
		// live decision's rule outcome stands; it is not re-judged.
		if live != nil && live.Rule > 0 {
			p.d.Rule, p.d.RuleAllowed, p.d.RuleMessage = live.Rule, live.RuleAllowed, live.RuleMessage
			if !live.Allowed() && live.Reason == ReasonRequestDenied {
				p.d.Verdict, p.d.Reason, p.d.Source, p.d.Cause = live.Verdict, live.Reason, live.Source, live.Cause
				return true
			}
		}
		return false
	}
	var buf [16]string
	segs, ok := normalisePath(p.req.Path, buf[:0])
	if !ok {
		if !p.s.HasRules(p.d.Host, p.t.port) {
			p.d.addStep(Step{Step: StepRequest, Result: ResultPass, Detail: "no rule for this host"})
			return false
		}
		p.d.Verdict, p.d.Reason, p.d.Source, p.d.Cause = Deny, ReasonRequestDenied, SourceBaseline, CausePathNotNormal
		p.d.addStep(Step{Step: StepRequest, Result: ResultBlock, Detail: "path does not normalise"})
		return true
	}
	m := p.s.requests.judge(p.d.Host, p.t.port, p.req.Method, segs)
	switch m.action {
	case "":
		p.d.addStep(Step{Step: StepRequest, Result: ResultPass, Detail: "no rule matched"})
		return false
	case ActionAllow:
		p.d.Rule, p.d.RuleAllowed = m.rule+1, true
		p.d.addStep(Step{Step: StepRequest, Result: ResultHit, Detail: fmt.Sprintf("rule %d: allow", m.rule)})
		return false
	case ActionDeny:
		p.d.Verdict, p.d.Reason, p.d.Source, p.d.Cause = Deny, ReasonRequestDenied, SourceBaseline, CauseRule
		p.d.Rule, p.d.RuleMessage = m.rule+1, m.message
		p.d.addStep(Step{Step: StepRequest, Result: ResultHit, Detail: fmt.Sprintf("rule %d: deny", m.rule)})
		return true
	}
	// ask
	p.d.Rule, p.d.RuleMessage = m.rule+1, m.message
	p.d.addStep(Step{Step: StepRequest, Result: ResultHit, Detail: fmt.Sprintf("rule %d: ask", m.rule)})
	return p.askRule(ctx, m)
}

// askRule sends a request an ask rule matched to the decider (the
// approval service: its key gains the rule's index, the review shows the
// method and path). Without a decider, or inside a re-check, it is
// request_denied; offline it is predicted as ask. A reviewer's allow is
// re-checked against the current kill switch and deny list and exempts the
// request from the mode guard, as an allow rule does.
func (p *pass) askRule(ctx context.Context, m ruleMatch) bool {
	d := &p.d
	d.Cause = CauseRule
	switch {
	case p.o.Resolve == ResolveOffline:
		d.Verdict, d.Reason, d.Source = Deny, ReasonRequestDenied, SourceBaseline
		if p.o.Approvals {
			d.Verdict, d.Source = Ask, SourceDecider
		}
		return true
	case p.o.NoDecider || p.e == nil || p.e.decider == nil:
		d.Verdict, d.Reason, d.Source = Deny, ReasonRequestDenied, SourceBaseline
		return true
	}
	base := *d
	base.Verdict, base.Reason, base.Source = Ask, ReasonRequestDenied, SourceBaseline
	req := p.req
	req.Host = d.Host
	out := p.e.decider.Decide(ctx, req, base)
	cur := p.e.state.Load()
	if !cur.enabled {
		p.d = disabledDecision(p.req)
		return true
	}
	if out.Verdict != Allow {
		d.ApprovalID, d.Override, d.Rationale = out.ApprovalID, out.Override, out.Rationale
		d.ApprovalOutcome = out.ApprovalOutcome
		d.Verdict, d.Reason, d.Source = Deny, ReasonRequestDenied, SourceDecider
		if out.Verdict == Ask {
			d.Verdict = Ask
		}
		if out.Reason != ReasonNone && out.Reason != ReasonRequestDenied {
			d.Reason = out.Reason
		}
		return true
	}
	// A deny that arrived while the reviewer decided wins (SPEC §3.9).
	keep := *d
	p.s, p.amends = cur, cur.amends
	if p.deny() {
		return true
	}
	p.d = keep
	d.Verdict, d.Reason, d.Source, d.Cause = Allow, ReasonNone, SourceDecider, ""
	d.ApprovalID, d.Override, d.Rationale = out.ApprovalID, out.Override, out.Rationale
	d.RuleAllowed = true
	return false
}
