// Package mitm owns netproxy's opt-in TLS interception — for limited mode
// (SPEC §3.8) and, in any mode, for the hosts of a credential
// (docs/credentials.md): the CA loaded from [mitm], leaf minting for CONNECT
// hosts with a bounded cache, and the interception of one tunnel —
// terminating the client's TLS (HTTP/1.1 or HTTP/2 by ALPN), reading each
// inner request, asking the caller's check (which may rewrite the request's
// headers), and streaming allowed requests to the upstream over verified
// TLS (HTTP/1.1 or HTTP/2).
//
// It must never forward a request the check did not allow, never skip
// upstream certificate verification, and never write the CA key anywhere.
package mitm

import (
	"bufio"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/elazarl/goproxy"
	lru "github.com/hashicorp/golang-lru/v2"
	"golang.org/x/net/http2"
)

// DefaultLeafCacheSize bounds the leaf cache when the caller passes 0.
const DefaultLeafCacheSize = 1024

// Authority mints leaf certificates signed by the configured CA.
type Authority struct {
	ca    tls.Certificate
	sign  func(host string, ctx *goproxy.ProxyCtx) (*tls.Config, error)
	gp    *goproxy.ProxyHttpServer // only for the signing helper's log context
	cache *lru.Cache[string, *tls.Certificate]
}

// LoadAuthority reads the CA certificate and key (PEM) and checks that they
// match and that the certificate is a CA.
func LoadAuthority(certFile, keyFile string, cacheSize int) (*Authority, error) {
	certPEM, err := os.ReadFile(certFile)
	if err != nil {
		return nil, fmt.Errorf("mitm.ca_cert: cannot read %s: %w", certFile, err)
	}
	keyPEM, err := os.ReadFile(keyFile)
	if err != nil {
		return nil, fmt.Errorf("mitm.ca_key: cannot read %s: %w", keyFile, err)
	}
	pair, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		return nil, fmt.Errorf("mitm.ca_key: %s does not match mitm.ca_cert %s: %w", keyFile, certFile, err)
	}
	return NewAuthority(pair, cacheSize)
}

// NewAuthority builds an Authority over a parsed CA pair.
func NewAuthority(ca tls.Certificate, cacheSize int) (*Authority, error) {
	if len(ca.Certificate) == 0 {
		return nil, errors.New("mitm: CA has no certificate")
	}
	leaf, err := x509.ParseCertificate(ca.Certificate[0])
	if err != nil {
		return nil, fmt.Errorf("mitm.ca_cert: %w", err)
	}
	if !leaf.IsCA {
		return nil, errors.New("mitm.ca_cert: not a CA certificate (basic constraints CA:TRUE needed)")
	}
	ca.Leaf = leaf
	if cacheSize <= 0 {
		cacheSize = DefaultLeafCacheSize
	}
	cache, err := lru.New[string, *tls.Certificate](cacheSize)
	if err != nil {
		return nil, err
	}
	gp := goproxy.NewProxyHttpServer()
	gp.Logger = log.New(io.Discard, "", 0)
	a := &Authority{ca: ca, gp: gp, cache: cache}
	a.sign = goproxy.TLSConfigFromCA(&a.ca)
	return a, nil
}

// Leaf returns the certificate for host (a DNS name or IP literal), minting
// it on a cache miss.
func (a *Authority) Leaf(host string) (*tls.Certificate, error) {
	if c, ok := a.cache.Get(host); ok {
		return c, nil
	}
	cfg, err := a.sign(host, &goproxy.ProxyCtx{Proxy: a.gp})
	if err != nil {
		return nil, fmt.Errorf("mitm: minting a leaf for %s: %w", host, err)
	}
	c := &cfg.Certificates[0]
	a.cache.Add(host, c)
	return c, nil
}

// CachedLeaves reports how many leaves the cache holds.
func (a *Authority) CachedLeaves() int { return a.cache.Len() }

// UpstreamRoots returns the system roots plus the PEM certificates in
// extraFile ("" for none).
func UpstreamRoots(extraFile string) (*x509.CertPool, error) {
	pool, err := x509.SystemCertPool()
	if err != nil || pool == nil {
		pool = x509.NewCertPool()
	}
	if extraFile == "" {
		return pool, nil
	}
	pem, err := os.ReadFile(extraFile)
	if err != nil {
		return nil, fmt.Errorf("mitm.upstream_ca: cannot read %s: %w", extraFile, err)
	}
	if !pool.AppendCertsFromPEM(pem) {
		return nil, fmt.Errorf("mitm.upstream_ca: %s holds no PEM certificate", extraFile)
	}
	return pool, nil
}

// Check decides one inner request. It returns nil to forward the request
// (with any header it rewrote), or the response to send instead (the
// request is then never forwarded).
type Check func(ctx context.Context, req *http.Request) *http.Response

// Interceptor terminates TLS for CONNECT tunnels and forwards the requests
// its Check allows.
type Interceptor struct {
	Authority *Authority
	Roots     *x509.CertPool // upstream trust; never nil verification
	Idle      time.Duration  // wait for the next inner request (0: 5m)
}

// Tunnel is one intercepted CONNECT.
type Tunnel struct {
	Client net.Conn // after the 200; closed by Serve
	Host   string   // CONNECT host (normalised, no brackets)
	Port   uint16
	Check  Check
	// Dial connects to the upstream (TCP); TLS is added here.
	Dial func(ctx context.Context) (net.Conn, error)
	// Bytes, when set, is told the bytes relayed per direction.
	Bytes func(dir string, n int64)
}

// Authority returns host:port as the inner requests' Host must name it
// (port omitted when 443).
func (t *Tunnel) authority() string {
	h := t.Host
	if strings.Contains(h, ":") {
		h = "[" + h + "]"
	}
	if t.Port == 443 {
		return h
	}
	return h + ":" + strconv.Itoa(int(t.Port))
}

// Serve runs the interception until the client leaves, ctx ends or an
// error occurs. It closes the client connection.
func (i *Interceptor) Serve(ctx context.Context, t *Tunnel) error {
	defer t.Client.Close()
	if i.Roots == nil {
		return errors.New("mitm: no upstream roots")
	}
	leaf, err := i.Authority.Leaf(t.Host)
	if err != nil {
		return err
	}
	tc := tls.Server(t.Client, &tls.Config{
		Certificates: []tls.Certificate{*leaf},
		NextProtos:   []string{"h2", "http/1.1"},
		MinVersion:   tls.VersionTLS12,
	})
	idle := i.Idle
	if idle <= 0 {
		idle = 5 * time.Minute
	}
	hctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	err = tc.HandshakeContext(hctx)
	cancel()
	if err != nil {
		return fmt.Errorf("mitm: client handshake: %w", err)
	}
	tr := i.transport(t, idle)
	defer tr.CloseIdleConnections()
	if tc.ConnectionState().NegotiatedProtocol == "h2" {
		return i.serveH2(ctx, t, tr, tc, idle)
	}
	br := bufio.NewReader(tc)
	bw := bufio.NewWriter(tc)
	for {
		tc.SetReadDeadline(time.Now().Add(idle))
		req, err := http.ReadRequest(br)
		if err != nil {
			if errors.Is(err, io.EOF) || errors.Is(err, net.ErrClosed) {
				return nil
			}
			var ne net.Error
			if errors.As(err, &ne) {
				return err // a timeout or a socket error: no request bytes in it
			}
			// net/http quotes the bad line, which may hold a query string
			// or a placeholder: never let it reach the log.
			return errors.New("mitm: unreadable inner request")
		}
		tc.SetReadDeadline(time.Time{})
		keep, err := i.serveOne(ctx, t, tr, bw, req)
		if err != nil || !keep {
			return err
		}
	}
}

// transport is the tunnel's own upstream client: it dials only through
// t.Dial (the pinned address), verifies the upstream's certificate against
// Roots for the CONNECT host, and speaks HTTP/2 when the upstream offers it.
func (i *Interceptor) transport(t *Tunnel, idle time.Duration) *http.Transport {
	return &http.Transport{
		DialTLSContext: func(dctx context.Context, _, _ string) (net.Conn, error) {
			raw, err := t.Dial(dctx)
			if err != nil {
				return nil, err
			}
			// Verification is the default (system roots + upstream_ca);
			// the name checked is the CONNECT host. There is no fallback.
			uc := tls.Client(raw, &tls.Config{RootCAs: i.Roots, ServerName: t.Host, NextProtos: []string{"h2", "http/1.1"}, MinVersion: tls.VersionTLS12})
			if err := uc.HandshakeContext(dctx); err != nil {
				raw.Close()
				return nil, err
			}
			return uc, nil
		},
		ForceAttemptHTTP2:  true,
		DisableCompression: true,
		MaxIdleConns:       1,
		IdleConnTimeout:    idle,
	}
}

// UpstreamFailure is the text of the 502 answered when the upstream
// cannot be reached or fails verification; it never names a header value.
func UpstreamFailure(host string, err error) string {
	var cv *tls.CertificateVerificationError
	var ua x509.UnknownAuthorityError
	var hn x509.HostnameError
	var ci x509.CertificateInvalidError
	if errors.As(err, &cv) || errors.As(err, &ua) || errors.As(err, &hn) || errors.As(err, &ci) {
		return "upstream certificate verification failed for " + host +
			" (trusted: system roots + mitm.upstream_ca); the request was not sent"
	}
	return "upstream failure"
}

// serveOne answers one inner request and reports whether the connection
// may carry another.
func (i *Interceptor) serveOne(ctx context.Context, t *Tunnel, tr *http.Transport, bw *bufio.Writer, req *http.Request) (bool, error) {
	hasBody := req.ContentLength != 0
	if !SameAuthority(req.Host, t.Host, t.Port) {
		return false, writeResponse(bw, req, TextResponse(req, http.StatusBadRequest, "Host header does not match CONNECT target"), true)
	}
	if resp := t.Check(ctx, req); resp != nil {
		// Not forwarded. A body left unread would desynchronise the stream.
		return !hasBody && !req.Close, writeResponse(bw, req, resp, hasBody || req.Close)
	}
	out := req.Clone(ctx)
	out.RequestURI = ""
	out.URL.Scheme = "https"
	out.URL.Host = t.authority()
	out.Host = t.authority()
	removeHopByHop(out.Header)
	var sent *countingReader
	if req.Body != nil && req.Body != http.NoBody {
		sent = &countingReader{r: req.Body}
		out.Body = sent
	}
	resp, err := tr.RoundTrip(out)
	if err != nil {
		return false, writeResponse(bw, req, TextResponse(req, http.StatusBadGateway, UpstreamFailure(t.Host, err)), true)
	}
	defer resp.Body.Close()
	removeHopByHop(resp.Header)
	// The upstream may have answered over HTTP/2: the client speaks 1.1.
	resp.ProtoMajor, resp.ProtoMinor = 1, 1
	if resp.ContentLength < 0 && req.Method != http.MethodHead {
		resp.TransferEncoding = []string{"chunked"}
	}
	cr := &countingReader{r: resp.Body}
	if resp.ContentLength < 0 {
		// An answer of unknown length may be a stream (server-sent
		// events): whatever was written (the head, the previous chunk)
		// reaches the client before waiting for more of the body.
		cr.flush = bw
	}
	resp.Body = cr
	closeAfter := req.Close || resp.Close
	err = writeResponse(bw, req, resp, closeAfter)
	if t.Bytes != nil {
		t.Bytes("down", cr.n)
		if sent != nil {
			t.Bytes("up", sent.n)
		}
	}
	return !closeAfter && err == nil, err
}

// serveH2 serves an HTTP/2 client connection: every stream is checked and
// forwarded like an HTTP/1.1 request, its response streamed back as it
// arrives. It returns when the client leaves, ctx ends or the connection
// stays idle.
func (i *Interceptor) serveH2(ctx context.Context, t *Tunnel, tr *http.Transport, tc *tls.Conn, idle time.Duration) error {
	done := make(chan struct{})
	defer close(done)
	go func() {
		select {
		case <-ctx.Done():
			tc.Close()
		case <-done:
		}
	}()
	var mu sync.Mutex // Bytes may be told from several streams
	srv := &http2.Server{IdleTimeout: idle}
	srv.ServeConn(tc, &http2.ServeConnOpts{
		Context: ctx,
		// x/net/http2 logs protocol errors through BaseConfig.ErrorLog
		// (the process's standard logger when nil): keep them out.
		BaseConfig: &http.Server{ErrorLog: log.New(io.Discard, "", 0)},
		Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			up, down := i.serveStream(t, tr, w, r)
			if t.Bytes != nil {
				mu.Lock()
				t.Bytes("up", up)
				t.Bytes("down", down)
				mu.Unlock()
			}
		}),
	})
	return nil
}

// serveStream answers one HTTP/2 stream and reports the body bytes moved.
func (i *Interceptor) serveStream(t *Tunnel, tr *http.Transport, w http.ResponseWriter, r *http.Request) (up, down int64) {
	ctx := r.Context()
	if !SameAuthority(r.Host, t.Host, t.Port) {
		http.Error(w, "Host header does not match CONNECT target", http.StatusBadRequest)
		return 0, 0
	}
	if resp := t.Check(ctx, r); resp != nil {
		defer resp.Body.Close()
		copyHeader(w.Header(), resp.Header)
		w.WriteHeader(resp.StatusCode)
		io.Copy(w, resp.Body)
		return 0, 0
	}
	out := r.Clone(ctx)
	out.RequestURI = ""
	out.URL.Scheme = "https"
	out.URL.Host = t.authority()
	out.Host = t.authority()
	removeHopByHop(out.Header)
	var sent *countingReader
	if r.Body != nil && r.Body != http.NoBody {
		sent = &countingReader{r: r.Body}
		out.Body = sent
	}
	defer func() {
		if sent != nil {
			up = sent.n
		}
	}()
	resp, err := tr.RoundTrip(out)
	if err != nil {
		http.Error(w, UpstreamFailure(t.Host, err), http.StatusBadGateway)
		return
	}
	defer resp.Body.Close()
	removeHopByHop(resp.Header)
	copyHeader(w.Header(), resp.Header)
	for k := range resp.Trailer {
		w.Header().Add("Trailer", k)
	}
	w.WriteHeader(resp.StatusCode)
	rc := http.NewResponseController(w)
	rc.Flush() // the client sees the head now (a stream may send nothing yet)
	buf := make([]byte, 32<<10)
	for {
		n, rerr := resp.Body.Read(buf)
		if n > 0 {
			if _, werr := w.Write(buf[:n]); werr != nil {
				return
			}
			down += int64(n)
			rc.Flush()
		}
		if rerr != nil {
			break
		}
	}
	for k, vs := range resp.Trailer {
		w.Header()[k] = vs
	}
	return
}

func copyHeader(dst, src http.Header) {
	for k, vs := range src {
		dst[k] = append([]string(nil), vs...)
	}
}

func writeResponse(bw *bufio.Writer, req *http.Request, resp *http.Response, closeAfter bool) error {
	resp.Request = req
	resp.Close = closeAfter
	// Only Write is exposed: bufio's ReadFrom would lend its buffer to the
	// body's Read, which flushes the same buffer (countingReader.flush).
	if err := resp.Write(struct{ io.Writer }{bw}); err != nil {
		return err
	}
	return bw.Flush()
}

// TextResponse builds a small text/plain response.
func TextResponse(req *http.Request, status int, body string) *http.Response {
	return &http.Response{
		StatusCode: status, ProtoMajor: 1, ProtoMinor: 1, Request: req,
		Header:        http.Header{"Content-Type": {"text/plain; charset=utf-8"}},
		ContentLength: int64(len(body)), Body: io.NopCloser(strings.NewReader(body)),
	}
}

// SameAuthority reports whether a Host header names host:port (default
// port 443), comparing hosts case-insensitively and without brackets.
func SameAuthority(hostHdr, host string, port uint16) bool {
	if hostHdr == "" {
		return false
	}
	h, p, err := net.SplitHostPort(hostHdr)
	if err != nil {
		h, p = strings.TrimSuffix(strings.TrimPrefix(hostHdr, "["), "]"), "443"
	}
	n, err := strconv.Atoi(p)
	if err != nil || n != int(port) {
		return false
	}
	return strings.EqualFold(strings.TrimSuffix(h, "."), strings.TrimSuffix(host, "."))
}

var hopByHop = []string{"Connection", "Proxy-Connection", "Keep-Alive", "Proxy-Authenticate", "Proxy-Authorization", "Te", "Trailer", "Transfer-Encoding", "Upgrade"}

func removeHopByHop(h http.Header) {
	for _, f := range h.Values("Connection") {
		for _, name := range strings.Split(f, ",") {
			if name = strings.TrimSpace(name); name != "" {
				h.Del(name)
			}
		}
	}
	for _, k := range hopByHop {
		h.Del(k)
	}
}

type countingReader struct {
	r     io.ReadCloser
	n     int64
	flush *bufio.Writer // flushed before each read when set
}

func (c *countingReader) Read(p []byte) (int, error) {
	if c.flush != nil && c.flush.Buffered() > 0 {
		if err := c.flush.Flush(); err != nil {
			return 0, err
		}
	}
	n, err := c.r.Read(p)
	c.n += int64(n)
	return n, err
}

func (c *countingReader) Close() error { return c.r.Close() }
