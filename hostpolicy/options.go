package hostpolicy

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/netproxy/netproxy/execcore/execpolicy"
	"github.com/netproxy/netproxy/hostpolicy/hostname"
)

// Options is everything the decision chain is built from. internal/config
// maps the TOML schema onto it (config.PolicyOptions); hostpolicy never
// reads TOML itself.
type Options struct {
	// Enabled is network.enabled (the kill switch); false blocks every
	// request with proxy_disabled.
	Enabled bool
	// Mode is network.mode: ModeFull or ModeLimited (anything else is
	// treated as limited: fail closed).
	Mode              string
	AllowLocalBinding bool
	// Entries are inline list entries ([network.domains]), each with the
	// Origin its errors name.
	Entries []Entry
	// DomainFiles are pattern files, one entry per line.
	DomainFiles []DomainFile
	DNS         DNSOptions
	// MITM admits limited-mode CONNECTs of allowed hosts to interception
	// (the proxy then method-checks every inner request) instead of
	// answering mitm_required. Set it only when an interceptor exists.
	MITM bool
	// Listen are netproxy's own listen addresses ("host:port"), carried in
	// the snapshot for the data path's self-dial refusal (SPEC §3.5).
	Listen []string
	// Requests are the request rules ([[network.requests]], SPEC §3.10) in
	// file order.
	Requests []RequestRule
	// CheckTLSName is network.check_tls_name: an opaque tunnel to a name
	// must carry no SNI or its own (SPEC §3.11).
	CheckTLSName bool
	// Resolver, when set, replaces the DNS resolver built from DNS (tests).
	// Static answers (DNS.Hosts) are still read first.
	Resolver Resolver
}

// DomainFile is one [[network.domain_files]] table.
type DomainFile struct {
	Path     string // absolute, or relative to the working directory
	Decision string // "allow" | "deny"
	Key      string // the config key its errors name, e.g. network.domain_files[0]
}

// DNSOptions is the [dns] table.
type DNSOptions struct {
	Timeout time.Duration // ≤ 0: DefaultDNSTimeout
	// Servers are "ip:port" name servers asked in turn; empty: the system's
	// resolv.conf.
	Servers []string
	// Hosts are static answers, keyed by host (normalised here).
	Hosts map[string][]netip.Addr
}

// Entry is one list entry with its decision and where it came from.
type Entry struct {
	Pattern  string
	Decision string // "allow" | "deny"
	Origin   string // e.g. network.domains."a.test" or deny.txt:12, used in errors
}

// Decisions of a list entry.
const (
	EntryAllow = "allow"
	EntryDeny  = "deny"
)

// parsedEntry is a validated entry: a domain pattern, an address entry, or
// both (an IP literal is an exact pattern and a one-address prefix).
type parsedEntry struct {
	pattern   *hostname.Pattern
	prefix    netip.Prefix
	hasPrefix bool
	// ports scopes the entry (SPEC §3.2); the zero value is every port.
	ports hostname.PortRange
}

// CheckEntry validates one list entry exactly as Build does (config
// validation calls it so that both agree); the error does not name the
// entry's origin.
func CheckEntry(pattern, decision string) error {
	_, err := parseEntry(pattern, decision)
	return err
}

func parseEntry(pattern, decision string) (parsedEntry, error) {
	if decision != EntryAllow && decision != EntryDeny {
		return parsedEntry{}, fmt.Errorf(`decision %q is not "allow" or "deny"`, decision)
	}
	s, ports, err := hostname.SplitEntryPort(pattern)
	if err != nil {
		return parsedEntry{}, err
	}
	if strings.Contains(s, "/") {
		p, err := parseCIDR(s)
		if err != nil {
			return parsedEntry{}, err
		}
		if decision == EntryDeny && p.Bits() == 0 && ports.Any() {
			return parsedEntry{}, fmt.Errorf("%q: a /0 prefix in the deny list denies every address; deny exact addresses or narrower prefixes", s)
		}
		return parsedEntry{prefix: p, hasPrefix: true, ports: ports}, nil
	}
	p, err := hostname.ParsePattern(s)
	if err != nil {
		return parsedEntry{}, err
	}
	if decision == EntryDeny && ports.Any() {
		// "*:25" in the deny list is a port fence, not "deny everything".
		if err := hostname.CheckDeny(p); err != nil {
			return parsedEntry{}, fmt.Errorf("%q: %w", pattern, err)
		}
	}
	out := parsedEntry{pattern: &p, ports: ports}
	if p.Kind == hostname.Exact {
		// A scoped literal stays a pattern only: its scope must match
		// exactly (reference §2.2); the unscoped address covers all scopes.
		if a, err := netip.ParseAddr(p.Domain); err == nil && a.Zone() == "" {
			a = a.Unmap()
			out.prefix, out.hasPrefix = netip.PrefixFrom(a, a.BitLen()), true
		}
	}
	return out, nil
}

// parseCIDR parses an address-prefix entry ("10.0.0.0/8", "fd00::/8").
func parseCIDR(s string) (netip.Prefix, error) {
	switch {
	case strings.HasPrefix(s, "["):
		return netip.Prefix{}, fmt.Errorf("%q: write an IPv6 prefix without brackets, e.g. fd00::/8", s)
	case strings.ContainsAny(s, "*?[]{}\\"):
		return netip.Prefix{}, fmt.Errorf("%q: a CIDR prefix cannot hold a wildcard; write a prefix such as 10.0.0.0/8", s)
	case strings.HasPrefix(s, "*.") || strings.HasPrefix(s, "**."):
		return netip.Prefix{}, fmt.Errorf("%q: a CIDR prefix cannot hold a wildcard", s)
	}
	addr, bits, _ := strings.Cut(s, "/")
	if strings.ContainsAny(bits, ":/") || strings.Contains(addr, "[") {
		return netip.Prefix{}, fmt.Errorf("%q: a CIDR prefix cannot carry a port or brackets; write e.g. 10.0.0.0/8 or fd00::/8 (address entries apply to every port)", s)
	}
	if _, err := netip.ParseAddr(addr); err != nil && !strings.Contains(addr, "%") {
		return netip.Prefix{}, fmt.Errorf("%q: only a CIDR prefix such as 10.0.0.0/8 or fd00::/8 may contain '/'; a host pattern is a name or an IP address", s)
	}
	if strings.Contains(addr, "%") {
		return netip.Prefix{}, fmt.Errorf("%q: a CIDR prefix cannot carry an IPv6 zone", s)
	}
	p, err := netip.ParsePrefix(s)
	if err != nil {
		return netip.Prefix{}, fmt.Errorf("%q is not a valid CIDR prefix (want e.g. 10.0.0.0/8 or fd00::/8): %v", s, strings.TrimPrefix(err.Error(), "netip.ParsePrefix("+strconv.Quote(s)+"): "))
	}
	if p != p.Masked() {
		return netip.Prefix{}, fmt.Errorf("%q has bits set outside its /%d prefix; write %s", s, p.Bits(), p.Masked())
	}
	if a := p.Addr(); a.Is4In6() && p.Bits() >= 96 {
		p = netip.PrefixFrom(a.Unmap(), p.Bits()-96)
	}
	return p, nil
}

// CheckDNSServer validates one dns.servers entry: "ip:port" (a name would
// need a resolver to find the resolver).
func CheckDNSServer(s string) error {
	host, port, err := net.SplitHostPort(s)
	if err != nil {
		return fmt.Errorf("%q is not \"ip:port\" (e.g. \"127.0.0.1:53\" or \"[::1]:53\"): %v", s, err)
	}
	if _, err := netip.ParseAddr(host); err != nil {
		return fmt.Errorf("%q: the host must be an IP address, not a name", s)
	}
	if n, err := strconv.Atoi(port); err != nil || n < 1 || n > 65535 {
		return fmt.Errorf("%q: the port must be a number 1–65535", s)
	}
	return nil
}

// Build compiles opts into an immutable Snapshot. Every bad entry is
// reported; the error joins them all, each naming its key or file:line.
func Build(opts Options) (*Snapshot, error) {
	b := newBuilder()
	var errs []error
	for _, e := range opts.Entries {
		if err := b.add(e); err != nil {
			errs = append(errs, err)
		}
	}
	for _, df := range opts.DomainFiles {
		key := df.Key
		if key == "" {
			key = "domain file " + df.Path
		}
		if df.Decision != EntryAllow && df.Decision != EntryDeny {
			errs = append(errs, fmt.Errorf("%s.decision: %q is not \"allow\" or \"deny\"", key, df.Decision))
			continue
		}
		if df.Path == "" {
			errs = append(errs, fmt.Errorf("%s.path: missing; give the file of patterns", key))
			continue
		}
		if f, err := os.Open(df.Path); err != nil {
			var pe *os.PathError
			if errors.As(err, &pe) {
				err = pe.Err
			}
			errs = append(errs, fmt.Errorf("%s.path: cannot read domain file %s: %v", key, df.Path, err))
			continue
		} else {
			f.Close()
		}
		errs = append(errs, ReadDomainFile(df.Path, df.Decision, func(e Entry) error { return b.addPattern(e.Pattern, e.Decision) })...)
	}
	for i, s := range opts.DNS.Servers {
		if err := CheckDNSServer(s); err != nil {
			errs = append(errs, fmt.Errorf("dns.servers[%d]: %w", i, err))
		}
	}
	static := make(map[string][]netip.Addr, len(opts.DNS.Hosts))
	for k, v := range opts.DNS.Hosts {
		key, err := hostname.Normalize(k)
		if err != nil || key == "" {
			errs = append(errs, fmt.Errorf("dns.hosts.%q: not a valid host name", k))
			continue
		}
		for _, a := range v {
			static[key] = append(static[key], a.WithZone("").Unmap())
		}
	}
	for k, v := range static {
		// Clipped: a decision's Addrs share these (read-only), and an
		// append to them must copy rather than write into the policy.
		static[k] = slices.Clip(v)
	}
	requests, rerrs := buildRequestRules(opts.Requests)
	errs = append(errs, rerrs...)
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	res := opts.Resolver
	if res == nil {
		res = newDNSResolver(opts.DNS.Timeout, opts.DNS.Servers)
	}
	return &Snapshot{
		allow:             b.allow.build(),
		deny:              b.deny.build(),
		allowLocalBinding: opts.AllowLocalBinding,
		mode:              opts.Mode,
		enabled:           opts.Enabled,
		mitm:              opts.MITM,
		checkTLSName:      opts.CheckTLSName,
		static:            static,
		dns:               res,
		listen:            append([]string(nil), opts.Listen...),
		self:              selfFromListen(opts.Listen),
		amends:            noAmendments,
		requests:          requests,
	}, nil
}

// Load is Build over opts plus the network_rule()s persisted in rulesDir
// (the allow_always / deny_always amendments in $NETPROXY_HOME/rules). It
// is the one builder serve, reload and `netproxy check` use, so that they
// agree. rulesDir "" reads no rules.
func Load(opts Options, rulesDir string) (*Snapshot, error) {
	if rulesDir != "" {
		rules, err := execpolicy.LoadDirs(rulesDir)
		if err != nil {
			return nil, fmt.Errorf("rules in %s: %w", rulesDir, err)
		}
		extra := make([]Entry, 0, len(opts.Entries))
		extra = append(extra, opts.Entries...)
		for _, r := range rules.NetworkRules() {
			switch r.Decision {
			case EntryAllow, EntryDeny:
				extra = append(extra, Entry{Pattern: r.Host, Decision: r.Decision, Origin: fmt.Sprintf("%s:%d", r.File, r.Line)})
			}
		}
		opts.Entries = extra
	}
	return Build(opts)
}

// ReadDomainFile reads a domain file (see hostname.ReadPatternFile) and
// calls add with each pattern and decision (Origin "path:line"). add's error
// should not repeat the origin: every returned error is prefixed path:line.
func ReadDomainFile(path, decision string, add func(Entry) error) []error {
	return hostname.ReadPatternFile(path, func(line int, pattern string) error {
		return add(Entry{Pattern: pattern, Decision: decision, Origin: path + ":" + strconv.Itoa(line)})
	})
}

// CheckDomainFile validates every line of a domain file exactly as Build
// does; each error names path:line.
func CheckDomainFile(path, decision string) []error {
	return ReadDomainFile(path, decision, func(e Entry) error { return CheckEntry(e.Pattern, e.Decision) })
}

// BroadAllowWarning reports why an allow entry is broader than an operator
// likely meant (SPEC §3.2: `netproxy config validate` warns about "*" and
// "**.<tld>"; "*.<tld>" is as broad and warned about too). ok is false for
// every other entry, and for entries that do not parse (errors report those).
func BroadAllowWarning(pattern string) (msg string, ok bool) {
	p, ports, err := hostname.ParseEntry(pattern)
	if err != nil {
		return "", false
	}
	on := "every port"
	if !ports.Any() {
		on = "port" + strings.Replace(ports.String(), ":", " ", 1)
	}
	switch {
	case p.Kind == hostname.All:
		return fmt.Sprintf("allow entry %q allows every host on %s: the allow list no longer limits anything (deny list and local guard still apply)", pattern, on), true
	case (p.Kind == hostname.ApexAndSubdomains || p.Kind == hostname.Subdomains) && !strings.Contains(p.Domain, ".") && !isLiteral(p.Domain):
		return fmt.Sprintf("allow entry %q allows every host under the top-level domain %q on %s; list the sites you mean", pattern, p.Domain, on), true
	}
	return "", false
}

// Warnings lists, for every allow entry of opts (inline and in domain
// files) that BroadAllowWarning flags, one line naming its origin.
func Warnings(opts Options) []string {
	var out []string
	warn := func(e Entry) error {
		if e.Decision != EntryAllow {
			return nil
		}
		if msg, ok := BroadAllowWarning(e.Pattern); ok {
			if e.Origin != "" {
				msg = e.Origin + ": " + msg
			}
			out = append(out, msg)
		}
		return nil
	}
	for _, e := range opts.Entries {
		warn(e)
	}
	for _, df := range opts.DomainFiles {
		if df.Decision == EntryAllow {
			ReadDomainFile(df.Path, df.Decision, warn)
		}
	}
	return out
}

func isLiteral(host string) bool {
	_, err := netip.ParseAddr(host)
	return err == nil
}
