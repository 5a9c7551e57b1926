package hostpolicy

import "strings"

// PredictOptions say what an offline judgement may use besides the
// snapshot itself.
type PredictOptions struct {
	// Approvals: approvals are enabled, so a not_allowed would reach the
	// decider. It is never called: the prediction is Ask (reason
	// not_allowed, source decider) — unless Live came from the decider
	// too, in which case the same reviewer answered and Live's verdict
	// stands.
	Approvals bool
	// Scopes are the request's narrower policies, when known (the shadow
	// evaluation knows them; replay does not and relies on Live.Level).
	Scopes []*Scope
	// Inner marks a request inside an intercepted tunnel: the host chain
	// and the method under the mode, no decider.
	Inner bool
	// Trace records the steps (Decision.Steps); off, nothing is recorded.
	Trace bool
}

// Predict judges req against s offline, as the live chain would have had s
// been the live snapshot: no DNS query and no decider call, ever. What the
// live chain learned is taken from live: the addresses it pinned
// (live.Addrs: the answers a name resolved to), whether a narrower policy
// blocked it (live.Level) and whether the decider answered it. A name
// allowed by s that the live chain never resolved (it blocked it first) is
// judged on its static answers, else assumed to resolve to public
// addresses: Predict cannot know better without a query. It is what the
// shadow policy and `netproxy replay` run.
func (s *Snapshot) Predict(req Request, live Decision, o PredictOptions) Decision {
	if !s.enabled {
		return disabledDecision(req)
	}
	d, t, final := s.chainTraced(req, o.Trace)
	if final && !d.Allowed() {
		return d
	}
	if len(o.Scopes) > 0 {
		if scopeBlock(&d, t, o.Scopes) {
			return d
		}
	} else if live.Level != "" && live.Reason == ReasonPolicyDenied {
		// The request's narrower policy blocked it and the candidate does
		// not change narrower policies.
		d.Verdict, d.Reason, d.Source, d.Level, d.Pattern = Deny, ReasonPolicyDenied, SourceBaseline, live.Level, live.Pattern
		return d
	}
	mode, level := s.scopeMode(o.Scopes)
	if len(o.Scopes) == 0 && live.Level != "" && live.Source == SourceModeGuard {
		mode, level = ModeLimited, live.Level
	}
	if !final && d.Allowed() {
		if !t.isIP && !t.hasStatic && len(live.Addrs) > 0 {
			addrs := live.Addrs
			if a, entry, ok := s.deny.matchAnyAddr(addrs, t.port); ok {
				d.Verdict, d.Reason, d.Pattern = Deny, ReasonDenied, entry
				d.addStep(Step{Step: StepDeny, Result: ResultHit, Detail: "pinned address " + a.String() + " in " + entry})
				return d
			}
			if !s.allowLocalBinding {
				if a, bad := s.firstLocal(addrs, t.port); bad {
					d.Verdict, d.Reason = Deny, ReasonNotAllowedLocal
					d.addStep(Step{Step: StepLocalGuard, Result: ResultBlock, Detail: "pinned address " + a.String() + " is non-public"})
					return d
				}
			}
			d.Addrs = addrs
			if scopeAddrBlock(&d, addrs, o.Scopes) {
				return d
			}
		}
	}
	if !d.Allowed() {
		// not_allowed: the decider's stage.
		if !o.Approvals || o.Inner {
			return d
		}
		if live.Source == SourceDecider && live.Reason != ReasonProxyDisabled {
			d.Verdict, d.Reason, d.Source, d.Pattern = live.Verdict, live.Reason, SourceDecider, live.Pattern
			return d
		}
		d.Verdict, d.Source = Ask, SourceDecider
		return d
	}
	if o.Inner {
		return withLevel(innerMode(mode, req, d), level)
	}
	return withLevel(s.modeGuardIn(mode, req, d), level)
}

// IsInner reports whether an audited request was one inside an
// intercepted tunnel (protocol https with a method other than CONNECT).
func IsInner(proto Protocol, method string) bool {
	return proto == ProtoHTTPS && method != "" && !strings.EqualFold(method, methodConnect)
}

// Shadow judges req against cand (the candidate snapshot) beside a live
// decision, with the live engine's amendments (allow_always/deny_always
// made since the last reload apply to both): see Snapshot.Predict.
func (e *Engine) Shadow(cand *Snapshot, req Request, live Decision, o PredictOptions) Decision {
	if cand == nil {
		return live
	}
	c := *cand
	c.amends = e.state.Load().amends
	return c.Predict(req, live, o)
}
