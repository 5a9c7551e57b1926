// Package rollout owns the safe-rollout layer around the live decision
// pipeline (issue 15): the shadow (candidate) policy judged beside every
// live decision, with its bounded per-host summary (/api/shadow), and
// `netproxy replay` (rollout/replay). The narrower per-execution and
// per-session policies are the pipeline's own (hostpolicy.Scopes); the
// Evaluator hands the store to it.
//
// It must never change a live decision because of the shadow policy, never
// resolve a name or call a reviewer for the shadow policy, and never
// record a token, a query string or a header value.
package rollout

import (
	"context"

	"github.com/netproxy/netproxy/attribution"
	"github.com/netproxy/netproxy/hostpolicy"
)

// Evaluator is the data path's pipeline: the live engine narrowed by the
// request's scopes, with the shadow policy judged beside it. It is what
// internal/proxy calls (Run).
type Evaluator struct {
	engine    *hostpolicy.Engine
	scopes    *hostpolicy.Scopes
	shadow    *Shadow
	approvals bool
}

// NewEvaluator wraps engine. scopes and shadow may be nil. approvals is
// approvals.enabled: a candidate not_allowed is then predicted as ask.
func NewEvaluator(engine *hostpolicy.Engine, scopes *hostpolicy.Scopes, shadow *Shadow, approvals bool) *Evaluator {
	if scopes == nil {
		scopes = hostpolicy.NewScopes(attribution.DefaultSession)
	}
	return &Evaluator{engine: engine, scopes: scopes, shadow: shadow, approvals: approvals}
}

// Scopes is the narrower policy store.
func (e *Evaluator) Scopes() *hostpolicy.Scopes { return e.scopes }

// Shadow is the shadow policy (nil when none was wired).
func (e *Evaluator) Shadow() *Shadow { return e.shadow }

// Run is the pipeline (hostpolicy.Engine.Run) for the data path: the
// request's narrower policies come from the store (asked again after a
// review), and a live decision — not a re-check — is judged by the shadow
// candidate too, offline; a disagreement is attached as Decision.Shadow
// and counted. The live decision is never changed by it.
func (e *Evaluator) Run(ctx context.Context, req hostpolicy.Request, o hostpolicy.RunOptions) hostpolicy.Decision {
	if o.Scopes == nil && o.ScopeSource == nil {
		o.ScopeSource = e.scopes
	}
	d := e.engine.Run(ctx, req, o)
	if o.Resolve == hostpolicy.ResolveLive {
		// In place: the decision is not copied through the shadow's judgement.
		e.judgeShadow(&req, &d, o.Inner)
	}
	return d
}

// Evaluate is Run's outer-request preset.
func (e *Evaluator) Evaluate(ctx context.Context, req hostpolicy.Request) hostpolicy.Decision {
	return e.Run(ctx, req, hostpolicy.RunOptions{})
}

func (e *Evaluator) judgeShadow(req *hostpolicy.Request, live *hostpolicy.Decision, inner bool) {
	cand := e.shadow.candidate()
	if cand == nil {
		return
	}
	scopes := e.scopes.For(req.ExecutionID, req.SessionID)
	p := e.engine.Shadow(cand, *req, *live, hostpolicy.PredictOptions{Approvals: e.approvals, Scopes: scopes, Inner: inner})
	if p.Verdict == live.Verdict {
		return
	}
	live.Shadow = &hostpolicy.ShadowDecision{Verdict: p.Verdict, Reason: p.Reason, Pattern: p.Pattern, Source: p.Source, Level: p.Level}
	host := live.Host
	if host == "" {
		host = p.Host
	}
	e.shadow.record(host, *live, p)
}
