package hostpolicy

import (
	"context"
	"net/netip"
	"sync/atomic"
	"testing"
)

// countingResolver fails every lookup and counts them: a disabled proxy
// must not even resolve.
type countingResolver struct{ n atomic.Int64 }

func (r *countingResolver) LookupNetIP(ctx context.Context, host string) ([]netip.Addr, error) {
	r.n.Add(1)
	return []netip.Addr{netip.MustParseAddr("93.184.216.34")}, nil
}

func wantDisabled(t *testing.T, what string, d Decision) {
	t.Helper()
	if d.Allowed() || d.Verdict != Deny || d.Reason != ReasonProxyDisabled || d.Source != SourceProxyState {
		t.Fatalf("%s: got %s %q %q, want deny proxy_disabled proxy_state", what, d.Verdict, d.Reason, d.Source)
	}
	if len(d.Addrs) != 0 || d.LocalLiteral || d.Pattern != "" || d.ApprovalID != "" || d.Override != "" {
		t.Fatalf("%s: a disabled decision carries nothing to dial or approve: %+v", what, d)
	}
	if len(d.Steps) != 1 || d.Steps[0] != (Step{Step: "mode", Result: "block", Detail: "network.enabled = false"}) {
		t.Fatalf("%s: steps %+v", what, d.Steps)
	}
}

// network.enabled = false beats every other step: allow-list hits (exact,
// wildcard, '*', exact local literal), deny hits, the local guard, limited
// mode, amendments and the decider, which is never asked.
func TestDisabledBeatsEverything(t *testing.T) {
	ctx := context.Background()
	dec := &recordingDecider{verdict: Allow}
	res := &countingResolver{}
	domains := map[string]string{"ok.test": "allow", "*.wild.test": "allow", "127.0.0.1": "allow", "bad.test": "deny"}
	for _, mode := range []string{ModeFull, ModeLimited} {
		e := newTestEngine(compileEnabled(t, false, domains, false), res, mode, dec)
		e.Amend("amended.test", Allow)
		if e.Enabled() || e.Snapshot().Enabled() {
			t.Fatal("Enabled() must report network.enabled = false")
		}
		for _, req := range []Request{
			{Host: "ok.test", Port: 80, Protocol: ProtoHTTP, Method: "GET"},
			{Host: "OK.Test.", Port: 443, Protocol: ProtoHTTPS, Method: "CONNECT"},
			{Host: "a.b.wild.test", Port: 22, Protocol: ProtoSOCKS5},
			{Host: "127.0.0.1", Port: 8080, Protocol: ProtoHTTP, Method: "GET"},
			{Host: "bad.test", Port: 80, Protocol: ProtoHTTP, Method: "GET"},
			{Host: "unknown.test", Port: 80, Protocol: ProtoHTTP, Method: "POST"},
			{Host: "amended.test", Port: 80, Protocol: ProtoHTTP, Method: "GET"},
			{Host: "10.0.0.1", Port: 80, Protocol: ProtoHTTP, Method: "GET"},
			{Host: "", Port: 80, Protocol: ProtoHTTP, Method: "GET"},
		} {
			d := e.Evaluate(ctx, req)
			wantDisabled(t, mode+" "+req.Host, d)
			if d.Port != req.Port {
				t.Errorf("%s: port %d, want %d", req.Host, d.Port, req.Port)
			}
			wantDisabled(t, "InnerDecision "+req.Host, e.InnerDecision(ctx, req))
			wantDisabled(t, "Recheck "+req.Host, e.Recheck(req.Host, int(req.Port), nil))
		}
		if d := e.Evaluate(ctx, Request{Trace: true, Host: "OK.Test.", Port: 443, Protocol: ProtoHTTPS}); d.Host != "ok.test" {
			t.Errorf("the decision names the normalised host: %q", d.Host)
		}
	}
	if n := res.n.Load(); n != 0 {
		t.Errorf("a disabled proxy resolved %d names", n)
	}
	if len(dec.calls) != 0 {
		t.Errorf("a disabled proxy asked the decider: %v", dec.calls)
	}

	// Even '*' with local binding on is off when the proxy is.
	e := newTestEngine(compileEnabled(t, false, map[string]string{"*": "allow"}, true), res, ModeFull, nil)
	wantDisabled(t, "star", e.Evaluate(ctx, Request{Trace: true, Host: "example.com", Port: 443, Protocol: ProtoHTTPS}))
}

// Swap flips the kill switch at once, both ways, without touching the
// amendments the reviewer made.
func TestDisabledSwapBothWays(t *testing.T) {
	ctx := context.Background()
	res := staticOnly{staticResolver(map[string][]string{"ok.test": {"93.184.216.34"}, "amended.test": {"93.184.216.34"}})}
	domains := map[string]string{"ok.test": "allow"}
	e := newTestEngine(compileEnabled(t, true, domains, false), res, ModeFull, nil)
	e.Amend("amended.test", Allow)
	req := Request{Trace: true, Host: "ok.test", Port: 80, Protocol: ProtoHTTP, Method: "GET"}
	amended := Request{Trace: true, Host: "amended.test", Port: 80, Protocol: ProtoHTTP, Method: "GET"}
	if !e.Evaluate(ctx, req).Allowed() || !e.Evaluate(ctx, amended).Allowed() || !e.Enabled() {
		t.Fatal("enabled policy must allow")
	}
	swapT(e, compileEnabled(t, false, domains, false), ModeFull)
	wantDisabled(t, "after swap off", e.Evaluate(ctx, req))
	wantDisabled(t, "amended after swap off", e.Evaluate(ctx, amended))
	swapT(e, compileEnabled(t, true, domains, false), ModeFull)
	if !e.Evaluate(ctx, req).Allowed() || !e.Evaluate(ctx, amended).Allowed() {
		t.Fatal("swap back on must allow again")
	}
	// An engine without a compiled policy is enabled with empty lists.
	if d := newTestEngine(nil, res, ModeFull, nil).Evaluate(ctx, req); d.Reason != ReasonNotAllowed {
		t.Fatalf("nil policy: %+v", d)
	}
	// The zero Policy fails closed.
	if (&Snapshot{}).Enabled() {
		t.Fatal("zero Policy must be disabled")
	}
}

// flippingDecider throws the kill switch while it "reviews", then approves.
type flippingDecider struct {
	e   *Engine
	off *Snapshot
	n   int
}

func (f *flippingDecider) Decide(_ context.Context, req Request, base Decision) Decision {
	f.n++
	swapT(f.e, f.off, ModeFull)
	return Decision{Verdict: Allow, Source: SourceDecider, ApprovalID: "ap1", Override: "allow_session"}
}

// An approval given after the kill switch was thrown does not let the
// request through.
func TestDisabledDuringReviewBeatsApproval(t *testing.T) {
	ctx := context.Background()
	res := staticOnly{staticResolver(map[string][]string{"unknown.test": {"93.184.216.34"}})}
	dec := &flippingDecider{off: compileEnabled(t, false, nil, false)}
	e := newTestEngine(compileEnabled(t, true, nil, false), res, ModeFull, dec)
	dec.e = e
	d := e.Evaluate(ctx, Request{Trace: true, Host: "unknown.test", Port: 80, Protocol: ProtoHTTP, Method: "GET"})
	if dec.n != 1 {
		t.Fatalf("decider calls %d, want 1", dec.n)
	}
	wantDisabled(t, "approved during the flip", d)
}
