package rollout

import (
	"context"
	"net/netip"

	"github.com/netproxy/netproxy/hostpolicy"
)

// Evaluator is the data path's decision chain: the live engine narrowed by
// the request's scopes, with the shadow policy judged beside it. It is what
// internal/proxy calls (Evaluate, InnerDecision, Recheck, RecheckConn).
type Evaluator struct {
	engine    *hostpolicy.Engine
	scopes    *Scopes
	shadow    *Shadow
	approvals bool
}

// NewEvaluator wraps engine. scopes and shadow may be nil. approvals is
// approvals.enabled: a candidate not_allowed is then predicted as ask.
func NewEvaluator(engine *hostpolicy.Engine, scopes *Scopes, shadow *Shadow, approvals bool) *Evaluator {
	if scopes == nil {
		scopes = NewScopes()
	}
	return &Evaluator{engine: engine, scopes: scopes, shadow: shadow, approvals: approvals}
}

// Scopes is the narrower policy store.
func (e *Evaluator) Scopes() *Scopes { return e.scopes }

// Shadow is the shadow policy (nil when none was wired).
func (e *Evaluator) Shadow() *Shadow { return e.shadow }

// Evaluate is the live decision (host-wide chain and scopes, decider for
// not_allowed). When a candidate is loaded it is judged too, offline;
// a disagreement is attached as Decision.Shadow and counted. The live
// decision is never changed by it.
func (e *Evaluator) Evaluate(ctx context.Context, req hostpolicy.Request) hostpolicy.Decision {
	scopes := e.scopes.For(req.ExecutionID, req.SessionID)
	d := e.engine.EvaluateScoped(ctx, req, scopes)
	if d.Allowed() && d.Source == hostpolicy.SourceDecider {
		// A review may have taken minutes: a narrower policy installed
		// meanwhile applies to its answer too.
		if now := e.scopes.For(req.ExecutionID, req.SessionID); !sameScopes(scopes, now) {
			scopes = now
			d = hostpolicy.ApplyScopes(d, scopes)
		}
	}
	return e.judgeShadow(req, d, scopes, false)
}

func sameScopes(a, b []*hostpolicy.Scope) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// InnerDecision judges one request inside an intercepted tunnel.
func (e *Evaluator) InnerDecision(ctx context.Context, req hostpolicy.Request) hostpolicy.Decision {
	scopes := e.scopes.For(req.ExecutionID, req.SessionID)
	d := e.engine.InnerDecisionScoped(ctx, req, scopes)
	return e.judgeShadow(req, d, scopes, true)
}

func (e *Evaluator) judgeShadow(req hostpolicy.Request, live hostpolicy.Decision, scopes []*hostpolicy.Scope, inner bool) hostpolicy.Decision {
	cand := e.shadow.candidate()
	if cand == nil {
		return live
	}
	p := e.engine.Shadow(cand, req, live, hostpolicy.PredictOptions{Approvals: e.approvals, Scopes: scopes, Inner: inner})
	if p.Verdict == live.Verdict {
		return live
	}
	live.Shadow = &hostpolicy.ShadowDecision{Verdict: p.Verdict, Reason: p.Reason, Pattern: p.Pattern, Source: p.Source, Level: p.Level}
	host := live.Host
	if host == "" {
		host = p.Host
	}
	e.shadow.record(host, live, p)
	return live
}

// Recheck re-judges an unattributed open connection: the host-wide chain
// and the default session's policy.
func (e *Evaluator) Recheck(host string, port int, addrs []netip.Addr) hostpolicy.Decision {
	return e.RecheckConn(host, port, addrs, "", "")
}

// RecheckConn re-judges an open connection of an execution/session
// against the current host-wide snapshot and its scopes, without any DNS
// query; a scope block is policy_denied.
func (e *Evaluator) RecheckConn(host string, port int, addrs []netip.Addr, executionID, sessionID string) hostpolicy.Decision {
	return e.engine.RecheckScoped(host, port, addrs, e.scopes.For(executionID, sessionID))
}
