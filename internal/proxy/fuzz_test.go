package proxy

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"os"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/netproxy/netproxy/attribution"
	"github.com/netproxy/netproxy/internal/observe"
)

func TestRawHostHeader(t *testing.T) {
	cases := map[string]string{
		"GET http://a/ HTTP/1.1\r\nHost: b:80\r\n\r\nHost: body":  "b:80",
		"GET http://a/ HTTP/1.1\r\nX: 1\r\nhOsT:   c \r\n\r\n":    "c",
		"GET http://a/ HTTP/1.1\r\nX: 1\r\n\r\nHost: in-body\r\n": "",
		"GET http://a/ HTTP/1.1\nHost: lf-only\n\n":               "lf-only",
	}
	for in, want := range cases {
		if got := rawHostHeader([]byte(in)); got != want {
			t.Errorf("rawHostHeader(%q) = %q, want %q", in, got, want)
		}
	}
}

func FuzzRawHostHeader(f *testing.F) {
	f.Add([]byte("GET http://a/ HTTP/1.1\r\nHost: b\r\n\r\n"))
	f.Add([]byte("\n\n\nhost:"))
	f.Fuzz(func(t *testing.T, data []byte) {
		h := rawHostHeader(data)
		if strings.ContainsAny(h, "\n") {
			t.Fatalf("host spans lines: %q", h)
		}
	})
}

func TestSplitHostPort(t *testing.T) {
	cases := []struct {
		in   string
		host string
		port uint16
		ok   bool
	}{
		{"a.test", "a.test", 80, true},
		{"a.test:8080", "a.test", 8080, true},
		{"[::1]:443", "::1", 443, true},
		{"[::1]", "::1", 80, true},
		{"::1", "::1", 80, true},
		{"a.test:0", "", 0, false},
		{"a.test:99999", "", 0, false},
		{":443", "", 443, false},
		{"", "", 0, false},
	}
	for _, c := range cases {
		h, p, ok := splitHostPort(c.in, 80)
		if ok != c.ok || (ok && (h != c.host || p != c.port)) {
			t.Errorf("splitHostPort(%q) = %q %d %t", c.in, h, p, ok)
		}
	}
	if !sameAuthority("UP.test.", "up.test:80", 80) || sameAuthority("up.test", "up.test:8080", 80) || sameAuthority("a.test:1", "b.test:1", 80) {
		t.Error("sameAuthority")
	}
}

func FuzzSplitHostPort(f *testing.F) {
	for _, s := range []string{"a:1", "[::1]:2", "::1", "[", "a:", ":"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		h, p, ok := splitHostPort(s, 80)
		if ok && (h == "" || p == 0) {
			t.Fatalf("accepted %q as %q:%d", s, h, p)
		}
		sameAuthority(s, s, 80)
	})
}

// nothingAllowed is the fuzz stacks' policy: an empty allow list, no
// approvals, local addresses guarded. No request may ever reach a dial.
const nothingAllowed = `
[network]
mode = "full"
allow_local_binding = false
[network.domains]
[approvals]
enabled = false
`

// offlineResolver is the fuzz stacks' DNS: fixed answers for a few names
// the seeds use, and a failed lookup (the engine's fail-closed path) for
// every other name, so generated names never reach a real DNS server.
type offlineResolver map[string][]netip.Addr

func (r offlineResolver) LookupNetIP(ctx context.Context, host string) ([]netip.Addr, error) {
	if addrs, ok := r[host]; ok {
		return append([]netip.Addr(nil), addrs...), nil
	}
	return nil, &net.DNSError{Err: "no such host (offline test resolver)", Name: host, IsNotFound: true}
}

// dialWatch records what must never happen while nothing is allowed: an
// allowed decision, or a dial attempt. Every path from the Dialer to a
// socket (DialTarget, DialContext, the parent proxy) checks the target's
// addresses first, which consults AllowLocalBinding: counting those calls
// counts the attempts, including ones that would have been refused.
type dialWatch struct {
	dials   atomic.Int64
	allowed atomic.Int64
}

func (w *dialWatch) allowLocal() bool {
	w.dials.Add(1)
	return false
}

func (w *dialWatch) ObserveDecision(e observe.DecisionEvent) {
	if e.Decision.Allowed() {
		w.allowed.Add(1)
	}
}

// exchangeDeadline bounds one fuzz exchange. It is below the attribution
// frame timeout (3 s) and far below the stack's header timeout, so a server
// that waits for bytes after the client's FIN shows up as a hang.
const exchangeDeadline = 2 * time.Second

// fuzzFront is one front end of a nothing-allowed stack, started once per
// fuzz process.
type fuzzFront struct {
	stack *stack
	addr  string
	watch *dialWatch
	frame []byte // a valid attribution frame of a registered execution
}

func newFuzzFront(f *testing.F, listener string) *fuzzFront {
	watch := &dialWatch{}
	dns := offlineResolver{
		"public.test": {netip.MustParseAddr("93.184.215.14"), netip.MustParseAddr("2606:2800:21f:cb07:6820:80da:af6b:8b2c")},
		"local.test":  {netip.MustParseAddr("127.0.0.1")},
	}
	s := newStackWith(f, nothingAllowed, Limits{HeaderTimeout: 30 * time.Second, MaxHeaderBytes: 2048},
		stackParts{resolver: dns, allowLocal: watch.allowLocal, sink: watch})
	_, token, err := s.registry.Register(attribution.ExecutionSpec{SessionID: "fuzz", EnvironmentID: "fuzz", Command: []string{"fuzz"}})
	if err != nil {
		f.Fatal(err)
	}
	var frame bytes.Buffer
	if err := attribution.WriteFrame(&frame, token); err != nil {
		f.Fatal(err)
	}
	ff := &fuzzFront{stack: s, addr: s.httpAddr, watch: watch, frame: frame.Bytes()}
	if listener == "socks5" {
		ff.addr = s.socksAddr
	}
	return ff
}

// exchange sends data (after a valid attribution frame when framed),
// half-closes and reads the whole answer. It fails the test when the server
// keeps the connection, keeps its slot, dials or allows anything. cut
// reports that the server ended with a reset (it closed with input unread),
// so the answer's end may be missing.
func (ff *fuzzFront) exchange(t *testing.T, framed bool, data []byte) (answer []byte, cut bool) {
	c, err := net.Dial("tcp", ff.addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(exchangeDeadline))
	send := data
	if framed {
		send = append(append([]byte(nil), ff.frame...), data...)
	}
	wrote := make(chan struct{})
	go func() {
		defer close(wrote)
		// A server that answers early and closes fails these writes: fine.
		c.Write(send)
		c.(*net.TCPConn).CloseWrite()
	}()
	answer, err = io.ReadAll(c)
	<-wrote
	switch {
	case err == nil:
	case errors.Is(err, syscall.ECONNRESET):
		cut = true
	case errors.Is(err, os.ErrDeadlineExceeded):
		t.Fatalf("server still holds the connection %s after the client's FIN (answer so far %q) for input framed=%t %q", exchangeDeadline, answer, framed, data)
	default:
		t.Fatalf("reading the answer: %v (input framed=%t %q)", err, framed, data)
	}
	// The handler must be done with the connection, not just its socket.
	for end := time.Now().Add(exchangeDeadline); ff.stack.tracker.Open() != 0; time.Sleep(time.Millisecond) {
		if time.Now().After(end) {
			t.Fatalf("%d connection(s) still open in the proxy after the client saw the end (input framed=%t %q)", ff.stack.tracker.Open(), framed, data)
		}
	}
	if n := ff.watch.allowed.Swap(0); n != 0 {
		t.Fatalf("%d request(s) allowed under a policy that allows nothing (input framed=%t %q)", n, framed, data)
	}
	if n := ff.watch.dials.Swap(0); n != 0 {
		t.Fatalf("%d dial attempt(s) under a policy that allows nothing (input framed=%t %q)", n, framed, data)
	}
	return answer, cut
}

// SOCKS5 reply codes go-socks5 sends itself (RFC 1928 §6).
const (
	socksCommandNotSupported  = 0x07
	socksAddrTypeNotSupported = 0x08
)

// checkSOCKSAnswer accepts exactly the answers the SOCKS5 front end may
// give while nothing is allowed: nothing; "no acceptable method"; the
// no-auth selection alone (the request never completed); or the selection
// and one reply — not allowed (0x02), command not supported (0x07, BIND,
// UDP ASSOCIATE, unknown commands) or address type not supported (0x08) —
// with the 0.0.0.0:0 bound address. A cut answer may be any prefix of those.
func checkSOCKSAnswer(answer []byte, cut bool) error {
	valid := [][]byte{
		{},
		{0x05, 0xff},
		{0x05, 0x00},
	}
	for _, code := range []byte{socksNotAllowed, socksCommandNotSupported, socksAddrTypeNotSupported} {
		valid = append(valid, []byte{0x05, 0x00, 0x05, code, 0x00, 0x01, 0, 0, 0, 0, 0, 0})
	}
	for _, v := range valid {
		if bytes.Equal(answer, v) || (cut && bytes.HasPrefix(v, answer)) {
			return nil
		}
	}
	return fmt.Errorf("not a SOCKS5 answer the proxy may give while nothing is allowed: % x (cut=%t)", answer, cut)
}

// socksGreeting is "SOCKS5, one method: no authentication".
const socksGreeting = "\x05\x01\x00"

func socksRequest(cmd byte, atyp byte, addr []byte, port uint16) string {
	b := []byte{0x05, cmd, 0x00, atyp}
	if atyp == 0x03 {
		b = append(b, byte(len(addr)))
	}
	b = append(b, addr...)
	return string(append(b, byte(port>>8), byte(port)))
}

// FuzzSOCKSHandshake feeds whole connections to the real SOCKS5 front end
// (real gate, go-socks5 under netproxy's wrapper, the real engine) with a
// policy that allows nothing: it must end every connection promptly with a
// well-formed answer, never dial and never panic.
func FuzzSOCKSHandshake(f *testing.F) {
	ff := newFuzzFront(f, "socks5")
	name := func(n string) []byte { return []byte(n) }
	v4 := netip.MustParseAddr("93.184.215.14").AsSlice()
	v6 := netip.MustParseAddr("2606:2800:21f:cb07:6820:80da:af6b:8b2c").AsSlice()
	connect := func(atyp byte, addr []byte, port uint16) string {
		return socksGreeting + socksRequest(0x01, atyp, addr, port)
	}
	seeds := []string{
		"",
		connect(0x03, name("public.test"), 443),
		connect(0x03, name("local.test"), 80),
		connect(0x03, name("nx.test"), 443),
		connect(0x03, name("PUBLIC.TEST."), 443),
		connect(0x03, name("127.0.0.1"), 80),
		connect(0x03, name("a\x00b"), 80),
		connect(0x03, []byte(strings.Repeat("a.", 127)+"a"), 80),
		connect(0x03, nil, 80), // zero-length name
		connect(0x01, v4, 80),
		connect(0x01, []byte{127, 0, 0, 1}, 80),
		connect(0x01, []byte{0, 0, 0, 0}, 0),
		connect(0x04, v6, 443),
		connect(0x04, netip.IPv6Loopback().AsSlice(), 443),
		connect(0x04, netip.MustParseAddr("::ffff:10.0.0.1").AsSlice(), 443),
		connect(0x03, name("public.test"), 0),                              // port 0
		connect(0x03, name("public.test"), 443) + "GET / HTTP/1.1\r\n\r\n", // early data
		"\x05\x02\x02\x00" + socksRequest(0x01, 0x03, name("public.test"), 443),
		"\x05\x01\x02",                                                  // user/pass only
		"\x05\x01\x02\x01\x04user\x04pass",                              // … with a subnegotiation
		"\x05\x00",                                                      // no methods
		"\x05\xff" + strings.Repeat("\x01", 255),                        // every method but no-auth
		socksGreeting + socksRequest(0x02, 0x01, v4, 80),                // BIND
		socksGreeting + socksRequest(0x03, 0x01, []byte{0, 0, 0, 0}, 0), // UDP ASSOCIATE
		socksGreeting + socksRequest(0x09, 0x01, v4, 80),                // unknown command
		socksGreeting + "\x05\x01\x00\x05\x01\x02\x03\x04\x00\x50",      // unknown address type
		"\x05", // truncated greetings
		"\x05\x02\x00",
		socksGreeting + "\x05\x01",
		socksGreeting + "\x05\x01\x00\x03\x0bpublic",
		socksGreeting + "\x05\x01\x00\x04\x26\x06",
		"\x04\x01\x00\x50\x5d\xb8\xd7\x0efuzz\x00",                 // SOCKS4
		socksGreeting + "\x04\x01\x00\x01\x5d\xb8\xd7\x0e\x00\x50", // bad request version
		"GET http://public.test/ HTTP/1.1\r\n\r\n",
		attribution.Magic + "\x00\x00",                                            // attribution frame, zero length
		attribution.Magic + "\xff\xff",                                            // … too long
		attribution.Magic + "\x00\x05ab",                                          // … cut short
		attribution.Magic[:4],                                                     // … magic cut short
		"\x00CDXPXY2\x00\x01a" + socksGreeting,                                    // … bad magic
		attribution.Magic + "\x00\x01\xff" + socksGreeting,                        // … token not UTF-8
		attribution.Magic + "\x00\x01a" + connect(0x03, name("public.test"), 443), // … unknown token
	}
	for _, s := range seeds {
		f.Add(false, []byte(s))
	}
	// Attributed connections (a valid frame of a registered execution first).
	for _, s := range []string{connect(0x03, name("public.test"), 443), connect(0x01, v4, 80), socksGreeting, ""} {
		f.Add(true, []byte(s))
	}
	f.Fuzz(func(t *testing.T, framed bool, data []byte) {
		answer, cut := ff.exchange(t, framed, data)
		if err := checkSOCKSAnswer(answer, cut); err != nil {
			t.Fatalf("%v\ninput framed=%t %q", err, framed, data)
		}
	})
}

// httpAnswerStatuses is every status the HTTP front end sends while nothing
// is allowed: 400 (malformed head, missing or mismatched host, non-http
// scheme, bad CONNECT authority or port), 403 (the policy's block, JSON or
// text), 431 (head over limits.max_header_bytes) and 508 (a request with
// this instance's own Via: a loop). 502 and 200 need an
// allowed decision; the code sends no 405, 413 or 503.
var httpAnswerStatuses = map[int]bool{400: true, 403: true, 431: true, 508: true}

// requestMethods returns the methods of the requests at the start of data
// as the proxy's parser (http.ReadRequest) reads them, up to the first one
// that does not parse or carries a body (the proxy answers nothing after
// either). Response i answers request i; a HEAD's answer has no body.
func requestMethods(data []byte) []string {
	br := bufio.NewReader(bytes.NewReader(data))
	var methods []string
	for {
		req, err := http.ReadRequest(br)
		if err != nil {
			return methods
		}
		methods = append(methods, req.Method)
		if hasBody(req) {
			return methods
		}
	}
}

// checkHTTPAnswer parses answer as the responses to the requests in input:
// each must be an HTTP/1.1 response with an allowed status and a
// Content-Length (and no body bytes after a HEAD), and none may follow a
// "Connection: close". A cut answer may end anywhere.
func checkHTTPAnswer(input, answer []byte, cut bool) error {
	methods := requestMethods(input)
	br := bufio.NewReader(bytes.NewReader(answer))
	for i := 0; ; i++ {
		head, _ := br.Peek(len("HTTP/1.1 "))
		if len(head) == 0 {
			return nil
		}
		if !bytes.HasPrefix([]byte("HTTP/1.1 "), head) || (!cut && len(head) < len("HTTP/1.1 ")) {
			return fmt.Errorf("response %d does not start with %q: %q", i, "HTTP/1.1 ", answer)
		}
		var req *http.Request // nil: read the body as after a GET
		if i < len(methods) {
			req = &http.Request{Method: methods[i]}
		}
		resp, err := http.ReadResponse(br, req)
		if err != nil {
			if cut {
				return nil
			}
			return fmt.Errorf("response %d: %v: %q", i, err, answer)
		}
		if !httpAnswerStatuses[resp.StatusCode] {
			return fmt.Errorf("response %d has status %d, want one of 400, 403, 431, 508: %q", i, resp.StatusCode, answer)
		}
		if resp.ContentLength < 0 {
			return fmt.Errorf("response %d has no Content-Length: %q", i, answer)
		}
		if _, err := io.ReadAll(resp.Body); err != nil {
			if cut {
				return nil
			}
			return fmt.Errorf("response %d body: %v: %q", i, err, answer)
		}
		if resp.Close && br.Buffered() > 0 {
			return fmt.Errorf("bytes after response %d, which closed the connection: %q", i, answer)
		}
	}
}

// FuzzHTTPRequestHead feeds whole connections to the real HTTP front end
// (real gate, netproxy's own connection loop, the real engine) with a
// policy that allows nothing: every connection must end promptly with
// well-formed 400/403/431 answers, and nothing may be dialed.
func FuzzHTTPRequestHead(f *testing.F) {
	ff := newFuzzFront(f, "http")
	seeds := []string{
		"",
		"GET http://public.test/ HTTP/1.1\r\nHost: public.test\r\n\r\n",
		"GET http://public.test/?q=secret HTTP/1.1\r\n\r\n",
		"GET http://local.test:8080/ HTTP/1.1\r\nHost: local.test:8080\r\n\r\n",
		"GET http://nx.test/ HTTP/1.1\r\nHost: nx.test\r\n\r\n",
		"GET http://127.0.0.1/ HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n",
		"GET http://[::1]:8080/ HTTP/1.1\r\nHost: [::1]:8080\r\n\r\n",
		"GET http://93.184.215.14/ HTTP/1.1\r\nHost: 93.184.215.14\r\n\r\n",
		"GET https://public.test/ HTTP/1.1\r\nHost: public.test\r\n\r\n",
		"GET ftp://public.test/ HTTP/1.1\r\n\r\n",
		"HEAD http://public.test/ HTTP/1.1\r\nHost: public.test\r\n\r\n", // no body after a HEAD's block
		"HEAD http://public.test/ HTTP/1.1\r\n\r\nGET http://public.test/ HTTP/1.1\r\n\r\n",
		"GET http://public.test/ HTTP/1.0\r\n\r\n",
		"CONNECT public.test:443 HTTP/1.1\r\nHost: public.test:443\r\n\r\n",
		"CONNECT public.test:443 HTTP/1.1\r\nHost: public.test:443\r\n\r\n\x16\x03\x01\x00\x05hello",
		"CONNECT public.test HTTP/1.1\r\nHost: public.test\r\n\r\n",
		"CONNECT public.test:0 HTTP/1.1\r\n\r\n",
		"CONNECT public.test:99999 HTTP/1.1\r\n\r\n",
		"CONNECT [::1]:443 HTTP/1.1\r\n\r\n",
		"CONNECT :443 HTTP/1.1\r\n\r\n",
		"CONNECT / HTTP/1.1\r\nHost: public.test:443\r\n\r\n",
		"GET http://public.test/ HTTP/1.1\r\nHost: other.test\r\n\r\n",       // Host mismatch
		"GET http://public.test/ HTTP/1.1\r\nHost: public.test:8080\r\n\r\n", // port mismatch
		"GET / HTTP/1.1\r\n\r\n",                                             // missing Host
		"GET / HTTP/1.1\r\nHost: public.test\r\n\r\n",                        // origin-form
		"GET / HTTP/1.1\r\nHost: public.test\r\nHost: other.test\r\n\r\n",    // repeated Host
		"GET / HTTP/1.1\r\nHost:\r\n\r\n",
		"GET http://public.test/ HTTP/1.1\r\nX-Big: " + strings.Repeat("a", 4096) + "\r\n\r\n", // huge header line
		"GET http://public.test/" + strings.Repeat("a", 4096) + " HTTP/1.1\r\n\r\n",            // huge request line
		"GET http://public.test/ HTTP/1.1\r\nX-Folded: a\r\n b\r\nHost: public.test\r\n\r\n",   // obs-fold
		"GET http://public.test/ HTTP/1.1\nHost: public.test\n\n",                              // bare LF
		"GET http://public.test/ HTTP/1.1\rHost: public.test\r\r",                              // bare CR
		"GET http://public.test/\x00 HTTP/1.1\r\nHost: public.test\r\n\r\n",                    // NUL bytes
		"GET http://public.test/ HTTP/1.1\r\nX-Nul: a\x00b\r\n\r\n",
		"GET http://pub\x00lic.test/ HTTP/1.1\r\n\r\n",
		"POST http://public.test/ HTTP/1.1\r\nHost: public.test\r\nTransfer-Encoding: chunked\r\nContent-Length: 5\r\n\r\n5\r\nhello\r\n0\r\n\r\n",
		"POST http://public.test/ HTTP/1.1\r\nHost: public.test\r\nContent-Length: 5\r\nContent-Length: 6\r\n\r\nhello!",
		"POST http://public.test/ HTTP/1.1\r\nHost: public.test\r\nContent-Length: 4\r\nExpect: 100-continue\r\n\r\n",
		"POST http://public.test/ HTTP/1.1\r\nTransfer-Encoding: gzip, chunked\r\n\r\n0\r\n\r\n",
		"GET http://public.test/a HTTP/1.1\r\nHost: public.test\r\n\r\nGET http://public.test/b HTTP/1.1\r\nHost: public.test\r\n\r\n", // pipelined
		"GET http://public.test/ HTTP/1.1\r\n\r\nCONNECT public.test:443 HTTP/1.1\r\n\r\n",
		"GET http://public.test/ HTTP/1.1\r\n\r\nGET / HTTP/1.1\r\n\r\n",
		"GET http://public.test/ HTTP/1.1\r\nConnection: close\r\n\r\nGET http://public.test/ HTTP/1.1\r\n\r\n",
		"GET http://public.test/ HTTP/1.1\r\nProxy-Authorization: Basic Zm9vOmJhcg==\r\n\r\n",
		"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n",
		"GET http://public.test/ HTTP/9.9\r\n\r\n",
		"GET http://public.test/ HTTP/1.1\r\nHost: public.test", // head cut short
		"\r\n\r\nGET http://public.test/ HTTP/1.1\r\n\r\n",
		"GET http://public.test/ HTTP/1.1\r\nHost: public.test\r\nVia: 1.0 a, 1.1 netproxy-" + testInstance + "\r\n\r\n", // our own Via: 508
		"GET / HTTP/1.1\r\nVia: 1.1 netproxy-" + testInstance + "\r\nVia: x\r\n\r\n",
		"CONNECT public.test:443 HTTP/1.1\r\nVia: 1.1 netproxy-" + testInstance + "\r\n\r\n",
		"\x05\x01\x00", // SOCKS on the HTTP port
		attribution.Magic + "\x00\x00",
		attribution.Magic + "\x00\x05ab",
		attribution.Magic + "\x00\x01aGET http://public.test/ HTTP/1.1\r\n\r\n", // unknown token
	}
	for _, s := range seeds {
		f.Add(false, []byte(s))
	}
	for _, s := range []string{
		"GET http://public.test/ HTTP/1.1\r\nHost: public.test\r\n\r\n",
		"CONNECT public.test:443 HTTP/1.1\r\n\r\n",
		"GET / HTTP/1.1\r\n\r\n",
		"",
	} {
		f.Add(true, []byte(s))
	}
	f.Fuzz(func(t *testing.T, framed bool, data []byte) {
		answer, cut := ff.exchange(t, framed, data)
		if err := checkHTTPAnswer(data, answer, cut); err != nil {
			t.Fatalf("%v\ninput framed=%t %q", err, framed, data)
		}
	})
}
