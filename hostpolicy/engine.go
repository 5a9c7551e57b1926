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

// Engine runs the decision chain of SPEC §3.4–3.8 over an atomically
// swapped Snapshot. It is safe for concurrent use. It never dials, and it
// never resolves a name before the allow list or the decider allowed it.
type Engine struct {
	// mu serialises the writers (Swap, Amend) so that no amendment is lost
	// between a load and a store; readers only Load.
	mu      sync.Mutex
	state   atomic.Pointer[Snapshot]
	decider Decider

	subs subscribers
}

// amendments are the live allow_always / deny_always hosts. They survive
// Swap: they are the reviewer's word and are also persisted as rules.
type amendments struct{ allow, deny map[string]struct{} }

var noAmendments = &amendments{allow: map[string]struct{}{}, deny: map[string]struct{}{}}

// NewEngine returns an Engine over s. d may be nil: not_allowed is then
// final with source baseline_policy.
func NewEngine(s *Snapshot, d Decider) *Engine {
	e := &Engine{decider: d}
	e.state.Store(orEmpty(s))
	return e
}

func orEmpty(s *Snapshot) *Snapshot {
	if s == nil {
		// Empty lists already block everything; enabled so that the empty
		// policy reports the list reasons, not proxy_disabled.
		s, _ = Build(Options{Enabled: true, Mode: ModeFull})
		return s
	}
	if s.amends == nil {
		c := *s
		c.amends = noAmendments
		return &c
	}
	return s
}

// Swap atomically replaces the whole snapshot (reload): lists, address
// entries, static answers, resolver, mode, kill switch and MITM admission
// change in one store. The live amendments carry over. Requests already in
// Evaluate finish on the snapshot they started with; a decider's allow is
// re-checked against the new one. Subscribers are told afterwards.
func (e *Engine) Swap(s *Snapshot) {
	e.mu.Lock()
	next := *orEmpty(s)
	next.amends = e.state.Load().amends
	e.state.Store(&next)
	e.mu.Unlock()
	e.notify()
}

// Subscribe registers fn to be called after every change of the current
// snapshot (Swap, Amend — the kill switch is a Swap). fn runs on the
// changing goroutine and must not block; it should re-check open
// connections with Recheck.
func (e *Engine) Subscribe(fn func()) { e.subs.add(fn) }

func (e *Engine) notify() { e.subs.notify() }

// Snapshot returns the current snapshot.
func (e *Engine) Snapshot() *Snapshot { return e.state.Load() }

// Mode returns the current mode.
func (e *Engine) Mode() string { return e.state.Load().mode }

// Enabled reports the current network.enabled.
func (e *Engine) Enabled() bool { return e.state.Load().enabled }

// AllowLocalBinding reports the current network.allow_local_binding.
func (e *Engine) AllowLocalBinding() bool { return e.state.Load().allowLocalBinding }

// Resolver answers through the current snapshot: static answers first,
// then its DNS servers. The dialer uses it only when the chain pinned no
// address (allow_local_binding).
func (e *Engine) Resolver() Resolver { return engineResolver{e} }

type engineResolver struct{ e *Engine }

func (r engineResolver) LookupNetIP(ctx context.Context, host string) ([]netip.Addr, error) {
	return r.e.state.Load().lookup(ctx, host)
}

// CheckDialAddr is the dial-time re-check of one address against the
// current snapshot (SPEC §3.2, 3.5): a deny-list address entry → denied; a
// non-public address outside every allow-list prefix (unless
// allow_local_binding) → not_allowed_local; the kill switch →
// proxy_disabled. A target that is an exactly allow-listed local literal
// may ignore not_allowed_local, never denied.
func (e *Engine) CheckDialAddr(ap netip.AddrPort) (Reason, bool) {
	return e.state.Load().CheckDialAddr(ap)
}

// CheckDialAddr: see Engine.CheckDialAddr.
func (s *Snapshot) CheckDialAddr(ap netip.AddrPort) (Reason, bool) {
	if !s.enabled {
		return ReasonProxyDisabled, false
	}
	a, port := ap.Addr(), ap.Port()
	if _, ok := s.deny.matchAddr(a, port); ok {
		return ReasonDenied, false
	}
	if !s.allowLocalBinding && IsNonPublic(a) {
		if _, ok := s.allow.matchPrefix(a, port); !ok {
			return ReasonNotAllowedLocal, false
		}
	}
	return ReasonNone, true
}

// Amend adds host to the live allow list (Allow) or deny list (Deny), removing
// it from the other one; it applies to the host on every port and protocol.
// A host that does not normalise is ignored. Subscribers are told.
func (e *Engine) Amend(host string, d Verdict) {
	h, err := Normalize(host)
	if err != nil || h == "" {
		return
	}
	if d != Allow && d != Deny {
		return
	}
	e.mu.Lock()
	cur := e.state.Load()
	next := *cur
	am := &amendments{allow: maps.Clone(cur.amends.allow), deny: maps.Clone(cur.amends.deny)}
	if d == Allow {
		am.allow[h] = struct{}{}
		delete(am.deny, h)
	} else {
		am.deny[h] = struct{}{}
		delete(am.allow, h)
	}
	next.amends = am
	e.state.Store(&next)
	e.mu.Unlock()
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

// The presets of the pipeline (pipeline.go) that the engine's users call.

// Evaluate is an outer request's decision: the whole pipeline with the
// decider for not_allowed and live resolution, no narrower policy.
func (e *Engine) Evaluate(ctx context.Context, req Request) Decision {
	return e.Run(ctx, req, RunOptions{})
}

// InnerDecision judges one request inside an intercepted tunnel: the host
// chain of the current snapshot (no decider: the CONNECT consulted it),
// then the method under the mode guard.
func (e *Engine) InnerDecision(ctx context.Context, req Request) Decision {
	return e.Run(ctx, req, RunOptions{Inner: true})
}

// Recheck re-judges an open connection to host:port whose pinned
// addresses are addrs against the current snapshot, without any DNS query:
// the kill switch, the deny list (names, amendments, and address entries
// against addrs), the local guard against addrs, and the allow list. The
// caller closes the connection when the result is Deny with reason
// denied, not_allowed_local or proxy_disabled; not_allowed does not close
// a connection a decider had allowed.
func (e *Engine) Recheck(host string, port int, addrs []netip.Addr) Decision {
	return e.Run(context.Background(), Request{Host: host, Port: uint16(port)}, RunOptions{Resolve: ResolvePinned, Pinned: addrs})
}

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
	d.Steps = []Step{{Step: StepMode, Result: ResultBlock, Detail: "network.enabled = false"}}
	return d
}

// target is a normalised request host and what the chain knows about it
// before any DNS query.
type target struct {
	host      string
	addr      netip.Addr
	isIP      bool
	unscoped  string // the unscoped spelling of a scoped literal
	mapped    string // the IPv4 spelling of an IPv4-mapped literal
	static    []netip.Addr
	hasStatic bool
	port      uint16 // the request's port: port-scoped entries match on it
}

// SPEC §3.4 steps 1–4, the pipeline's first stages: no DNS query. A
// stage returns true when it ended the decision.

// 1. normalise
func (p *pass) normalise() bool {
	req := p.req
	d := &p.d
	*d = Decision{Verdict: Deny, Source: SourceBaseline, Port: req.Port, noTrace: !req.Trace}
	p.t, p.final = target{port: req.Port}, false
	if req.Trace {
		// Room for every step (deny, local_guard, allow, step 5, mode) so
		// the chain allocates its trace once.
		d.Steps = make([]Step, 0, 5)
	}
	host, err := Normalize(req.Host)
	if err != nil || host == "" {
		d.Reason = ReasonNotAllowed
		detail := "empty host"
		if err != nil {
			detail = err.Error()
		}
		// SPEC §7.1 knows four steps; an unusable host is an allow-list miss.
		if d.tracing() { // the detail is built only for a trace
			d.addStep(Step{Step: StepAllow, Result: ResultMiss, Detail: "invalid host: " + detail})
		}
		return true
	}
	d.Host = host
	p.t = targetOf(host)
	p.t.port = req.Port
	if !p.t.isIP {
		p.t.static, p.t.hasStatic = p.s.static[host]
	}
	return false
}

// 2. deny list: patterns, amendments, address entries against a literal
// or the static answers (local, so readable here).
func (p *pass) deny() bool {
	s, t, d := p.s, &p.t, &p.d
	// The forms of the host a deny entry may name: the host itself, the
	// unscoped address of a scoped literal, and the IPv4 address inside an
	// IPv4-mapped IPv6 literal (the same socket address).
	for _, h := range [3]string{t.host, t.unscoped, t.mapped} {
		if h == "" {
			continue
		}
		if pat, ok := s.deny.matchName(h, t.port); ok {
			d.Reason, d.Pattern, d.Cause = ReasonDenied, pat, CauseDenyList
			d.addStep(Step{Step: StepDeny, Result: ResultHit, Detail: pat})
			return true
		}
	}
	if h, ok := amended(p.amends.deny, t.host, t.unscoped, t.mapped); ok {
		d.Reason, d.Pattern, d.Cause = ReasonDenied, h, CauseDenyList
		if d.tracing() { // the detail is built only for a trace
			d.addStep(Step{Step: StepDeny, Result: ResultHit, Detail: h + " (amended)"})
		}
		return true
	}
	if t.isIP {
		if entry, ok := s.deny.matchAddr(t.addr, t.port); ok {
			d.Reason, d.Pattern, d.Cause = ReasonDenied, entry, CauseDenyList
			d.addStep(Step{Step: StepDeny, Result: ResultHit, Detail: entry})
			return true
		}
	}
	if a, entry, ok := s.deny.matchAnyAddr(t.static, t.port); ok {
		d.Reason, d.Pattern, d.Cause = ReasonDenied, entry, CauseDenyList
		if d.tracing() { // the detail is built only for a trace
			d.addStep(Step{Step: StepDeny, Result: ResultHit, Detail: "static answer " + a.String() + " in " + entry})
		}
		return true
	}
	d.addStep(Step{Step: StepDeny, Result: ResultMiss})
	return false
}

// 3. local/private guard: literals and static answers only; any other
// name is not resolved here. An exactly allow-listed local literal is
// allowed here and final.
func (p *pass) localGuard() bool {
	s, t, d := p.s, &p.t, &p.d
	if s.allowLocalBinding {
		d.addStep(Step{Step: StepLocalGuard, Result: ResultPass, Detail: "allow_local_binding = true"})
		if t.isIP {
			d.Addrs = []netip.Addr{t.addr}
		} else if t.hasStatic {
			d.Addrs = t.static // shared, read-only (Decision.Addrs)
		}
		return false
	}
	if t.host == "localhost" || (t.isIP && IsNonPublic(t.addr)) {
		pat, ok := s.allow.matchExact(t.host, t.port)
		if !ok && t.unscoped != "" {
			pat, ok = s.allow.matchExact(t.unscoped, t.port)
		}
		if !ok && t.isIP {
			pat, ok = s.allow.matchAddr(t.addr, t.port)
		}
		if !ok {
			d.Reason, d.Cause = ReasonNotAllowedLocal, CauseLocalLiteral
			d.addStep(Step{Step: StepLocalGuard, Result: ResultBlock, Detail: "local/private address not allow-listed exactly or by prefix"})
			return true
		}
		d.LocalLiteral = true
		d.Pattern = pat
		if t.isIP {
			d.Addrs = []netip.Addr{t.addr}
		} else {
			// RFC 6761: localhost is loopback, never looked up.
			d.Addrs = localhostAddrs // shared, read-only (Decision.Addrs)
		}
		if d.tracing() { // the detail is built only for a trace
			d.addStep(Step{Step: StepLocalGuard, Result: ResultPass, Detail: "allow-list entry " + pat})
		}
		d.addStep(Step{Step: StepAllow, Result: ResultHit, Detail: pat})
		d.Verdict, d.Reason = Allow, ReasonNone
		p.final = true
		return false
	}
	switch {
	case t.isIP:
		d.Addrs = []netip.Addr{t.addr}
		d.addStep(Step{Step: StepLocalGuard, Result: ResultPass, Detail: "public address"})
	case t.hasStatic:
		d.Addrs = t.static // shared, read-only (Decision.Addrs)
		if a, bad := s.firstLocal(t.static, t.port); bad {
			d.Reason, d.Cause = ReasonNotAllowedLocal, CauseNonPublicAnswer
			if d.tracing() { // the detail is built only for a trace
				d.addStep(Step{Step: StepLocalGuard, Result: ResultBlock, Detail: "static answer " + a.String() + " is non-public"})
			}
			return true
		}
		d.addStep(Step{Step: StepLocalGuard, Result: ResultPass, Detail: "static answers checked"})
	default:
		d.addStep(Step{Step: StepLocalGuard, Result: ResultPass, Detail: "name not resolved before the allow list"})
	}
	return false
}

// 4. allow list. A miss is not_allowed, which only the decider may turn
// into an allow: it goes on to the scopes and the decider; while the
// pipeline re-runs after the decider's allow, that allow stands here.
func (p *pass) allow() {
	if p.final {
		return
	}
	s, t, d := p.s, &p.t, &p.d
	pat, ok := s.allow.matchName(t.host, t.port)
	if !ok && t.unscoped != "" && !s.allowLocalBinding {
		// An exact scoped match is required when local binding is on
		// (reference §2.2); otherwise the unscoped entry covers all scopes.
		pat, ok = s.allow.matchName(t.unscoped, t.port)
	}
	if !ok && t.isIP && (t.unscoped == "" || !s.allowLocalBinding) {
		pat, ok = s.allow.matchAddr(t.addr, t.port)
	}
	amendedHit := false
	if !ok {
		if h, found := amended(p.amends.allow, t.host); found {
			pat, ok, amendedHit = h, true, true
		}
	}
	if !ok {
		d.Reason = ReasonNotAllowed
		d.addStep(Step{Step: StepAllow, Result: ResultMiss})
		if p.approved != nil {
			d.Verdict, d.Reason = Allow, ReasonNone
		}
		return
	}
	d.Pattern = pat
	detail := pat
	if amendedHit && d.tracing() {
		detail += " (amended)"
	}
	d.addStep(Step{Step: StepAllow, Result: ResultHit, Detail: detail})
	d.Verdict, d.Reason = Allow, ReasonNone
}

// firstLocal returns the first non-public address outside every allow-list
// CIDR prefix that covers port.
func (s *Snapshot) firstLocal(addrs []netip.Addr, port uint16) (netip.Addr, bool) {
	for _, a := range addrs {
		if !IsNonPublic(a) {
			continue
		}
		if _, ok := s.allow.matchPrefix(a, port); ok {
			continue
		}
		return a, true
	}
	return netip.Addr{}, false
}

// resolveAllowed is step 5 for an allowed name: it is resolved now
// (static answers were judged in steps 2–3), and an error, a timeout or
// any non-public answer outside an allow-list prefix is not_allowed_local;
// a deny-list address entry matching any answer is denied. With
// allow_local_binding no query is made unless the deny list holds address
// entries (the dialer resolves and re-checks instead).
func (s *Snapshot) resolveAllowed(ctx context.Context, d *Decision, t *target) {
	if t.isIP || t.hasStatic {
		return
	}
	if s.allowLocalBinding && !s.deny.hasAddrs() {
		return
	}
	addrs, err := s.lookupDNS(ctx, t.host)
	if err != nil {
		d.Verdict, d.Reason, d.Source, d.Cause = Deny, ReasonNotAllowedLocal, SourceBaseline, lookupCause(err)
		if d.tracing() { // the detail is built only for a trace
			d.addStep(Step{Step: StepLocalGuard, Result: ResultBlock, Detail: "lookup failed: " + err.Error()})
		}
		return
	}
	d.Addrs = addrs
	if a, entry, ok := s.deny.matchAnyAddr(addrs, t.port); ok {
		d.Verdict, d.Reason, d.Source, d.Pattern, d.Cause = Deny, ReasonDenied, SourceBaseline, entry, CauseDenyList
		if d.tracing() { // the detail is built only for a trace
			d.addStep(Step{Step: StepDeny, Result: ResultHit, Detail: "answer " + a.String() + " in " + entry})
		}
		return
	}
	if !s.allowLocalBinding {
		if a, bad := s.firstLocal(addrs, t.port); bad {
			d.Verdict, d.Reason, d.Source, d.Cause = Deny, ReasonNotAllowedLocal, SourceBaseline, CauseNonPublicAnswer
			if d.tracing() { // the detail is built only for a trace
				d.addStep(Step{Step: StepLocalGuard, Result: ResultBlock, Detail: "resolves to non-public address " + a.String()})
			}
			return
		}
	}
	// The answers themselves are in d.Addrs (check prints them as "resolved").
	d.addStep(Step{Step: StepLocalGuard, Result: ResultPass, Detail: "every answer checked"})
}

// lookup answers host from the static answers, else DNS.
func (s *Snapshot) lookup(ctx context.Context, host string) ([]netip.Addr, error) {
	if as, ok := s.static[host]; ok && len(as) > 0 {
		return append([]netip.Addr(nil), as...), nil
	}
	return s.lookupDNS(ctx, host)
}

func (s *Snapshot) lookupDNS(ctx context.Context, host string) ([]netip.Addr, error) {
	if s.dns == nil {
		return nil, errNoResolver
	}
	addrs, err := s.dns.LookupNetIP(ctx, host)
	if err != nil {
		return nil, err
	}
	if len(addrs) == 0 {
		return nil, ErrNoAddresses
	}
	return addrs, nil
}

// modeGuardIn applies limited mode (SPEC §3.8) under mode (a scope may
// narrow full to limited) to an allowed request. With MITM admission a
// limited-mode CONNECT passes to interception (Intercept); the decision
// keeps its source.
func (s *Snapshot) modeGuardIn(mode string, req *Request, d *Decision) {
	if mode == ModeFull || mode == "" {
		d.addStep(Step{Step: StepMode, Result: ResultPass, Detail: ModeFull})
		return
	}
	reason := ReasonNone
	switch req.Protocol {
	case ProtoHTTPS:
		if s.mitm && strings.EqualFold(req.Method, methodConnect) {
			d.Intercept = true
			d.addStep(Step{Step: StepMode, Result: ResultPass, Detail: "limited: mitm"})
			return
		}
		reason = ReasonMITMRequired
	case ProtoSOCKS5:
		if req.Port == 443 && d.Intercept && s.mitm {
			// A host with request rules: intercepted, every inner request judged.
			d.addStep(Step{Step: StepMode, Result: ResultPass, Detail: "limited: mitm"})
			return
		}
		if req.Port == 443 {
			reason = ReasonMITMRequired
		} else {
			reason = ReasonMethodNotAllowed
		}
	default:
		if !MethodAllowed(ModeLimited, req.Method) {
			reason = ReasonMethodNotAllowed
		}
	}
	if reason == ReasonNone {
		if d.tracing() { // the detail is built only for a trace
			d.addStep(Step{Step: StepMode, Result: ResultPass, Detail: "limited: " + strings.ToUpper(req.Method)})
		}
		return
	}
	d.Verdict, d.Reason, d.Source, d.Cause = Deny, reason, SourceModeGuard, CauseLimitedMode
	if d.tracing() { // the detail is built only for a trace
		d.addStep(Step{Step: StepMode, Result: ResultBlock, Detail: "limited: " + string(reason)})
	}
}

const methodConnect = "CONNECT"

// localhostAddrs are what an allow-listed localhost is pinned to (len ==
// cap: an append to a decision's Addrs copies them).
var localhostAddrs = []netip.Addr{netip.AddrFrom4([4]byte{127, 0, 0, 1}), netip.IPv6Loopback()}

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
	if !mayBeLiteral(host) {
		return netip.Addr{}, false
	}
	a, err := netip.ParseAddr(host)
	return a, err == nil
}

// mayBeLiteral is false for a host parseLiteral refuses, decided without
// netip.ParseAddr: its refusal allocates an error, and most names (any
// starting with a-f among them) are refused. ParseAddr reads the host as
// IPv4 when '.' comes before any ':' or '%', and IPv4 is digits and dots
// only; as IPv6 when ':' comes first, after hex digits only; and refuses a
// '%' first or none of the three.
func mayBeLiteral(host string) bool {
	if host == "" {
		return false
	}
	if c := host[0]; !(c >= '0' && c <= '9' || c >= 'a' && c <= 'f' || c == ':') {
		return false
	}
	i := strings.IndexAny(host, ".:%")
	switch {
	case i < 0 || host[i] == '%':
		return false
	case host[i] == ':':
		return strings.Trim(host[:i], "0123456789abcdefABCDEF") == ""
	}
	return strings.Trim(host, "0123456789.") == ""
}
