package config

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"math/big"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func writePEMPair(t *testing.T, dir, prefix string) {
	t.Helper()
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "t"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign}
	der, _ := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	kder, _ := x509.MarshalECPrivateKey(key)
	os.WriteFile(filepath.Join(dir, prefix+".pem"), pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o644)
	os.WriteFile(filepath.Join(dir, prefix+"-key.pem"), pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kder}), 0o600)
}

func TestMITMValidation(t *testing.T) {
	dir := t.TempDir()
	writePEMPair(t, dir, "ca")
	writePEMPair(t, dir, "other")
	cfgFile := func(body string) string {
		p := filepath.Join(dir, "netproxy.toml")
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	// Relative paths resolve against the config's folder.
	c, err := Load(cfgFile("[mitm]\nenabled = true\nca_cert = \"ca.pem\"\nca_key = \"ca-key.pem\"\nupstream_ca = \"other.pem\"\n"))
	if err != nil {
		t.Fatal(err)
	}
	if c.MITM.CACert != filepath.Join(dir, "ca.pem") || c.MITM.UpstreamCA != filepath.Join(dir, "other.pem") {
		t.Fatalf("paths not resolved: %+v", c.MITM)
	}
	if d := Default(); d.MITM.Enabled {
		t.Fatal("MITM must be off by default")
	}
	for body, key := range map[string]string{
		"[mitm]\nenabled = true\n":                                                   "mitm.ca_cert",
		"[mitm]\nenabled = true\nca_cert = \"ca.pem\"\n":                             "mitm.ca_key",
		"[mitm]\nenabled = true\nca_cert = \"ca.pem\"\nca_key = \"other-key.pem\"\n": "mitm.ca_key",
		"[mitm]\nenabled = true\nca_cert = \"nope.pem\"\nca_key = \"ca-key.pem\"\n":  "mitm.ca_cert",
		"[mitm]\nupstream_ca = \"ca-key.pem\"\n":                                     "mitm.upstream_ca",
	} {
		_, err := Load(cfgFile(body))
		var ce *Error
		if err == nil || !errors.As(err, &ce) || !strings.Contains(err.Error(), key) {
			t.Errorf("%q: err = %v, want one naming %s", body, err, key)
		}
	}
}
