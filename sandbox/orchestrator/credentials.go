package orchestrator

import (
	"os"

	"github.com/netproxy/netproxy/sandbox"
	"github.com/netproxy/netproxy/sandbox/netctl"
)

// caBundleEnv are the variables common clients read their trusted roots
// from; each is pointed at the bundle of the system roots plus netproxy's
// interception CA (docs/credentials.md).
var caBundleEnv = []string{"SSL_CERT_FILE", "REQUESTS_CA_BUNDLE", "CURL_CA_BUNDLE", "NODE_EXTRA_CA_CERTS", "PIP_CERT", "GIT_SSL_CAINFO"}

// caBundleName is the bundle's file name in the sandbox's private /tmp.
const caBundleName = "netproxy-ca-bundle.pem"

// systemRootFiles are where distributions keep the PEM bundle of trusted
// roots (the first readable one is used).
var systemRootFiles = []string{
	"/etc/ssl/certs/ca-certificates.crt",                // Debian, Ubuntu, Alpine
	"/etc/pki/tls/certs/ca-bundle.crt",                  // Fedora, RHEL
	"/etc/ssl/ca-bundle.pem",                            // openSUSE
	"/etc/pki/ca-trust/extracted/pem/tls-ca-bundle.pem", // RHEL 7+
	"/etc/ssl/cert.pem",                                 // Alpine, macOS
}

// applyCredentials puts an execution's credential placeholders into the
// command's environment (under each credential's env variable, replacing
// whatever value the parent had — a real key never reaches the sandbox),
// and has the sandbox create the CA bundle its clients trust. Nothing is
// written outside the sandbox.
func applyCredentials(spec *sandbox.Spec, reg netctl.Registration) {
	for _, p := range reg.Placeholders {
		if p.Env != "" {
			spec.Env = sandbox.SetEnv(spec.Env, p.Env, p.Value)
		}
	}
	if reg.CACert == "" {
		return
	}
	var roots []string
	if f := os.Getenv("SSL_CERT_FILE"); f != "" {
		roots = append(roots, f) // the caller's own roots first
	}
	spec.Files = append(spec.Files, sandbox.File{
		Name: caBundleName, PrependFirst: append(roots, systemRootFiles...),
		Data: []byte(reg.CACert), Env: caBundleEnv,
	})
}
