package mitm

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"testing"
)

// TestWriteRequestHeadMatchesNetHTTP: the head the tunnel's own
// connection writes is byte for byte req.Write's, for the requests it
// writes itself and for those it hands to req.Write.
func TestWriteRequestHeadMatchesNetHTTP(t *testing.T) {
	mk := func(method, target, host string, h http.Header, edit func(*http.Request)) *http.Request {
		u, err := url.ParseRequestURI(target)
		if err != nil {
			t.Fatal(err)
		}
		u.Scheme, u.Host = "https", host
		r := &http.Request{Method: method, URL: u, Host: host, Header: h, Body: http.NoBody, ProtoMajor: 1, ProtoMinor: 1}
		if edit != nil {
			edit(r)
		}
		return r
	}
	cases := map[string]*http.Request{
		"get":           mk("GET", "/a/b?q=1&r=%20", "up.test", http.Header{"User-Agent": {"curl/8"}, "Accept": {"*/*"}, "X-B": {"2", "1"}, "Authorization": {"Bearer x"}}, nil),
		"head":          mk("HEAD", "/", "up.test:8443", http.Header{"User-Agent": {""}}, nil),
		"no-agent":      mk("GET", "/", "up.test", http.Header{"User-Agent": {""}, "Accept": {"a"}}, nil),
		"agent-missing": mk("GET", "/", "up.test", http.Header{"Accept": {"a"}}, nil),
		"agent-space":   mk("GET", "/", "up.test", http.Header{"User-Agent": {" x "}}, nil),
		"agent-newline": mk("GET", "/", "up.test", http.Header{"User-Agent": {"a\r\nX-Evil: 1"}}, nil),
		"value-newline": mk("GET", "/", "up.test", http.Header{"User-Agent": {"a"}, "X-A": {"b\nc", " d "}}, nil),
		"ipv6":          mk("GET", "/", "[::1]:8443", http.Header{"User-Agent": {"a"}}, nil),
		"ipv6-zone":     mk("GET", "/", "[fe80::1%25eth0]", http.Header{"User-Agent": {"a"}}, nil),
		"idn":           mk("GET", "/", "bücher.test", http.Header{"User-Agent": {"a"}}, nil),
		"bad-host":      mk("GET", "/", "up.test/x y", http.Header{"User-Agent": {"a"}}, nil),
		"options":       mk("OPTIONS", "/", "up.test", http.Header{"User-Agent": {"a"}}, nil),
		"trace":         mk("TRACE", "/", "up.test", http.Header{"User-Agent": {"a"}}, nil),
		"close":         mk("GET", "/", "up.test", http.Header{"User-Agent": {"a"}}, func(r *http.Request) { r.Close = true }),
		"nil-body":      mk("GET", "/", "up.test", http.Header{"User-Agent": {"a"}}, func(r *http.Request) { r.Body = nil }),
		"framing-in-map": mk("GET", "/", "up.test", http.Header{"User-Agent": {"a"}, "Content-Length": {"5"}, "Transfer-Encoding": {"chunked"},
			"Trailer": {"X"}, "Host": {"evil"}, "Connection": {"x"}}, nil),
		"opaque": mk("GET", "/", "up.test", http.Header{"User-Agent": {"a"}}, func(r *http.Request) { r.URL.Opaque = "//up.test/o" }),
		"ctl":    mk("GET", "/", "up.test", http.Header{"User-Agent": {"a"}}, func(r *http.Request) { r.URL.RawQuery = "a\x7fb" }),
	}
	for name, req := range cases {
		var want, got bytes.Buffer
		wantErr := req.Write(&want)
		bw := bufio.NewWriter(&got)
		gotErr := writeRequestHead(bw, req)
		bw.Flush()
		if got.String() != want.String() || fmt.Sprint(gotErr) != fmt.Sprint(wantErr) {
			t.Errorf("%s:\n got %q (%v)\nwant %q (%v)", name, got.String(), gotErr, want.String(), wantErr)
		}
	}
}

// TestWriteAnswerMatchesNetHTTP: an answer written by writeAnswer is byte
// for byte resp.Write's, with the same error and the body closed, for the
// answers it writes itself and for those it hands to resp.Write.
func TestWriteAnswerMatchesNetHTTP(t *testing.T) {
	type tc struct {
		raw    string
		method string
		close  bool
		body   func() io.Reader // replaces the parsed body when set
	}
	cases := map[string]tc{
		"ok":           {raw: "HTTP/1.1 200 OK\r\nContent-Length: 5\r\nX-B: 2\r\nX-B: 1\r\nA: x\r\n\r\nhello", method: "GET"},
		"close":        {raw: "HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhello", method: "GET", close: true},
		"reason":       {raw: "HTTP/1.1 404 Not Found Here\r\nContent-Length: 1\r\n\r\nx", method: "GET"},
		"no-reason":    {raw: "HTTP/1.1 200\r\nContent-Length: 1\r\n\r\nx", method: "GET"},
		"odd-reason":   {raw: "HTTP/1.1 299 \r\nContent-Length: 1\r\n\r\nx", method: "GET"},
		"plus-code":    {raw: "HTTP/1.1 +20 OK\r\nContent-Length: 1\r\n\r\nx", method: "GET"},
		"head":         {raw: "HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\n", method: "HEAD"},
		"empty":        {raw: "HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n", method: "GET"},
		"no-content":   {raw: "HTTP/1.1 204 No Content\r\n\r\n", method: "GET"},
		"not-modified": {raw: "HTTP/1.1 304 Not Modified\r\nContent-Length: 5\r\n\r\n", method: "GET"},
		"chunked":      {raw: "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nTrailer: X-T\r\n\r\n3\r\nabc\r\n0\r\nX-T: 1\r\n\r\n", method: "GET"},
		"http10":       {raw: "HTTP/1.0 200 OK\r\nContent-Length: 2\r\n\r\nab", method: "GET"},
		"short":        {raw: "HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nabc", method: "GET"},
		"long-body": {raw: "HTTP/1.1 200 OK\r\nContent-Length: 3\r\n\r\nabc", method: "GET",
			body: func() io.Reader { return strings.NewReader("abcdef") }},
		"read-error": {raw: "HTTP/1.1 200 OK\r\nContent-Length: 3\r\n\r\nabc", method: "GET",
			body: func() io.Reader { return io.MultiReader(strings.NewReader("a"), errReader{}) }},
		"big":         {raw: "HTTP/1.1 200 OK\r\nContent-Length: 100000\r\n\r\n" + strings.Repeat("z", 100000), method: "GET"},
		"connection":  {raw: "HTTP/1.1 200 OK\r\nConnection: keep-alive\r\nContent-Length: 1\r\n\r\nx", method: "GET", close: true},
		"newline-val": {raw: "HTTP/1.1 200 OK\r\nContent-Length: 1\r\nX-A:  spaced  \r\n\r\nx", method: "GET"},
	}
	parse := func(c tc) (*http.Response, *closeCount) {
		req := &http.Request{Method: c.method}
		resp, err := http.ReadResponse(bufio.NewReader(strings.NewReader(c.raw)), req)
		if err != nil {
			t.Fatal(err)
		}
		if c.body != nil {
			resp.Body = io.NopCloser(c.body())
		}
		cc := &closeCount{ReadCloser: resp.Body}
		resp.Body = cc
		resp.Close = c.close
		return resp, cc
	}
	for name, c := range cases {
		r1, c1 := parse(c)
		r2, c2 := parse(c)
		var want, got bytes.Buffer
		wbw := bufio.NewWriter(&want)
		wantErr := r1.Write(writeOnly{wbw})
		wbw.Flush()
		bw := bufio.NewWriter(&got)
		gotErr := writeAnswer(bw, r2)
		bw.Flush()
		if got.String() != want.String() || fmt.Sprint(gotErr) != fmt.Sprint(wantErr) || c1.n != c2.n {
			t.Errorf("%s:\n got %.200q (%v, closed %d)\nwant %.200q (%v, closed %d)", name, got.String(), gotErr, c2.n, want.String(), wantErr, c1.n)
		}
	}
}

type closeCount struct {
	io.ReadCloser
	n int
}

func (c *closeCount) Close() error { c.n++; return c.ReadCloser.Close() }

type errReader struct{}

func (errReader) Read([]byte) (int, error) { return 0, errors.New("upstream broke off") }
