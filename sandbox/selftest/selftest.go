// Package selftest is the probe battery of `execwrap selftest` (SPEC §6.7):
// escape attempts that run inside a sandbox built exactly as `execwrap run`
// builds it, and the host side that judges them.
//
// The probe side (Probe, run as the sandboxed command) never decides alone
// where the host can see more: a TCP or UDP probe is ESCAPED when a host
// listener received anything, a write probe when its file appeared on the
// host, a secret probe when it read the host's bytes (same SHA-256), a
// setuid probe when the host sees the bit after the run. The host side
// (cmd/execwrap) builds the Plan, starts the listeners, runs the sandbox,
// and merges what both sides saw with Merge.
package selftest

import (
	"encoding/json"
	"fmt"
	"io"
	"sort"
	"strings"
)

// Outcome is one probe's verdict.
type Outcome string

const (
	// Held: the probe tried and the sandbox stopped it.
	Held Outcome = "held"
	// Escaped: the probe got out (evidence says how).
	Escaped Outcome = "escaped"
	// Error: the probe could not run or its result cannot be trusted; it
	// counts as a failure (an unproven fence is not a fence).
	Error Outcome = "error"
	// Skipped: the flags or the host make the probe inapplicable (no
	// non-loopback IPv6 address, no writable root, no --probe-host); the
	// evidence says why.
	Skipped Outcome = "skipped"
)

// Result is one probe's line.
type Result struct {
	Name     string  `json:"name"`
	Result   Outcome `json:"result"`
	Evidence string  `json:"evidence"`
	// Hashes and Names carry what a secret probe read (file → SHA-256,
	// directory entries) to the host, which compares them with its own
	// view; they are never printed.
	Hashes map[string]string `json:"hashes,omitempty"`
	Names  []string          `json:"names,omitempty"`
}

// Names is every probe, in the order they are printed. A probe missing from
// the sandbox's answer is an Error, so this list is the contract.
var Names = []string{
	"net.tcp4-loopback", "net.tcp6-loopback", "net.tcp4-host", "net.tcp6-host",
	"net.udp4-loopback", "net.udp6-loopback", "net.udp4-host", "net.udp6-host",
	"net.tfo4", "net.tfo6",
	"net.raw-socket", "net.packet-socket", "net.netlink-socket", "net.unix-socket",
	"dns.resolver", "dns.proxy",
	"capture.denied-connect", "capture.udp-9", "capture.dns-txt",
	"proxy.addr-127.1", "proxy.addr-2130706433", "proxy.addr-0x7f000001",
	"proxy.addr-mapped-127.0.0.1", "proxy.addr-169.254.169.254", "proxy.addr-fd00-ec2--254",
	"netproxy.direct", "netproxy.control-socket", "proxy.self-loop", "proxy.forged-frame",
	"tls.sni-fronting",
	"fs.secret-netproxy-home", "fs.secret-admin-token", "fs.secret-ssh", "fs.secret-aws",
	"fs.secret-gcloud", "fs.secret-azure", "fs.secret-kube", "fs.secret-docker-config",
	"fs.secret-gnupg", "fs.secret-netrc", "fs.secret-git-credentials", "fs.secret-gh",
	"fs.secret-netproxy-paths", "fs.secret-deny-read",
	"fs.write-etc", "fs.write-home", "fs.write-tmp",
	"fs.protected-git", "fs.protected-git-config", "fs.protected-git-hooks", "fs.protected-hg",
	"fs.protected-svn", "fs.protected-codex", "fs.protected-execwrap", "fs.protected-netproxy",
	"fs.setuid", "fs.setgid", "fs.setuid-open", "fs.file-caps",
	"tty.tiocsti",
	"sys.ptrace-init", "sys.pidfd-getfd-init", "sys.proc1-environ", "sys.mount",
	"sys.unshare-userns", "sys.keyctl", "sys.bpf", "sys.perf-event-open",
	"sys.io-uring-setup", "sys.open-by-handle-at", "sys.userfaultfd",
}

// ProbeArg is the hidden argv[1] that makes execwrap run the probe battery
// (argv[2] is the Plan as JSON). The host passes it as the sandboxed
// command: /proc/self/exe __selftest-probe PLAN.
const ProbeArg = "__selftest-probe"

// ResultsMarker starts the probe side's single output line.
const ResultsMarker = "EXECWRAP-SELFTEST-RESULTS "

// Report is what `execwrap selftest --json` prints.
type Report struct {
	Tier    string   `json:"tier"`
	Network string   `json:"network"`
	Probes  []Result `json:"probes"`
	Held    int      `json:"held"`
	Escaped int      `json:"escaped"`
	Errors  int      `json:"error"`
	Skipped int      `json:"skipped"`
	// Error is set when the sandbox itself could not be built.
	Error string `json:"error_message,omitempty"`
}

// Exit codes of `execwrap selftest`.
const (
	ExitAllHeld = 0
	ExitEscaped = 1   // at least one probe got out
	ExitError   = 3   // none got out, but some could not be proven
	ExitSetup   = 125 // the sandbox could not be built: nothing was proven
)

// NewReport orders results as Names (unknown names last), fills in an
// Error for every expected probe that has no result, and counts.
func NewReport(tier, network string, got []Result) Report {
	byName := map[string]Result{}
	for _, r := range got {
		r.Hashes, r.Names = nil, nil
		byName[r.Name] = r
	}
	rep := Report{Tier: tier, Network: network, Probes: []Result{}}
	for _, n := range Names {
		r, ok := byName[n]
		if !ok {
			r = Result{Name: n, Result: Error, Evidence: "no result from inside the sandbox"}
		}
		delete(byName, n)
		rep.Probes = append(rep.Probes, r)
	}
	extra := make([]string, 0, len(byName))
	for n := range byName {
		extra = append(extra, n)
	}
	sort.Strings(extra)
	for _, n := range extra {
		rep.Probes = append(rep.Probes, byName[n])
	}
	for i, r := range rep.Probes {
		switch r.Result {
		case Held:
			rep.Held++
		case Escaped:
			rep.Escaped++
		case Skipped:
			rep.Skipped++
		default:
			rep.Probes[i].Result = Error // an unknown verdict proves nothing
			rep.Errors++
		}
	}
	return rep
}

// ExitCode is 0 only when every probe held or was inapplicable.
func (r Report) ExitCode() int {
	switch {
	case r.Error != "":
		return ExitSetup
	case r.Escaped > 0:
		return ExitEscaped
	case r.Errors > 0:
		return ExitError
	}
	return ExitAllHeld
}

// WriteText prints one line per probe: name, verdict (ESCAPED in capitals
// so it stands out), evidence; then a summary line.
func (r Report) WriteText(w io.Writer) error {
	var b strings.Builder
	fmt.Fprintf(&b, "execwrap selftest: tier %s, network %s\n", orDash(r.Tier), orDash(r.Network))
	for _, p := range r.Probes {
		verdict := string(p.Result)
		if p.Result == Escaped {
			verdict = "ESCAPED"
		}
		fmt.Fprintf(&b, "%-30s %-8s %s\n", p.Name, verdict, oneLine(p.Evidence))
	}
	if r.Error != "" {
		fmt.Fprintf(&b, "the sandbox could not be built: %s\n", oneLine(r.Error))
	}
	fmt.Fprintf(&b, "%d held, %d escaped, %d error, %d skipped\n", r.Held, r.Escaped, r.Errors, r.Skipped)
	_, err := io.WriteString(w, b.String())
	return err
}

// WriteJSON prints the report as one indented object.
func (r Report) WriteJSON(w io.Writer) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(r)
}

// ParseProbeOutput finds the probe side's results line in the sandboxed
// command's stdout.
func ParseProbeOutput(stdout []byte) ([]Result, error) {
	for _, line := range strings.Split(string(stdout), "\n") {
		if rest, ok := strings.CutPrefix(line, ResultsMarker); ok {
			var rs []Result
			if err := json.Unmarshal([]byte(rest), &rs); err != nil {
				return nil, fmt.Errorf("probe results: %w", err)
			}
			return rs, nil
		}
	}
	return nil, fmt.Errorf("the probe battery printed no results line")
}

func oneLine(s string) string {
	s = strings.Join(strings.Fields(s), " ")
	if s == "" {
		return "-"
	}
	return s
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
