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
	"net/http/httptrace"
	"net/textproto"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	lru "github.com/hashicorp/golang-lru/v2"
	"golang.org/x/net/http2"

	"github.com/netproxy/netproxy/internal/httphead"
)

// DefaultLeafCacheSize bounds the leaf cache when the caller passes 0.
const DefaultLeafCacheSize = 1024

// Authority mints leaf certificates signed by the configured CA.
type Authority struct {
	ca    tls.Certificate
	cache *lru.Cache[string, *tls.Certificate]
	// inflight: leaves being minted, so that concurrent handshakes for a
	// new host wait for one mint instead of each minting their own.
	mu       sync.Mutex
	inflight map[string]*minting
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
	return &Authority{ca: ca, cache: cache, inflight: make(map[string]*minting)}, nil
}

// Leaf returns the certificate for host (a DNS name or IP literal), minting
// it on a cache miss (or joining a mint already under way: Prepare).
func (a *Authority) Leaf(host string) (*tls.Certificate, error) {
	if c, ok := a.cache.Get(host); ok && a.fresh(c, time.Now()) {
		return c, nil
	}
	a.mu.Lock()
	m, ok := a.inflight[host]
	if !ok {
		m = &minting{done: make(chan struct{})}
		a.inflight[host] = m
		a.mu.Unlock()
		a.mint(host, m)
	} else {
		a.mu.Unlock()
		<-m.done
	}
	return m.cert, m.err
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
	// MaxHeaderBytes and MaxHeaders bound one inner request head (SPEC
	// §7.2; 0: 64 KiB and 100); beyond either the client gets a 431.
	// HTTP/2 heads are held to the same limits as HTTP/1.1 ones.
	MaxHeaderBytes int
	MaxHeaders     int
	// HeaderTimeout bounds one inner head from its first byte (0: 10 s),
	// as limits.header_timeout bounds a head on the plain listener; Idle
	// is only the wait for the next head to begin.
	HeaderTimeout time.Duration

	once sync.Once
	tls  *sharedTLS
}

// limits returns the head limits with their defaults filled in.
func (i *Interceptor) limits() (maxBytes, maxLines int, headTimeout time.Duration) {
	maxBytes, maxLines, headTimeout = i.MaxHeaderBytes, i.MaxHeaders, i.HeaderTimeout
	if maxBytes <= 0 {
		maxBytes = 64 << 10
	}
	if maxLines <= 0 {
		maxLines = 100
	}
	if headTimeout <= 0 {
		headTimeout = 10 * time.Second
	}
	return maxBytes, maxLines, headTimeout
}

// Tunnel is one intercepted CONNECT.
type Tunnel struct {
	Client net.Conn // after the 200; closed by Serve
	Host   string   // CONNECT host (normalised, no brackets)
	Port   uint16
	Check  Check
	// CheckTrailer, when set, decides a request's trailers at its body's
	// end (trailers.go); a block aborts the upstream request.
	CheckTrailer TrailerCheck
	// Dial connects to the upstream (TCP); TLS is added here.
	Dial func(ctx context.Context) (net.Conn, error)
	// Bytes, when set, is told the bytes relayed per direction.
	Bytes func(dir string, n int64)
	// Ended, when set, is told the end of every forwarded inner request
	// (exchange.go).
	Ended func(Exchange)

	auth string // authority(), set once by Serve
}

// authority returns host:port as the inner requests' Host must name it
// (port omitted when 443).
func (t *Tunnel) authority() string {
	if t.auth != "" {
		return t.auth
	}
	return t.formatAuthority()
}

func (t *Tunnel) formatAuthority() string {
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
	// Formatted once: every inner request names it (twice).
	t.auth = t.formatAuthority()
	tc := tls.Server(&hostConn{Conn: t.Client, host: t.Host}, i.shared().server)
	idle := i.Idle
	if idle <= 0 {
		idle = 5 * time.Minute
	}
	hctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	err := tc.HandshakeContext(hctx)
	cancel()
	if err != nil {
		return fmt.Errorf("mitm: client handshake: %w", err)
	}
	tr := i.transport(t, idle)
	defer tr.CloseIdleConnections()
	if tc.ConnectionState().NegotiatedProtocol == "h2" {
		return i.serveH2(ctx, t, tr, tc, idle)
	}
	maxBytes, maxLines, headTimeout := i.limits()
	lim := &headLimit{r: tc, maxBytes: maxBytes, maxLines: maxLines}
	br := bufio.NewReader(lim)
	// A refused head's answer is written through a writer made then: an
	// idle tunnel holds none (answers use the pooled one below).
	refuse := func(resp *http.Response) { writeResponse(bufio.NewWriter(tc), nil, resp, true) }
	up := &h1Upstream{i: i, t: t}
	defer up.close()
	for {
		if br.Buffered() == 0 {
			// Waiting for a head to begin is idleness; once its first
			// byte is here the head must complete within headTimeout.
			tc.SetReadDeadline(time.Now().Add(idle))
			if _, err := br.Peek(1); err != nil {
				var ne net.Error
				if errors.As(err, &ne) && !ne.Timeout() {
					return err
				}
				return nil
			}
		}
		tc.SetReadDeadline(time.Now().Add(headTimeout))
		pre, _ := br.Peek(br.Buffered())
		var req *http.Request
		err := lim.begin(pre)
		if err == nil {
			req, err = readInnerRequest(br, lim)
		}
		lim.active = false
		if lim.failed {
			// The parser may report the cut line in its own words.
			err = lim.failure()
		}
		if err != nil {
			switch {
			case errors.Is(err, io.EOF), errors.Is(err, net.ErrClosed), errors.Is(err, io.ErrUnexpectedEOF):
				return nil
			case errors.Is(err, errHeadTooLarge):
				refuse(TextResponse(nil, http.StatusRequestHeaderFieldsTooLarge, "request header too large\n"))
			default:
				var ne net.Error
				if !errors.As(err, &ne) {
					// RFC 9112: a malformed head (e.g. "Transfer-Encoding :")
					// is answered 400, never forwarded.
					refuse(TextResponse(nil, http.StatusBadRequest, "malformed request\n"))
				}
			}
			var ne net.Error
			if errors.As(err, &ne) {
				return err // a timeout or a socket error: no request bytes in it
			}
			// The client may still be sending the head we refused: close
			// gently so that it reads the answer rather than a reset.
			lingerClose(tc, t.Client)
			// net/http quotes the bad line, which may hold a query string
			// or a placeholder: never let it reach the log.
			return errors.New("mitm: unreadable inner request")
		}
		tc.SetReadDeadline(time.Time{})
		// Answers go out through a pooled 64 KiB writer held only for the
		// exchange: a bulk body leaves in four-record writes, and an idle
		// tunnel keeps no writer.
		obw := bulkWriters.Get().(*bufio.Writer)
		obw.Reset(tc)
		keep, err := i.serveOne(ctx, t, tr, up, tc, br, obw, req)
		obw.Reset(nil)
		bulkWriters.Put(obw)
		if err != nil || !keep {
			return err
		}
	}
}

// transport is the tunnel's own upstream client: it dials only through
// t.Dial (the pinned address), verifies the upstream's certificate against
// Roots for the CONNECT host, and speaks HTTP/2 when the upstream offers it
// — except for a WebSocket handshake, which net/http sends over a
// connection of its own offering only HTTP/1.1 (an Upgrade has no meaning
// in HTTP/2). The Transport adds TLS itself so that it can do that.
func (i *Interceptor) transport(t *Tunnel, idle time.Duration) *http.Transport {
	return &http.Transport{
		DialContext: func(dctx context.Context, _, _ string) (net.Conn, error) { return t.Dial(dctx) },
		// Verification is the default (system roots + upstream_ca); the
		// name checked is the CONNECT host. There is no fallback. The
		// shared session cache resumes TLS toward the upstream.
		TLSClientConfig:    i.shared().upstreamConfig(t.Host),
		ForceAttemptHTTP2:  true,
		DisableCompression: true,
		MaxIdleConns:       1,
		IdleConnTimeout:    idle,
		// Bulk bodies move in 64 KiB reads and writes (four TLS records
		// per system call) rather than the default 4 KiB.
		ReadBufferSize:  bulkBuffer,
		WriteBufferSize: bulkBuffer,
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

var errHeadTooLarge = errors.New("mitm: request head beyond the limits")

// lingerDelay and lingerBytes bound what lingerClose reads after an error
// answer (net/http's server waits 500 ms the same way). lingerBytes is
// well above any head a client sends before it reads our answer (a 400 KiB
// head refused at 64 KiB left 80 KiB unread at 256 KiB: a reset).
const (
	lingerDelay = 500 * time.Millisecond
	lingerBytes = 4 << 20
)

// lingerClose ends an answered connection whose client may still be
// sending: close_notify and a TCP FIN first, then up to lingerBytes read
// and dropped for lingerDelay, so the kernel does not answer the unread
// bytes with a reset that destroys the answer in flight.
func lingerClose(tc *tls.Conn, raw net.Conn) {
	_ = tc.CloseWrite()
	if cw, ok := raw.(interface{ CloseWrite() error }); ok {
		_ = cw.CloseWrite()
	}
	_ = tc.SetReadDeadline(time.Now().Add(lingerDelay))
	_, _ = io.CopyN(io.Discard, tc, lingerBytes)
}

// readInnerRequest reads the next inner request from br once lim has
// scanned the buffered bytes: a whole body-less head already buffered is
// parsed in place (httphead.ParseRequest, held to net/http's parse),
// anything else by http.ReadRequest.
func readInnerRequest(br *bufio.Reader, lim *headLimit) (*http.Request, error) {
	if !lim.active && !lim.failed && lim.n > 0 && lim.n <= br.Buffered() {
		buf, _ := br.Peek(lim.n)
		if req, ok := httphead.ParseRequest(buf); ok {
			br.Discard(lim.n)
			return req, nil
		}
	}
	return http.ReadRequest(br)
}

// headLimit counts the bytes and lines of an inner request head as they
// pass from the TLS connection to the parser; it keeps no copy.
type headLimit struct {
	r                  io.Reader
	maxBytes, maxLines int
	active             bool
	inName             bool
	bad                bool // a field name that is not a token
	failed             bool // a read failed on a limit or a bad name
	n, lines, cur      int
}

// begin starts a head; pre are its bytes already buffered.
func (l *headLimit) begin(pre []byte) error {
	l.active, l.n, l.lines, l.cur, l.inName, l.bad, l.failed = true, 0, 0, 0, false, false, false
	if !l.scan(pre) {
		return l.failure()
	}
	return nil
}

func (l *headLimit) failure() error {
	if l.bad {
		return errBadFieldName
	}
	return errHeadTooLarge
}

func (l *headLimit) scan(b []byte) bool {
	for _, c := range b {
		if !l.active {
			return true
		}
		l.n++
		if l.n > l.maxBytes || l.lines > l.maxLines+1 {
			return false
		}
		if l.lines > 0 && l.cur == 0 {
			l.inName = c != '\r' && c != '\n'
			if l.inName && c == ':' {
				l.bad = true // empty field name
				return false
			}
		}
		if l.inName {
			switch {
			case c == ':', c == '\r', c == '\n':
				l.inName = false
			case !httphead.IsTokenByte(c):
				// "Transfer-Encoding : chunked", an obs-fold line:
				// RFC 9112 §5.1 asks for a 400.
				l.bad = true
				return false
			}
		}
		if c != '\n' {
			l.cur++
			continue
		}
		if (l.cur == 0 || l.cur == 1) && l.lines > 0 {
			l.active = false // the empty line: the head is complete
			return true
		}
		l.lines++
		l.cur = 0
	}
	return l.n <= l.maxBytes && l.lines <= l.maxLines+1
}

func (l *headLimit) Read(p []byte) (int, error) {
	n, err := l.r.Read(p)
	if l.active && n > 0 && !l.scan(p[:n]) {
		l.failed = true
		return 0, l.failure()
	}
	return n, err
}

var errBadFieldName = errors.New("mitm: malformed header field name")

// serveOne answers one inner request and reports whether the connection
// may carry another.
func (i *Interceptor) serveOne(ctx context.Context, t *Tunnel, tr *http.Transport, up *h1Upstream, tc net.Conn, br *bufio.Reader, bw *bufio.Writer, req *http.Request) (bool, error) {
	x := Exchange{Method: req.Method, Started: time.Now()}
	hasBody := req.ContentLength != 0
	if !SameAuthority(req.Host, t.Host, t.Port) {
		return false, writeResponse(bw, req, TextResponse(req, http.StatusBadRequest, "Host header does not match CONNECT target"), true)
	}
	if resp := t.Check(ctx, req); resp != nil {
		// Not forwarded. A body left unread would desynchronise the stream.
		return !hasBody && !req.Close, writeResponse(bw, req, resp, hasBody || req.Close)
	}
	upType := upgradeType(req.Header)
	wantContinue := strings.EqualFold(req.Header.Get("Expect"), "100-continue")
	clientClose := req.Close
	fast := h1Eligible(req, upType)
	out := req
	if !fast {
		out = req.Clone(ctx)
	}
	// On the tunnel's own connection (fast) req itself goes upstream: from
	// here on only its Method is read again (by the answer's writer), so a
	// copy of its URL and header map would be garbage per request.
	out.RequestURI = ""
	out.URL.Scheme = "https"
	out.URL.Host = t.authority()
	out.Host = t.authority()
	removeHopByHop(out.Header)
	// The client's Connection: close is about its own connection: a
	// request without a body goes over a kept-alive upstream connection
	// (one with a body keeps it, as on the plain path: docs/proxy.md), and
	// no default User-Agent is added.
	if !hasBody {
		out.Close = false
	}
	if _, ok := out.Header["User-Agent"]; !ok {
		out.Header.Set("User-Agent", "")
	}
	if upType != "" {
		out.Header.Set("Connection", "Upgrade")
		out.Header.Set("Upgrade", upType)
	}
	var sent *countingReader
	if req.Body != nil && req.Body != http.NoBody {
		sent = &countingReader{r: req.Body}
		out.Body = sent
	}
	gate := gateTrailers(t, req, out)
	var resp *http.Response
	var err error
	var ready *h1Upstream
	if fast {
		resp, err = up.roundTrip(ctx, out, &interim{bw: bw, wantContinue: wantContinue})
		ready = up
	} else {
		rl := &interim{bw: bw, wantContinue: wantContinue}
		trace := &httptrace.ClientTrace{Got1xxResponse: func(code int, h textproto.MIMEHeader) error {
			return rl.relay(code, http.Header(h))
		}}
		out = out.WithContext(httptrace.WithClientTrace(out.Context(), trace))
		resp, err = tr.RoundTrip(out)
	}
	if blocked := gate.block(); blocked != nil {
		// The trailers were refused before any answer was relayed.
		if err == nil {
			resp.Body.Close()
		}
		return false, writeResponse(bw, req, blocked, true)
	}
	if err != nil {
		x.Failed = true
		defer t.ended(x)
		return false, writeResponse(bw, req, TextResponse(req, http.StatusBadGateway, UpstreamFailure(t.Host, err)), true)
	}
	defer resp.Body.Close()
	x.Status = resp.StatusCode
	if resp.StatusCode == http.StatusSwitchingProtocols {
		// Only for the protocol asked for; anything else would hold the
		// client's connection slot for as long as the upstream likes.
		rwc, ok := resp.Body.(io.ReadWriteCloser)
		if upType == "" || !ok || !strings.EqualFold(upgradeType(resp.Header), upType) {
			writeResponse(bw, req, TextResponse(req, http.StatusBadGateway, "upstream failure"), true)
			return false, errors.New("mitm: upstream switched protocols without a matching upgrade request")
		}
		// On the heap only here: the byte counter keeps a pointer to it.
		ux := new(Exchange)
		*ux = x
		err := spliceUpgrade(tc, br, bw, resp, rwc, t.countBytes(ux))
		ux.Err = err
		t.ended(*ux)
		return false, err
	}
	removeHopByHop(resp.Header)
	// The upstream may have answered over HTTP/2: the client speaks 1.1.
	resp.ProtoMajor, resp.ProtoMinor = 1, 1
	if resp.ContentLength < 0 && req.Method != http.MethodHead {
		resp.TransferEncoding = []string{"chunked"}
	}
	// The head goes out at once and each part of the body as it arrives
	// (a slow Content-Length body too): what was written is flushed
	// before every read of the upstream's body.
	var cr *flushBeforeRead
	if ready != nil {
		cr = &ready.answer
		*cr = flushBeforeRead{countingReader: countingReader{r: resp.Body}, bw: bw, up: ready, length: resp.ContentLength}
	} else {
		cr = &flushBeforeRead{countingReader: countingReader{r: resp.Body}, bw: bw, length: -1}
	}
	resp.Body = cr
	closeAfter := clientClose || resp.Close
	resp.Request = req
	resp.Close = closeAfter
	err = writeAnswer(bw, resp)
	if err == nil {
		err = bw.Flush()
	}
	if t.Bytes != nil {
		t.Bytes("down", cr.n)
		if sent != nil {
			t.Bytes("up", sent.n)
		}
	}
	x.Down, x.Err = cr.n, err
	if sent != nil {
		x.Up = sent.n
	}
	t.ended(x)
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
	maxBytes, maxLines, headTimeout := i.limits()
	// Upload windows as large as the upstream transport's default stream
	// window (4 MiB): a client's upload is not throttled to 1 MiB per
	// round trip. The buffers only fill while the upstream is not reading.
	srv := &http2.Server{IdleTimeout: idle, MaxUploadBufferPerStream: 4 << 20, MaxUploadBufferPerConnection: 8 << 20}
	// ServeConn returns when the client leaves, without waiting for its
	// stream handlers: serveH2 waits for them, so every exchange has told
	// its bytes and its end before the tunnel ends (its connection_end
	// sums them). A handler that starts after that serves nothing.
	var streams sync.WaitGroup
	var streamsMu sync.Mutex
	stopped := false
	defer func() {
		streamsMu.Lock()
		stopped = true
		streamsMu.Unlock()
		streams.Wait()
	}()
	srv.ServeConn(&h2HeadGuard{Conn: tc, tls: tc, timeout: headTimeout, preface: len(http2.ClientPreface)}, &http2.ServeConnOpts{
		Context: ctx,
		// x/net/http2 logs protocol errors through BaseConfig.ErrorLog
		// (the process's standard logger when nil): keep them out.
		// MaxHeaderBytes is the advertised and enforced header list size:
		// a larger block is refused (431) and never buffered whole.
		BaseConfig: &http.Server{ErrorLog: log.New(io.Discard, "", 0), MaxHeaderBytes: maxBytes},
		Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			streamsMu.Lock()
			if stopped {
				streamsMu.Unlock()
				return
			}
			streams.Add(1)
			streamsMu.Unlock()
			defer streams.Done()
			if fieldCount(r.Header) > maxLines {
				// The HTTP/1.1 side counts header lines; an HTTP/2 head is
				// held to the same number of fields.
				w.Header().Set("Content-Type", "text/plain; charset=utf-8")
				w.WriteHeader(http.StatusRequestHeaderFieldsTooLarge)
				io.WriteString(w, "request header too large\n")
				return
			}
			started := time.Now()
			up, down, status, forwarded := i.serveStream(t, tr, w, r)
			if t.Bytes != nil {
				mu.Lock()
				t.Bytes("up", up)
				t.Bytes("down", down)
				mu.Unlock()
			}
			if forwarded {
				t.ended(Exchange{Method: r.Method, Started: started, Status: status, Up: up, Down: down, Failed: status == 0})
			}
		}),
	})
	return nil
}

// serveStream answers one HTTP/2 stream and reports the body bytes moved,
// the upstream's status (0: none came) and whether it went upstream.
func (i *Interceptor) serveStream(t *Tunnel, tr *http.Transport, w http.ResponseWriter, r *http.Request) (up, down int64, status int, forwarded bool) {
	ctx := r.Context()
	if !SameAuthority(r.Host, t.Host, t.Port) {
		http.Error(w, "Host header does not match CONNECT target", http.StatusBadRequest)
		return 0, 0, 0, false
	}
	if resp := t.Check(ctx, r); resp != nil {
		defer resp.Body.Close()
		copyHeader(w.Header(), resp.Header)
		w.WriteHeader(resp.StatusCode)
		io.Copy(w, resp.Body)
		return 0, 0, 0, false
	}
	forwarded = true
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
	gate := gateTrailers(t, r, out)
	defer func() {
		if sent != nil {
			up = sent.n
		}
	}()
	resp, err := tr.RoundTrip(out)
	if blocked := gate.block(); blocked != nil {
		if err == nil {
			resp.Body.Close()
		}
		defer blocked.Body.Close()
		copyHeader(w.Header(), blocked.Header)
		w.WriteHeader(blocked.StatusCode)
		io.Copy(w, blocked.Body)
		return
	}
	if err != nil {
		http.Error(w, UpstreamFailure(t.Host, err), http.StatusBadGateway)
		return
	}
	defer resp.Body.Close()
	status = resp.StatusCode
	removeHopByHop(resp.Header)
	copyHeader(w.Header(), resp.Header)
	for k := range resp.Trailer {
		w.Header().Add("Trailer", k)
	}
	w.WriteHeader(resp.StatusCode)
	rc := http.NewResponseController(w)
	rc.Flush() // the client sees the head now (a stream may send nothing yet)
	// The copy buffer is pooled, not one per stream.
	bp := copyBuffers.Get().(*[32 << 10]byte)
	defer copyBuffers.Put(bp)
	buf := bp[:]
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
			if gate.block() != nil {
				// Blocked after the answer began: the client's stream is
				// reset rather than ended as if complete.
				panic(http.ErrAbortHandler)
			}
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

// upgradeType is the protocol a head asks to switch to ("" none).
func upgradeType(h http.Header) string {
	for _, v := range h.Values("Connection") {
		for _, tok := range strings.Split(v, ",") {
			if strings.EqualFold(strings.TrimSpace(tok), "upgrade") {
				return h.Get("Upgrade")
			}
		}
	}
	return ""
}

// upgradeGrace closes an upgraded inner connection this long after one
// side ended it.
const upgradeGrace = 5 * time.Second

// spliceUpgrade relays a 101 and then copies bytes both ways between the
// client's TLS session and the upstream's until one side ends (plus
// upgradeGrace for the other), then closes both.
func spliceUpgrade(tc net.Conn, br *bufio.Reader, bw *bufio.Writer, resp *http.Response, up io.ReadWriteCloser, bytesFn func(string, int64)) error {
	proto := resp.Header.Get("Upgrade")
	removeHopByHop(resp.Header)
	resp.Header.Set("Connection", "Upgrade")
	resp.Header.Set("Upgrade", proto)
	bw.WriteString("HTTP/1.1 101 Switching Protocols\r\n")
	resp.Header.Write(bw)
	bw.WriteString("\r\n")
	if err := bw.Flush(); err != nil {
		up.Close()
		return err
	}
	done := make(chan struct{}, 2)
	var upN, downN int64
	go func() {
		upN, _ = io.Copy(up, br) // br holds client bytes already read
		done <- struct{}{}
	}()
	go func() {
		downN, _ = io.Copy(tc, up)
		done <- struct{}{}
	}()
	<-done
	t := time.AfterFunc(upgradeGrace, func() { up.Close(); tc.Close() })
	<-done
	t.Stop()
	up.Close()
	tc.Close()
	if bytesFn != nil {
		bytesFn("up", upN)
		bytesFn("down", downN)
	}
	return nil
}

func writeResponse(bw *bufio.Writer, req *http.Request, resp *http.Response, closeAfter bool) error {
	resp.Request = req
	resp.Close = closeAfter
	if err := resp.Write(writeOnly{bw}); err != nil {
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

// flushBeforeRead flushes the client's writer before each body read.
// With up set (the answer comes over the tunnel's own connection), a read
// that will not wait skips the flush (the head and a buffered body leave
// together): one with bytes buffered or queued on the socket, or the read
// of a body whose announced length has all been read (it only reports the
// end; the caller flushes after it).
type flushBeforeRead struct {
	countingReader
	bw     *bufio.Writer
	up     *h1Upstream
	length int64 // the body's announced length with up set; -1 otherwise
}

func (f *flushBeforeRead) Read(p []byte) (int, error) {
	if f.bw.Buffered() > 0 && (f.up == nil || !(f.length >= 0 && f.n >= f.length) && !f.up.ready()) {
		if err := f.bw.Flush(); err != nil {
			return 0, err
		}
	}
	return f.countingReader.Read(p)
}

type countingReader struct {
	r io.ReadCloser
	n int64
}

func (c *countingReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n += int64(n)
	return n, err
}

func (c *countingReader) Close() error { return c.r.Close() }
