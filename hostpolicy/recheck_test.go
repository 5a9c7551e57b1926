package hostpolicy

import (
	"net/netip"
	"sync/atomic"
	"testing"
)

// Recheck judges a pinned target with no lookup: deny-list and amended
// deny hits, non-public pinned answers and the kill switch close; an
// allow-list miss (a reviewer's allowance) does not.
func TestRecheckUsesPinnedAddressesOnly(t *testing.T) {
	res := &countingResolver{}
	pub := []netip.Addr{netip.MustParseAddr("93.184.216.34")}
	lo := []netip.Addr{netip.MustParseAddr("127.0.0.1")}
	domains := map[string]string{"ok.test": "allow", "bad.test": "deny", "127.0.0.1": "allow"}
	e := newTestEngine(compileEnabled(t, true, domains, false), res, ModeFull, nil)
	cases := []struct {
		host  string
		addrs []netip.Addr
		want  Reason
	}{
		{"ok.test", pub, ReasonNone},
		{"bad.test", pub, ReasonDenied},
		{"ok.test", lo, ReasonNotAllowedLocal},  // pinned answer is loopback
		{"ok.test", nil, ReasonNotAllowedLocal}, // nothing pinned: fail closed
		{"127.0.0.1", lo, ReasonNone},           // exact allow-listed local literal
		{"10.0.0.1", []netip.Addr{netip.MustParseAddr("10.0.0.1")}, ReasonNotAllowedLocal},
		{"approved.test", pub, ReasonNotAllowed}, // a reviewer's allowance: not a close reason
	}
	for _, c := range cases {
		if d := e.Recheck(c.host, 443, c.addrs); d.Reason != c.want {
			t.Errorf("Recheck(%s, %v) = %q, want %q", c.host, c.addrs, d.Reason, c.want)
		}
	}
	e.Amend("ok.test", Deny)
	if d := e.Recheck("ok.test", 443, pub); d.Reason != ReasonDenied {
		t.Errorf("after deny_always: %q", d.Reason)
	}
	swapT(e, compileEnabled(t, false, domains, false), ModeFull)
	if d := e.Recheck("approved.test", 443, pub); d.Reason != ReasonProxyDisabled {
		t.Errorf("kill switch: %q", d.Reason)
	}
	if n := res.n.Load(); n != 0 {
		t.Fatalf("Recheck looked up %d names", n)
	}
}

// Subscribe's callbacks run after every Swap and Amend.
func TestSubscribeSeesSwapAndAmend(t *testing.T) {
	e := newTestEngine(nil, &countingResolver{}, ModeFull, nil)
	var n atomic.Int32
	e.Subscribe(func() { n.Add(1) })
	swapT(e, compileEnabled(t, true, map[string]string{"a.test": "allow"}, false), ModeFull)
	e.Amend("b.test", Deny)
	e.Amend("c.test", Allow)
	if got := n.Load(); got != 3 {
		t.Fatalf("callbacks %d, want 3", got)
	}
}
