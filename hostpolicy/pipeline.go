package hostpolicy

import (
	"context"
	"net/netip"
	"strings"
)

// The one network decision pipeline (SPEC §3.4–3.9). Every decision —
// the data path's, a MITM inner request's, the re-check of an open
// connection, `netproxy check`, the shadow candidate's and `netproxy
// replay`'s — runs these stages in this order; the entry points
// (Evaluate, InnerDecision, Recheck, Predict, …) are presets of Options.
// Adding a stage is one entry in pipeline and its function.

// Stage names one stage of the pipeline.
type Stage string

const (
	StageProxyState    Stage = "proxy_state"    // network.enabled (the kill switch)
	StageNormalise     Stage = "normalise"      // SPEC §3.1
	StageDeny          Stage = "deny"           // the deny list, amendments, address entries
	StageLocalGuard    Stage = "local_guard"    // literals and static answers; no DNS
	StageAllow         Stage = "allow"          // the allow list (a miss is not_allowed)
	StageScopes        Stage = "scopes"         // per-session and per-execution narrower policies
	StageResolve       Stage = "resolve"        // live DNS, pinned or offline addresses, judged
	StageAddressScopes Stage = "address_scopes" // the scopes' address entries against the addresses
	StageOwnListener   Stage = "own_listener"   // netproxy never dials its own listeners (SPEC §3.5)
	StageDecider       Stage = "decider"        // not_allowed only; its allow re-runs the pipeline
	StageRequests      Stage = "requests"       // request rules on method and path (SPEC §3.10)
	StageModeGuard     Stage = "mode_guard"     // limited mode (SPEC §3.8)
	StageAdmission     Stage = "admission"      // the data path's own stages (RunOptions.Admit)
)

// pipeline is the order. A stage ends the decision (a block) or passes it
// on; an allowed decision runs every stage.
var pipeline = [...]Stage{
	StageProxyState,
	StageNormalise,
	StageDeny,
	StageLocalGuard,
	StageAllow,
	StageScopes,
	StageResolve,
	StageAddressScopes,
	StageOwnListener,
	StageDecider,
	StageRequests,
	StageModeGuard,
	StageAdmission,
}

// Stages returns the pipeline's stage names in order (docs and tests).
func Stages() []Stage { return append([]Stage(nil), pipeline[:]...) }

// Resolution says where the resolve stage gets an allowed name's addresses.
type Resolution uint8

const (
	// ResolveLive queries DNS now (only for an allowed name).
	ResolveLive Resolution = iota
	// ResolvePinned judges RunOptions.Pinned, the addresses an open
	// connection dialed, and never queries (the re-check, SPEC §3.9).
	ResolvePinned
	// ResolveOffline judges the addresses the live decision pinned and
	// never queries: Snapshot.Predict and Engine.Shadow, which hand the
	// pipeline the live decision.
	ResolveOffline
)

// RunOptions select a preset of the pipeline. The zero value is an outer
// request: live resolution, the engine's decider, no narrower policy, no
// admission.
type RunOptions struct {
	// Scopes, when non-nil, are the request's narrower policies.
	Scopes []*Scope
	// ScopeSource, when Scopes is nil, is asked for the request's
	// execution and session — again after a review, so that a narrower
	// policy installed meanwhile applies to the reviewer's allow too.
	ScopeSource ScopeSource
	// Inner is a request inside an intercepted tunnel: no decider (the
	// CONNECT consulted it), the method under the mode guard.
	Inner bool
	// Resolve selects live, pinned or offline resolution.
	Resolve Resolution
	// Pinned are the addresses of ResolvePinned.
	Pinned []netip.Addr
	// NoDecider skips the decider: not_allowed is final.
	NoDecider bool
	// Approvals (ResolveOffline): a decider exists, so a not_allowed is
	// predicted as ask — it is never called offline.
	Approvals bool
	// Granted (Inner): the tunnel's CONNECT was allowed by a reviewer, so
	// an inner not_allowed stands allowed as that review decided (the deny
	// list, local guard and narrower policies still apply) and the request
	// rules refine it (SPEC §3.10: a host a reviewer allowed).
	Granted bool
	// Admit, when set, is the admission stage (the proxy's own listeners,
	// credential interception, MITM).
	Admit Admitter
}

// ScopeSource returns the narrower policies a request of executionID /
// sessionID must pass (a *Scopes).
type ScopeSource interface {
	For(executionID, sessionID string) []*Scope
}

// Admitter is the pipeline's last stage on the data path: what the proxy
// admits of an allowed decision. It sees allowed decisions only and may
// block one or mark it intercepted, with a typed Cause.
type Admitter interface {
	Admit(req Request, d Decision) Decision
}

// Cause is the finer, typed cause of a decision made after the host chain
// (SPEC §3.7 "cause"); empty when the chain's reason says it all.
type Cause string

const (
	// CauseCredential: intercepted only because the host has a credential.
	CauseCredential Cause = "credential"
	// CauseNoInterceptor: limited mode needs MITM and none is wired.
	CauseNoInterceptor Cause = "no_interceptor"
	// CauseOwnListener: the target is one of netproxy's own listeners.
	CauseOwnListener Cause = "own_listener"
	// CauseRequestRules: intercepted because the host has request rules
	// (SPEC §3.10), whatever the mode.
	CauseRequestRules Cause = "request_rules"
	// CauseRule: a request rule decided (request_denied, or its ask).
	CauseRule Cause = "rule"
	// CausePathNotNormal: the path of a request toward a host with
	// request rules does not normalise (request_denied).
	CausePathNotNormal Cause = "path_not_normal"

	// The host chain's causes, set by the stage that decides (SPEC §3.7).
	CauseDenyList        Cause = "deny_list"         // a deny-list entry (name, address, answer)
	CauseLocalLiteral    Cause = "local_literal"     // localhost or a non-public IP literal
	CauseNonPublicAnswer Cause = "non_public_answer" // a static, resolved or pinned address is non-public
	CauseNoPinnedAddress Cause = "no_pinned_address" // an open connection to a name with no pinned address
	CauseDNSError        Cause = "dns_error"         // SERVFAIL, NXDOMAIN, no address, another error
	CauseDNSTimeout      Cause = "dns_timeout"       // no answer within dns.timeout
	CauseReviewer        Cause = "reviewer"          // the decider refused or asks
	CauseLimitedMode     Cause = "limited_mode"      // the limited-mode method or protocol guard
	CauseUpgrade         Cause = "upgrade"           // limited mode: a request carrying Upgrade
)

// BlockCause is the cause a blocked decision reports: the stage's typed
// Cause, else the reason itself (every block names one, SPEC §3.7).
func (d Decision) BlockCause() Cause {
	if d.Cause != "" {
		return d.Cause
	}
	switch d.Reason {
	case ReasonNotAllowed:
		if d.Source == SourceDecider {
			return CauseReviewer
		}
		return "not_in_allowlist"
	case ReasonProxyDisabled:
		return "kill_switch"
	case ReasonPolicyDenied:
		if d.Level != "" {
			return Cause(d.Level + "_policy")
		}
	}
	return Cause(d.Reason)
}

// pass is one run of the pipeline. It lives on the caller's stack: the
// stages are dispatched by a switch, not through function values, so that
// the data path's decision allocates nothing for its own state.
type pass struct {
	e *Engine // nil offline
	s *Snapshot
	// amends are the live amendments (Engine.Shadow judges a candidate
	// snapshot with the engine's).
	amends *amendments
	req    Request
	o      RunOptions
	scopes []*Scope
	d      Decision
	t      target
	// final: the host chain's answer cannot change by resolving (an
	// allowed local literal).
	final bool
	// approved is the decider's allow while the pipeline re-runs on the
	// snapshot current when it answered.
	approved    *Decision
	mode, level string
	// modeExempt: an `allow` request rule (SPEC §3.10) matched, which
	// exempts the request from the limited-mode method and Upgrade guard.
	// The request-rule stage (before mode_guard) sets it; nothing else may.
	modeExempt bool
}

// Run is the pipeline: every decision of netproxy is one of its presets.
func (e *Engine) Run(ctx context.Context, req Request, o RunOptions) Decision {
	s := e.state.Load()
	return s.run(ctx, e, req, o, s.amends, nil)
}

// run is the pipeline over s with amends. live is what the live pipeline
// decided (ResolveOffline only): it is handed to the stages that read it
// rather than kept in the pass, so that an offline judgement does not move
// it to the heap.
func (s *Snapshot) run(ctx context.Context, e *Engine, req Request, o RunOptions, amends *amendments, live *Decision) Decision {
	p := pass{e: e, s: s, amends: amends, req: req, o: o, scopes: o.Scopes}
	if p.scopes == nil && o.ScopeSource != nil {
		p.scopes = o.ScopeSource.For(req.ExecutionID, req.SessionID)
	}
	for i := 0; i < len(pipeline); {
		switch p.stage(ctx, pipeline[i], live) {
		case stageNext:
			i++
		case stageAgain:
			i = 0
		default:
			return p.d
		}
	}
	return p.d
}

type stageResult uint8

const (
	stageNext  stageResult = iota
	stageStop              // the decision is made
	stageAgain             // re-run on the current snapshot (the decider allowed)
)

func next(stop bool) stageResult {
	if stop {
		return stageStop
	}
	return stageNext
}

// stage dispatches one stage to its function.
func (p *pass) stage(ctx context.Context, st Stage, live *Decision) stageResult {
	switch st {
	case StageProxyState:
		return next(p.proxyState())
	case StageNormalise:
		return next(p.normalise())
	case StageDeny:
		return next(p.deny())
	case StageLocalGuard:
		return next(p.localGuard())
	case StageAllow:
		p.allow()
		return stageNext
	case StageScopes:
		return next(p.scopeLists(live))
	case StageResolve:
		return next(p.resolve(ctx, live))
	case StageAddressScopes:
		return next(scopeAddrBlock(&p.d, p.d.Addrs, p.scopes))
	case StageOwnListener:
		return next(p.ownListener())
	case StageDecider:
		return p.decide(ctx, live)
	case StageRequests:
		return next(p.requests(ctx, live))
	case StageModeGuard:
		p.modeGuard()
		return stageNext
	case StageAdmission:
		p.tlsName()
		if p.o.Admit != nil && p.d.Allowed() {
			p.d = p.o.Admit.Admit(p.req, p.d)
		}
		return stageNext
	}
	panic("hostpolicy: stage " + string(st) + " has no function")
}

// proxyState: network.enabled = false blocks before anything is looked up.
func (p *pass) proxyState() bool {
	if p.s.enabled {
		return false
	}
	p.d = disabledDecision(p.req)
	return true
}

// scopeLists is the scopes stage: the narrower policies' lists (before
// any DNS query and before the decider, so that no reviewer widens past
// a narrower deny), and the effective mode.
func (p *pass) scopeLists(live *Decision) bool {
	if len(p.scopes) > 0 {
		if scopeBlock(&p.d, p.t, p.scopes) {
			return true
		}
	} else if live != nil && live.Level != "" && live.Reason == ReasonPolicyDenied {
		// Offline without the request's scopes (replay): its narrower
		// policy blocked it and a candidate does not change those.
		p.d.Verdict, p.d.Reason, p.d.Source, p.d.Level, p.d.Pattern = Deny, ReasonPolicyDenied, SourceBaseline, live.Level, live.Pattern
		return true
	}
	p.mode, p.level = p.s.scopeMode(p.scopes)
	if live != nil && len(p.scopes) == 0 && live.Level != "" && live.Source == SourceModeGuard {
		p.mode, p.level = ModeLimited, live.Level
	}
	return false
}

// resolve is step 5: an allowed name's addresses, judged (live DNS); or an
// open connection's pinned addresses; or, offline, the addresses the live
// decision pinned.
func (p *pass) resolve(ctx context.Context, live *Decision) bool {
	switch p.o.Resolve {
	case ResolvePinned:
		return p.judgePinned(p.o.Pinned)
	case ResolveOffline:
		if p.d.Allowed() && !p.final && !p.t.isIP && !p.t.hasStatic && live != nil && len(live.Addrs) > 0 {
			return p.judgeAddrs(live.Addrs)
		}
		return false
	}
	if !p.d.Allowed() || p.final {
		return false
	}
	p.s.resolveAllowed(ctx, &p.d, &p.t)
	return !p.d.Allowed()
}

// judgePinned re-judges an open connection's addresses without a query:
// the deny list's address entries and the local guard. A name with no
// pinned address proves nothing about where it went: fail closed.
func (p *pass) judgePinned(addrs []netip.Addr) bool {
	if len(addrs) == 0 && !p.s.allowLocalBinding && !p.d.LocalLiteral && p.d.Host != "" && !p.t.isIP {
		p.d.Verdict, p.d.Reason, p.d.Source, p.d.Cause = Deny, ReasonNotAllowedLocal, SourceBaseline, CauseNoPinnedAddress
		p.d.addStep(Step{Step: StepLocalGuard, Result: ResultBlock, Detail: "no pinned address"})
		return true
	}
	if p.judgeAddrs(addrs) {
		return true
	}
	if len(addrs) > 0 {
		p.d.Addrs = append([]netip.Addr(nil), addrs...)
	}
	return false
}

// judgeAddrs checks addresses the pipeline did not resolve itself.
func (p *pass) judgeAddrs(addrs []netip.Addr) bool {
	if a, entry, ok := p.s.deny.matchAnyAddr(addrs, p.t.port); ok {
		p.d.Verdict, p.d.Reason, p.d.Source, p.d.Pattern, p.d.Cause = Deny, ReasonDenied, SourceBaseline, entry, CauseDenyList
		if p.d.tracing() { // the detail is built only for a trace
			p.d.addStep(Step{Step: StepDeny, Result: ResultHit, Detail: "pinned address " + a.String() + " in " + entry})
		}
		return true
	}
	if !p.s.allowLocalBinding && !p.d.LocalLiteral {
		if a, bad := p.s.firstLocal(addrs, p.t.port); bad {
			p.d.Verdict, p.d.Reason, p.d.Source, p.d.Cause = Deny, ReasonNotAllowedLocal, SourceBaseline, CauseNonPublicAnswer
			if p.d.tracing() { // the detail is built only for a trace
				p.d.addStep(Step{Step: StepLocalGuard, Result: ResultBlock, Detail: "pinned address " + a.String() + " is non-public"})
			}
			return true
		}
	}
	if p.o.Resolve == ResolveOffline {
		p.d.Addrs = addrs
	}
	return false
}

// decide is the decider stage: only not_allowed reaches a decider, which
// may turn it into allow, deny or ask. Its allow is re-checked: the
// pipeline runs again on the snapshot current when it answered (a deny or
// kill switch that arrived meanwhile wins), the name is then resolved and
// judged like an allow-listed one, and the mode guard still applies.
func (p *pass) decide(ctx context.Context, live *Decision) stageResult {
	if p.approved != nil {
		if p.d.Allowed() && !p.final {
			out := p.approved
			p.d.Source = SourceDecider
			p.d.ApprovalID, p.d.Override, p.d.Rationale = out.ApprovalID, out.Override, out.Rationale
			if out.Pattern != "" {
				p.d.Pattern = out.Pattern
			}
		}
		return stageNext
	}
	if p.d.Allowed() {
		return stageNext
	}
	// not_allowed
	switch {
	case p.o.Inner && p.o.Granted && p.d.Reason == ReasonNotAllowed && p.d.Host != "":
		p.d.Verdict, p.d.Reason, p.d.Source = Allow, ReasonNone, SourceDecider
		return stageNext
	case p.o.Inner || p.o.NoDecider || p.o.Resolve == ResolvePinned:
		return stageStop
	case p.o.Resolve == ResolveOffline:
		p.predictDecider(live)
		return stageStop
	case p.e == nil || p.e.decider == nil || p.d.Host == "":
		return stageStop
	}
	// The decider keys its caches on the canonical host.
	p.req.Host = p.d.Host
	out := p.e.decider.Decide(ctx, p.req, p.d)
	cur := p.e.state.Load()
	if !cur.enabled {
		// No approval outlives the kill switch.
		p.d = disabledDecision(p.req)
		return stageStop
	}
	if out.Verdict != Allow {
		d := &p.d
		d.ApprovalID, d.Override, d.Rationale = out.ApprovalID, out.Override, out.Rationale
		d.ApprovalOutcome = out.ApprovalOutcome
		d.Source, d.Verdict, d.Reason, d.Cause = SourceDecider, Deny, out.Reason, CauseReviewer
		if out.Verdict == Ask {
			d.Verdict = Ask
		}
		if d.Reason == ReasonNone {
			d.Reason = ReasonPolicyDenied
		}
		return stageStop
	}
	p.s, p.amends, p.approved = cur, cur.amends, &out
	if p.o.Scopes == nil && p.o.ScopeSource != nil {
		// A narrower policy installed during the review applies too.
		p.scopes = p.o.ScopeSource.For(p.req.ExecutionID, p.req.SessionID)
	}
	return stageAgain
}

// predictDecider is the decider offline: never called; a not_allowed is
// predicted as ask — unless the live decision came from the decider too,
// in which case the same reviewer answered and its verdict stands.
func (p *pass) predictDecider(live *Decision) {
	if !p.o.Approvals {
		return
	}
	if live != nil && live.Source == SourceDecider && live.Reason != ReasonProxyDisabled {
		p.d.Verdict, p.d.Reason, p.d.Source, p.d.Pattern = live.Verdict, live.Reason, SourceDecider, live.Pattern
		return
	}
	p.d.Verdict, p.d.Source = Ask, SourceDecider
}

// ownListener refuses an allowed target that is one of netproxy's own
// listen addresses, whatever allowed it (allow_local_binding, an
// allow-listed 127.0.0.1): the decision's addresses, or the literal
// itself when the local guard was skipped. Offline (replay, shadow) it
// judges the candidate's listen addresses, as serve judges its own.
func (p *pass) ownListener() bool {
	if !p.d.Allowed() || p.s.self == nil {
		return false
	}
	addrs := p.d.Addrs
	if len(addrs) == 0 && p.t.isIP {
		addrs = []netip.Addr{p.t.addr}
	}
	if !p.s.self.ContainsAny(addrs, p.t.port) {
		return false
	}
	p.d.Verdict, p.d.Reason, p.d.Source, p.d.Cause = Deny, ReasonNotAllowedLocal, SourceBaseline, CauseOwnListener
	p.d.addStep(Step{Step: StepLocalGuard, Result: ResultBlock, Detail: "netproxy's own listen address"})
	return true
}

// tlsName marks an allowed opaque tunnel to a name for the TLS-name check
// (SPEC §3.11): CONNECT or SOCKS5, not an IP literal, with
// network.check_tls_name. The data path peeks its first client bytes
// unless admission intercepts it (interception sees the name itself).
func (p *pass) tlsName() {
	if !p.d.Allowed() || !p.s.checkTLSName || p.t.isIP || p.d.Intercept || p.o.Inner {
		return
	}
	switch {
	case p.req.Protocol == ProtoSOCKS5:
	case p.req.Protocol == ProtoHTTPS && strings.EqualFold(p.req.Method, methodConnect):
	default:
		return
	}
	p.d.CheckTLSName = true
}

// upgradeRefused is the limited-mode answer to a request carrying Upgrade.
func upgradeRefused(d *Decision) {
	d.Verdict, d.Reason, d.Source, d.Cause = Deny, ReasonMethodNotAllowed, SourceModeGuard, CauseUpgrade
	d.addStep(Step{Step: StepMode, Result: ResultBlock, Detail: "limited: Upgrade"})
}

// modeGuard applies the mode under the narrowest scope: an outer request's
// protocol and method (a limited-mode CONNECT may pass to interception),
// an inner request's method. A re-check has no method to judge.
func (p *pass) modeGuard() {
	if p.o.Resolve == ResolvePinned || !p.d.Allowed() || p.modeExempt {
		return
	}
	if p.d.RuleAllowed && p.mode != ModeFull && p.mode != "" {
		// An allow request rule is the mode guard's one exception (SPEC
		// §3.8), for the method and for an Upgrade alike.
		p.d.addStep(Step{Step: StepMode, Result: ResultPass, Detail: "limited: request rule exception"})
		return
	}
	if p.req.Upgrade && p.mode != ModeFull && p.mode != "" {
		// A 101 turns the request into an unchecked two-way channel.
		upgradeRefused(&p.d)
	} else if p.o.Inner {
		innerMode(p.mode, &p.req, &p.d)
	} else {
		p.s.modeGuardIn(p.mode, &p.req, &p.d)
	}
	withLevel(&p.d, p.level)
}
