package approvalsvc

import (
	"context"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/netproxy/netproxy/attribution"
	"github.com/netproxy/netproxy/hostpolicy"
	"github.com/netproxy/netproxy/internal/config"
)

// rig is a service wired to real parts: a registry, an engine over a
// compiled policy, a rules file in a temp dir.
type rig struct {
	t      testing.TB
	svc    *Service
	reg    *attribution.Registry
	engine *hostpolicy.Engine
	rules  string
	cfg    *config.Config
	dir    string
}

type rigOpt func(*Options)

func withConfig(f func(*Settings)) rigOpt { return func(o *Options) { f(&o.Settings) } }

// newRig builds the service. The policy denies denied.test, allows
// allowed.test; local.test resolves to 127.0.0.1; everything else to a
// public documentation-free address (8.8.8.8) so it is an allow-list miss.
func newRig(t testing.TB, opts ...rigOpt) *rig {
	t.Helper()
	dir := t.TempDir()
	r := &rig{t: t, reg: attribution.NewRegistry(), dir: dir, rules: filepath.Join(dir, "rules", "default.rules")}
	o := Options{
		Settings:     Settings{Enabled: true, Reviewer: "user", Policy: "on-request", Timeout: 30 * time.Second},
		UserReviewer: true,
		Owners:       r.reg,
		Publisher:    r.reg,
		Rules:        RulesFile{Path: r.rules},
		HookEnv:      []string{"PATH=" + os.Getenv("PATH")},
	}
	var engine *hostpolicy.Engine
	// The rig builds its engine after the service (the engine takes the
	// service as its decider), so the amender reaches it through a closure.
	o.Amender = amendFunc(func(h string, v hostpolicy.Verdict) { engine.Amend(h, v) })
	for _, f := range opts {
		f(&o)
	}
	svc, err := New(o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(svc.Close)
	r.svc = svc
	r.cfg = testPolicyConfig(map[string]string{"denied.test": "deny", "allowed.test": "allow"})
	engine = hostpolicy.NewEngine(testSnapshot(t, r.cfg), svc)
	r.engine = engine
	return r
}

func testPolicyConfig(domains map[string]string) *config.Config {
	c := &config.Config{}
	c.Network.Enabled = true // the zero Config is a disabled proxy (fail closed)
	c.Network.Mode = "full"
	c.Network.Domains = domains
	return c
}

// testSnapshot builds cfg's policy (as serve does, without rules) with
// the test names answered statically: no test sends a query to real DNS.
func testSnapshot(t testing.TB, cfg *config.Config) *hostpolicy.Snapshot {
	t.Helper()
	o, err := config.PolicyOptions(cfg)
	if err != nil {
		t.Fatal(err)
	}
	pub := []netip.Addr{netip.MustParseAddr("8.8.8.8")}
	o.DNS.Hosts = map[string][]netip.Addr{"local.test": {netip.MustParseAddr("127.0.0.1")}}
	for _, h := range []string{"alpha.test", "bravo.test", "charlie.test", "denied.test", "allowed.test", "evil.test", "ok.good.test"} {
		o.DNS.Hosts[h] = pub
	}
	o.DNS.Timeout = time.Second
	o.Resolver = hostpolicy.NewResolver(nil, time.Second)
	pol, err := hostpolicy.Build(o)
	if err != nil {
		t.Fatal(err)
	}
	return pol
}

func (r *rig) eval(ctx context.Context, req hostpolicy.Request) hostpolicy.Decision {
	if req.Protocol == "" {
		req.Protocol = hostpolicy.ProtoHTTP
	}
	if req.Port == 0 {
		req.Port = 80
	}
	return r.engine.Evaluate(ctx, req)
}

// goEval runs eval in the background.
func (r *rig) goEval(req hostpolicy.Request) <-chan hostpolicy.Decision {
	ch := make(chan hostpolicy.Decision, 1)
	go func() { ch <- r.eval(context.Background(), req) }()
	return ch
}

// waitPending waits for exactly one pending approval mentioning host.
func (r *rig) waitPending(host string) Approval {
	r.t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for time.Now().Before(deadline) {
		for _, a := range r.svc.Approvals(StatusPending) {
			if a.Host == host {
				return a
			}
		}
		time.Sleep(2 * time.Millisecond)
	}
	r.t.Fatalf("no pending approval for %s", host)
	return Approval{}
}

func (r *rig) pendingCount() int { return len(r.svc.Approvals(StatusPending)) }

func recv(t testing.TB, ch <-chan hostpolicy.Decision) hostpolicy.Decision {
	t.Helper()
	select {
	case d := <-ch:
		return d
	case <-time.After(10 * time.Second):
		t.Fatal("request still waiting")
		return hostpolicy.Decision{}
	}
}

func (r *rig) register(session, env string) attribution.Execution {
	r.t.Helper()
	e, _, err := r.reg.Register(attribution.ExecutionSpec{SessionID: session, EnvironmentID: env, Command: []string{"curl", "x"}, Cwd: "/w"})
	if err != nil {
		r.t.Fatal(err)
	}
	return e
}

// hookScript writes an executable hook; each call appends a line to a
// counter file so tests can see how often it ran.
func hookScript(t *testing.T, body string) (path string, calls func() int) {
	t.Helper()
	dir := t.TempDir()
	path = filepath.Join(dir, "hook.sh")
	count := filepath.Join(dir, "calls")
	src := fmt.Sprintf("#!/bin/sh\necho x >> %q\n%s\n", count, body)
	if err := os.WriteFile(path, []byte(src), 0o755); err != nil {
		t.Fatal(err)
	}
	return path, func() int {
		b, _ := os.ReadFile(count)
		return strings.Count(string(b), "x")
	}
}

func withHooks(timeout time.Duration, cmds ...string) rigOpt {
	return withConfig(func(c *Settings) {
		for _, p := range cmds {
			c.Hooks = append(c.Hooks, Hook{Command: []string{p}, Timeout: timeout})
		}
	})
}

// countingHook is a real hook process that counts its runs and answers ans.
func countingHook(t *testing.T, ans string) (string, func() int) {
	return hookScript(t, "cat >/dev/null\necho '"+ans+"'")
}

// waiters counts requests waiting on reviews in flight.
func (s *Service) waiters() int {
	s.flightMu.Lock()
	defer s.flightMu.Unlock()
	n := 0
	for _, f := range s.flights {
		n += f.joined
	}
	return n
}

// amendFunc adapts a function to Amender (tests only).
type amendFunc func(host string, d hostpolicy.Verdict)

func (f amendFunc) Amend(host string, d hostpolicy.Verdict) { f(host, d) }
