package selftest

import "strings"

// Plan is what the host tells the probe side (argv, so never a secret: no
// token, no file content, no hash of one).
type Plan struct {
	Nonce   string `json:"nonce"`
	Network string `json:"network"` // proxied | none
	// Capture: the run asks for transparent capture (SPEC §6.6); the
	// capture probes then run (skipped when the tier cannot capture).
	Capture bool `json:"capture,omitempty"`
	// Workspace is the writable root shared with the host where the
	// protected-path and setuid probes write ("" when none is writable).
	Workspace string `json:"workspace,omitempty"`
	// Scratch is a folder the host made in the workspace for the setuid
	// probes' files (the landlock tier makes nothing new at a writable
	// root's top) and removes after the run.
	Scratch string `json:"scratch,omitempty"`
	Home    string `json:"home,omitempty"`
	// Targets are host addresses (host:port) per network probe; the host
	// listens on each and counts what arrives. A loopback spelling probe
	// names its listener's port through the proxy.
	Targets map[string][]string `json:"targets,omitempty"`
	// Netproxy lists netproxy's own listening addresses as the host sees
	// them; Control is its control socket.
	Netproxy []string `json:"netproxy,omitempty"`
	Control  string   `json:"control,omitempty"`
	// Secrets per probe: the host paths the caller can read (one, or
	// every path of netproxy's list or of --deny-read).
	Secrets map[string][]SecretTarget `json:"secrets,omitempty"`
	// ProbeHost is an allowed HOST:PORT for the SNI fronting probe.
	ProbeHost string `json:"probe_host,omitempty"`
	// Skip names the probes that do not apply, with the reason.
	Skip map[string]string `json:"skip,omitempty"`
}

// SecretTarget is a host secret: a file, or a directory with the readable
// files the host found in it.
type SecretTarget struct {
	Path  string   `json:"path"`
	Dir   bool     `json:"dir,omitempty"`
	Files []string `json:"files,omitempty"`
}

// ExfilName is the denied name a DNS exfiltration probe asks for: unique
// per run so no cache answers it, under .invalid so no real zone does.
func (p *Plan) ExfilName(tag string) string {
	return strings.ToLower(p.Nonce) + "-" + tag + ".exfil-probe.invalid"
}

// FileName is the name of a file a probe creates (unique per run, so the
// host can find and remove leftovers).
func (p *Plan) FileName(tag string) string { return "execwrap-selftest-" + p.Nonce + "-" + tag }

// Merge combines the sandbox's view of a probe with the host's: what the
// host saw get out (hostEscaped) wins over anything the probe said; a host
// check that could not be made (hostErr) turns a held into an error.
func Merge(r Result, hostEscaped, hostErr string) Result {
	switch {
	case hostEscaped != "":
		r.Evidence = "host saw: " + hostEscaped + "; inside: " + r.Evidence
		r.Result = Escaped
	case r.Result == Escaped || r.Result == Skipped:
	case hostErr != "":
		r.Evidence = "host check failed: " + hostErr + "; inside: " + r.Evidence
		r.Result = Error
	}
	return r
}
