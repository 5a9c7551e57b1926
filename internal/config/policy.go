package config

import (
	"fmt"
	"github.com/netproxy/netproxy/guardian"
	"maps"
	"net/netip"
	"path/filepath"
	"slices"
	"strconv"

	"github.com/netproxy/netproxy/hostpolicy"
)

// PolicyOptions maps the TOML schema onto hostpolicy's own options: the
// lists, the domain files (paths already resolved), [dns], the mode, the
// kill switch, MITM admission ([mitm] enabled) and the listen addresses.
// It compiles nothing; hostpolicy.Load does.
func PolicyOptions(c *Config) (hostpolicy.Options, error) {
	o := hostpolicy.Options{
		Enabled:           c.Network.Enabled,
		Mode:              c.Network.Mode,
		AllowLocalBinding: c.Network.AllowLocalBinding,
		MITM:              c.MITM.Enabled,
		CheckTLSName:      c.Network.CheckTLSName,
		Listen:            []string{c.Listen.HTTP, c.Listen.SOCKS5, c.Listen.Admin},
		DNS: hostpolicy.DNSOptions{
			Timeout: c.DNS.Timeout.Duration,
			Servers: append([]string(nil), c.DNS.Servers...),
			Hosts:   make(map[string][]netip.Addr, len(c.DNS.Hosts)),
		},
	}
	for _, k := range slices.Sorted(maps.Keys(c.Network.Domains)) {
		o.Entries = append(o.Entries, hostpolicy.Entry{Pattern: k, Decision: c.Network.Domains[k], Origin: "network.domains." + strconv.Quote(k)})
	}
	for i, df := range c.Network.DomainFiles {
		p := df.Path
		if p != "" && !filepath.IsAbs(p) && c.Path != "" {
			p = filepath.Join(filepath.Dir(c.Path), p)
		}
		o.DomainFiles = append(o.DomainFiles, hostpolicy.DomainFile{Path: p, Decision: df.Decision, Key: fmt.Sprintf("network.domain_files[%d]", i)})
	}
	o.Requests = c.RequestRules()
	for name, list := range c.DNS.Hosts {
		for i, s := range list {
			a, err := netip.ParseAddr(s)
			if err != nil {
				return hostpolicy.Options{}, &Error{File: c.Path, Key: fmt.Sprintf("dns.hosts.%s[%d]", strconv.Quote(name), i), Msg: fmt.Sprintf("%q is not an IP address", s)}
			}
			o.DNS.Hosts[name] = append(o.DNS.Hosts[name], a.Unmap())
		}
	}
	return o, nil
}

// RulesDir is where approved allow_always / deny_always amendments are
// persisted as network_rule()s: $NETPROXY_HOME/rules.
func RulesDir() string { return filepath.Join(HomeDir(), "rules") }

// GuardianSettings maps [guardian] onto the guardian package's settings.
func GuardianSettings(g Guardian) guardian.Settings {
	return guardian.Settings{Backend: g.Backend, Script: g.Script, URL: g.URL, Model: g.Model,
		APIKeyEnv: g.APIKeyEnv, Timeout: g.Timeout.Duration}
}

// RequestRules maps [[network.requests]] onto hostpolicy's rules, each
// named by its key.
func (c *Config) RequestRules() []hostpolicy.RequestRule {
	var out []hostpolicy.RequestRule
	for i, r := range c.Network.Requests {
		out = append(out, hostpolicy.RequestRule{Hosts: r.Hosts, Methods: r.Methods, Paths: r.Paths, Action: r.Action, Message: r.Message, Key: fmt.Sprintf("network.requests[%d]", i)})
	}
	return out
}
