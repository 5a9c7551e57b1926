package hostpolicy

import (
	"context"
	"fmt"
	"strings"
	"testing"
)

// gitRules is the read-only GitHub example of SPEC §3.10 / docs/policy.md.
func gitRules() []RequestRule {
	return []RequestRule{
		{Hosts: []string{"git.test"}, Methods: []string{"POST"}, Paths: []string{"/*/*/git-receive-pack"}, Action: ActionDeny, Message: "Agents may read, not push."},
		{Hosts: []string{"git.test"}, Methods: []string{"POST"}, Paths: []string{"/*/*/git-upload-pack"}, Action: ActionAllow},
		{Hosts: []string{"**.ask.test:8443"}, Methods: []string{"DELETE"}, Action: ActionAsk},
	}
}

func rulesEngine(t *testing.T, mode string, rules []RequestRule, d Decider) *Engine {
	t.Helper()
	o := testOptions(true, map[string]string{"git.test": "allow", "**.ask.test": "allow", "other.test": "allow"}, false)
	o.Requests = rules
	o.MITM = true
	snap, err := Build(o)
	if err != nil {
		t.Fatalf("Build: %v", err)
	}
	hosts := map[string][]string{"git.test": {"93.184.216.34"}, "ask.test": {"93.184.216.35"}, "x.ask.test": {"93.184.216.36"}, "other.test": {"93.184.216.37"}}
	return newTestEngine(snap, staticOnly{staticResolver(hosts)}, mode, d)
}

// TestRequestRuleDodges: every spelling a client may use to reach
// git-receive-pack is denied by the rule on its normalised path; a path
// that does not normalise is request_denied too. Written before the stage.
func TestRequestRuleDodges(t *testing.T) {
	e := rulesEngine(t, ModeFull, gitRules(), nil)
	for _, c := range []struct {
		path  string
		want  Reason // ReasonNone: allowed
		cause Cause
	}{
		{"/o/r/git-receive-pack", ReasonRequestDenied, CauseRule},
		{"/a/../o/r/git-receive-pack", ReasonRequestDenied, CauseRule},
		{"//o//r/git-receive-pack", ReasonRequestDenied, CauseRule},
		{"/o/./r/./git-receive-pack", ReasonRequestDenied, CauseRule},
		{"/o%2Fr/git-receive-pack", ReasonRequestDenied, CauseRule},
		{"/o%2fr%2fgit-receive-pack", ReasonRequestDenied, CauseRule},
		{"/x/%2e%2e/o/r/git-receive-pack", ReasonRequestDenied, CauseRule},
		{"/x/.%2E/o/r/git-receive-pack", ReasonRequestDenied, CauseRule},
		{"/o/r/git-receive-pac%6B", ReasonRequestDenied, CauseRule},
		{"/o/r/git-receive-pack?service=x", ReasonRequestDenied, CauseRule},
		{"/o/r/git-receive-pack;x=1", ReasonRequestDenied, CausePathNotNormal},
		{"/o/r/git-receive-pack%3Bx", ReasonRequestDenied, CausePathNotNormal},
		{"/o/r/git-receive-pack%00", ReasonRequestDenied, CausePathNotNormal},
		{"/o\\r/git-receive-pack", ReasonRequestDenied, CausePathNotNormal},
		{"/o%5Cr/git-receive-pack", ReasonRequestDenied, CausePathNotNormal},
		{"/o/r/git-receive-pack%252F", ReasonRequestDenied, CausePathNotNormal},
		{"/o/r/git-receive-pack%", ReasonRequestDenied, CausePathNotNormal},
		{"/../o/r/git-receive-pack", ReasonRequestDenied, CausePathNotNormal},
		{"o/r/git-receive-pack", ReasonRequestDenied, CausePathNotNormal},
		{"/o/r/git-receive-pack\x01", ReasonRequestDenied, CausePathNotNormal},
		// Case-sensitive: another path (the server's, not a dodge of ours).
		{"/o/r/GIT-RECEIVE-PACK", ReasonNone, ""},
		// A trailing slash is kept: "/*/*/git-receive-pack" is not "…/".
		{"/o/r/git-receive-pack/", ReasonNone, ""},
		{"/o/r/git-upload-pack", ReasonNone, ""},
		{"/o/r/x/../git-upload-pack", ReasonNone, ""},
	} {
		d := e.Run(context.Background(), Request{Host: "git.test", Port: 443, Protocol: ProtoHTTP, Method: "POST", Path: c.path, Trace: true}, RunOptions{})
		if d.Reason != c.want || (c.want != ReasonNone && d.Cause != c.cause) {
			t.Errorf("POST %q: reason %q cause %q, want %q %q (steps %v)", c.path, d.Reason, d.Cause, c.want, c.cause, d.Steps)
		}
		if c.want == ReasonRequestDenied && c.cause == CauseRule {
			if i, ok := d.RuleIndex(); !ok || i != 0 || d.Message() != "Agents may read, not push." || d.XProxyError() != "blocked-by-request-rule" || d.Source != SourceBaseline {
				t.Errorf("POST %q: rule %d %v message %q x-proxy-error %q source %q", c.path, i, ok, d.Message(), d.XProxyError(), d.Source)
			}
		}
	}
}

// TestRequestRulesLimitedMode: an allow rule is the mode guard's one
// exception; a deny rule reports the rule, not the method; no match is
// the mode guard as before; a host without rules is unchanged.
func TestRequestRulesLimitedMode(t *testing.T) {
	e := rulesEngine(t, ModeLimited, gitRules(), nil)
	run := func(host, method, path string, inner bool) Decision {
		return e.Run(context.Background(), Request{Host: host, Port: 443, Protocol: ProtoHTTPS, Method: method, Path: path, Trace: true}, RunOptions{Inner: inner})
	}
	if d := run("git.test", "POST", "/o/r/git-upload-pack", true); !d.Allowed() || !d.RuleAllowed || d.Rule != 2 {
		t.Errorf("upload-pack: %+v", d)
	}
	if d := run("git.test", "POST", "/o/r/git-receive-pack", true); d.Reason != ReasonRequestDenied {
		t.Errorf("receive-pack: %+v", d)
	}
	if d := run("git.test", "PUT", "/o/r/git-upload-pack", true); d.Reason != ReasonMethodNotAllowed || d.Source != SourceModeGuard {
		t.Errorf("PUT upload-pack: %+v", d)
	}
	if d := run("other.test", "POST", "/o/r/git-upload-pack", true); d.Reason != ReasonMethodNotAllowed {
		t.Errorf("other host: %+v", d)
	}
	// A host the chain does not allow is never allowed by a rule.
	if d := run("nope.test", "POST", "/o/r/git-upload-pack", true); d.Reason != ReasonNotAllowed {
		t.Errorf("not allowed host: %+v", d)
	}
	// The CONNECT is intercepted for the rules.
	if d := run("git.test", "CONNECT", "", false); !d.Allowed() || !d.Intercept {
		t.Errorf("CONNECT: %+v", d)
	}
	// SOCKS5 to 443 of a rules host is intercepted even in limited mode.
	d := e.Run(context.Background(), Request{Host: "git.test", Port: 443, Protocol: ProtoSOCKS5}, RunOptions{})
	if !d.Allowed() || !d.Intercept || d.Cause != CauseRequestRules {
		t.Errorf("SOCKS5 443: %+v", d)
	}
	if d := e.Run(context.Background(), Request{Host: "other.test", Port: 443, Protocol: ProtoSOCKS5}, RunOptions{}); d.Reason != ReasonMITMRequired {
		t.Errorf("SOCKS5 443 without rules: %+v", d)
	}
}

// TestRequestRulesFullModeIntercept: in full mode a CONNECT to a rules
// host is intercepted; to another host it is not; a port-scoped rule host
// only on its port.
func TestRequestRulesFullModeIntercept(t *testing.T) {
	e := rulesEngine(t, ModeFull, gitRules(), nil)
	for _, c := range []struct {
		host string
		port uint16
		want bool
	}{{"git.test", 443, true}, {"other.test", 443, false}, {"x.ask.test", 8443, true}, {"ask.test", 8443, true}, {"x.ask.test", 443, false}} {
		d := e.Run(context.Background(), Request{Host: c.host, Port: c.port, Protocol: ProtoHTTPS, Method: "CONNECT"}, RunOptions{})
		if !d.Allowed() || d.Intercept != c.want {
			t.Errorf("%s:%d: intercept %v, want %v (%+v)", c.host, c.port, d.Intercept, c.want, d)
		}
	}
}

type askDecider struct {
	got []Request
	ans Verdict
}

func (a *askDecider) Decide(ctx context.Context, req Request, base Decision) Decision {
	a.got = append(a.got, req)
	base.Verdict = a.ans
	if a.ans == Allow {
		base.Reason = ReasonNone
	}
	base.Source, base.ApprovalID = SourceDecider, "ap-1"
	return base
}

// TestRequestRuleAsk: ask goes to the decider with method, path and the
// rule; its allow exempts the request from the mode guard; its deny is
// request_denied from the decider; without a decider it is denied.
func TestRequestRuleAsk(t *testing.T) {
	for _, ans := range []Verdict{Allow, Deny} {
		dec := &askDecider{ans: ans}
		e := rulesEngine(t, ModeLimited, gitRules(), dec)
		d := e.Run(context.Background(), Request{Host: "x.ask.test", Port: 8443, Protocol: ProtoHTTP, Method: "DELETE", Path: "/a/b"}, RunOptions{})
		if len(dec.got) != 1 || dec.got[0].Path != "/a/b" || dec.got[0].Method != "DELETE" {
			t.Fatalf("decider saw %+v", dec.got)
		}
		if ans == Allow && (!d.Allowed() || !d.RuleAllowed || d.Source != SourceDecider) {
			t.Errorf("allowed ask: %+v", d)
		}
		if ans == Deny && (d.Reason != ReasonRequestDenied || d.Source != SourceDecider || d.Rule != 3) {
			t.Errorf("denied ask: %+v", d)
		}
	}
	e := rulesEngine(t, ModeFull, gitRules(), nil)
	if d := e.Run(context.Background(), Request{Host: "ask.test", Port: 8443, Protocol: ProtoHTTP, Method: "DELETE", Path: "/"}, RunOptions{}); d.Reason != ReasonRequestDenied {
		t.Errorf("ask without decider: %+v", d)
	}
}

// TestRequestRuleErrors: every bad field names its key.
func TestRequestRuleErrors(t *testing.T) {
	for _, c := range []struct {
		r    RequestRule
		want string
	}{
		{RequestRule{Hosts: []string{"a.test"}, Action: "permit"}, `network.requests[0].action: "permit"`},
		{RequestRule{Hosts: []string{"a.test"}}, "network.requests[0].action: missing"},
		{RequestRule{Action: "deny"}, "network.requests[0].hosts: missing"},
		{RequestRule{Hosts: []string{"a.test:0"}, Action: "deny"}, "network.requests[0].hosts[0]:"},
		{RequestRule{Hosts: []string{"a.test"}, Methods: []string{"PO ST"}, Action: "deny"}, "network.requests[0].methods[0]:"},
		{RequestRule{Hosts: []string{"a.test"}, Paths: []string{"/ok", "nope"}, Action: "deny"}, "network.requests[0].paths[1]:"},
		{RequestRule{Hosts: []string{"a.test"}, Paths: []string{"/../x"}, Action: "deny"}, "network.requests[0].paths[0]:"},
		{RequestRule{Hosts: []string{"a.test"}, Paths: []string{"/a**"}, Action: "deny"}, "network.requests[0].paths[0]:"},
	} {
		_, err := Build(Options{Enabled: true, Requests: []RequestRule{c.r}})
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%+v: error %v, want %q", c.r, err, c.want)
		}
	}
}

func TestMatchSegments(t *testing.T) {
	for _, c := range []struct {
		pat, path string
		want      bool
	}{
		{"/**", "/", true}, {"/**", "/a/b/", true}, {"/a/**", "/a", true}, {"/a/**", "/a/", true},
		{"/a/*", "/a/", false}, {"/a/*", "/a/b", true}, {"/a/*", "/a/b/c", false},
		{"/*/*/git-upload-pack", "/o/r/git-upload-pack", true}, {"/**/git-upload-pack", "/x/y/z/git-upload-pack", true},
		{"/packages/*.whl", "/packages/a-1.0.whl", true}, {"/packages/*.whl", "/packages/a.tar.gz", false},
		{"/a", "/a/", false}, {"/a/", "/a/", true}, {"/", "/", true}, {"/", "/a", false},
	} {
		pat, err := compilePathPattern(c.pat)
		if err != nil {
			t.Fatal(err)
		}
		segs, ok := normalisePath(c.path, nil)
		if !ok {
			t.Fatalf("%q does not normalise", c.path)
		}
		if got := matchSegments(pat, segs); got != c.want {
			t.Errorf("%q ~ %q: %v, want %v", c.pat, c.path, got, c.want)
		}
	}
}

func TestNormalisePath(t *testing.T) {
	for in, want := range map[string]string{
		"/": "/", "//": "/", "/a/./b/../c": "/a/c", "/a/b/..": "/a/", "/a/.": "/a/", "/a%2Fb": "/a/b",
		"/a/b/": "/a/b/", "/a?x=/../..": "/a", "/%41": "/A", "/a%25b": "/a%b",
	} {
		if got, ok := NormalisePath(in); !ok || got != want {
			t.Errorf("NormalisePath(%q) = %q %v, want %q", in, got, ok, want)
		}
	}
}

// BenchmarkRequestRules: one request-rule check among 1 000 rules on
// 1 000 hosts (SPEC §3.10: about 1 µs), against a plain decision.
func BenchmarkRequestRules(b *testing.B) {
	for _, n := range []int{0, 1000} {
		b.Run(fmt.Sprintf("rules=%d", n), func(b *testing.B) {
			var rules []RequestRule
			for i := 0; i < n; i++ {
				rules = append(rules, RequestRule{Hosts: []string{fmt.Sprintf("h%d.test", i), fmt.Sprintf("*.s%d.test", i)}, Methods: []string{"POST"}, Paths: []string{"/*/*/git-receive-pack", "/repos/**"}, Action: ActionDeny})
			}
			rules = append(rules, RequestRule{Hosts: []string{"git.test"}, Methods: []string{"POST"}, Paths: []string{"/*/*/git-upload-pack"}, Action: ActionAllow})
			o := testOptions(true, map[string]string{"git.test": "allow"}, false)
			o.Requests = rules
			snap, err := Build(o)
			if err != nil {
				b.Fatal(err)
			}
			e := newTestEngine(snap, staticOnly{staticResolver(map[string][]string{"git.test": {"93.184.216.34"}})}, ModeLimited, nil)
			req := Request{Host: "git.test", Port: 443, Protocol: ProtoHTTPS, Method: "POST", Path: "/owner/repo/git-upload-pack"}
			ctx := context.Background()
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				if d := e.Run(ctx, req, RunOptions{Inner: true}); !d.Allowed() && n > 0 {
					b.Fatal(d)
				}
			}
		})
	}
}

// BenchmarkRequestStage: the request stage alone (normalise the path, find
// the host's rules, match them) among 1 000 rules.
func BenchmarkRequestStage(b *testing.B) {
	var rules []RequestRule
	for i := 0; i < 1000; i++ {
		rules = append(rules, RequestRule{Hosts: []string{fmt.Sprintf("h%d.test", i), fmt.Sprintf("*.s%d.test", i)}, Methods: []string{"POST"}, Paths: []string{"/*/*/git-receive-pack", "/repos/**"}, Action: ActionDeny})
	}
	rules = append(rules, RequestRule{Hosts: []string{"git.test"}, Methods: []string{"POST"}, Paths: []string{"/*/*/git-upload-pack"}, Action: ActionAllow})
	rr, errs := buildRequestRules(rules)
	if len(errs) > 0 {
		b.Fatal(errs)
	}
	b.ReportAllocs()
	for i := 0; i < b.N; i++ {
		var buf [16]string
		segs, _ := normalisePath("/owner/repo/git-upload-pack", buf[:0])
		if m := rr.judge("git.test", 443, "POST", segs); m.action != ActionAllow {
			b.Fatal(m)
		}
	}
}

// TestRequestRulesOffline: the shadow policy (which has the live request's
// path) judges a candidate's rules exactly; replay (the audit holds no
// path) carries the live rule outcome over and judges rule-free requests
// as before.
func TestRequestRulesOffline(t *testing.T) {
	o := testOptions(true, map[string]string{"git.test": "allow"}, false)
	o.Requests = gitRules()[:1]
	cand, err := Build(o)
	if err != nil {
		t.Fatal(err)
	}
	live := rulesEngine(t, ModeFull, nil, nil)
	req := Request{Host: "git.test", Port: 443, Protocol: ProtoHTTPS, Method: "POST", Path: "/o/r/git-receive-pack"}
	ld := live.Run(context.Background(), req, RunOptions{Inner: true})
	if !ld.Allowed() {
		t.Fatalf("live: %+v", ld)
	}
	if sd := live.Shadow(cand, req, ld, PredictOptions{Inner: true}); sd.Reason != ReasonRequestDenied || sd.Rule != 1 {
		t.Errorf("shadow with the path: %+v", sd)
	}
	// Replay: no path. A live rule-free allow stays allowed (the rules
	// cannot be judged without the path); a live rule block is carried.
	req.Path = ""
	if pd := cand.Predict(req, ld, PredictOptions{Inner: true}); !pd.Allowed() {
		t.Errorf("replay of a rule-free line: %+v", pd)
	}
	blocked := ld
	blocked.Verdict, blocked.Reason, blocked.Source, blocked.Rule = Deny, ReasonRequestDenied, SourceBaseline, 1
	if pd := cand.Predict(req, blocked, PredictOptions{Inner: true}); pd.Reason != ReasonRequestDenied || pd.Rule != 1 {
		t.Errorf("replay of a rule block: %+v", pd)
	}
}
