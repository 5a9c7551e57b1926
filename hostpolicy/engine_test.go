package hostpolicy

import (
	"context"
	"errors"
	"net/netip"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"sync"
	"testing"
)

func staticResolver(hosts map[string][]string) Resolver {
	m := map[string][]netip.Addr{}
	for h, as := range hosts {
		for _, a := range as {
			m[h] = append(m[h], netip.MustParseAddr(a))
		}
	}
	return &staticThenSystem{static: m, timeout: DefaultDNSTimeout, system: nil}
}

// staticOnly never reaches the system resolver: names outside the table fail
// (fail closed), so table tests never touch real DNS.
type staticOnly struct{ Resolver }

func (s staticOnly) LookupNetIP(ctx context.Context, host string) ([]netip.Addr, error) {
	r := s.Resolver.(*staticThenSystem)
	if as, ok := r.static[host]; ok && len(as) > 0 {
		return as, nil
	}
	return nil, errors.New("lookup " + host + ": no such host (test)")
}

var publicHosts = map[string][]string{
	"example.com": {"93.184.216.34"}, "api.example.com": {"93.184.216.34"}, "api.openai.com": {"104.18.0.1"},
	"openai.com": {"104.18.0.2"}, "evil.example": {"93.184.216.35"}, "private.test": {"10.0.0.5"},
	"rebind.test": {"8.8.8.8", "127.0.0.1"}, "v6.test": {"2606:4700::1111"}, "v6private.test": {"fd00::1"},
}

type row struct {
	host   string
	reason Reason // ReasonNone = allowed
}

// checkSteps enforces the step vocabulary of SPEC §7.1.
func checkSteps(t *testing.T, host string, d Decision) {
	t.Helper()
	steps := map[StepName]bool{"deny": true, "local_guard": true, "allow": true, "request": true, "mode": true} // request: SPEC §3.10
	results := map[StepResult]bool{"hit": true, "miss": true, "pass": true, "block": true}
	if len(d.Steps) == 0 {
		t.Errorf("%q: no steps", host)
	}
	for _, s := range d.Steps {
		if !steps[s.Step] || !results[s.Result] {
			t.Errorf("%q: step %+v outside the SPEC vocabulary", host, s)
		}
	}
}

func runRows(t *testing.T, name string, e *Engine, rows []row) {
	t.Helper()
	for _, r := range rows {
		d := e.Evaluate(context.Background(), Request{Trace: true, Host: r.host, Port: 443, Protocol: ProtoHTTP, Method: "GET"})
		checkSteps(t, r.host, d)
		got := d.Reason
		if d.Verdict == Allow {
			got = ReasonNone
		}
		if got != r.reason || (r.reason == ReasonNone) != d.Allowed() {
			t.Errorf("%s: %q → verdict %s reason %q, want reason %q (steps %+v)", name, r.host, d.Verdict, d.Reason, r.reason, d.Steps)
		}
		if d.Verdict != Allow && d.Source != SourceBaseline {
			t.Errorf("%s: %q → source %q, want baseline_policy", name, r.host, d.Source)
		}
	}
}

// TestHostBlockedReference covers every host_blocked row of reference §9.3.
func TestHostBlockedReference(t *testing.T) {
	res := staticOnly{staticResolver(publicHosts)}
	cases := []struct {
		name       string
		domains    map[string]string
		allowLocal bool
		rows       []row
	}{
		{"denied_wins_over_allowed", nil, false, nil}, // set below: a map cannot hold a key twice
		{"requires_allowlist_match", map[string]string{"example.com": "allow"}, false,
			[]row{{"example.com", ReasonNone}, {"8.8.8.8", ReasonNotAllowed}}},
		{"subdomain_wildcards_exclude_apex", map[string]string{"*.openai.com": "allow"}, false,
			[]row{{"api.openai.com", ReasonNone}, {"openai.com", ReasonNotAllowed}}},
		{"global_wildcard_allowlist_except_denylist", map[string]string{"*": "allow", "evil.example": "deny"}, false,
			[]row{{"example.com", ReasonNone}, {"api.openai.com", ReasonNone}, {"evil.example", ReasonDenied}}},
		{"rejects_loopback_when_local_binding_disabled", map[string]string{"example.com": "allow"}, false,
			[]row{{"127.0.0.1", ReasonNotAllowedLocal}, {"localhost", ReasonNotAllowedLocal}}},
		{"allows_loopback_when_explicitly_allowlisted", map[string]string{"localhost": "allow"}, false,
			[]row{{"localhost", ReasonNone}, {"LOCALHOST.", ReasonNone}, {"127.0.0.1", ReasonNotAllowedLocal}}},
		{"allows_private_ip_literal_when_explicitly_allowlisted", map[string]string{"10.0.0.1": "allow"}, false,
			[]row{{"10.0.0.1", ReasonNone}, {"10.0.0.2", ReasonNotAllowedLocal}}},
		{"rejects_scoped_ipv6_literal_when_not_allowlisted", map[string]string{"example.com": "allow"}, false,
			[]row{{"fe80::1%lo0", ReasonNotAllowedLocal}}},
		{"allows_scoped_ipv6_literal_when_explicitly_allowlisted", map[string]string{"fe80::1": "allow"}, false,
			[]row{{"fe80::1%lo0", ReasonNone}, {"[fe80::1%25lo0]:443", ReasonNone}}},
		{"requires_exact_scoped_ipv6_allowlist_match", map[string]string{"fe80::1%eth0": "allow"}, true,
			[]row{{"fe80::1%eth0", ReasonNone}, {"fe80::1%eth1", ReasonNotAllowed}}},
		{"denies_scoped_ipv6_literal_before_local_binding", map[string]string{"*": "allow", "fd00::1": "deny"}, true,
			[]row{{"fd00::1%eth0", ReasonDenied}, {"[fd00::1%eth0]", ReasonDenied}, {"[fd00::1%25eth0]", ReasonDenied}}},
		{"requires_exact_scoped_ipv6_denylist_match", map[string]string{"*": "allow", "fd00::1%eth0": "deny"}, true,
			[]row{{"fd00::1%eth0", ReasonDenied}, {"fd00::1%eth1", ReasonNone}}},
		{"rejects_private_ip_literals_when_local_binding_disabled", map[string]string{"example.com": "allow"}, false,
			[]row{{"10.0.0.1", ReasonNotAllowedLocal}}},
		{"rejects_loopback_when_allowlist_empty", nil, false,
			[]row{{"127.0.0.1", ReasonNotAllowedLocal}}},
		{"rejects_allowlisted_hostname_when_dns_lookup_fails", map[string]string{"does-not-resolve.invalid": "allow"}, false,
			[]row{{"does-not-resolve.invalid", ReasonNotAllowedLocal}}},
		{"allowlisted_hostname_resolving_private_still_blocked", map[string]string{"private.test": "allow", "rebind.test": "allow", "v6private.test": "allow"}, false,
			[]row{{"private.test", ReasonNotAllowedLocal}, {"rebind.test", ReasonNotAllowedLocal}, {"v6private.test", ReasonNotAllowedLocal}}},
		{"wildcards_never_grant_local_exception", map[string]string{"**.localhost": "allow", "10.*": "allow", "*.0.0.1": "allow", "*": "allow"}, false,
			[]row{{"localhost", ReasonNotAllowedLocal}, {"10.0.0.1", ReasonNotAllowedLocal}, {"127.0.0.1", ReasonNotAllowedLocal}}},
		{"empty_host_not_allowed", map[string]string{"*": "allow"}, false,
			[]row{{"", ReasonNotAllowed}, {".", ReasonNotAllowed}, {"  ", ReasonNotAllowed}, {"[", ReasonNotAllowed}}},
		{"local_binding_skips_guard_and_dns", map[string]string{"private.test": "allow", "nxdomain.invalid": "allow", "10.0.0.1": "allow"}, true,
			[]row{{"private.test", ReasonNone}, {"nxdomain.invalid", ReasonNone}, {"10.0.0.1", ReasonNone}, {"127.0.0.1", ReasonNotAllowed}}},
		{"apex_double_star_and_deny", map[string]string{"**.corp.test": "allow", "secret.corp.test": "deny", "**.dup.test": "allow", "dup.test": "deny"}, true,
			[]row{{"corp.test", ReasonNone}, {"a.corp.test", ReasonNone}, {"secret.corp.test", ReasonDenied}, {"dup.test", ReasonDenied}, {"a.dup.test", ReasonNone}}},
	}
	for _, c := range cases {
		if c.name == "denied_wins_over_allowed" {
			p := mustCompile(t, map[string]string{"example.com": "allow"}, false, Entry{Pattern: "EXAMPLE.com.", Decision: "deny"})
			runRows(t, c.name, newTestEngine(p, res, ModeFull, nil), []row{{"example.com", ReasonDenied}})
			continue
		}
		runRows(t, c.name, newTestEngine(mustCompile(t, c.domains, c.allowLocal), res, ModeFull, nil), c.rows)
	}
}

// TestSSRFSpellings: with "*" allowed, every spelling of a private address
// must be blocked as not_allowed_local (or not_allowed when it is not a valid
// host at all), never allowed.
func TestSSRFSpellings(t *testing.T) {
	e := newTestEngine(mustCompile(t, map[string]string{"*": "allow"}, false), staticOnly{staticResolver(publicHosts)}, ModeFull, nil)
	local := []string{
		"127.0.0.1", "127.1", "127.0.1", "2130706433", "0x7f000001", "0X7F000001", "0177.0.0.1", "0x7f.1",
		"017700000001", "0x7f.0x0.0x0.0x1", "127.000.000.001", "127.0.0.1.", "127.0.0.1..", "127.0.0.1:80",
		"0", "0.0.0.0", "0x0", "localhost", "LOCALHOST", "localhost.", "localhost:8080",
		"169.254.169.254", "2852039166", "0xa9fea9fe", "0251.0376.0251.0376", "169.254.43518",
		"10.0.0.1", "012.0.0.1", "0xa.1", "167772161", "172.16.0.1", "192.168.1.1", "100.64.0.1",
		"224.0.0.1", "255.255.255.255", "4294967295", "198.18.0.1",
		"[::1]", "[::1]:443", "::1", "[0:0:0:0:0:0:0:1]", "[::]", "[::ffff:127.0.0.1]", "[::ffff:7f00:1]",
		"[0:0:0:0:0:ffff:127.0.0.1]", "[::FFFF:7F00:0001]", "[::127.0.0.1]", "[::ffff:169.254.169.254]",
		"[::ffff:a9fe:a9fe]", "[64:ff9b::127.0.0.1]", "[64:ff9b::a9fe:a9fe]", "[64:ff9b:1::1]",
		"[2002:7f00:1::1]", "[2002:a9fe:a9fe::]", "[2001:0:4136:e378:8000:63bf:80ff:fffe]",
		"[fe80::1%25eth0]", "[fe80::1%eth0]:80", "fe80::1%lo0", "[fc00::1]", "[fd00::1]", "[ff02::1]",
		"[fec0::1]", "[2001:db8::1]", "[::ffff:0:127.0.0.1]", "[::ffff:0:7f00:1]", "[100::1]",
		"127。0。0。1", "１２７．０．０．１", "127｡0｡0｡1", "１２７.1", "①②⑦.⓪.⓪.①", "𝟏𝟐𝟕.𝟎.𝟎.𝟏", "127．0．0．1", "ⓛⓞⓒⓐⓛⓗⓞⓢⓣ", "ｌｏｃａｌｈｏｓｔ",
		"127%2e0%2e0%2e1", "127%2E0%2E0%2E1", "%6c%6f%63%61%6c%68%6f%73%74", "%31%32%37.0.0.1",
		"private.test", "rebind.test", "v6private.test", "nonexistent.invalid",
	}
	for _, h := range local {
		d := e.Evaluate(context.Background(), Request{Trace: true, Host: h, Port: 80, Protocol: ProtoHTTP, Method: "GET"})
		if d.Allowed() || d.Reason != ReasonNotAllowedLocal {
			t.Errorf("%q → %s %q (host %q), want deny not_allowed_local", h, d.Verdict, d.Reason, d.Host)
		}
	}
	invalid := []string{"127.0.0.1%25eth0", "127%252e0%252e0%252e1", "1.2.3.4.5", "256.0.0.1", "08.0.0.1",
		"127.0.0.1/", "localhost%00", "[127.0.0.1]", "0x7f.0.0.1.2", "*.localhost", "loc alhost"}
	for _, h := range invalid {
		d := e.Evaluate(context.Background(), Request{Trace: true, Host: h, Port: 80, Protocol: ProtoHTTP, Method: "GET"})
		checkSteps(t, h, d)
		if d.Allowed() {
			t.Errorf("%q was allowed (host %q)", h, d.Host)
		}
	}
	public := []string{"8.8.8.8", "134744072", "0x08080808", "[::ffff:8.8.8.8]", "[64:ff9b::808:808]",
		"[2002:808:808::1]", "[2606:4700::1111]", "example.com", "v6.test"}
	for _, h := range public {
		d := e.Evaluate(context.Background(), Request{Trace: true, Host: h, Port: 80, Protocol: ProtoHTTP, Method: "GET"})
		if !d.Allowed() {
			t.Errorf("public %q → %s %q, want allow", h, d.Verdict, d.Reason)
		}
	}
}

// TestDenyCatchesEverySpelling: a deny entry for an IPv4 address catches its
// numeric, Unicode, percent-encoded and IPv4-mapped spellings, even with
// local binding allowed and "*" on the allow list.
func TestDenyCatchesEverySpelling(t *testing.T) {
	e := newTestEngine(mustCompile(t, map[string]string{"*": "allow", "127.0.0.1": "deny", "169.254.169.254": "deny", "[::1]": "deny"}, true), staticOnly{staticResolver(nil)}, ModeFull, nil)
	for _, h := range []string{"127.1", "2130706433", "0x7f000001", "0177.0.0.1", "127。0。0。1", "127%2e0%2e0%2e1",
		"[::ffff:127.0.0.1]", "2852039166", "0xa9.0xfe.0xa9.0xfe", "[::ffff:a9fe:a9fe]", "[0:0:0:0:0:0:0:1]", "::1"} {
		d := e.Evaluate(context.Background(), Request{Trace: true, Host: h, Port: 80, Protocol: ProtoHTTP, Method: "GET"})
		if d.Reason != ReasonDenied {
			t.Errorf("%q → %s %q, want denied", h, d.Verdict, d.Reason)
		}
	}
}

func TestDecisionFieldsAndSteps(t *testing.T) {
	e := newTestEngine(mustCompile(t, map[string]string{"*.wild.test": "allow", "bad.test": "deny", "127.0.0.1": "allow"}, false),
		staticOnly{staticResolver(map[string][]string{"a.wild.test": {"93.184.216.34"}})}, ModeFull, nil)
	d := e.Evaluate(context.Background(), Request{Trace: true, Host: "A.Wild.Test.:8443", Port: 8443, Protocol: ProtoHTTP, Method: "GET"})
	if !d.Allowed() || d.Host != "a.wild.test" || d.Pattern != "*.wild.test" || d.Source != SourceBaseline || len(d.Addrs) != 1 || d.LocalLiteral {
		t.Fatalf("allowed decision wrong: %+v", d)
	}
	// The guard passes the name unresolved, the allow list hits, then the
	// answers are judged (step 5) before the mode guard.
	wantSteps := []string{"deny:miss", "local_guard:pass", "allow:hit", "local_guard:pass", "mode:pass"}
	var got []string
	for _, s := range d.Steps {
		got = append(got, string(s.Step)+":"+string(s.Result))
	}
	if strings.Join(got, ",") != strings.Join(wantSteps, ",") {
		t.Fatalf("steps %v, want %v", got, wantSteps)
	}
	d = e.Evaluate(context.Background(), Request{Trace: true, Host: "bad.test", Port: 80})
	if d.Reason != ReasonDenied || d.Pattern != "bad.test" || d.Steps[0] != (Step{Step: "deny", Result: "hit", Detail: "bad.test"}) {
		t.Fatalf("denied decision wrong: %+v", d)
	}
	d = e.Evaluate(context.Background(), Request{Trace: true, Host: "127.0.0.1", Port: 80})
	if !d.Allowed() || !d.LocalLiteral || len(d.Addrs) != 1 || d.Addrs[0] != netip.MustParseAddr("127.0.0.1") {
		t.Fatalf("local literal decision wrong: %+v", d)
	}
}

// recordingDecider is a real Decider implementation that records its calls.
type recordingDecider struct {
	mu      sync.Mutex
	calls   []string
	verdict Verdict
}

func (r *recordingDecider) Decide(_ context.Context, req Request, base Decision) Decision {
	r.mu.Lock()
	r.calls = append(r.calls, base.Host+":"+string(base.Reason))
	r.mu.Unlock()
	out := Decision{Verdict: r.verdict, Reason: ReasonNotAllowed, Source: SourceDecider, ApprovalID: "ap1", Override: "allow_session"}
	return out
}

func TestDeciderOnlyForNotAllowed(t *testing.T) {
	dec := &recordingDecider{verdict: Allow}
	res := staticOnly{staticResolver(map[string][]string{"ok.test": {"93.184.216.34"}, "unknown.test": {"93.184.216.34"}, "private.test": {"10.0.0.5"}})}
	e := newTestEngine(mustCompile(t, map[string]string{"ok.test": "allow", "bad.test": "deny"}, false), res, ModeFull, dec)
	ctx := context.Background()
	for _, h := range []string{"bad.test", "10.0.0.1", "ok.test"} {
		d := e.Evaluate(ctx, Request{Trace: true, Host: h, Port: 80, Protocol: ProtoHTTP, Method: "GET"})
		if h != "ok.test" && (d.Allowed() || d.Source != SourceBaseline) {
			t.Errorf("%s: decider must not override %s", h, d.Reason)
		}
	}
	if len(dec.calls) != 0 {
		t.Fatalf("decider called for %v", dec.calls)
	}
	// An unlisted name is not resolved before the decider (SPEC 3.4): it is
	// not_allowed; once the decider allows it, it is resolved and judged, and
	// a private answer or a failed lookup is final not_allowed_local.
	for _, h := range []string{"private.test", "gone.invalid"} {
		d := e.Evaluate(ctx, Request{Trace: true, Host: h, Port: 80, Protocol: ProtoHTTP, Method: "GET"})
		if d.Allowed() || d.Reason != ReasonNotAllowedLocal || d.Source != SourceBaseline {
			t.Errorf("%s: decider allow must be judged after resolving: %+v", h, d)
		}
	}
	if len(dec.calls) != 2 {
		t.Fatalf("decider calls %v, want private.test and gone.invalid", dec.calls)
	}
	dec.calls = nil
	d := e.Evaluate(ctx, Request{Trace: true, Host: "unknown.test", Port: 80, Protocol: ProtoHTTP, Method: "GET"})
	if !d.Allowed() || d.Source != SourceDecider || d.ApprovalID != "ap1" || len(d.Addrs) != 1 {
		t.Fatalf("decider allow: %+v", d)
	}
	if len(dec.calls) != 1 || dec.calls[0] != "unknown.test:not_allowed" {
		t.Fatalf("decider calls %v", dec.calls)
	}
	dec.verdict = Ask
	d = e.Evaluate(ctx, Request{Trace: true, Host: "unknown.test", Port: 80, Protocol: ProtoHTTP, Method: "GET"})
	if d.Verdict != Ask || d.Reason != ReasonNotAllowed || d.Source != SourceDecider {
		t.Fatalf("decider ask: %+v", d)
	}
	// Without a decider not_allowed is final from the baseline.
	e2 := newTestEngine(mustCompile(t, nil, false), res, ModeFull, nil)
	if d := e2.Evaluate(ctx, Request{Trace: true, Host: "unknown.test", Port: 80}); d.Verdict != Deny || d.Reason != ReasonNotAllowed || d.Source != SourceBaseline {
		t.Fatalf("no decider: %+v", d)
	}
}

func TestLimitedMode(t *testing.T) {
	dec := &recordingDecider{verdict: Allow}
	res := staticOnly{staticResolver(map[string][]string{"ok.test": {"93.184.216.34"}, "other.test": {"93.184.216.34"}, "bad.test": {"93.184.216.34"}})}
	e := newTestEngine(mustCompile(t, map[string]string{"ok.test": "allow", "bad.test": "deny"}, false), res, ModeLimited, dec)
	ctx := context.Background()
	cases := []struct {
		req    Request
		reason Reason
		source Source
	}{
		{Request{Trace: true, Host: "ok.test", Port: 80, Protocol: ProtoHTTP, Method: "GET"}, ReasonNone, SourceBaseline},
		{Request{Trace: true, Host: "ok.test", Port: 80, Protocol: ProtoHTTP, Method: "head"}, ReasonNone, SourceBaseline},
		{Request{Trace: true, Host: "ok.test", Port: 80, Protocol: ProtoHTTP, Method: "OPTIONS"}, ReasonNone, SourceBaseline},
		{Request{Trace: true, Host: "ok.test", Port: 80, Protocol: ProtoHTTP, Method: "POST"}, ReasonMethodNotAllowed, SourceModeGuard},
		{Request{Trace: true, Host: "ok.test", Port: 80, Protocol: ProtoHTTP, Method: "DELETE"}, ReasonMethodNotAllowed, SourceModeGuard},
		{Request{Trace: true, Host: "ok.test", Port: 443, Protocol: ProtoHTTPS, Method: "CONNECT"}, ReasonMITMRequired, SourceModeGuard},
		{Request{Trace: true, Host: "ok.test", Port: 443, Protocol: ProtoSOCKS5}, ReasonMITMRequired, SourceModeGuard},
		{Request{Trace: true, Host: "ok.test", Port: 22, Protocol: ProtoSOCKS5}, ReasonMethodNotAllowed, SourceModeGuard},
		{Request{Trace: true, Host: "bad.test", Port: 80, Protocol: ProtoHTTP, Method: "POST"}, ReasonDenied, SourceBaseline},
		// a reviewer's allow does not lift the method restriction
		{Request{Trace: true, Host: "other.test", Port: 80, Protocol: ProtoHTTP, Method: "POST"}, ReasonMethodNotAllowed, SourceModeGuard},
		{Request{Trace: true, Host: "other.test", Port: 80, Protocol: ProtoHTTP, Method: "GET"}, ReasonNone, SourceDecider},
		// a GET carrying Upgrade would be a two-way channel (SPEC §3.8)
		{Request{Trace: true, Host: "ok.test", Port: 80, Protocol: ProtoHTTP, Method: "GET", Upgrade: true}, ReasonMethodNotAllowed, SourceModeGuard},
		{Request{Trace: true, Host: "bad.test", Port: 80, Protocol: ProtoHTTP, Method: "GET", Upgrade: true}, ReasonDenied, SourceBaseline},
	}
	for _, c := range cases {
		d := e.Evaluate(ctx, c.req)
		if d.Reason != c.reason || d.Source != c.source || (c.reason == ReasonNone) != d.Allowed() {
			t.Errorf("%+v → %s %q %q, want %q %q", c.req, d.Verdict, d.Reason, d.Source, c.reason, c.source)
		}
	}
}

func TestLimitedModeUpgradeInner(t *testing.T) {
	res := staticOnly{staticResolver(map[string][]string{"ok.test": {"93.184.216.34"}})}
	ctx := context.Background()
	up := Request{Host: "ok.test", Port: 443, Protocol: ProtoHTTPS, Method: "GET", Upgrade: true}
	e := newTestEngine(mustCompile(t, map[string]string{"ok.test": "allow"}, false), res, ModeLimited, nil)
	if d := e.Run(ctx, up, RunOptions{Inner: true}); d.Reason != ReasonMethodNotAllowed || d.Source != SourceModeGuard {
		t.Fatalf("inner limited Upgrade: %+v", d)
	}
	full := newTestEngine(mustCompile(t, map[string]string{"ok.test": "allow"}, false), res, ModeFull, nil)
	if d := full.Run(ctx, up, RunOptions{Inner: true}); !d.Allowed() {
		t.Fatalf("full mode refused an Upgrade: %+v", d)
	}
}

func TestSwapAndAmend(t *testing.T) {
	res := staticOnly{staticResolver(map[string][]string{"a.test": {"93.184.216.34"}, "b.test": {"93.184.216.34"}})}
	e := newTestEngine(mustCompile(t, map[string]string{"a.test": "allow"}, false), res, ModeFull, nil)
	ctx := context.Background()
	ev := func(h string) Decision {
		return e.Evaluate(ctx, Request{Trace: true, Host: h, Port: 80, Protocol: ProtoHTTP, Method: "GET"})
	}
	if !ev("a.test").Allowed() || ev("b.test").Allowed() {
		t.Fatal("initial policy")
	}
	e.Amend("B.TEST.", Allow)
	if !ev("b.test").Allowed() {
		t.Fatal("amended allow")
	}
	swapT(e, mustCompile(t, map[string]string{"*": "allow"}, false), ModeLimited)
	if e.Mode() != ModeLimited || !ev("b.test").Allowed() {
		t.Fatal("amendment must survive Swap")
	}
	e.Amend("b.test", Deny)
	if d := ev("b.test"); d.Reason != ReasonDenied {
		t.Fatalf("amended deny must beat '*' and the earlier allow: %+v", d)
	}
	e.Amend("a.test", Deny)
	if d := ev("a.test"); d.Reason != ReasonDenied {
		t.Fatalf("amended deny: %+v", d)
	}
	if e.AllowLocalBinding() {
		t.Fatal("AllowLocalBinding")
	}
	swapT(e, mustCompile(t, nil, true), ModeFull)
	if !e.AllowLocalBinding() {
		t.Fatal("AllowLocalBinding after swap")
	}
}

func TestConcurrentEvaluateSwapAmend(t *testing.T) {
	res := staticOnly{staticResolver(map[string][]string{"a.test": {"93.184.216.34"}})}
	e := newTestEngine(mustCompile(t, map[string]string{"a.test": "allow"}, false), res, ModeFull, nil)
	var wg sync.WaitGroup
	for i := 0; i < 4; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := 0; j < 500; j++ {
				e.Evaluate(context.Background(), Request{Trace: true, Host: "a.test", Port: 80})
			}
		}()
	}
	for j := 0; j < 100; j++ {
		swapT(e, mustCompile(t, map[string]string{"a.test": "allow"}, false), ModeFull)
		e.Amend("x.test", Allow)
	}
	wg.Wait()
}

func TestCompileErrors(t *testing.T) {
	dir := t.TempDir()
	good := filepath.Join(dir, "good.txt")
	os.WriteFile(good, []byte("# comment\n\nexample.org\n*.ads.test  # trailing comment\n"), 0o644)
	bad := filepath.Join(dir, "bad.txt")
	os.WriteFile(bad, []byte("ok.test\n[\n*\n"), 0o644)

	opts := testOptions(true, map[string]string{"*": "deny", "[": "allow", "a.test": "maybe"}, false)
	opts.DomainFiles = []DomainFile{{Path: good, Decision: "deny", Key: "network.domain_files[0]"}, {Path: bad, Decision: "deny", Key: "network.domain_files[1]"},
		{Path: filepath.Join(dir, "missing.txt"), Decision: "allow", Key: "network.domain_files[2]"}}
	_, err := Build(opts)
	if err == nil {
		t.Fatal("Compile accepted a broken config")
	}
	msg := err.Error()
	for _, want := range []string{`network.domains."*"`, "global wildcard", `network.domains."["`, "invalid glob", `network.domains."a.test"`, `"maybe"`,
		bad + ":2", bad + ":3", "missing.txt", "no such file"} {
		if !strings.Contains(msg, want) {
			t.Errorf("error does not mention %q:\n%s", want, msg)
		}
	}

	opts = testOptions(true, map[string]string{"x.test": "allow"}, false, Entry{Pattern: "rule.test", Decision: "allow", Origin: "default.rules:3"})
	opts.DomainFiles = []DomainFile{{Path: good, Decision: "deny"}}
	p, err := Build(opts)
	if err != nil {
		t.Fatal(err)
	}
	if a, d := p.PatternCounts(); a != 2 || d != 2 {
		t.Fatalf("PatternCounts = %d, %d; want 2, 2", a, d)
	}
	opts.Entries = append(opts.Entries, Entry{Pattern: "*", Decision: "deny", Origin: "default.rules:7"})
	_, err = Build(opts)
	if err == nil || !strings.Contains(err.Error(), "default.rules:7") {
		t.Fatalf("extra entry error must name its origin: %v", err)
	}
}

func TestMessages(t *testing.T) {
	for r, want := range map[Reason][2]string{
		ReasonNotAllowed:       {"Domain not in allowlist.", "blocked-by-allowlist"},
		ReasonNotAllowedLocal:  {"Sandbox policy blocks local/private network addresses.", "blocked-by-allowlist"},
		ReasonDenied:           {"Domain denied by the sandbox policy.", "blocked-by-denylist"},
		ReasonMethodNotAllowed: {"Method not allowed in limited mode.", "blocked-by-method-policy"},
		ReasonMITMRequired:     {"MITM required for limited HTTPS.", "blocked-by-mitm-required"},
		ReasonMITMHookDenied:   {"Request blocked by network policy.", "blocked-by-mitm-hook"},
		ReasonPolicyDenied:     {"Request blocked by network policy.", "blocked-by-policy"},
		ReasonProxyDisabled:    {"network proxy is disabled", "blocked-by-policy"},
	} {
		d := Decision{Verdict: Deny, Reason: r}
		if d.Message() != want[0] || d.XProxyError() != want[1] {
			t.Errorf("%s: %q %q, want %q %q", r, d.Message(), d.XProxyError(), want[0], want[1])
		}
	}
}

// Reference §9.2 method_allowed rows.
func TestMethodAllowed(t *testing.T) {
	for _, m := range []string{"GET", "POST", "CONNECT", "DELETE"} {
		if !MethodAllowed(ModeFull, m) {
			t.Errorf("full mode must allow %s", m)
		}
	}
	for m, want := range map[string]bool{"GET": true, "HEAD": true, "OPTIONS": true, "get": true, "POST": false, "CONNECT": false, "PUT": false} {
		if MethodAllowed(ModeLimited, m) != want {
			t.Errorf("limited mode %s: want %v", m, want)
		}
	}
}

// Reference §9.2 is_loopback_host rows: localhost spellings are local
// literals; a name that merely contains "localhost" is an ordinary name.
func TestLocalhostVariants(t *testing.T) {
	e := newTestEngine(mustCompile(t, map[string]string{"*": "allow"}, false),
		staticOnly{staticResolver(map[string][]string{"notlocalhost": {"93.184.216.34"}})}, ModeFull, nil)
	for h, want := range map[string]Reason{
		"localhost": ReasonNotAllowedLocal, "localhost.": ReasonNotAllowedLocal, "LOCALHOST": ReasonNotAllowedLocal,
		"127.0.0.1": ReasonNotAllowedLocal, "::1": ReasonNotAllowedLocal, "1.2.3.4": ReasonNone, "notlocalhost": ReasonNone,
	} {
		d := e.Evaluate(context.Background(), Request{Trace: true, Host: h, Port: 80})
		if d.Reason != want {
			t.Errorf("%s: %q, want %q", h, d.Reason, want)
		}
	}
}

// Reference §9.3 add_allowed/add_denied rows, as live amendments.
func TestAmendReferenceRows(t *testing.T) {
	res := staticOnly{staticResolver(map[string][]string{"example.com": {"93.184.216.34"}})}
	ctx := context.Background()
	req := Request{Trace: true, Host: "example.com", Port: 443}

	// add_denied_domain_removes_matching_allow_entry
	e := newTestEngine(mustCompile(t, map[string]string{"example.com": "allow"}, false), res, ModeFull, nil)
	e.Amend("EXAMPLE.COM", Deny)
	if d := e.Evaluate(ctx, req); d.Reason != ReasonDenied {
		t.Errorf("amended deny over allow: %+v", d)
	}
	// …and a later allow_always replaces the amended deny
	e.Amend("example.com", Allow)
	if d := e.Evaluate(ctx, req); !d.Allowed() {
		t.Errorf("amended allow after amended deny: %+v", d)
	}

	// add_denied_domain_forces_block_with_global_wildcard_allowlist
	e = newTestEngine(mustCompile(t, map[string]string{"*": "allow"}, false), res, ModeFull, nil)
	if !e.Evaluate(ctx, Request{Trace: true, Host: "8.8.8.8", Port: 443}).Allowed() {
		t.Fatal("8.8.8.8 under '*'")
	}
	e.Amend("8.8.8.8", Deny)
	if d := e.Evaluate(ctx, Request{Trace: true, Host: "8.8.8.8", Port: 443}); d.Reason != ReasonDenied {
		t.Errorf("amended deny under '*': %+v", d)
	}

	// add_allowed_domain_removes_matching_deny_entry — SPEC §3.4 differs: a
	// configured deny is final and no reviewer can override it, so an
	// amended allow does not lift a deny-list entry.
	e = newTestEngine(mustCompile(t, map[string]string{"example.com": "deny"}, false), res, ModeFull, nil)
	e.Amend("ExAmPlE.CoM", Allow)
	if d := e.Evaluate(ctx, req); d.Reason != ReasonDenied {
		t.Errorf("configured deny must stay final: %+v", d)
	}
}

// TestTraceOnlyAddsSteps: the data path evaluates without a trace; the
// decision must be the one `netproxy check` shows, steps aside.
func TestTraceOnlyAddsSteps(t *testing.T) {
	e := newTestEngine(mustCompile(t, map[string]string{"ok.test": "allow", "*.wild.test": "allow", "bad.test": "deny", "10.0.0.0/8": "allow"}, false),
		staticOnly{staticResolver(map[string][]string{"ok.test": {"8.8.8.8"}, "a.wild.test": {"10.1.2.3"}})}, ModeFull, nil)
	for _, h := range []string{"ok.test", "a.wild.test", "bad.test", "other.test", "10.9.9.9", "127.0.0.1", "localhost", "[::1]", "", "8.8.8.8"} {
		req := Request{Host: h, Port: 443, Protocol: ProtoHTTPS, Method: "CONNECT"}
		plain := e.Evaluate(context.Background(), req)
		req.Trace = true
		traced := e.Evaluate(context.Background(), req)
		if len(plain.Steps) != 0 {
			t.Errorf("%q: untraced decision has steps %v", h, plain.Steps)
		}
		if len(traced.Steps) == 0 {
			t.Errorf("%q: traced decision has no steps", h)
		}
		plain.Steps, traced.Steps = nil, nil
		plain.noTrace, traced.noTrace = false, false
		if !reflect.DeepEqual(plain, traced) {
			t.Errorf("%q: untraced %+v\n  traced %+v", h, plain, traced)
		}
	}
}
