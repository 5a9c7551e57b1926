package hostpolicy

import (
	"context"
	"strings"
)

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
	return s.predict(req, &live, o, s.amends)
}

func (s *Snapshot) predict(req Request, live *Decision, o PredictOptions, amends *amendments) Decision {
	req.Trace = o.Trace
	return s.run(context.Background(), nil, req, RunOptions{
		Resolve: ResolveOffline, Scopes: o.Scopes, Inner: o.Inner, Approvals: o.Approvals,
	}, amends, live)
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
	return cand.predict(req, &live, o, e.state.Load().amends)
}
