package proxy

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"io"
	"math/big"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/netproxy/netproxy/mitm"
)

func testCA(t *testing.T) tls.Certificate {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "netproxy test CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	leaf, _ := x509.ParseCertificate(der)
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key, Leaf: leaf}
}

func TestLimitedModeMITM(t *testing.T) {
	var seen atomic.Int64
	var posts atomic.Int64
	// The upstream's certificate names up.test, signed by its own CA that
	// only the proxy's upstream roots trust.
	upCA := testCA(t)
	upAuth, err := mitm.NewAuthority(upCA, 4)
	if err != nil {
		t.Fatal(err)
	}
	upLeaf, err := upAuth.Leaf("up.test")
	if err != nil {
		t.Fatal(err)
	}
	up := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		seen.Add(1)
		if r.Method == http.MethodPost {
			posts.Add(1)
		}
		io.WriteString(w, "hello from "+r.Host+" "+r.URL.Path)
	}))
	up.TLS = &tls.Config{Certificates: []tls.Certificate{*upLeaf}}
	up.StartTLS()
	defer up.Close()
	_, portStr, _ := net.SplitHostPort(up.Listener.Addr().String())
	port, _ := strconv.Atoi(portStr)

	ca := testCA(t)
	auth, err := mitm.NewAuthority(ca, 16)
	if err != nil {
		t.Fatal(err)
	}
	roots := x509.NewCertPool()
	roots.AddCert(upCA.Leaf)
	policy := strings.Replace(testPolicy, `mode = "full"`, `mode = "limited"`, 1)
	s := newStackWith(t, policy, Limits{}, stackParts{mitm: &mitm.Interceptor{Authority: auth, Roots: roots}})

	clientRoots := x509.NewCertPool()
	clientRoots.AddCert(ca.Leaf)
	proxyURL, _ := url.Parse("http://" + s.httpAddr)
	client := &http.Client{Transport: &http.Transport{
		Proxy:           http.ProxyURL(proxyURL),
		TLSClientConfig: &tls.Config{RootCAs: clientRoots},
	}, Timeout: 10 * time.Second}
	defer client.CloseIdleConnections()
	target := "https://up.test:" + portStr

	// GET passes with its body intact. (httptest's cert names example.com
	// and 127.0.0.1; the upstream is dialled by IP and verified against
	// that name via the pinned target, so name it as the test server does.)
	resp, err := client.Get(target + "/hello")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || string(body) != "hello from up.test:"+portStr+" /hello" {
		t.Fatalf("GET: %d %q", resp.StatusCode, body)
	}

	// POST is refused inside the tunnel; the upstream never sees it.
	resp, err = client.Post(target+"/submit", "text/plain", strings.NewReader("data"))
	if err != nil {
		t.Fatal(err)
	}
	var blocked blockedBody
	json.NewDecoder(resp.Body).Decode(&blocked)
	resp.Body.Close()
	if resp.StatusCode != 403 || blocked.Reason != "method_not_allowed" || blocked.Source != "mode_guard" || blocked.Protocol != "https" {
		t.Fatalf("POST: %d %+v", resp.StatusCode, blocked)
	}
	if posts.Load() != 0 {
		t.Fatal("upstream saw the POST")
	}

	// Host mismatch inside the tunnel → 400.
	req, _ := http.NewRequest("GET", target+"/x", nil)
	req.Host = "other.test"
	resp, err = client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 400 {
		t.Fatalf("host mismatch: %d", resp.StatusCode)
	}

	// A denied host is refused at CONNECT, before any interception.
	before := seen.Load()
	_, err = client.Get("https://denied.test:" + portStr + "/")
	if err == nil || !strings.Contains(err.Error(), "Forbidden") {
		t.Fatalf("denied host: %v", err)
	}
	if seen.Load() != before {
		t.Fatal("upstream reached for a denied host")
	}
	_ = port
}
