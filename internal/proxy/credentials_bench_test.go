package proxy

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"fmt"
	"io"
	"math/big"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/netproxy/netproxy/attribution"
	"github.com/netproxy/netproxy/credentials"
	"github.com/netproxy/netproxy/hostpolicy"
	"github.com/netproxy/netproxy/mitm"
)

const credPolicy = `
[network]
mode = "full"
allow_local_binding = true
[network.domains]
"up.test" = "allow"
"other.test" = "allow"
[dns.hosts]
"up.test" = ["127.0.0.1"]
"other.test" = ["127.0.0.1"]
[approvals]
enabled = false
`

const benchSecret = "sk-bench-secret-000000000000000000000000"

// credBench is a proxy stack whose broker has a credential for up.test
// (intercepted) while other.test stays an opaque tunnel; one TLS upstream
// answers both names with a certificate from its own CA, which both the
// proxy and the client trust.
type credBench struct {
	s           *stack
	port        string
	token       string
	placeholder string
	clientRoots *x509.CertPool
	mu          sync.Mutex
	lastAuth    string
	lastResumed bool // the upstream's TLS session of the last request was resumed
	sseSeen     chan struct{}
}

const credBenchBig = 8 << 20

func tbCA(tb testing.TB) tls.Certificate {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		tb.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(time.Now().UnixNano()), Subject: pkix.Name{CommonName: "bench CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		tb.Fatal(err)
	}
	leaf, _ := x509.ParseCertificate(der)
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key, Leaf: leaf}
}

func newCredBench(tb testing.TB) *credBench { return newCredBenchWith(tb, credPolicy, nil) }

// newCredBenchWith is newCredBench over policy with request rules.
func newCredBenchWith(tb testing.TB, policy string, rules []hostpolicy.RequestRule) *credBench {
	upCA := tbCA(tb)
	upAuth, err := mitm.NewAuthority(upCA, 4)
	if err != nil {
		tb.Fatal(err)
	}
	upLeaf, err := upAuth.Leaf("up.test")
	if err != nil {
		tb.Fatal(err)
	}
	otherLeaf, _ := upAuth.Leaf("other.test")
	cb := &credBench{sseSeen: make(chan struct{}, 8)}
	big := strings.Repeat("x", credBenchBig)
	up := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		cb.mu.Lock()
		cb.lastAuth = r.Header.Get("Authorization")
		cb.lastResumed = r.TLS != nil && r.TLS.DidResume
		cb.mu.Unlock()
		if r.URL.Path == "/big" {
			io.WriteString(w, big)
			return
		}
		if r.URL.Path == "/sse" {
			// One event now, the next only after the client saw the first.
			w.Header().Set("Content-Type", "text/event-stream")
			io.WriteString(w, "data: first\n\n")
			w.(http.Flusher).Flush()
			select {
			case <-cb.sseSeen:
			case <-time.After(5 * time.Second):
			}
			io.WriteString(w, "data: second\n\n")
			return
		}
		io.WriteString(w, "ok")
	}))
	up.TLS = &tls.Config{Certificates: []tls.Certificate{*upLeaf, *otherLeaf}}
	up.EnableHTTP2 = true
	up.StartTLS()
	tb.Cleanup(up.Close)
	_, cb.port, _ = net.SplitHostPort(up.Listener.Addr().String())

	ca := tbCA(tb)
	auth, err := mitm.NewAuthority(ca, 16)
	if err != nil {
		tb.Fatal(err)
	}
	roots := x509.NewCertPool()
	roots.AddCert(upCA.Leaf)
	set, err := credentials.Load([]credentials.Spec{{
		Name: "bench", Hosts: []string{"up.test"}, Header: "Authorization", Format: "Bearer {secret}", SecretEnv: "BENCH",
	}}, credentials.Sources{LookupEnv: func(string) (string, bool) { return benchSecret, true }})
	if err != nil {
		tb.Fatal(err)
	}
	broker := credentials.NewBroker(set)
	cb.s = newStackWith(tb, policy, Limits{}, stackParts{mitm: &mitm.Interceptor{Authority: auth, Roots: roots}, creds: broker, requests: rules})
	e, token, err := cb.s.registry.Register(attribution.ExecutionSpec{SessionID: "s", EnvironmentID: "e"})
	if err != nil {
		tb.Fatal(err)
	}
	ph, err := broker.Mint(e.ID)
	if err != nil {
		tb.Fatal(err)
	}
	cb.token, cb.placeholder = token, ph[0].Value
	cb.clientRoots = x509.NewCertPool()
	cb.clientRoots.AddCert(ca.Leaf)
	cb.clientRoots.AddCert(upCA.Leaf)
	return cb
}

func (cb *credBench) client(h2, keepAlive bool) *http.Client {
	return cb.clientWith(h2, keepAlive, nil)
}

// clientWith is client with a TLS session cache (nil: none).
func (cb *credBench) clientWith(h2, keepAlive bool, sessions tls.ClientSessionCache) *http.Client {
	proxyURL, _ := url.Parse("http://" + cb.s.httpAddr)
	tr := &http.Transport{
		Proxy: http.ProxyURL(proxyURL),
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			c, err := (&net.Dialer{}).DialContext(ctx, "tcp", cb.s.httpAddr)
			if err != nil {
				return nil, err
			}
			if err := attribution.WriteFrame(c, cb.token); err != nil {
				c.Close()
				return nil, err
			}
			return c, nil
		},
		TLSClientConfig:   &tls.Config{RootCAs: cb.clientRoots, ClientSessionCache: sessions},
		ForceAttemptHTTP2: h2,
		DisableKeepAlives: !keepAlive,
	}
	if !h2 {
		tr.TLSNextProto = map[string]func(string, *tls.Conn) http.RoundTripper{}
	}
	return &http.Client{Transport: tr, Timeout: 30 * time.Second}
}

func (cb *credBench) get(b *testing.B, c *http.Client, host, path string) int64 {
	req, _ := http.NewRequest("GET", fmt.Sprintf("https://%s:%s%s", host, cb.port, path), nil)
	req.Header.Set("Authorization", "Bearer "+cb.placeholder)
	resp, err := c.Do(req)
	if err != nil {
		b.Fatal(err)
	}
	n, _ := io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 {
		b.Fatalf("%s: %d", host, resp.StatusCode)
	}
	return n
}

// BenchmarkCredentialHTTPS compares HTTPS through the interception of a
// credential's host (up.test: TLS terminated, placeholder replaced,
// re-encrypted toward the upstream) with an opaque CONNECT tunnel
// (other.test): small keep-alive requests (req/s), 8 MiB responses (MB/s)
// and a new connection per request (handshake cost, leaf cache warm).
func BenchmarkCredentialHTTPS(b *testing.B) {
	cb := newCredBench(b)
	for _, tc := range []struct {
		name, host string
		h2         bool
	}{
		{"intercepted-h1", "up.test", false},
		{"intercepted-h2", "up.test", true},
		{"opaque-h1", "other.test", false},
		{"opaque-h2", "other.test", true},
	} {
		b.Run(tc.name+"/requests", func(b *testing.B) {
			c := cb.client(tc.h2, true)
			defer c.CloseIdleConnections()
			cb.get(b, c, tc.host, "/") // connection set up outside the timing
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				cb.get(b, c, tc.host, "/")
			}
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "req/s")
		})
		b.Run(tc.name+"/8MiB", func(b *testing.B) {
			c := cb.client(tc.h2, true)
			defer c.CloseIdleConnections()
			cb.get(b, c, tc.host, "/")
			b.SetBytes(credBenchBig)
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				cb.get(b, c, tc.host, "/big")
			}
		})
		b.Run(tc.name+"/new-connection", func(b *testing.B) {
			c := cb.client(tc.h2, false)
			cb.get(b, c, tc.host, "/") // warms the leaf cache
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				cb.get(b, c, tc.host, "/")
			}
		})
	}
	cb.mu.Lock()
	defer cb.mu.Unlock()
	if cb.lastAuth != "Bearer "+cb.placeholder && cb.lastAuth != "Bearer "+benchSecret {
		b.Fatalf("upstream saw %q", cb.lastAuth)
	}
}

// BenchmarkLeaf is the handshake's certificate cost: minting a leaf for a
// host not in the cache (cold) against a cache hit (warm).
func BenchmarkLeaf(b *testing.B) {
	auth, err := mitm.NewAuthority(tbCA(b), 1<<20)
	if err != nil {
		b.Fatal(err)
	}
	b.Run("cold", func(b *testing.B) {
		for i := 0; i < b.N; i++ {
			if _, err := auth.Leaf(fmt.Sprintf("h%d.example.com", i)); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("warm", func(b *testing.B) {
		auth.Leaf("warm.example.com")
		for i := 0; i < b.N; i++ {
			auth.Leaf("warm.example.com")
		}
	})
}

// TestCredentialInterceptionInjects checks the benchmark's stack does what
// it measures: the upstream of up.test sees the secret, other.test's sees
// the placeholder through the opaque tunnel.
func TestCredentialInterceptionInjects(t *testing.T) {
	cb := newCredBench(t)
	for _, tc := range []struct {
		host string
		h2   bool
		want string
	}{
		{"up.test", false, "Bearer " + benchSecret},
		{"up.test", true, "Bearer " + benchSecret},
		{"other.test", false, "Bearer " + cb.placeholder},
	} {
		c := cb.client(tc.h2, true)
		req, _ := http.NewRequest("GET", fmt.Sprintf("https://%s:%s/", tc.host, cb.port), nil)
		req.Header.Set("Authorization", "Bearer "+cb.placeholder)
		resp, err := c.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		cb.mu.Lock()
		got := cb.lastAuth
		cb.mu.Unlock()
		if resp.StatusCode != 200 || got != tc.want || (tc.h2 && resp.ProtoMajor != 2) {
			t.Fatalf("%s h2=%v: %d %s, upstream saw %q", tc.host, tc.h2, resp.StatusCode, resp.Proto, got)
		}
	}
}

// TestCredentialInterceptionStreamsH1: a server-sent event reaches an
// HTTP/1.1 client of the interception before the response ends.
func TestCredentialInterceptionStreamsH1(t *testing.T) {
	cb := newCredBench(t)
	for _, h2 := range []bool{false, true} {
		c := cb.client(h2, true)
		req, _ := http.NewRequest("GET", fmt.Sprintf("https://up.test:%s/sse", cb.port), nil)
		start := time.Now()
		resp, err := c.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		buf := make([]byte, 64)
		n, err := io.ReadAtLeast(resp.Body, buf, len("data: first\n\n"))
		if err != nil || string(buf[:n]) != "data: first\n\n" || time.Since(start) > 3*time.Second {
			t.Fatalf("h2=%v: first event %q (%v) after %v", h2, buf[:n], err, time.Since(start))
		}
		cb.sseSeen <- struct{}{}
		rest, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if string(rest) != "data: second\n\n" {
			t.Fatalf("h2=%v: rest %q", h2, rest)
		}
	}
}
