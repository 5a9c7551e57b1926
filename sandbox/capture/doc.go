// Package capture holds the pure parts of transparent capture (SPEC §6.6,
// docs/sandbox.md "Transparent capture"): the run's address pool, which
// maps each name the sandbox looks up to a private address of its own, and
// the sandbox's resolver, which answers A/AAAA from that pool and nothing
// else. It never resolves a name and never forwards a query (SPEC §3.4: a
// name the policy has not allowed must cause no lookup anywhere); the real
// resolution happens in netproxy, after its decision, when a captured
// connection to a pool address arrives there as a CONNECT to name:port.
//
// It is a leaf (standard library, x/net/dns/dnsmessage and
// hostpolicy/hostname), so package sandbox can use it.
package capture
