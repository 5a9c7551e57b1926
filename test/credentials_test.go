package test

import (
	"bufio"
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"io"
	"math/big"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

// credSecret is the real key of the e2e credential; no output of a run may
// contain it.
const credSecret = "sk-e2e-REAL-7f3a9c1d5b2e8f604a1c3e5d7b9f1a2c"

// credUpstream is a TLS origin for the credential's hosts (certificate from
// a test CA that netproxy trusts through mitm.upstream_ca), speaking
// HTTP/1.1 and HTTP/2. It records every Authorization header it sees.
type credUpstream struct {
	Port  int
	mu    sync.Mutex
	auths []string
	hits  int
}

func (u *credUpstream) seen() (int, []string) {
	u.mu.Lock()
	defer u.mu.Unlock()
	return u.hits, append([]string(nil), u.auths...)
}

type testCA struct {
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
	pem  []byte
}

func newTestCA(t testing.TB, name string) *testCA {
	t.Helper()
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(time.Now().UnixNano()), Subject: pkix.Name{CommonName: name},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, _ := x509.ParseCertificate(der)
	return &testCA{cert: cert, key: key, pem: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})}
}

func (ca *testCA) keyPEM() []byte {
	b, _ := x509.MarshalECPrivateKey(ca.key)
	return pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: b})
}

func (ca *testCA) leaf(t testing.TB, names ...string) tls.Certificate {
	t.Helper()
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(time.Now().UnixNano()), Subject: pkix.Name{CommonName: names[0]},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		DNSNames: names, IPAddresses: []net.IP{net.ParseIP("127.0.0.1")},
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, &key.PublicKey, ca.key)
	if err != nil {
		t.Fatal(err)
	}
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}
}

// bigStream is the size of /stream (HTTP/2 streaming through the interception).
const bigStream = 100 << 20

func startCredUpstream(t testing.TB, cert tls.Certificate) *credUpstream {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	return serveCredUpstream(t, ln, cert)
}

func serveCredUpstream(t testing.TB, ln net.Listener, cert tls.Certificate) *credUpstream {
	t.Helper()
	u := &credUpstream{}
	mux := http.NewServeMux()
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		u.mu.Lock()
		u.hits++
		u.auths = append(u.auths, r.Header.Get("Authorization"))
		u.mu.Unlock()
		switch r.URL.Path {
		case "/stream":
			w.Header().Set("Content-Type", "application/octet-stream")
			chunk := bytes.Repeat([]byte("0123456789abcdef"), 4096) // 64 KiB
			for sent := 0; sent < bigStream; sent += len(chunk) {
				if _, err := w.Write(chunk); err != nil {
					return
				}
			}
		case "/echo":
			// Bidirectional: every line read is echoed at once.
			w.WriteHeader(200)
			rc := http.NewResponseController(w)
			rc.EnableFullDuplex()
			rc.Flush()
			buf := make([]byte, 4096)
			for {
				n, err := r.Body.Read(buf)
				if n > 0 {
					w.Write(buf[:n])
					rc.Flush()
				}
				if err != nil {
					return
				}
			}
		default:
			fmt.Fprintf(w, "%s %s proto=%s", r.Method, r.URL.Path, r.Proto)
		}
	})
	u.Port = ln.Addr().(*net.TCPAddr).Port
	srv := &http.Server{Handler: mux, TLSConfig: &tls.Config{Certificates: []tls.Certificate{cert}}, ReadHeaderTimeout: 10 * time.Second}
	go srv.ServeTLS(ln, "", "")
	t.Cleanup(func() { srv.Close() })
	return u
}

// credFixture is a netproxy with one credential ("openai" on api.cred.test
// and badtls.cred.test) and a second ("github" on api.gh.test), MITM on;
// extra TOML, if any, follows the credentials.
type credFixture struct {
	p       *Proxy
	upCA    *testCA
	up      *credUpstream // api.cred.test, api.gh.test (trusted certificate)
	plain   *Upstream     // plain HTTP origin (any name)
	bad     *Upstream     // TLS with an untrusted self-signed certificate
	mitmCA  *x509.CertPool
	caFile  string
	secretF string
}

func startCredFixture(t *testing.T, extra ...string) *credFixture {
	t.Helper()
	upCA := newTestCA(t, "e2e upstream CA")
	f := &credFixture{
		upCA:  upCA,
		up:    startCredUpstream(t, upCA.leaf(t, "api.cred.test", "api.gh.test", "paste.test")),
		plain: StartUpstream(t, false),
		bad:   StartUpstream(t, true),
	}
	cfg := StdConfig()
	for _, h := range []string{"api.cred.test", "api.gh.test", "paste.test", "badtls.cred.test"} {
		cfg.Domains = append(cfg.Domains, [2]string{h, "allow"})
		cfg.Hosts[h] = []string{"127.0.0.1"}
	}
	// SOCKS5 to port 443 of a credential's host (its own loopback address).
	cfg.Domains = append(cfg.Domains, [2]string{"sock.cred.test", "allow"})
	cfg.Hosts["sock.cred.test"] = []string{"127.0.0.7"}
	cfg.Extra = `[mitm]
enabled = true
ca_cert = "ca.pem"
ca_key = "ca-key.pem"
upstream_ca = "upstream-ca.pem"

[[credentials]]
name = "openai"
hosts = ["api.cred.test", "badtls.cred.test", "sock.cred.test"]
header = "Authorization"
format = "Bearer {secret}"
secret_file = "openai.secret"
env = "OPENAI_API_KEY"
placeholder_prefix = "sk-"
placeholder_length = 51

[[credentials]]
name = "github"
hosts = ["api.gh.test"]
header = "Authorization"
format = "token {secret}"
secret_file = "github.secret"
env = "GITHUB_TOKEN"
` + strings.Join(extra, "\n")
	f.p = WriteProxyConfig(t, cfg)
	mitmCA := newTestCA(t, "e2e netproxy MITM CA")
	f.caFile = filepath.Join(f.p.Dir, "ca.pem")
	f.secretF = filepath.Join(f.p.Dir, "openai.secret")
	for name, b := range map[string][]byte{
		"ca.pem": mitmCA.pem, "ca-key.pem": mitmCA.keyPEM(), "upstream-ca.pem": upCA.pem,
		"openai.secret": []byte(credSecret + "\n"), "github.secret": []byte("ghp_e2eGITHUBsecretvalue000000000000"),
	} {
		if err := os.WriteFile(filepath.Join(f.p.Dir, name), b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	f.mitmCA = x509.NewCertPool()
	f.mitmCA.AppendCertsFromPEM(mitmCA.pem)
	f.p.Start(t)
	return f
}

type credRegistration struct {
	Registration
	Placeholders []struct{ Credential, Env, Value string } `json:"placeholders"`
	CACert       string                                    `json:"ca_cert"`
}

func (f *credFixture) register(t *testing.T) credRegistration {
	t.Helper()
	body := `{"session_id":"s1","environment_id":"e1","command":["agent"],"cwd":"/tmp"}`
	resp, err := f.p.ControlClient().Post("http://netproxy/v1/executions", "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var r credRegistration
	if resp.StatusCode != 201 || json.NewDecoder(resp.Body).Decode(&r) != nil {
		t.Fatalf("register: %d", resp.StatusCode)
	}
	return r
}

func (r credRegistration) placeholder(t *testing.T, cred string) string {
	for _, p := range r.Placeholders {
		if p.Credential == cred {
			return p.Value
		}
	}
	t.Fatalf("no placeholder for %s in %+v", cred, r.Placeholders)
	return ""
}

// client is an attributed client of the proxy (the frame written on every
// connection, as execwrap's bridge does) trusting netproxy's CA.
func (f *credFixture) client(token string, h2 bool) *http.Client {
	tr := &http.Transport{
		Proxy: http.ProxyURL(&url.URL{Scheme: "http", Host: f.p.HTTP}),
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			c, err := (&net.Dialer{}).DialContext(ctx, "tcp", f.p.HTTP)
			if err != nil {
				return nil, err
			}
			if token != "" {
				if _, err := c.Write(Frame(token)); err != nil {
					c.Close()
					return nil, err
				}
			}
			return c, nil
		},
		TLSClientConfig:   &tls.Config{RootCAs: f.mitmCA},
		ForceAttemptHTTP2: h2,
	}
	if !h2 {
		tr.TLSNextProto = map[string]func(string, *tls.Conn) http.RoundTripper{}
	}
	return &http.Client{Transport: tr, Timeout: 60 * time.Second}
}

func credGet(t *testing.T, c *http.Client, u, auth string) (int, string, http.Header) {
	t.Helper()
	req, _ := http.NewRequest("GET", u, nil)
	if auth != "" {
		req.Header.Set("Authorization", auth)
	}
	resp, err := c.Do(req)
	if err != nil {
		t.Fatalf("GET %s: %v", u, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b), resp.Header
}

func TestCredentialBrokerInjectsAndBlocks(t *testing.T) {
	f := startCredFixture(t)
	a := f.register(t)
	b := f.register(t)
	ph := a.placeholder(t, "openai")
	if !strings.HasPrefix(ph, "sk-") || len(ph) != 51 || strings.Contains(ph, credSecret) {
		t.Fatalf("placeholder %q: want sk- and 51 characters", ph)
	}
	if !strings.Contains(a.CACert, "BEGIN CERTIFICATE") {
		t.Fatal("registration lacks the CA certificate")
	}
	tlsURL := func(host, path string) string { return fmt.Sprintf("https://%s:%d%s", host, f.up.Port, path) }

	// Intercepted HTTPS over HTTP/1.1 and HTTP/2: the upstream sees the secret.
	for _, h2 := range []bool{false, true} {
		c := f.client(a.Token, h2)
		code, body, _ := credGet(t, c, tlsURL("api.cred.test", "/v1/models"), "Bearer "+ph)
		if code != 200 {
			t.Fatalf("h2=%v: %d %s\n%s", h2, code, body, f.p.Output.String())
		}
		_, auths := f.up.seen()
		if got := auths[len(auths)-1]; got != "Bearer "+credSecret {
			t.Fatalf("h2=%v: upstream saw Authorization %q, want the secret", h2, got)
		}
	}

	// Plain HTTP to the credential's host: injected.
	c := f.client(a.Token, false)
	code, body, _ := credGet(t, c, f.plain.URL("api.cred.test", "/headers"), "Bearer "+ph)
	if code != 200 || f.plain.LastHeaders().Get("Authorization") != "Bearer "+credSecret {
		t.Fatalf("plain HTTP: %d %s, upstream Authorization %q", code, body, f.plain.LastHeaders().Get("Authorization"))
	}

	// A plain request with a body (the other forwarding path): injected too.
	preq, _ := http.NewRequest("POST", f.plain.URL("api.cred.test", "/echo"), strings.NewReader("payload"))
	preq.Header.Set("Authorization", "Bearer "+ph)
	presp, err := c.Do(preq)
	if err != nil {
		t.Fatal(err)
	}
	pbody, _ := io.ReadAll(presp.Body)
	presp.Body.Close()
	if presp.StatusCode != 200 || string(pbody) != "payload" || f.plain.LastHeaders().Get("Authorization") != "Bearer "+credSecret {
		t.Fatalf("plain POST: %d %q, upstream Authorization %q", presp.StatusCode, pbody, f.plain.LastHeaders().Get("Authorization"))
	}
	// A plain POST carrying the placeholder to another host: blocked.
	preq, _ = http.NewRequest("POST", f.plain.URL("paste.test", "/echo"), strings.NewReader("payload"))
	preq.Header.Set("X-Leak", ph)
	if presp, err = c.Do(preq); err != nil {
		t.Fatal(err)
	}
	presp.Body.Close()
	if presp.StatusCode != 403 {
		t.Fatalf("plain POST to paste.test: %d", presp.StatusCode)
	}

	// The placeholder toward another allowed host: blocked, the upstream sees nothing.
	plainHits := f.plain.Hits()
	upHits, _ := f.up.seen()
	for _, tc := range []struct{ name, url, auth string }{
		{"plain header", f.plain.URL("paste.test", "/hello"), "Bearer " + ph},
		{"plain query", f.plain.URL("paste.test", "/hello?k="+ph), ""},
		{"another credential's host (intercepted)", tlsURL("api.gh.test", "/user"), "Bearer " + ph},
	} {
		code, body, hdr := credGet(t, c, tc.url, tc.auth)
		if code != 403 || !strings.Contains(body, `"reason":"credential_misuse"`) || hdr.Get("X-Proxy-Error") == "" {
			t.Errorf("%s: %d %s", tc.name, code, body)
		}
	}
	if f.plain.Hits() != plainHits {
		t.Error("the plain upstream saw a request carrying a placeholder toward the wrong host")
	}
	if n, _ := f.up.seen(); n != upHits {
		t.Error("api.gh.test saw a request carrying the openai placeholder")
	}
	// Another execution presenting a's placeholder on the right host: blocked.
	code, body, _ = credGet(t, f.client(b.Token, true), tlsURL("api.cred.test", "/v1/models"), "Bearer "+ph)
	if code != 403 || !strings.Contains(body, "credential_misuse") {
		t.Errorf("other execution: %d %s", code, body)
	}
	// Unattributed: blocked too.
	code, _, _ = credGet(t, f.client("", false), f.plain.URL("api.cred.test", "/x"), "Bearer "+ph)
	if code != 403 {
		t.Errorf("unattributed: %d", code)
	}
	// A host whose upstream certificate fails verification: 502, never a downgrade.
	code, body, _ = credGet(t, c, fmt.Sprintf("https://badtls.cred.test:%d/x", f.bad.Port), "Bearer "+ph)
	if code != 502 || !strings.Contains(body, "certificate verification failed") || f.bad.Hits() != 0 {
		t.Errorf("bad upstream certificate: %d %q hits %d", code, body, f.bad.Hits())
	}
	// Other hosts' CONNECT stays an opaque tunnel: the client sees the
	// upstream's own certificate, not a minted one.
	conn, err := f.client(a.Token, false).Transport.(*http.Transport).DialContext(context.Background(), "tcp", f.p.HTTP)
	if err != nil {
		t.Fatal(err)
	}
	fmt.Fprintf(conn, "CONNECT up.test:%d HTTP/1.1\r\nHost: up.test\r\n\r\n", f.bad.Port)
	buf := make([]byte, 64)
	n, _ := conn.Read(buf)
	if !strings.Contains(string(buf[:n]), " 200 ") {
		t.Fatalf("CONNECT up.test: %q", buf[:n])
	}
	tc := tls.Client(conn, &tls.Config{InsecureSkipVerify: true, ServerName: "up.test"})
	if err := tc.Handshake(); err != nil {
		t.Fatal(err)
	}
	if issuer := tc.ConnectionState().PeerCertificates[0].Issuer.CommonName; issuer != "e2e upstream" {
		t.Fatalf("up.test was intercepted (issuer %q)", issuer)
	}
	tc.Close()

	// The block is audited with the credential's name; after the
	// execution ends its placeholder is dead (passes unreplaced).
	f.p.Revoke(t, a.ExecutionID)
	waitFor(t, 5*time.Second, func() bool {
		audit, _ := os.ReadFile(f.p.Audit)
		return strings.Contains(string(audit), `"reason":"credential_misuse"`) && strings.Contains(string(audit), "credential openai")
	}, "credential_misuse with the credential's name in the audit")
	_, _, _ = credGet(t, f.client(b.Token, false), f.plain.URL("api.cred.test", "/x"), "Bearer "+ph)
	if got := f.plain.LastHeaders().Get("Authorization"); got != "Bearer "+ph {
		t.Errorf("an ended execution's placeholder: upstream saw %q", got)
	}
	_, metrics := f.p.AdminRequest(t, "GET", "/metrics", "")
	if !strings.Contains(metrics, `reason="credential_misuse"`) {
		t.Error("credential_misuse is not counted")
	}
	assertNoSecret(t, f.p, credSecret)
}

// assertNoSecret greps every output netproxy produced for the secret:
// its log, the audit, metrics, the admin API and the page.
func assertNoSecret(t *testing.T, p *Proxy, secret string) {
	t.Helper()
	outputs := map[string]string{"log": p.Output.String()}
	if b, err := os.ReadFile(p.Audit); err == nil {
		outputs["audit"] = string(b)
	}
	for _, path := range []string{"/metrics", "/api/executions", "/api/session", "/", "/healthz"} {
		_, body := p.AdminRequest(t, "GET", path, p.Token)
		outputs[path] = body
	}
	filepath.WalkDir(p.Home, func(path string, d os.DirEntry, err error) error {
		if err == nil && !d.IsDir() {
			if b, err := os.ReadFile(path); err == nil {
				outputs[path] = string(b)
			}
		}
		return nil
	})
	for name, out := range outputs {
		if strings.Contains(out, secret) {
			t.Errorf("the secret appears in %s", name)
		}
	}
}

func waitFor(t *testing.T, within time.Duration, ok func() bool, what string) {
	t.Helper()
	deadline := time.Now().Add(within)
	for !ok() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// TestCredentialHTTP2Streaming: a Go client speaking HTTP/2 through the
// interception streams a 100 MB response and a bidirectional stream.
func TestCredentialHTTP2Streaming(t *testing.T) {
	f := startCredFixture(t)
	a := f.register(t)
	ph := a.placeholder(t, "openai")
	c := f.client(a.Token, true)
	req, _ := http.NewRequest("GET", fmt.Sprintf("https://api.cred.test:%d/stream", f.up.Port), nil)
	req.Header.Set("Authorization", "Bearer "+ph)
	start := time.Now()
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	if resp.ProtoMajor != 2 {
		t.Fatalf("client spoke %s", resp.Proto)
	}
	h := sha256.New()
	n, err := io.Copy(h, resp.Body)
	resp.Body.Close()
	if err != nil || n != bigStream {
		t.Fatalf("streamed %d bytes (%v), want %d", n, err, bigStream)
	}
	t.Logf("100 MB over intercepted HTTP/2 in %v (%.0f MB/s)", time.Since(start), float64(n)/1e6/time.Since(start).Seconds())

	// Bidirectional: each line sent comes back before the next is written.
	pr, pw := io.Pipe()
	req, _ = http.NewRequest("POST", fmt.Sprintf("https://api.cred.test:%d/echo", f.up.Port), pr)
	req.Header.Set("Authorization", "Bearer "+ph)
	resp, err = c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	// 30 s of traffic both ways (a few rounds with -short).
	streamFor := 30 * time.Second
	if testing.Short() {
		streamFor = time.Second
	}
	buf := make([]byte, 64)
	streamStart := time.Now()
	for i := 0; time.Since(streamStart) < streamFor; i++ {
		msg := fmt.Sprintf("ping %d\n", i)
		if _, err := pw.Write([]byte(msg)); err != nil {
			t.Fatal(err)
		}
		got := ""
		for len(got) < len(msg) {
			k, err := resp.Body.Read(buf)
			if err != nil {
				t.Fatalf("round %d: %v", i, err)
			}
			got += string(buf[:k])
		}
		if got != msg {
			t.Fatalf("round %d: echoed %q", i, got)
		}
		time.Sleep(250 * time.Millisecond)
	}
	pw.Close()
	_, auths := f.up.seen()
	for _, a := range auths {
		if a != "Bearer "+credSecret {
			t.Fatalf("upstream saw %q", a)
		}
	}
}

// TestCredentialMissingSecretRefusesServe: serve names the credential and key.
func TestCredentialMissingSecretRefusesServe(t *testing.T) {
	cfg := StdConfig()
	cfg.Extra = `[mitm]
enabled = true
ca_cert = "ca.pem"
ca_key = "ca-key.pem"

[[credentials]]
name = "openai"
hosts = ["api.cred.test"]
header = "Authorization"
format = "Bearer {secret}"
secret_env = "E2E_NOT_SET_OPENAI"
`
	p := WriteProxyConfig(t, cfg)
	ca := newTestCA(t, "ca")
	os.WriteFile(filepath.Join(p.Dir, "ca.pem"), ca.pem, 0o600)
	os.WriteFile(filepath.Join(p.Dir, "ca-key.pem"), ca.keyPEM(), 0o600)
	cmd := exec.Command(netproxyBin, "serve", "--config", p.ConfigPath)
	cmd.Env = p.Env()
	out, err := cmd.CombinedOutput()
	if err == nil {
		t.Fatal("serve started without the credential's secret")
	}
	if !strings.Contains(string(out), `credentials[0] "openai": secret_env`) || !strings.Contains(string(out), "E2E_NOT_SET_OPENAI") {
		t.Fatalf("serve's error does not name the credential and key:\n%s", out)
	}
}

// TestCredentialReloadKeepsPrevious: a reload whose secret file vanished
// fails, keeps the previous secret, and is counted.
func TestCredentialReloadKeepsPrevious(t *testing.T) {
	f := startCredFixture(t)
	a := f.register(t)
	ph := a.placeholder(t, "openai")
	os.Remove(f.secretF)
	code, body := f.p.AdminRequest(t, "POST", "/api/reload", f.p.Token)
	if code == 200 || !strings.Contains(body, "secret_file") {
		t.Fatalf("reload without the secret: %d %s", code, body)
	}
	if strings.Contains(body, credSecret) {
		t.Fatal("the reload error holds the secret")
	}
	c := f.client(a.Token, false)
	credGet(t, c, f.plain.URL("api.cred.test", "/x"), "Bearer "+ph)
	if got := f.plain.LastHeaders().Get("Authorization"); got != "Bearer "+credSecret {
		t.Fatalf("after a failed reload: upstream saw %q", got)
	}
	_, metrics := f.p.AdminRequest(t, "GET", "/metrics", "")
	if !strings.Contains(metrics, `netproxy_policy_reloads_total{result="error"} 1`) {
		t.Error("the failed reload is not counted")
	}
	// A new secret in the file is picked up by the next reload.
	os.WriteFile(f.secretF, []byte("sk-rotated-secret-value-000000000000000"), 0o600)
	if code, body := f.p.AdminRequest(t, "POST", "/api/reload", f.p.Token); code != 200 {
		t.Fatalf("reload: %d %s", code, body)
	}
	credGet(t, c, f.plain.URL("api.cred.test", "/x"), "Bearer "+ph)
	if got := f.plain.LastHeaders().Get("Authorization"); got != "Bearer sk-rotated-secret-value-000000000000000" {
		t.Fatalf("after the rotation: upstream saw %q", got)
	}
}

// TestCredentialExecwrapRealClients: curl, Python urllib and git inside
// `execwrap run --network proxied` call the credential's TLS host with
// $OPENAI_API_KEY (the placeholder) and the upstream sees the real secret;
// the same request to another allowed host is blocked and that host sees
// nothing; the sandbox's environment never holds the secret.
func TestCredentialExecwrapRealClients(t *testing.T) {
	for _, tier := range []string{"namespaces", "landlock"} {
		t.Run(tier, func(t *testing.T) { credentialExecwrapRun(t, tier) })
	}
}

func credentialExecwrapRun(t *testing.T, tier string) {
	f := startCredFixture(t)
	dir := sbxDir(t)
	py := "/usr/bin/python3"
	if _, err := os.Stat(py); err != nil {
		t.Fatal("python3 is required at /usr/bin/python3 (scripts/install-test-deps.sh)")
	}
	api := fmt.Sprintf("https://api.cred.test:%d", f.up.Port)
	script := fmt.Sprintf(`
case "$OPENAI_API_KEY" in sk-*) ;; *) echo "OPENAI_API_KEY=$OPENAI_API_KEY" >&2; exit 30;; esac
[ ${#OPENAI_API_KEY} -eq 51 ] || exit 31
for v in SSL_CERT_FILE REQUESTS_CA_BUNDLE CURL_CA_BUNDLE NODE_EXTRA_CA_CERTS PIP_CERT GIT_SSL_CAINFO; do
  eval p=\$$v; [ -n "$p" ] && [ -r "$p" ] || { echo "$v=$p" >&2; exit 32; }
done
grep -q 'BEGIN CERTIFICATE' "$SSL_CERT_FILE" || exit 33
curl -sS -m 10 -H "Authorization: Bearer $OPENAI_API_KEY" %[1]s/curl || exit 21
echo
code=$(curl -sS -m 10 -o /dev/null -w '%%{http_code}' -H "Authorization: Bearer $OPENAI_API_KEY" %[2]s) 
[ "$code" = 403 ] || { echo "paste.test answered $code" >&2; exit 22; }
%[3]s -c 'import os,urllib.request as u
r=u.Request("%[1]s/python", headers={"Authorization":"Bearer "+os.environ["OPENAI_API_KEY"]})
print(u.urlopen(r, timeout=10).read().decode())' || exit 23
git -c http.extraHeader="Authorization: Bearer $OPENAI_API_KEY" ls-remote %[1]s/repo.git >/dev/null 2>&1
env | grep -q 'e2e-REAL' && exit 40
cat /proc/[0-9]*/environ 2>/dev/null | tr '\0' '\n' | grep -q 'e2e-REAL' && exit 41
exit 0`, api, f.plain.URL("paste.test", "/hello"), py)
	env := append(f.p.Env(), "OPENAI_API_KEY=parent-value-never-in-sandbox")
	r, code, stderr := sbxRun(t, env, dir, "--control", f.p.Control, "--tier", tier, "--", "sh", "-c", script)
	if code != 0 || r.ExitCode != 0 {
		t.Fatalf("exit %d/%d (30/31 placeholder shape, 32/33 CA bundle, 21 curl, 22 paste.test not blocked, 23 python, 40/41 secret in the sandbox's environment)\nstdout %s\nstderr %s %s\n%s",
			code, r.ExitCode, r.Stdout, r.Stderr, stderr, f.p.Output.String())
	}
	if r.Sandbox.Tier != tier {
		t.Fatalf("tier %q, want %s", r.Sandbox.Tier, tier)
	}
	if f.plain.Hits() != 0 {
		t.Fatal("paste.test saw the request carrying the placeholder")
	}
	hits, auths := f.up.seen()
	if hits < 3 {
		t.Fatalf("the credential's upstream saw %d requests, want curl, python and git", hits)
	}
	for _, a := range auths {
		if a != "Bearer "+credSecret {
			t.Fatalf("upstream saw Authorization %q, want the real secret", a)
		}
	}
	found := false
	for _, d := range r.NetworkDenials {
		found = found || (d.Host == "paste.test" && d.Reason == "credential_misuse")
	}
	if !found {
		t.Errorf("execwrap's network_denials lack paste.test credential_misuse: %+v", r.NetworkDenials)
	}
	for name, out := range map[string]string{"execwrap stdout": r.Stdout, "execwrap stderr": r.Stderr + stderr} {
		if strings.Contains(out, credSecret) {
			t.Errorf("the secret appears in %s", name)
		}
	}
	// Nothing written outside the sandbox: no bundle left in the host's /tmp.
	if m, _ := filepath.Glob(filepath.Join(os.TempDir(), "*", caBundleFile)); len(m) > 0 {
		t.Errorf("CA bundle left on the host: %v", m)
	}
	assertNoSecret(t, f.p, credSecret)
}

const caBundleFile = "netproxy-ca-bundle.pem"

// TestCredentialSOCKS5Port443: SOCKS5 to port 443 of a credential's host
// is intercepted like a CONNECT: the upstream sees the secret.
func TestCredentialSOCKS5Port443(t *testing.T) {
	f := startCredFixture(t)
	ln, err := net.Listen("tcp", "127.0.0.7:443")
	if err != nil {
		// Binding port 443 needs root or CAP_NET_BIND_SERVICE; CI runs as
		// root, so there a failure is a broken machine, never a pass.
		if os.Getenv("CI") != "" {
			t.Fatalf("CI must exercise this test: cannot listen on 127.0.0.7:443: %v", err)
		}
		t.Skipf("cannot listen on 127.0.0.7:443 here: %v", err)
	}
	up := serveCredUpstream(t, ln, f.upCA.leaf(t, "sock.cred.test"))
	a := f.register(t)
	ph := a.placeholder(t, "openai")
	c, err := net.Dial("tcp", f.p.SOCKS)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.Write(Frame(a.Token))
	// SOCKS5: no auth, CONNECT sock.cred.test:443 by name.
	host := "sock.cred.test"
	req := append([]byte{5, 1, 0, 5, 1, 0, 3, byte(len(host))}, host...)
	c.Write(append(req, 1, 187))
	rep := make([]byte, 12)
	if _, err := io.ReadFull(c, rep); err != nil || rep[1] != 0 || rep[3] != 0 {
		t.Fatalf("SOCKS5 reply % x (%v)", rep, err)
	}
	tc := tls.Client(c, &tls.Config{RootCAs: f.mitmCA, ServerName: host})
	fmt.Fprintf(tc, "GET /socks HTTP/1.1\r\nHost: %s\r\nAuthorization: Bearer %s\r\nConnection: close\r\n\r\n", host, ph)
	resp, err := http.ReadResponse(bufio.NewReader(tc), nil)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if _, auths := up.seen(); resp.StatusCode != 200 || len(auths) != 1 || auths[0] != "Bearer "+credSecret {
		t.Fatalf("SOCKS5 443: %d, upstream saw %q", resp.StatusCode, auths)
	}
}
