package hostpolicy

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"strings"
)

// Levels of a narrower network policy (a Scope).
const (
	LevelExecution = "execution"
	LevelSession   = "session"
)

// ScopeSpec is a narrower network policy as a client writes it: the
// "network" object of POST /v1/executions, the body of PUT
// /v1/sessions/{id}/network, or `netproxy check --execution-policy FILE`.
// Entries use the list syntax of SPEC §3.2 (names, wildcards, IP literals,
// CIDR prefixes).
type ScopeSpec struct {
	Allow []string `json:"allow,omitempty"`
	Deny  []string `json:"deny,omitempty"`
	// Mode "limited" narrows a full host-wide mode; "" or "full" keeps the
	// host-wide mode (a scope never widens limited to full).
	Mode string `json:"mode,omitempty"`
}

// Empty reports whether spec narrows nothing.
func (spec ScopeSpec) Empty() bool {
	return len(spec.Allow) == 0 && len(spec.Deny) == 0 && (spec.Mode == "" || spec.Mode == ModeFull)
}

// maxScopeEntries bounds one scope's lists (they come from a client).
const maxScopeEntries = 4096

// Scope is one compiled narrower policy (SPEC issue 15): it can only
// narrow the host-wide chain. A request must pass the host-wide chain and
// every scope: a scope's deny list blocks (deny beats allow at every
// level), a scope's allow list, when it has entries, must match, and a
// scope's limited mode applies. A scope block is reason policy_denied,
// source baseline_policy, with the scope's Level. Immutable once built.
type Scope struct {
	level       string
	allow, deny *list
	hasAllow    bool
	limited     bool
	spec        ScopeSpec
}

// Level is "execution", "session" or "client".
func (sc *Scope) Level() string { return sc.level }

// Spec returns the entries the scope was built from.
func (sc *Scope) Spec() ScopeSpec { return sc.spec }

// BuildScope validates and compiles spec at level. Every bad entry is
// reported, each naming its key ("allow[2]", "deny[0]", "mode").
func BuildScope(level string, spec ScopeSpec) (*Scope, error) {
	if level != LevelExecution && level != LevelSession && level != LevelClient {
		return nil, fmt.Errorf("level %q is not %q, %q or %q", level, LevelExecution, LevelSession, LevelClient)
	}
	var errs []error
	if n := len(spec.Allow) + len(spec.Deny); n > maxScopeEntries {
		return nil, fmt.Errorf("%d entries: at most %d allowed", n, maxScopeEntries)
	}
	b := newBuilder()
	for i, p := range spec.Allow {
		if err := b.addPattern(p, EntryAllow); err != nil {
			errs = append(errs, fmt.Errorf("allow[%d]: %w", i, err))
		}
	}
	for i, p := range spec.Deny {
		if err := b.addPattern(p, EntryDeny); err != nil {
			errs = append(errs, fmt.Errorf("deny[%d]: %w", i, err))
		}
	}
	switch spec.Mode {
	case "", ModeFull, ModeLimited:
	default:
		errs = append(errs, fmt.Errorf("mode: %q is not %q or %q", spec.Mode, ModeLimited, ModeFull))
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	return &Scope{
		level: level, allow: b.allow.build(), deny: b.deny.build(),
		hasAllow: len(spec.Allow) > 0, limited: spec.Mode == ModeLimited,
		spec: ScopeSpec{Allow: append([]string(nil), spec.Allow...), Deny: append([]string(nil), spec.Deny...), Mode: spec.Mode},
	}, nil
}

// Notes lists what in spec has no effect under s because a scope can only
// narrow: an allow entry for a host the host-wide deny list denies, and
// mode "full" under a limited host-wide mode. They are accepted, and the
// answer to the client says so.
func (s *Snapshot) Notes(spec ScopeSpec) []string {
	var notes []string
	for i, p := range spec.Allow {
		probe := strings.TrimSpace(p)
		switch {
		case strings.HasPrefix(probe, "**."):
			probe = probe[3:]
		case strings.HasPrefix(probe, "*."):
			probe = "x." + probe[2:]
		}
		h, err := Normalize(probe)
		if err != nil || h == "" {
			continue
		}
		if pat, ok := s.deny.names.match(h); ok {
			notes = append(notes, fmt.Sprintf("allow[%d] %q has no effect: the host-wide deny list denies it (%s); a narrower policy can only narrow", i, p, pat))
			continue
		}
		if a, isIP := parseLiteral(h); isIP {
			if entry, ok := s.deny.addrs.match(a); ok {
				notes = append(notes, fmt.Sprintf("allow[%d] %q has no effect: the host-wide deny list denies it (%s); a narrower policy can only narrow", i, p, entry))
			}
		}
	}
	if spec.Mode == ModeFull && s.mode != ModeFull && s.mode != "" {
		notes = append(notes, `mode "full" has no effect: the host-wide mode is limited; a narrower policy can only narrow`)
	}
	return notes
}

// scopeBlock checks d's host (and its literal forms) against scopes: every
// deny list first (deny beats allow at every level), then every allow list
// that has entries. On a block d becomes policy_denied with the scope's
// level and true is returned.
func scopeBlock(d *Decision, t target, scopes []*Scope) bool {
	hosts := [3]string{t.host, t.unscoped, t.mapped}
	for _, sc := range scopes {
		if sc == nil {
			continue
		}
		for _, h := range hosts {
			if h == "" {
				continue
			}
			if pat, ok := sc.deny.matchName(h, t.port); ok {
				scopeDeny(d, sc.level, pat, StepDeny, ResultHit, sc.level+" deny list: "+pat)
				return true
			}
		}
		if t.isIP {
			if entry, ok := sc.deny.matchAddr(t.addr, t.port); ok {
				scopeDeny(d, sc.level, entry, StepDeny, ResultHit, sc.level+" deny list: "+entry)
				return true
			}
		}
		if a, entry, ok := sc.deny.matchAnyAddr(t.static, t.port); ok {
			scopeDeny(d, sc.level, entry, StepDeny, ResultHit, sc.level+" deny list: static answer "+a.String()+" in "+entry)
			return true
		}
	}
	for _, sc := range scopes {
		if sc == nil || !sc.hasAllow {
			continue
		}
		ok := false
		for _, h := range hosts {
			if h == "" {
				continue
			}
			if _, ok = sc.allow.matchName(h, t.port); ok {
				break
			}
		}
		if !ok && t.isIP {
			_, ok = sc.allow.matchAddr(t.addr, t.port)
		}
		if !ok {
			scopeDeny(d, sc.level, "", StepAllow, ResultMiss, sc.level+" allow list: no entry matches")
			return true
		}
	}
	return false
}

// scopeAddrBlock checks pinned addresses against the scopes' deny address
// entries (a name may resolve into a denied prefix).
func scopeAddrBlock(d *Decision, addrs []netip.Addr, scopes []*Scope) bool {
	port := d.Port
	if len(addrs) == 0 {
		return false
	}
	for _, sc := range scopes {
		if sc == nil {
			continue
		}
		if a, entry, ok := sc.deny.matchAnyAddr(addrs, port); ok {
			scopeDeny(d, sc.level, entry, StepDeny, ResultHit, sc.level+" deny list: address "+a.String()+" in "+entry)
			return true
		}
	}
	return false
}

func scopeDeny(d *Decision, level, pattern string, step StepName, res StepResult, detail string) {
	d.Verdict, d.Reason, d.Source, d.Level, d.Pattern = Deny, ReasonPolicyDenied, SourceBaseline, level, pattern
	d.Intercept = false
	d.addStep(Step{Step: step, Result: res, Detail: detail})
}

// scopeMode returns the effective mode under scopes and the level of the
// scope that narrowed it ("" when the host-wide mode stands).
func (s *Snapshot) scopeMode(scopes []*Scope) (string, string) {
	if s.mode != ModeFull && s.mode != "" {
		return s.mode, ""
	}
	for _, sc := range scopes {
		if sc != nil && sc.limited {
			return ModeLimited, sc.level
		}
	}
	return s.mode, ""
}

// EvaluateScoped is Evaluate narrowed by scopes (nil entries are ignored):
// the host-wide chain's blocks come first; then the scopes (before any DNS
// query and before the decider, so that no reviewer's answer widens past a
// narrower deny); then resolution, the scopes' address entries, the
// decider for not_allowed, and the mode guard under the narrowest mode.
func (e *Engine) EvaluateScoped(ctx context.Context, req Request, scopes []*Scope) Decision {
	return e.Run(ctx, req, RunOptions{Scopes: scopes})
}

// withLevel names the scope level on a mode-guard block the scope's mode
// caused.
func withLevel(d *Decision, level string) {
	if level != "" && !d.Allowed() && d.Source == SourceModeGuard {
		d.Level = level
	}
}

// InnerDecisionScoped is InnerDecision narrowed by scopes.
func (e *Engine) InnerDecisionScoped(ctx context.Context, req Request, scopes []*Scope) Decision {
	return e.Run(ctx, req, RunOptions{Inner: true, Scopes: scopes})
}

// innerMode is the mode guard of an inner request: its method.
func innerMode(mode string, req *Request, d *Decision) {
	if MethodAllowed(mode, req.Method) {
		if d.tracing() { // the detail is built only for a trace
			d.addStep(Step{Step: StepMode, Result: ResultPass, Detail: "limited: " + strings.ToUpper(req.Method)})
		}
		return
	}
	d.Verdict, d.Reason, d.Source, d.Cause = Deny, ReasonMethodNotAllowed, SourceModeGuard, CauseLimitedMode
	if d.tracing() { // the detail is built only for a trace
		d.addStep(Step{Step: StepMode, Result: ResultBlock, Detail: "limited: " + string(ReasonMethodNotAllowed)})
	}
}

// RecheckScoped is Recheck narrowed by scopes: an open connection whose
// target a scope now blocks is policy_denied (the caller closes it).
func (e *Engine) RecheckScoped(host string, port int, addrs []netip.Addr, scopes []*Scope) Decision {
	return e.Run(context.Background(), Request{Host: host, Port: uint16(port)}, RunOptions{Resolve: ResolvePinned, Pinned: addrs, Scopes: scopes})
}

// targetOf is the literal forms of a normalised host (no static answers).
func targetOf(host string) target {
	t := target{host: host}
	t.addr, t.isIP = parseLiteral(host)
	if t.isIP && t.addr.Zone() != "" {
		t.unscoped = t.addr.WithZone("").String()
	}
	if t.isIP && t.addr.Is4In6() {
		t.mapped = t.addr.Unmap().String()
	}
	return t
}
