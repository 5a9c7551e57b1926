package mitm

import (
	"bufio"
	"bytes"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"io"
	"math/big"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/netproxy/netproxy/internal/httphead"
)

func writeCA(t *testing.T, isCA bool) (certFile, keyFile string) {
	t.Helper()
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "test CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IsCA: isCA, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	kder, _ := x509.MarshalECPrivateKey(key)
	dir := t.TempDir()
	certFile, keyFile = filepath.Join(dir, "ca.pem"), filepath.Join(dir, "ca-key.pem")
	os.WriteFile(certFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o644)
	os.WriteFile(keyFile, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kder}), 0o600)
	return certFile, keyFile
}

func TestLeafMintingAndCache(t *testing.T) {
	cf, kf := writeCA(t, true)
	a, err := LoadAuthority(cf, kf, 2)
	if err != nil {
		t.Fatal(err)
	}
	l1, err := a.Leaf("up.test")
	if err != nil {
		t.Fatal(err)
	}
	leaf, err := x509.ParseCertificate(l1.Certificate[0])
	if err != nil {
		t.Fatal(err)
	}
	roots := x509.NewCertPool()
	roots.AddCert(a.ca.Leaf)
	if _, err := leaf.Verify(x509.VerifyOptions{DNSName: "up.test", Roots: roots}); err != nil {
		t.Fatalf("leaf does not verify for up.test: %v", err)
	}
	if l2, _ := a.Leaf("up.test"); l2 != l1 {
		t.Fatal("second Leaf call minted again instead of using the cache")
	}
	a.Leaf("a.test")
	a.Leaf("b.test")
	if n := a.CachedLeaves(); n != 2 {
		t.Fatalf("cache holds %d leaves, want bound 2", n)
	}
	ip, err := a.Leaf("127.0.0.1")
	if err != nil {
		t.Fatal(err)
	}
	ipLeaf, _ := x509.ParseCertificate(ip.Certificate[0])
	if len(ipLeaf.IPAddresses) != 1 {
		t.Fatalf("IP leaf SANs: %v", ipLeaf.IPAddresses)
	}
}

func TestLoadAuthorityErrors(t *testing.T) {
	cf, kf := writeCA(t, true)
	_, otherKey := writeCA(t, true)
	notCA, notCAKey := writeCA(t, false)
	for name, c := range map[string]struct{ cert, key, want string }{
		"missing cert": {filepath.Join(t.TempDir(), "none.pem"), kf, "mitm.ca_cert"},
		"missing key":  {cf, filepath.Join(t.TempDir(), "none.pem"), "mitm.ca_key"},
		"mismatch":     {cf, otherKey, "does not match"},
		"not a CA":     {notCA, notCAKey, "not a CA"},
	} {
		if _, err := LoadAuthority(c.cert, c.key, 0); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: err = %v, want %q", name, err, c.want)
		}
	}
}

func TestSameAuthority(t *testing.T) {
	for _, c := range []struct {
		hdr, host string
		port      uint16
		want      bool
	}{
		{"up.test", "up.test", 443, true}, {"UP.test:443", "up.test", 443, true},
		{"up.test:8443", "up.test", 8443, true}, {"up.test", "up.test", 8443, false},
		{"other.test", "up.test", 443, false}, {"", "up.test", 443, false}, {"[::1]:443", "::1", 443, true},
	} {
		if got := SameAuthority(c.hdr, c.host, c.port); got != c.want {
			t.Errorf("SameAuthority(%q,%q,%d) = %v", c.hdr, c.host, c.port, got)
		}
	}
}

// FuzzSameAuthority: the inner Host header is untrusted; comparing it must
// never panic, and a match must name the same port.
func FuzzSameAuthority(f *testing.F) {
	for _, s := range []string{"up.test", "up.test:443", "[::1]:8443", "[", ":", "a:b:c", "up.test:99999"} {
		f.Add(s, "up.test", uint16(443))
	}
	f.Fuzz(func(t *testing.T, hdr, host string, port uint16) {
		if SameAuthority(hdr, host, port) && hdr == "" {
			t.Fatal("empty Host matched")
		}
	})
}

// FuzzHeadLimit: inner request heads are untrusted. Whatever the bytes,
// the limiter never panics, a head it lets through to a successful parse
// is within the limits (bytes and fields), and every field name the parser
// then holds is a token.
func FuzzHeadLimit(f *testing.F) {
	for _, s := range []string{
		"GET / HTTP/1.1\r\nHost: up.test\r\n\r\n",
		"GET / HTTP/1.1\r\nTransfer-Encoding : chunked\r\n\r\n",
		"GET / HTTP/1.1\r\nX: a\r\n b\r\n\r\n",
		"GET / HTTP/1.1\r\n: empty\r\n\r\n",
		"GET / HTTP/1.1\nHost: a\n\nGET / HTTP/1.1\r\n\r\n",
		"GET / HTTP/1.1\r\nh:\r\nh:\r\nh:\r\nh:\r\n\r\n",
	} {
		f.Add([]byte(s), uint8(3))
	}
	f.Fuzz(func(t *testing.T, data []byte, maxFields uint8) {
		lim := &headLimit{r: bytes.NewReader(data), maxBytes: 256, maxLines: int(maxFields)}
		br := bufio.NewReaderSize(lim, 16)
		for i := 0; i < 4; i++ {
			pre, _ := br.Peek(br.Buffered())
			var req *http.Request
			err := lim.begin(pre)
			if err == nil {
				req, err = http.ReadRequest(br)
			}
			lim.active = false
			if err != nil {
				return
			}
			if lim.n > lim.maxBytes {
				t.Fatalf("a head of %d bytes passed a limit of %d", lim.n, lim.maxBytes)
			}
			fields := 0
			for k, v := range req.Header {
				fields += len(v)
				for j := 0; j < len(k); j++ {
					if !httphead.IsTokenByte(k[j]) {
						t.Fatalf("field name %q is not a token", k)
					}
				}
			}
			if req.Host != "" {
				fields++ // ReadRequest moves Host out of the map
			}
			if fields > int(maxFields) {
				t.Fatalf("%d fields passed a limit of %d", fields, maxFields)
			}
			if req.Body != nil {
				io.Copy(io.Discard, req.Body)
			}
		}
	})
}
