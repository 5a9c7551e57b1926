package hostpolicy

import (
	"context"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
)

// TestAddressEntries is SPEC 3.2: IP literals and CIDR prefixes in both
// lists, IPv4 entries matching the IPv4-embedding IPv6 forms.
func TestAddressEntries(t *testing.T) {
	res := &recordingResolver{answer: map[string][]netip.Addr{
		"meta.test":     {netip.MustParseAddr("169.254.169.254")},
		"meta6.test":    {netip.MustParseAddr("64:ff9b::a9fe:a9fe")},
		"registry.test": {netip.MustParseAddr("10.20.1.2")},
		"other.test":    {netip.MustParseAddr("10.30.0.1")},
		"mixed.test":    {netip.MustParseAddr("8.8.8.8"), netip.MustParseAddr("100.64.1.1")},
		"ula.test":      {netip.MustParseAddr("fd12::1")},
		"pub.test":      {netip.MustParseAddr("8.8.8.8")},
		"loop.test":     {netip.MustParseAddr("127.0.0.1")},
	}}
	domains := map[string]string{
		"*": "allow", "169.254.169.254": "deny", "100.64.0.0/10": "deny", "fd00::/8": "allow",
		"10.20.0.0/16": "allow", "10.20.9.0/24": "deny", "127.0.0.1": "allow",
	}
	e := newTestEngine(mustCompile(t, domains, false), res, ModeFull, nil)
	for _, c := range []struct {
		host string
		want Reason
		pat  string
	}{
		{"169.254.169.254", ReasonDenied, "169.254.169.254"},
		{"::ffff:169.254.169.254", ReasonDenied, "169.254.169.254"},
		{"64:ff9b::a9fe:a9fe", ReasonDenied, "169.254.169.254"},       // NAT64
		{"2002:a9fe:a9fe::1", ReasonDenied, "169.254.169.254"},        // 6to4
		{"2001:0:1:2:3:4:5601:5601", ReasonDenied, "169.254.169.254"}, // Teredo (client bit-inverted)
		{"2852039166", ReasonDenied, "169.254.169.254"},               // decimal spelling
		{"meta.test", ReasonDenied, "169.254.169.254"},                // name resolving there
		{"meta6.test", ReasonDenied, "169.254.169.254"},
		{"100.64.3.4", ReasonDenied, "100.64.0.0/10"},
		{"mixed.test", ReasonDenied, "100.64.0.0/10"},
		{"10.20.1.2", ReasonNone, "10.20.0.0/16"},   // literal inside an allow prefix
		{"registry.test", ReasonNone, "*"},          // name resolving into it
		{"10.20.9.9", ReasonDenied, "10.20.9.0/24"}, // deny beats the allow prefix
		{"other.test", ReasonNotAllowedLocal, ""},   // private outside every prefix
		{"10.30.0.1", ReasonNotAllowedLocal, ""},
		{"fd00::5", ReasonNone, "fd00::/8"},
		{"ula.test", ReasonNone, "*"},
		{"pub.test", ReasonNone, "*"},
		// An exact literal entry allows the literal, never a name answered
		// there: only a CIDR prefix is the exemption for names.
		{"127.0.0.1", ReasonNone, "127.0.0.1"},
		{"loop.test", ReasonNotAllowedLocal, ""},
	} {
		d := e.Evaluate(context.Background(), Request{Trace: true, Host: c.host, Port: 443, Protocol: ProtoHTTP, Method: "GET"})
		if d.Reason != c.want || (c.pat != "" && d.Pattern != c.pat) {
			t.Errorf("%s: reason %q pattern %q, want %q %q (%+v)", c.host, d.Reason, d.Pattern, c.want, c.pat, d.Steps)
		}
	}
	// The dial-time re-check sees the same entries.
	s := e.Snapshot()
	for a, want := range map[string]Reason{"169.254.169.254": ReasonDenied, "::ffff:169.254.169.254": ReasonDenied,
		"10.20.1.1": ReasonNone, "10.30.0.1": ReasonNotAllowedLocal, "8.8.8.8": ReasonNone, "127.0.0.1": ReasonNotAllowedLocal} {
		if r, ok := s.CheckDialAddr(netip.AddrPortFrom(netip.MustParseAddr(a), 443)); r != want || ok != (want == ReasonNone) {
			t.Errorf("CheckDialAddr(%s) = %q %v, want %q", a, r, ok, want)
		}
	}
}

// TestAddressEntryErrors: bad address entries are clear errors naming
// their key or file:line.
func TestAddressEntryErrors(t *testing.T) {
	for _, c := range []struct{ entry, decision, want string }{
		{"10.0.0.0/33", "deny", "not a valid CIDR"},
		{"10.0.0.1/8", "deny", "write 10.0.0.0/8"},
		{"10.0.0.0/8:0", "deny", "port"},
		{"*.10.0.0.0/8", "allow", "wildcard"},
		{"10.*.0.0/8", "deny", "wildcard"},
		{"[fd00::]/8", "deny", "brackets"},
		{"0.0.0.0/0", "deny", "/0"},
		{"fe80::/10%eth0", "deny", "not a valid CIDR"},
		{"fe80::%eth0/10", "deny", "zone"},
		{"example.com/8", "deny", "only a CIDR prefix"},
		{"example.com/path", "allow", "only a CIDR prefix"},
	} {
		err := CheckEntry(c.entry, c.decision)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s (%s): %v, want an error mentioning %q", c.entry, c.decision, err, c.want)
		}
	}
	dir := t.TempDir()
	f := filepath.Join(dir, "deny.txt")
	os.WriteFile(f, []byte("# cloud metadata\n169.254.169.254\n10.0.0.0/8\n192.168.0.0/33\n"), 0o644)
	_, err := Build(Options{Enabled: true, Entries: []Entry{{Pattern: "10.0.0.0/8:80-79", Decision: "allow", Origin: `network.domains."10.0.0.0/8:80-79"`}},
		DomainFiles: []DomainFile{{Path: f, Decision: "deny", Key: "network.domain_files[0]"}}})
	if err == nil || !strings.Contains(err.Error(), f+":4") || !strings.Contains(err.Error(), `network.domains."10.0.0.0/8:80-79"`) {
		t.Fatalf("errors must name file:line and key: %v", err)
	}
	if a, d := mustCompile(t, map[string]string{"10.0.0.0/8": "deny", "1.2.3.4": "deny", "fd00::/8": "allow"}, false).PatternCounts(); a != 1 || d != 2 {
		t.Fatalf("PatternCounts %d %d", a, d)
	}
}

// deciderThatChanges changes the policy while it "reviews", then allows.
type deciderThatChanges struct {
	change func()
	calls  atomic.Int32
}

func (d *deciderThatChanges) Decide(_ context.Context, req Request, base Decision) Decision {
	d.calls.Add(1)
	d.change()
	return Decision{Verdict: Allow, Source: SourceDecider, ApprovalID: "ap1", Override: "allow_once"}
}

// TestDeciderAllowRecheckedAgainstCurrentPolicy is SPEC 3.9's last
// sentence: a deny added while a reviewer was deciding wins over the
// reviewer's allow — an amendment, a reload, or an address entry.
func TestDeciderAllowRecheckedAgainstCurrentPolicy(t *testing.T) {
	res := &recordingResolver{answer: map[string][]netip.Addr{"late.test": {netip.MustParseAddr("203.0.114.7")}}}
	ctx := context.Background()
	req := Request{Trace: true, Host: "late.test", Port: 443, Protocol: ProtoHTTPS, Method: "CONNECT"}

	var e *Engine
	dec := &deciderThatChanges{}
	e = newTestEngine(mustCompile(t, nil, false), res, ModeFull, dec)

	dec.change = func() { e.Amend("late.test", Deny) }
	if d := e.Evaluate(ctx, req); d.Allowed() || d.Reason != ReasonDenied {
		t.Fatalf("deny_always during review: %+v", d)
	}

	e = newTestEngine(mustCompile(t, nil, false), res, ModeFull, dec)
	dec.change = func() { swapT(e, mustCompile(t, map[string]string{"*.test": "deny"}, false), ModeFull) }
	if d := e.Evaluate(ctx, req); d.Allowed() || d.Reason != ReasonDenied || d.Pattern != "*.test" {
		t.Fatalf("reload deny during review: %+v", d)
	}

	e = newTestEngine(mustCompile(t, nil, false), res, ModeFull, dec)
	dec.change = func() { swapT(e, mustCompile(t, map[string]string{"203.0.114.0/24": "deny"}, false), ModeFull) }
	if d := e.Evaluate(ctx, req); d.Allowed() || d.Reason != ReasonDenied {
		t.Fatalf("address deny during review: %+v", d)
	}

	// Without a change, the allow stands, resolved and pinned.
	e = newTestEngine(mustCompile(t, nil, false), res, ModeFull, dec)
	dec.change = func() {}
	if d := e.Evaluate(ctx, req); !d.Allowed() || d.Source != SourceDecider || len(d.Addrs) != 1 {
		t.Fatalf("plain allow: %+v", d)
	}
}

// TestRecheckAndSubscribe: Recheck judges an open connection against the
// current snapshot with no DNS query; Subscribe hears every change.
func TestRecheckAndSubscribe(t *testing.T) {
	res := &recordingResolver{}
	e := newTestEngine(mustCompile(t, map[string]string{"ok.test": "allow", "10.20.0.0/16": "allow"}, false), res, ModeFull, nil)
	var changes atomic.Int32
	e.Subscribe(func() { changes.Add(1) })
	pub := []netip.Addr{netip.MustParseAddr("93.184.216.34")}
	if d := e.Recheck("ok.test", 443, pub); !d.Allowed() {
		t.Fatalf("allowed: %+v", d)
	}
	if d := e.Recheck("ok.test", 443, []netip.Addr{netip.MustParseAddr("10.20.0.1")}); !d.Allowed() {
		t.Fatalf("allow prefix: %+v", d)
	}
	if d := e.Recheck("ok.test", 443, []netip.Addr{netip.MustParseAddr("10.30.0.1")}); d.Reason != ReasonNotAllowedLocal {
		t.Fatalf("private pinned address: %+v", d)
	}
	if d := e.Recheck("reviewed.test", 443, pub); d.Reason != ReasonNotAllowed {
		t.Fatalf("unlisted stays not_allowed (the caller keeps a reviewed tunnel): %+v", d)
	}
	e.Amend("ok.test", Deny)
	if d := e.Recheck("ok.test", 443, pub); d.Reason != ReasonDenied {
		t.Fatalf("after deny_always: %+v", d)
	}
	swapT(e, mustCompile(t, map[string]string{"*": "allow", "93.184.216.0/24": "deny"}, false), ModeFull)
	if d := e.Recheck("other.test", 443, pub); d.Reason != ReasonDenied {
		t.Fatalf("address entry against the pinned address: %+v", d)
	}
	swapT(e, compileEnabled(t, false, nil, false), ModeFull)
	if d := e.Recheck("other.test", 443, pub); d.Reason != ReasonProxyDisabled {
		t.Fatalf("kill switch: %+v", d)
	}
	if n := changes.Load(); n != 3 {
		t.Fatalf("subscribers heard %d changes, want 3", n)
	}
	if got := res.lookups(); len(got) != 0 {
		t.Fatalf("Recheck resolved %v", got)
	}
}

// TestMITMAdmission: with MITM admission a limited-mode CONNECT of an
// allowed host passes to interception and keeps its own source.
func TestMITMAdmission(t *testing.T) {
	res := &recordingResolver{}
	o := testOptions(true, map[string]string{"ok.test": "allow"}, false)
	o.Mode, o.MITM, o.Resolver = ModeLimited, true, res
	p, err := Build(o)
	if err != nil {
		t.Fatal(err)
	}
	dec := &recordingDecider{verdict: Allow}
	e := NewEngine(p, dec)
	req := Request{Trace: true, Host: "ok.test", Port: 443, Protocol: ProtoHTTPS, Method: "CONNECT"}
	if d := e.Evaluate(context.Background(), req); !d.Allowed() || !d.Intercept || d.Source != SourceBaseline {
		t.Fatalf("baseline CONNECT: %+v", d)
	}
	req.Host = "reviewed.test"
	if d := e.Evaluate(context.Background(), req); !d.Allowed() || !d.Intercept || d.Source != SourceDecider {
		t.Fatalf("decider CONNECT: %+v", d)
	}
	// A session-cache hit carries no approval id; it is still the decider's.
	dec2 := &cacheHitDecider{}
	e = NewEngine(p, dec2)
	if d := e.Evaluate(context.Background(), req); !d.Allowed() || d.Source != SourceDecider {
		t.Fatalf("session-cache CONNECT: %+v", d)
	}
	// SOCKS5 cannot be intercepted.
	if d := e.Evaluate(context.Background(), Request{Trace: true, Host: "ok.test", Port: 443, Protocol: ProtoSOCKS5}); d.Reason != ReasonMITMRequired {
		t.Fatalf("SOCKS5: %+v", d)
	}
}

type cacheHitDecider struct{}

func (cacheHitDecider) Decide(_ context.Context, _ Request, _ Decision) Decision {
	return Decision{Verdict: Allow, Source: SourceDecider, Override: "allow_session"}
}
