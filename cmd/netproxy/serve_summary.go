package main

import (
	"fmt"
	"strings"
	"time"

	"github.com/netproxy/netproxy/approvalsvc"
	"github.com/netproxy/netproxy/guardian"
	"github.com/netproxy/netproxy/hostpolicy"
	"github.com/netproxy/netproxy/internal/config"
)

// policySummary is what `netproxy serve` says at start about its policy, so
// that nobody has to read the config to know why a request waits or is
// blocked: how many allow and deny entries the live lists hold (config,
// domain files and the persisted network_rule()s of $NETPROXY_HOME/rules),
// the mode, and what happens to a host that is in neither list.
func policySummary(snap *hostpolicy.Snapshot, cfg *config.Config) string {
	allow, deny := snap.PatternCounts()
	var b strings.Builder
	fmt.Fprintf(&b, "netproxy: policy: %s, %s, mode %s", plural(allow, "allow entry", "allow entries"), plural(deny, "deny entry", "deny entries"), snap.Mode())
	if snap.Mode() == "limited" {
		b.WriteString(" (GET, HEAD and OPTIONS only)")
	}
	b.WriteString("\n")
	fmt.Fprintf(&b, "netproxy: %s\n", unlistedHosts(cfg))
	if allow == 0 {
		b.WriteString("netproxy: nothing is allowed until it is listed in [network.domains] or approved\n")
	}
	return b.String()
}

// unlistedHosts says what the approval service does with a host in no
// list (SPEC §5 steps 4–6), from the same settings and policy parser the
// service uses.
func unlistedHosts(cfg *config.Config) string {
	s := cfg.Approvals.Settings().WithDefaults()
	if !s.Enabled {
		return "unlisted hosts are blocked (approvals.enabled = false)"
	}
	policy, err := approvalsvc.ParsePolicy(s.Policy)
	if err != nil {
		// serve refuses such a config before it gets here.
		return fmt.Sprintf("unlisted hosts are blocked (approvals.policy %q: %v)", s.Policy, err)
	}
	if policy.Kind == approvalsvc.PolicyNever {
		return "unlisted hosts are blocked (approvals.policy = never)"
	}
	hooks := ""
	if n := len(s.Hooks); n > 0 {
		hooks = ", after " + plural(n, "approval hook", "approval hooks")
	}
	if approvalsvc.RoutesToGuardian(policy, s.Reviewer) {
		t := cfg.Guardian.Timeout.Duration
		if t <= 0 {
			t = guardian.DefaultTimeout
		}
		return fmt.Sprintf("unlisted hosts wait for the Guardian (guardian.backend = %s) for up to %s%s; no answer denies", cfg.Guardian.Backend, seconds(t), hooks)
	}
	return fmt.Sprintf("unlisted hosts wait for approval for up to %s%s (approvals page or `netproxy approvals`); no decision denies; a request is told \"pending\" after %s and retries", seconds(s.Timeout), hooks, seconds(s.ClientWait))
}

func plural(n int, one, many string) string {
	if n == 1 {
		return "1 " + one
	}
	return fmt.Sprintf("%d %s", n, many)
}

// seconds writes d as whole seconds ("120 s"), or as Go writes it when it
// is not a whole number of seconds.
func seconds(d time.Duration) string {
	if d%time.Second == 0 {
		return fmt.Sprintf("%d s", d/time.Second)
	}
	return d.String()
}
