package main

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// The interception part's parties: the HTTPS origin's certificate, one CA
// per intercepting proxy (so a client that trusts only that CA proves, by
// completing its handshake, that this proxy minted the leaf), and the
// intercepting peers themselves (Squid ssl-bump, mitmdump, netproxy with
// [mitm] and a request rule), each in its own temporary directory.

// Every key is ECDSA P-256, as netproxy's own test CAs: Squid signs its
// leaves with the CA's key, mitmproxy with its own RSA key, netproxy mints
// a P-256 key per host.

// benchCA is one CA of the bench: its PEM files and parsed pair.
type benchCA struct {
	name            string // subject common name
	certPEM, keyPEM []byte
	cert            *x509.Certificate
	key             *ecdsa.PrivateKey
}

func newBenchCA(name string) (*benchCA, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(time.Now().UnixNano()), Subject: pkix.Name{CommonName: name},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(48 * time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature | x509.KeyUsageCRLSign,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, err
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, err
	}
	kder, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return nil, err
	}
	return &benchCA{name: name, cert: cert, key: key,
		certPEM: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		keyPEM:  pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kder})}, nil
}

func (ca *benchCA) pool() *x509.CertPool {
	p := x509.NewCertPool()
	p.AddCert(ca.cert)
	return p
}

// leaf signs a server certificate for names with ca and returns it with
// its key, both PEM.
func (ca *benchCA) leaf(names []string) (certPEM, keyPEM []byte, err error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, err
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(time.Now().UnixNano()), Subject: pkix.Name{CommonName: names[0]},
		DNSNames: names, NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(48 * time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, &key.PublicKey, ca.key)
	if err != nil {
		return nil, nil, err
	}
	kder, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return nil, nil, err
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kder}), nil
}

// writeFiles writes files (name → content) into dir, readable by owner.
func writeFiles(dir string, files map[string][]byte) error {
	for name, b := range files {
		if err := os.WriteFile(filepath.Join(dir, name), b, 0o644); err != nil {
			return err
		}
	}
	return nil
}

// chownProxy gives dir (recursively) to Debian's `proxy` user, which Squid
// drops to when started as root.
func chownProxy(dir string) error {
	if os.Geteuid() != 0 {
		return nil
	}
	u, err := user.Lookup("proxy")
	if err != nil {
		return nil
	}
	uid, _ := strconv.Atoi(u.Uid)
	gid, _ := strconv.Atoi(u.Gid)
	return filepath.Walk(dir, func(path string, _ os.FileInfo, err error) error {
		if err != nil {
			return err
		}
		return os.Lchown(path, uid, gid)
	})
}

// squidHasOpenSSL says whether bin was built with OpenSSL (ssl-bump needs
// it: Debian's squid-openssl, not squid).
func squidHasOpenSSL(bin string) bool {
	out, _ := exec.Command(bin, "-v").CombinedOutput()
	return strings.Contains(string(out), "--with-openssl")
}

// squidCertgen is the path of Squid's certificate helper.
const squidCertgen = "/usr/lib/squid/security_file_certgen"

// startSquidBump starts Squid with test/loadbench/peers/squid-bump.conf.tmpl:
// ssl-bump of every CONNECT with leaves signed by ca, the origin verified
// against originCA, names from hosts; its certificate database is
// initialised in the run's temporary directory.
func startSquidBump(bin string, fds int, ca *benchCA, originCA []byte, hosts map[string]string) (*peerProc, error) {
	if !squidHasOpenSSL(bin) {
		return nil, fmt.Errorf("%s is built without OpenSSL: ssl-bump needs Debian's squid-openssl (scripts/install-test-deps.sh --bench-peers)", bin)
	}
	dir, err := newSquidDir("bench-squid-bump", hosts)
	if err != nil {
		return nil, err
	}
	p := &peerProc{name: "squid-bump", dir: dir, logs: []string{filepath.Join(dir, "cache.log")}}
	fail := func(err error) (*peerProc, error) { os.RemoveAll(dir); return nil, err }
	if err := writeFiles(dir, map[string][]byte{"ca.pem": ca.certPEM, "ca-key.pem": ca.keyPEM, "origin-ca.pem": originCA}); err != nil {
		return fail(err)
	}
	if out, err := exec.Command(squidCertgen, "-c", "-s", filepath.Join(dir, "ssl_db"), "-M", "16MB").CombinedOutput(); err != nil {
		return fail(fmt.Errorf("%s -c (the ssl_db): %v\n%s", squidCertgen, err, out))
	}
	port, err := freePort()
	if err != nil {
		return fail(err)
	}
	if err := runSquid(p, bin, "squid-bump.conf", port, map[string]any{"Dir": dir, "Port": port, "FDs": fds, "Certgen": squidCertgen}); err != nil {
		return fail(err)
	}
	return p, nil
}

// startMitmdump starts mitmdump in regular (forward proxy) mode with its
// defaults but for: quiet output (-q, no flow printing), its CA ca (the
// confdir's mitmproxy-ca.pem, key and certificate), and the origin
// verified against originCA only.
func startMitmdump(bin string, ca *benchCA, originCA []byte) (*peerProc, error) {
	dir, err := os.MkdirTemp("", "bench-mitmdump")
	if err != nil {
		return nil, err
	}
	p := &peerProc{name: "mitmdump", dir: dir}
	fail := func(err error) (*peerProc, error) { os.RemoveAll(dir); return nil, err }
	conf := filepath.Join(dir, "conf")
	if err := os.Mkdir(conf, 0o700); err != nil {
		return fail(err)
	}
	if err := writeFiles(conf, map[string][]byte{"mitmproxy-ca.pem": append(append([]byte{}, ca.keyPEM...), ca.certPEM...)}); err != nil {
		return fail(err)
	}
	if err := writeFiles(dir, map[string][]byte{"origin-ca.pem": originCA}); err != nil {
		return fail(err)
	}
	port, err := freePort()
	if err != nil {
		return fail(err)
	}
	p.httpAddr = fmt.Sprintf("127.0.0.1:%d", port)
	p.cmd = exec.Command(bin, "-q", "--mode", "regular", "--listen-host", "127.0.0.1", "--listen-port", strconv.Itoa(port),
		"--set", "confdir="+conf, "--set", "ssl_verify_upstream_trusted_ca="+filepath.Join(dir, "origin-ca.pem"))
	p.cmd.Env = append(os.Environ(), "HOME="+dir)
	if err := startProc(p, p.httpAddr); err != nil {
		return fail(err)
	}
	return p, nil
}

// mitmdumpVersion is the first line of `mitmdump --version`.
func mitmdumpVersion(bin string) string {
	out, _ := exec.Command(bin, "--version").CombinedOutput()
	line, _, _ := strings.Cut(strings.TrimSpace(string(out)), "\n")
	return strings.TrimSpace(line)
}

// netproxyInterceptTail is the interception part's addition to netproxy's
// peer configuration: [mitm] with the bench's netproxy CA and the origin's
// CA as upstream_ca, and one request rule that allows GET on the origin's
// names — a host named by a request rule is intercepted in every mode
// (docs/policy.md, request rules), and every request inside is judged.
const netproxyInterceptTail = `[mitm]
enabled = true
ca_cert = "ca.pem"
ca_key = "ca-key.pem"
upstream_ca = "origin-ca.pem"

[[network.requests]]
hosts = ["up.test", "*.up.test"]
methods = ["GET"]
action = "allow"
`

// startNetproxyIntercept starts netproxy in its peer-bench shape plus
// [mitm] and the request rule: CONNECTs to up.test and *.up.test are
// intercepted, to other.test (the same origin) tunnelled opaquely.
func startNetproxyIntercept(bin string, originPort int, ca *benchCA, originCA []byte, hosts []string) (*peerProc, error) {
	ex := netproxyExtra{
		domains: `"*.up.test" = "allow"` + "\n" + `"other.test" = "allow"` + "\n",
		tail:    netproxyInterceptTail,
		files:   map[string][]byte{"ca.pem": ca.certPEM, "ca-key.pem": ca.keyPEM, "origin-ca.pem": originCA},
	}
	for _, h := range hosts {
		if h != "up.test" {
			ex.hosts += fmt.Sprintf("%q = [\"127.0.0.1\"]\n", h)
		}
	}
	return startNetproxyPeerWith(bin, originPort, ex)
}

// originTLS is the HTTPS origin's certificate material.
type originTLS struct {
	ca              *benchCA
	certPEM, keyPEM []byte
}

func newOriginTLS() (*originTLS, error) {
	ca, err := newBenchCA("loadbench origin CA")
	if err != nil {
		return nil, err
	}
	c, k, err := ca.leaf([]string{"up.test", "*.up.test", "other.test"})
	if err != nil {
		return nil, err
	}
	return &originTLS{ca: ca, certPEM: c, keyPEM: k}, nil
}

// keyPair is the origin's certificate and key for its TLS listener.
func (o *originTLS) keyPair() (tls.Certificate, error) { return tls.X509KeyPair(o.certPEM, o.keyPEM) }
