package main

import (
	"flag"
	"fmt"
	"strings"

	"github.com/netproxy/netproxy/attribution"
	"github.com/netproxy/netproxy/hostpolicy"
	"github.com/netproxy/netproxy/sandbox"
)

// networkFlags are `execwrap run`'s narrower network policy flags: they
// narrow netproxy's policy for this execution only (docs/policy.md
// "Narrower policies") and are sent as the registration's "network".
type networkFlags struct {
	allow, deny []string
	mode        string
}

func registerNetworkFlags(fs *flag.FlagSet) *networkFlags {
	n := &networkFlags{}
	fs.Var((*repeated)(&n.allow), "allow-domain", "narrow this execution's egress to hosts matching this pattern (repeatable; never widens the proxy's policy)")
	fs.Var((*repeated)(&n.deny), "deny-domain", "deny hosts matching this pattern to this execution (repeatable)")
	fs.StringVar(&n.mode, "network-mode", "", "limited: only GET/HEAD/OPTIONS for this execution (never widens the proxy's mode)")
	return n
}

// policy validates the flags exactly as netproxy will (so a typo is a
// usage error here: allow[i] is the i-th --allow-domain, deny[i] the i-th
// --deny-domain) and returns the policy to register; nil when none is set.
// They need network proxied: nothing else could enforce them.
func (n *networkFlags) policy(network string) (*attribution.NetworkPolicy, error) {
	if n == nil || (len(n.allow) == 0 && len(n.deny) == 0 && n.mode == "") {
		return nil, nil
	}
	switch n.mode {
	case "", hostpolicy.ModeLimited, hostpolicy.ModeFull:
	default:
		return nil, fmt.Errorf("--network-mode %q: want limited or full", n.mode)
	}
	if _, err := hostpolicy.BuildScope(hostpolicy.LevelExecution, hostpolicy.ScopeSpec{Allow: n.allow, Deny: n.deny, Mode: n.mode}); err != nil {
		return nil, fmt.Errorf("--allow-domain/--deny-domain: %s", strings.ReplaceAll(err.Error(), "\n", "; "))
	}
	if network != string(sandbox.NetworkProxied) {
		return nil, fmt.Errorf("--allow-domain, --deny-domain and --network-mode need --network proxied (got %s)", network)
	}
	return &attribution.NetworkPolicy{Allow: n.allow, Deny: n.deny, Mode: n.mode}, nil
}
