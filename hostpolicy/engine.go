package hostpolicy

import (
	"context"
	"maps"
	"net/netip"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/netproxy/netproxy/hostpolicy/hostname"
)

// Normalize returns the canonical spelling of a host (SPEC §3.1); an error
// (or the empty host) must be treated as not_allowed.
func Normalize(host string) (string, error) { return hostname.Normalize(host) }

// Mode values of network.mode.
const (
	ModeFull    = "full"
	ModeLimited = "limited"
)

// Engine runs the decision chain of SPEC §3.4–3.8 over a swappable Policy.
// It is safe for concurrent use.
type Engine struct {
	state    atomic.Pointer[engineState]
	resolver Resolver
	decider  Decider

	// Live amendments (allow_always / deny_always) survive Swap: they are
	// the reviewer's word and are also persisted as rules by the caller.
	// Copy-on-write: Evaluate reads them without a lock; Amend is rare.
	amendMu sync.Mutex
	amends  atomic.Pointer[amendments]
	subs    subscribers // Subscribe's callbacks (recheck.go)
}

type amendments struct{ allow, deny map[string]struct{} }

type engineState struct {
	policy *Policy
	mode   string
}

// NewEngine returns an Engine over p. mode is "full" or "limited" (anything
// else is treated as limited: fail closed). d may be nil: not_allowed is then
// final with source baseline_policy.
func NewEngine(p *Policy, r Resolver, mode string, d Decider) *Engine {
	if r == nil {
		r = NewResolver(nil, DefaultDNSTimeout)
	}
	e := &Engine{resolver: r, decider: d}
	e.amends.Store(&amendments{allow: map[string]struct{}{}, deny: map[string]struct{}{}})
	e.state.Store(&engineState{policy: orEmpty(p), mode: mode})
	return e
}

func orEmpty(p *Policy) *Policy {
	if p == nil {
		// Empty lists already block everything; enabled so that the empty
		// policy reports the list reasons, not proxy_disabled.
		return &Policy{allow: newMatcherBuilder().build(), deny: newMatcherBuilder().build(), enabled: true}
	}
	return p
}

// Swap atomically replaces the policy and mode (reload). Requests already in
// Evaluate finish on the policy they started with.
func (e *Engine) Swap(p *Policy, mode string) {
	e.state.Store(&engineState{policy: orEmpty(p), mode: mode})
	e.notify()
}

// Policy returns the current compiled policy.
func (e *Engine) Policy() *Policy { return e.state.Load().policy }

// Mode returns the current mode.
func (e *Engine) Mode() string { return e.state.Load().mode }

// Resolver returns the resolver the local guard uses; the dialer resolves
// through the same one when the guard was skipped.
func (e *Engine) Resolver() Resolver { return e.resolver }

// AllowLocalBinding reports the current network.allow_local_binding.
func (e *Engine) AllowLocalBinding() bool { return e.state.Load().policy.allowLocalBinding }

// Amend adds host to the live allow list (Allow) or deny list (Deny), removing
// it from the other one; it applies to the host on every port and protocol.
// A host that does not normalise is ignored.
func (e *Engine) Amend(host string, d Verdict) {
	h, err := Normalize(host)
	if err != nil || h == "" {
		return
	}
	if d != Allow && d != Deny {
		return
	}
	e.amendMu.Lock()
	defer e.amendMu.Unlock()
	old := e.amends.Load()
	next := &amendments{allow: maps.Clone(old.allow), deny: maps.Clone(old.deny)}
	if d == Allow {
		next.allow[h] = struct{}{}
		delete(next.deny, h)
	} else {
		next.deny[h] = struct{}{}
		delete(next.allow, h)
	}
	e.amends.Store(next)
	e.notify()
}

func amended(set map[string]struct{}, hosts ...string) (string, bool) {
	if len(set) == 0 {
		return "", false
	}
	for _, h := range hosts {
		if h == "" {
			continue
		}
		if _, ok := set[h]; ok {
			return h, true
		}
	}
	return "", false
}

// Evaluate runs the whole chain for req and returns the final decision:
// proxy state (network.enabled) → normalise → deny list → local/private
// guard → allow list → mode guard, and the decider only for not_allowed.
// It never dials.
func (e *Engine) Evaluate(ctx context.Context, req Request) Decision {
	st := e.state.Load()
	if !st.policy.enabled {
		return disabledDecision(req)
	}
	d := e.hostDecision(ctx, st.policy, req)
	switch {
	case d.Verdict == Allow:
		return modeGuard(st.mode, req, d)
	case d.Reason == ReasonNotAllowed && e.decider != nil && d.Host != "":
		base := d
		// The decider keys its caches on the canonical host.
		req.Host = d.Host
		out := e.decider.Decide(ctx, req, base)
		if !e.state.Load().policy.enabled {
			// The kill switch was thrown while a reviewer was thinking: no
			// approval outlives it.
			return disabledDecision(req)
		}
		return e.mergeDecider(st.mode, req, base, out)
	}
	return d
}

// EvaluateHost runs only the host chain of SPEC §3.4 (no mode guard, no
// decider) — for re-checks such as MITM inner requests. The kill switch
// applies here too.
func (e *Engine) EvaluateHost(ctx context.Context, req Request) Decision {
	p := e.state.Load().policy
	if !p.enabled {
		return disabledDecision(req)
	}
	return e.hostDecision(ctx, p, req)
}

// Enabled reports the current network.enabled.
func (e *Engine) Enabled() bool { return e.state.Load().policy.enabled }

// disabledDecision is the block of a proxy whose network.enabled is false
// (SPEC §3.6 proxy_disabled, source proxy_state). It comes before every
// other step, so nothing is looked up and no decider is asked; the host is
// normalised only so that audit and metrics name it canonically.
func disabledDecision(req Request) Decision {
	d := Decision{Verdict: Deny, Reason: ReasonProxyDisabled, Source: SourceProxyState, Port: req.Port}
	if h, err := Normalize(req.Host); err == nil {
		d.Host = h
	}
	// SPEC §7.1 has four step names; the proxy's operating state is the
	// "mode" step (network.mode and network.enabled both say how the proxy
	// runs, not what the host is).
	d.Steps = []Step{{Step: "mode", Result: "block", Detail: "network.enabled = false"}}
	return d
}

// mergeDecider keeps what the chain established (host, pinned addresses,
// steps) and takes the decider's verdict. A decider can only turn
// not_allowed into allow, deny or ask; its blocks carry source decider.
func (e *Engine) mergeDecider(mode string, req Request, base, out Decision) Decision {
	d := base
	d.ApprovalID, d.Override, d.Rationale = out.ApprovalID, out.Override, out.Rationale
	d.Source = SourceDecider
	switch out.Verdict {
	case Allow:
		d.Verdict, d.Reason = Allow, ReasonNone
		if out.Pattern != "" {
			d.Pattern = out.Pattern
		}
		// A reviewer approves a host, never a method: limited mode still applies.
		return modeGuard(mode, req, d)
	case Ask:
		d.Verdict = Ask
	default:
		d.Verdict = Deny
	}
	d.Reason = out.Reason
	if d.Reason == ReasonNone {
		d.Reason = ReasonPolicyDenied
	}
	return d
}

func (e *Engine) hostDecision(ctx context.Context, p *Policy, req Request) Decision {
	// Room for every step (deny, local_guard, allow, mode)
	// so the chain allocates its trace once.
	d := Decision{Verdict: Deny, Source: SourceBaseline, Port: req.Port, Steps: make([]Step, 0, 4)}
	host, err := Normalize(req.Host)
	if err != nil || host == "" {
		d.Reason = ReasonNotAllowed
		detail := "empty host"
		if err != nil {
			detail = err.Error()
		}
		// SPEC §7.1 knows four steps; an unusable host is an allow-list miss.
		d.Steps = append(d.Steps, Step{Step: "allow", Result: "miss", Detail: "invalid host: " + detail})
		return d
	}
	d.Host = host

	// The forms of the host a deny entry may name: the host itself, the
	// unscoped address of a scoped literal, and the IPv4 address inside an
	// IPv4-mapped IPv6 literal (the same socket address).
	addr, isIP := parseLiteral(host)
	unscoped := ""
	if isIP && addr.Zone() != "" {
		unscoped = addr.WithZone("").String()
	}
	mapped := ""
	if isIP && addr.Is4In6() {
		mapped = addr.Unmap().String()
	}

	// 2. deny list
	for _, h := range []string{host, unscoped, mapped} {
		if h == "" {
			continue
		}
		if pat, ok := p.deny.match(h); ok {
			d.Reason, d.Pattern = ReasonDenied, pat
			d.Steps = append(d.Steps, Step{Step: "deny", Result: "hit", Detail: pat})
			return d
		}
	}
	amends := e.amends.Load()
	if h, ok := amended(amends.deny, host, unscoped, mapped); ok {
		d.Reason, d.Pattern = ReasonDenied, h
		d.Steps = append(d.Steps, Step{Step: "deny", Result: "hit", Detail: h + " (amended)"})
		return d
	}
	d.Steps = append(d.Steps, Step{Step: "deny", Result: "miss"})

	// 3. local/private guard
	if !p.allowLocalBinding {
		local := host == "localhost" || (isIP && IsNonPublic(addr))
		if local {
			pat, ok := p.allow.matchExact(host)
			if !ok && unscoped != "" {
				pat, ok = p.allow.matchExact(unscoped)
			}
			if !ok {
				d.Reason = ReasonNotAllowedLocal
				d.Steps = append(d.Steps, Step{Step: "local_guard", Result: "block", Detail: "local/private address not allow-listed exactly"})
				return d
			}
			d.LocalLiteral = true
			d.Pattern = pat
			if isIP {
				d.Addrs = []netip.Addr{addr}
			} else {
				// RFC 6761: localhost is loopback, never looked up.
				d.Addrs = []netip.Addr{netip.AddrFrom4([4]byte{127, 0, 0, 1}), netip.IPv6Loopback()}
			}
			d.Steps = append(d.Steps, Step{Step: "local_guard", Result: "pass", Detail: "exact allow-list entry " + pat})
			d.Steps = append(d.Steps, Step{Step: "allow", Result: "hit", Detail: pat})
			d.Verdict, d.Reason = Allow, ReasonNone
			return d
		}
		if isIP {
			d.Addrs = []netip.Addr{addr}
			d.Steps = append(d.Steps, Step{Step: "local_guard", Result: "pass", Detail: "public address"})
		} else {
			addrs, err := e.resolver.LookupNetIP(ctx, host)
			if err != nil {
				d.Reason = ReasonNotAllowedLocal
				d.Steps = append(d.Steps, Step{Step: "local_guard", Result: "block", Detail: "lookup failed: " + err.Error()})
				return d
			}
			d.Addrs = addrs
			for _, a := range addrs {
				if IsNonPublic(a) {
					d.Reason = ReasonNotAllowedLocal
					d.Steps = append(d.Steps, Step{Step: "local_guard", Result: "block", Detail: "resolves to non-public address " + a.String()})
					return d
				}
			}
			// The answers themselves are in d.Addrs (check prints them as "resolved").
			d.Steps = append(d.Steps, Step{Step: "local_guard", Result: "pass", Detail: "every answer is public"})
		}
	} else {
		d.Steps = append(d.Steps, Step{Step: "local_guard", Result: "pass", Detail: "allow_local_binding = true"})
		if isIP {
			d.Addrs = []netip.Addr{addr}
		}
	}

	// 4. allow list
	pat, ok := p.allow.match(host)
	if !ok && unscoped != "" && !p.allowLocalBinding {
		// An exact scoped match is required when local binding is on
		// (reference §2.2); otherwise the unscoped entry covers all scopes.
		pat, ok = p.allow.match(unscoped)
	}
	if !ok {
		if h, found := amended(amends.allow, host); found {
			pat, ok = h+" (amended)", true
		}
	}
	if !ok {
		d.Reason = ReasonNotAllowed
		d.Steps = append(d.Steps, Step{Step: "allow", Result: "miss"})
		return d
	}
	d.Pattern = strings.TrimSuffix(pat, " (amended)")
	d.Steps = append(d.Steps, Step{Step: "allow", Result: "hit", Detail: pat})
	d.Verdict, d.Reason = Allow, ReasonNone
	return d
}

// modeGuard applies limited mode (SPEC §3.8) to an allowed request.
func modeGuard(mode string, req Request, d Decision) Decision {
	if mode == ModeFull || mode == "" {
		d.Steps = append(d.Steps, Step{Step: "mode", Result: "pass", Detail: "full"})
		return d
	}
	reason := ReasonNone
	switch req.Protocol {
	case ProtoHTTPS:
		reason = ReasonMITMRequired
	case ProtoSOCKS5:
		if req.Port == 443 {
			reason = ReasonMITMRequired
		} else {
			reason = ReasonMethodNotAllowed
		}
	default:
		switch strings.ToUpper(req.Method) {
		case "GET", "HEAD", "OPTIONS":
		default:
			reason = ReasonMethodNotAllowed
		}
	}
	if reason == ReasonNone {
		d.Steps = append(d.Steps, Step{Step: "mode", Result: "pass", Detail: "limited: " + strings.ToUpper(req.Method)})
		return d
	}
	d.Verdict, d.Reason, d.Source = Deny, reason, SourceModeGuard
	d.Steps = append(d.Steps, Step{Step: "mode", Result: "block", Detail: "limited: " + string(reason)})
	return d
}

// MethodAllowed reports whether a plain-HTTP method passes mode (for MITM
// inner requests in limited mode).
func MethodAllowed(mode, method string) bool {
	if mode == ModeFull || mode == "" {
		return true
	}
	switch strings.ToUpper(method) {
	case "GET", "HEAD", "OPTIONS":
		return true
	}
	return false
}

func parseLiteral(host string) (netip.Addr, bool) {
	if host == "" {
		return netip.Addr{}, false
	}
	c := host[0]
	if !(c >= '0' && c <= '9' || c >= 'a' && c <= 'f' || c == ':') {
		return netip.Addr{}, false
	}
	a, err := netip.ParseAddr(host)
	return a, err == nil
}
