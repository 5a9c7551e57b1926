package test

// Issue 24 item 4: a live placeholder anywhere in a request — request line,
// header names and values, and the trailers of a chunked (HTTP/1.1) or
// HTTP/2 request — in every form the scanner promises (with or without its
// prefix, glued to letters on either or both sides) is blocked toward a
// host it does not belong to, plain and inside interception, and audited;
// a trailer block reaches the upstream only as an unfinished request.

import (
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// trailerSink is an origin (plain and TLS) that records, per path, every
// request it read: whether its body ended properly, and its trailers.
// /ws is a WebSocket echo.
type trailerSink struct {
	mu       sync.Mutex
	got      map[string][]sinkSeen
	upgrades atomic.Int64
	plain    int // port, plain HTTP
	tls      int // port, TLS (HTTP/1.1 and HTTP/2) for api.cred.test and paste.test
}

type sinkSeen struct {
	complete bool
	body     string
	trailer  http.Header
}

func startTrailerSink(t *testing.T, f *credFixture) *trailerSink {
	t.Helper()
	s := &trailerSink{got: map[string][]sinkSeen{}}
	ws := wsEchoHandler(&s.upgrades)
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/ws" {
			ws(w, r)
			return
		}
		b, err := io.ReadAll(r.Body)
		s.mu.Lock()
		s.got[r.URL.Path] = append(s.got[r.URL.Path], sinkSeen{complete: err == nil, body: string(b), trailer: r.Trailer.Clone()})
		s.mu.Unlock()
		io.WriteString(w, "sink ok")
	})
	for _, useTLS := range []bool{false, true} {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		srv := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second}
		if useTLS {
			s.tls = ln.Addr().(*net.TCPAddr).Port
			srv.TLSConfig = &tls.Config{Certificates: []tls.Certificate{f.upCA.leaf(t, "api.cred.test", "paste.test")}}
			go srv.ServeTLS(ln, "", "")
		} else {
			s.plain = ln.Addr().(*net.TCPAddr).Port
			go srv.Serve(ln)
		}
		t.Cleanup(func() { srv.Close() })
	}
	return s
}

func (s *trailerSink) seen(path string) []sinkSeen {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]sinkSeen(nil), s.got[path]...)
}

// completed reports whether the sink read path's request to its end.
func (s *trailerSink) completed(path string) bool {
	for _, r := range s.seen(path) {
		if r.complete {
			return true
		}
	}
	return false
}

// lateTrailers is a request body that sends its parts, then — in the read
// that ends it — adds trailers to the request, so that the client sends
// them without announcing them in a Trailer header (the proxy learns of
// them only at the body's end).
type lateTrailers struct {
	req   *http.Request
	parts []string
	late  http.Header
}

func (l *lateTrailers) Read(p []byte) (int, error) {
	if len(l.parts) > 0 {
		n := copy(p, l.parts[0])
		l.parts = l.parts[1:]
		return n, nil
	}
	time.Sleep(50 * time.Millisecond) // the first part reaches the upstream first
	for k, v := range l.late {
		l.req.Trailer[k] = v
	}
	return 0, io.EOF
}

// postTrailers sends a chunked POST (HTTP/2: DATA frames) with trailers
// and returns the status and body of the answer. The trailers are set at
// the body's end; only X-Decl (always sent) and, when announce is set,
// those of trailer are announced in a Trailer field (an HTTP/2 server keeps
// trailers only when some were announced, an HTTP/1.1 one keeps all).
func postTrailers(t *testing.T, c *http.Client, u string, trailer http.Header, announce bool) (int, string) {
	t.Helper()
	req, _ := http.NewRequest("POST", u, nil)
	req.Trailer = http.Header{"X-Decl": nil}
	if announce {
		for k := range trailer {
			req.Trailer[k] = nil
		}
	}
	trailer = trailer.Clone()
	if trailer == nil {
		trailer = http.Header{}
	}
	trailer.Set("X-Decl", "1")
	req.Body = io.NopCloser(&lateTrailers{req: req, parts: []string{"part-one;", "part-two;"}, late: trailer})
	req.ContentLength = -1
	resp, err := c.Do(req)
	if err != nil {
		// The connection may end after a block answered on it.
		return -1, err.Error()
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

func auditCount(t *testing.T, p *Proxy, what string) int {
	t.Helper()
	b, _ := os.ReadFile(p.Audit)
	return strings.Count(string(b), what)
}

// trailerFixture: the credential fixture plus a request rule on paste.test,
// which makes netproxy intercept paste.test (a host without a credential)
// in full mode, as any host with a request rule is (SPEC §3.10).
func trailerFixture(t *testing.T) (*credFixture, *trailerSink) {
	f := startCredFixture(t, `
[[network.requests]]
hosts = ["paste.test"]
paths = ["/never/**"]
action = "deny"
`)
	return f, startTrailerSink(t, f)
}

func TestCredentialTrailerPlaceholderBlocked(t *testing.T) {
	f, s := trailerFixture(t)
	a, b := f.register(t), f.register(t)
	ph := a.placeholder(t, "openai")
	body := ph[len("sk-"):]
	type path struct {
		name string
		c    *http.Client
		url  func(host, p string) string
	}
	paths := []path{
		{"plain", f.client(a.Token, false), func(h, p string) string { return fmt.Sprintf("http://%s:%d%s", h, s.plain, p) }},
		{"intercepted h1", f.client(a.Token, false), func(h, p string) string { return fmt.Sprintf("https://%s:%d%s", h, s.tls, p) }},
		{"intercepted h2", f.client(a.Token, true), func(h, p string) string { return fmt.Sprintf("https://%s:%d%s", h, s.tls, p) }},
	}
	n := 0
	for _, pa := range paths {
		for _, tc := range []struct {
			name    string
			trailer http.Header
		}{
			{"value", http.Header{"X-Note": {ph}}},
			{"value without prefix", http.Header{"X-Note": {body}}},
			{"value glued both sides", http.Header{"X-Note": {"Z" + ph + "Z"}}},
			{"body glued both sides", http.Header{"X-Note": {"Z" + body + "Z"}}},
			{"name", http.Header{"X-" + body: {"1"}}},
			{"name glued", http.Header{"X-Z" + body + "Z": {"1"}}},
		} {
			n++
			p := fmt.Sprintf("/sink/%d", n)
			before := auditCount(t, f.p, `"reason":"credential_misuse"`)
			// HTTP/2: netproxy's server keeps only announced trailers
			// (x/net drops the others, so they never go upstream); the
			// values still arrive only at the end.
			code, got := postTrailers(t, pa.c, pa.url("paste.test", p), tc.trailer, pa.name == "intercepted h2")
			if code != 403 || !strings.Contains(got, `"reason":"credential_misuse"`) {
				t.Errorf("%s, trailer %s: %d %q, want 403 credential_misuse", pa.name, tc.name, code, got)
			}
			if s.completed(p) {
				t.Errorf("%s, trailer %s: the upstream received the whole request", pa.name, tc.name)
			}
			audited := false
			for end := time.Now().Add(5 * time.Second); !audited && time.Now().Before(end); time.Sleep(20 * time.Millisecond) {
				audited = auditCount(t, f.p, `"reason":"credential_misuse"`) > before
			}
			if !audited {
				t.Errorf("%s, trailer %s: no credential_misuse line in the audit", pa.name, tc.name)
			}
		}
		// Another execution's placeholder in a trailer toward the
		// credential's own host: blocked too.
		n++
		p := fmt.Sprintf("/sink/%d", n)
		code, got := postTrailers(t, f.client(b.Token, pa.name == "intercepted h2"), pa.url("api.cred.test", p), http.Header{"X-Note": {ph}}, true)
		if code != 403 || !strings.Contains(got, "credential_misuse") || s.completed(p) {
			t.Errorf("%s: another execution's placeholder in a trailer to api.cred.test: %d %q (upstream completed: %v)", pa.name, code, got, s.completed(p))
		}

		// What passes: trailers without a placeholder arrive intact, and a
		// chunked request without trailers is forwarded as before.
		n++
		p = fmt.Sprintf("/sink/%d", n)
		code, got = postTrailers(t, pa.c, pa.url("paste.test", p), http.Header{"X-Checksum": {"sha256:0123abcd"}, "X-Count": {"2"}}, true)
		seen := s.seen(p)
		if code != 200 || len(seen) != 1 || !seen[0].complete || seen[0].body != "part-one;part-two;" ||
			seen[0].trailer.Get("X-Checksum") != "sha256:0123abcd" || seen[0].trailer.Get("X-Count") != "2" {
			t.Errorf("%s: trailers without a placeholder: %d %q, upstream saw %+v", pa.name, code, got, seen) // no placeholder in it
		}
		n++
		p = fmt.Sprintf("/sink/%d", n)
		req, _ := http.NewRequest("POST", pa.url("paste.test", p), io.MultiReader(strings.NewReader("part-one;"), strings.NewReader("part-two;")))
		req.ContentLength = -1
		if resp, err := pa.c.Do(req); err == nil {
			code = resp.StatusCode
			resp.Body.Close()
		}
		if seen := s.seen(p); code != 200 || len(seen) != 1 || !seen[0].complete || seen[0].body != "part-one;part-two;" {
			t.Errorf("%s: chunked without trailers: %d, upstream saw %+v", pa.name, code, seen)
		}
	}
	assertNoSecret(t, f.p, credSecret)
}

// Glued on both sides in the request line and in a header value, plain and
// intercepted (HTTP/1.1 and HTTP/2): found and blocked, nothing forwarded.
func TestCredentialGluedPlaceholderBlocked(t *testing.T) {
	f, s := trailerFixture(t)
	a := f.register(t)
	ph := a.placeholder(t, "openai")
	body := ph[len("sk-"):]
	n := 0
	for _, pa := range []struct {
		name string
		c    *http.Client
		base string
	}{
		{"plain", f.client(a.Token, false), fmt.Sprintf("http://paste.test:%d", s.plain)},
		{"intercepted h1", f.client(a.Token, false), fmt.Sprintf("https://paste.test:%d", s.tls)},
		{"intercepted h2", f.client(a.Token, true), fmt.Sprintf("https://paste.test:%d", s.tls)},
	} {
		for _, glued := range []string{"Z" + body + "Z", "Z" + ph + "Z", "0" + body + "az"} {
			for _, where := range []string{"request line", "header value"} {
				n++
				p := fmt.Sprintf("/glued/%d", n)
				u, hdr := pa.base+p, ""
				if where == "request line" {
					u += "?k=" + glued
				} else {
					hdr = "key " + glued
				}
				code, got, _ := credGet(t, pa.c, u, hdr)
				if code != 403 || !strings.Contains(got, `"reason":"credential_misuse"`) || len(s.seen(p)) != 0 {
					t.Errorf("%s, %s %q: %d %q, upstream saw %d requests", pa.name, where, glued[:4], code, got, len(s.seen(p)))
				}
			}
		}
	}
}

// A WebSocket (Upgrade) inside full-mode interception still splices: the
// credential's host is intercepted in full mode, where Upgrade is allowed
// (the limited-mode refusal is TestMITMUpgradeSlotsAndMalformedHeads').
func TestCredentialFullModeWebSocketSplice(t *testing.T) {
	f, s := trailerFixture(t)
	a := f.register(t)
	c, err := f.client(a.Token, false).Transport.(*http.Transport).DialContext(context.Background(), "tcp", f.p.HTTP)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	fmt.Fprintf(c, "CONNECT api.cred.test:%d HTTP/1.1\r\nHost: api.cred.test:%d\r\n\r\n", s.tls, s.tls)
	buf := make([]byte, 128)
	c.SetReadDeadline(time.Now().Add(10 * time.Second))
	if n, _ := c.Read(buf); !strings.Contains(string(buf[:n]), " 200 ") {
		t.Fatalf("CONNECT api.cred.test: %q", buf[:n])
	}
	c.SetReadDeadline(time.Time{})
	tc := tls.Client(c, &tls.Config{RootCAs: f.mitmCA, ServerName: "api.cred.test", NextProtos: []string{"http/1.1"}})
	if err := tc.Handshake(); err != nil {
		t.Fatal(err)
	}
	if issuer := tc.ConnectionState().PeerCertificates[0].Issuer.CommonName; issuer != "e2e netproxy MITM CA" {
		t.Fatalf("api.cred.test was not intercepted (issuer %q)", issuer)
	}
	br, status := wsHandshake(tc, "api.cred.test", s.tls, false)
	if br == nil || s.upgrades.Load() != 1 {
		t.Fatalf("wss inside full-mode interception: %q (upstream saw %d upgrades)\n%s", status, s.upgrades.Load(), f.p.Output.String())
	}
	for _, msg := range []string{"hello", "second frame"} {
		if got, err := wsEcho(tc, br, msg); err != nil || got != msg {
			t.Fatalf("echo %q: %q %v", msg, got, err)
		}
	}
}

// Cluster mode: a placeholder the replica holds is found glued on both
// sides without any Redis operation; another replica's, glued behind its
// prefix, in one read-through for the whole request, trailer included
// only when the trailer itself holds a candidate.
func TestClusterCredentialGluedAndTrailer(t *testing.T) {
	upCA, mitmCA := newTestCA(t, "e2e upstream CA"), newTestCA(t, "e2e netproxy MITM CA")
	plain := StartUpstream(t, false)
	rds := StartRedis(t)
	a := credReplica(t, rds, "node-a", mitmCA, upCA)
	b := credReplica(t, rds, "node-b", mitmCA, upCA)
	f := &credFixture{p: b.Proxy}
	op := `{op="read_through_placeholder"}`
	reads := func() float64 { // the series appears with the first read-through
		return max(0, metricValue(t, b.Proxy, "netproxy_cluster_commands_total", op))
	}

	regB, phB := registerCred(t, b, "s-b")
	c := f.client(regB.Token, false)
	before := reads()
	code, body, _ := credGet(t, c, plain.URL("paste.test", "/leak?k=Z"+phB[3:]+"Z"), "")
	if code != 403 || !strings.Contains(body, "credential_misuse") {
		t.Fatalf("B's own placeholder glued on both sides through B: %d %s", code, body)
	}
	if d := reads() - before; d != 0 {
		t.Fatalf("%v read-throughs for a placeholder B holds", d)
	}
	// A's placeholder through B, glued after its prefix, among other
	// candidates: one read-through for the request.
	_, phA := registerCred(t, a, "s-a")
	before = reads()
	req, _ := http.NewRequest("GET", plain.URL("paste.test", "/leak?q="+strings.Repeat("w", 60)), nil)
	req.Header.Set("X-Note", "Z"+phA+"Z")
	req.Header.Set("X-Other", strings.Repeat("Q", 70))
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 403 {
		t.Fatalf("A's placeholder glued through B: %d", resp.StatusCode)
	}
	if d := reads() - before; d != 1 {
		t.Fatalf("%v read-throughs for one request, want 1", d)
	}
	// In a trailer through B: blocked (one read-through for the trailer;
	// the head had no candidate).
	before = reads()
	code, got := postTrailers(t, f.client(regB.Token, false), plain.URL("paste.test", "/sink"), http.Header{"X-Note": {phA}}, false)
	if code != 403 || !strings.Contains(got, "credential_misuse") {
		t.Fatalf("A's placeholder in a trailer through B: %d %s", code, got)
	}
	if d := reads() - before; d != 1 {
		t.Fatalf("%v read-throughs for a trailer with one candidate, want 1", d)
	}
}
