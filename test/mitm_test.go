package test

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
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// writeMITMFiles writes a fresh CA (cert + key) and the upstream's
// certificate as PEM files in dir, named as the config refers to them.
func writeMITMFiles(t *testing.T, dir string, up *Upstream) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(time.Now().UnixNano()), Subject: pkix.Name{CommonName: "e2e MITM CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	kder, _ := x509.MarshalECPrivateKey(key)
	// The upstream's self-signed certificate becomes upstream_ca: the
	// proxy verifies the upstream against it (this dial only fetches it).
	c, err := tls.Dial("tcp", fmt.Sprintf("127.0.0.1:%d", up.Port), &tls.Config{InsecureSkipVerify: true})
	if err != nil {
		t.Fatal(err)
	}
	upDER := c.ConnectionState().PeerCertificates[0].Raw
	c.Close()
	for name, b := range map[string]*pem.Block{
		"ca.pem":       {Type: "CERTIFICATE", Bytes: der},
		"ca-key.pem":   {Type: "EC PRIVATE KEY", Bytes: kder},
		"upstream.pem": {Type: "CERTIFICATE", Bytes: upDER},
	} {
		if err := os.WriteFile(filepath.Join(dir, name), pem.EncodeToMemory(b), 0o600); err != nil {
			t.Fatal(err)
		}
	}
}

func TestMITMLimitedModeCurl(t *testing.T) {
	up := StartUpstream(t, true)
	cfg := StdConfig()
	cfg.Mode = "limited"
	// Paths are relative to the config file's folder.
	cfg.Extra = "[mitm]\nenabled = true\nca_cert = \"ca.pem\"\nca_key = \"ca-key.pem\"\nupstream_ca = \"upstream.pem\"\n"
	p := WriteProxyConfig(t, cfg)
	writeMITMFiles(t, p.Dir, up)
	p.Start(t)
	ca := filepath.Join(p.Dir, "ca.pem")

	r := Curl(t, "-x", "http://"+p.HTTP, "--cacert", ca, up.URL("up.test", "/hello"))
	if r.Exit != 0 || r.Stdout != Hello {
		t.Fatalf("GET through MITM: exit %d stdout %q stderr %s\n%s", r.Exit, r.Stdout, r.Stderr, p.Output.String())
	}
	hits := up.Hits()
	r = Curl(t, "-x", "http://"+p.HTTP, "--cacert", ca, "-X", "POST", "-d", "x=1", "-w", "\n%{http_code}", up.URL("up.test", "/submit"))
	if r.Exit != 0 || !strings.HasSuffix(r.Stdout, "\n403") || !strings.Contains(r.Stdout, `"reason":"method_not_allowed"`) {
		t.Fatalf("POST through MITM: exit %d stdout %q stderr %s", r.Exit, r.Stdout, r.Stderr)
	}
	if up.Hits() != hits {
		t.Fatal("the upstream saw a POST that limited mode forbids")
	}
	// The inner decisions reach the audit with protocol https.
	deadline := time.Now().Add(5 * time.Second)
	for {
		b, _ := os.ReadFile(p.Audit)
		if strings.Contains(string(b), "method_not_allowed") && strings.Contains(string(b), `"https"`) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no https method_not_allowed line in the audit:\n%s", b)
		}
		time.Sleep(50 * time.Millisecond)
	}
	// Without the CA, curl refuses the minted leaf: interception is visible.
	r = Curl(t, "-x", "http://"+p.HTTP, up.URL("up.test", "/hello"))
	if r.Exit == 0 {
		t.Fatal("curl accepted the MITM leaf without trusting the CA")
	}
	// A denied host is refused at CONNECT.
	r = Curl(t, "-x", "http://"+p.HTTP, "--cacert", ca, up.URL("denied.test", "/hello"))
	if r.Exit == 0 || up.Hits() != hits {
		t.Fatalf("denied host: exit %d hits %d→%d", r.Exit, hits, up.Hits())
	}
}
