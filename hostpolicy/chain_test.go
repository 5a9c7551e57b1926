package hostpolicy

import (
	"context"
	"net/netip"
	"strings"
	"sync"
	"testing"
)

// recordingResolver answers every name with fixed addresses and records
// each lookup: the test's view of the DNS server an attacker watches.
type recordingResolver struct {
	mu     sync.Mutex
	names  []string
	answer map[string][]netip.Addr
}

func (r *recordingResolver) LookupNetIP(_ context.Context, host string) ([]netip.Addr, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.names = append(r.names, host)
	if a, ok := r.answer[host]; ok {
		return a, nil
	}
	return []netip.Addr{netip.MustParseAddr("93.184.216.34")}, nil
}

func (r *recordingResolver) lookups() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]string(nil), r.names...)
}

// TestNoLookupBeforeAllow is SPEC 3.4: no DNS query for a name the allow
// list or a reviewer has not allowed — whatever the lists hold, with or
// without a decider that asks or denies.
func TestNoLookupBeforeAllow(t *testing.T) {
	for _, lists := range []map[string]string{nil, {"ok.test": "allow", "*.evil.test": "deny"}, {"ok.test": "allow", "10.0.0.0/8": "deny"}} {
		for _, verdict := range []Verdict{"", Ask, Deny} {
			res := &recordingResolver{}
			var dec Decider
			if verdict != "" {
				dec = &recordingDecider{verdict: verdict}
			}
			e := newTestEngine(mustCompile(t, lists, false), res, ModeFull, dec)
			for _, h := range []string{"c2VjcmV0.exfil.attacker.test", "x.evil.test", "another.attacker.test:443"} {
				for _, proto := range []Protocol{ProtoHTTP, ProtoHTTPS, ProtoSOCKS5} {
					d := e.Evaluate(context.Background(), Request{Host: h, Port: 443, Protocol: proto, Method: "GET"})
					if d.Allowed() || len(d.Addrs) != 0 {
						t.Fatalf("%s: %+v", h, d)
					}
				}
				e.Run(context.Background(), Request{Host: h, Port: 443}, RunOptions{NoDecider: true})
				e.Recheck(h, 443, nil)
			}
			if got := res.lookups(); len(got) != 0 {
				t.Fatalf("lists %v, decider %q: blocked names were looked up: %v", lists, verdict, got)
			}
		}
	}
}

// TestLookupAfterAllow: an allow-listed name and a decider-allowed name are
// resolved exactly once and judged (step 5).
func TestLookupAfterAllow(t *testing.T) {
	res := &recordingResolver{answer: map[string][]netip.Addr{"meta.test": {netip.MustParseAddr("169.254.169.254")}}}
	dec := &recordingDecider{verdict: Allow}
	e := newTestEngine(mustCompile(t, map[string]string{"ok.test": "allow", "meta.test": "allow", "169.254.169.254": "deny"}, false), res, ModeFull, dec)
	if d := e.Evaluate(context.Background(), Request{Host: "ok.test", Port: 80}); !d.Allowed() || len(d.Addrs) != 1 {
		t.Fatalf("allow-listed: %+v", d)
	}
	if d := e.Evaluate(context.Background(), Request{Host: "reviewed.test", Port: 80}); !d.Allowed() || d.Source != SourceDecider || len(d.Addrs) != 1 {
		t.Fatalf("decider-allowed: %+v", d)
	}
	if d := e.Evaluate(context.Background(), Request{Host: "meta.test", Port: 80}); d.Reason != ReasonDenied || d.Pattern != "169.254.169.254" {
		t.Fatalf("deny address entry must match a resolved answer: %+v", d)
	}
	if got := strings.Join(res.lookups(), ","); got != "ok.test,reviewed.test,meta.test" {
		t.Fatalf("lookups %s", got)
	}
}
