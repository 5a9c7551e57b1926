package proxy

import (
	"bufio"
	"bytes"
	"net/http"
	"reflect"
	"strings"
	"testing"

	"github.com/netproxy/netproxy/internal/httphead"
)

// sameAsReadRequest fails t unless req is what http.ReadRequest makes of
// data, and n is the head length it consumed.
func sameAsReadRequest(t *testing.T, data []byte, n int, req *http.Request) {
	t.Helper()
	br := bufio.NewReader(bytes.NewReader(data))
	want, err := http.ReadRequest(br)
	if err != nil {
		t.Fatalf("accepted a head net/http refuses: %v\n%q", err, data)
	}
	if consumed := len(data) - br.Buffered(); consumed != n {
		t.Fatalf("head length %d; net/http read %d\n%q", n, consumed, data)
	}
	type view struct {
		Method, Proto, Host, RequestURI string
		Major, Minor                    int
		URL                             any
		Header                          http.Header
		Close, NoBody                   bool
		ContentLength                   int64
		TE                              []string
		Trailer                         http.Header
	}
	of := func(r *http.Request) view {
		return view{r.Method, r.Proto, r.Host, r.RequestURI, r.ProtoMajor, r.ProtoMinor, *r.URL, r.Header,
			r.Close, r.Body == http.NoBody, r.ContentLength, r.TransferEncoding, r.Trailer}
	}
	if g, w := of(req), of(want); !reflect.DeepEqual(g, w) {
		t.Fatalf("parsed\n%+v\nnet/http\n%+v\n%q", g, w, data)
	}
}

// headOf is the head at the start of data as the connection loop's
// scanner delimits it (ok false: no whole head, or over the limits).
func headOf(data []byte) ([]byte, bool) {
	sc := headScanner{maxBytes: 1 << 20, maxLines: 1 << 10}
	if sc.begin(data) != nil || sc.active {
		return nil, false
	}
	return data[:sc.n], true
}

func TestParseRequestHeadMatchesNetHTTP(t *testing.T) {
	for _, s := range []string{
		"GET http://up.test:8080/a/b?x=1&y=%20 HTTP/1.1\r\nHost: up.test:8080\r\nUser-Agent: curl/8\r\nAccept: */*\r\n\r\n",
		"GET / HTTP/1.1\r\nhost: Example.COM\r\naccept-encoding: gzip\r\nX-Custom-header:  v  \t\r\n\r\n",
		"HEAD http://up.test HTTP/1.0\r\n\r\n",
		"GET http://up.test?q HTTP/1.0\r\nConnection: keep-alive\r\n\r\n",
		"DELETE /x;y=1 HTTP/1.1\r\nConnection: close\r\nPragma: no-cache\r\n\r\n",
		"GET / HTTP/1.1\r\nPragma: no-cache\r\nCache-Control: max-age=0\r\n\r\n",
		"GET / HTTP/1.1\r\nSet-Thing: a\r\nset-thing: b\r\nX-Empty:\r\n\r\nGET / HTTP/1.1\r\n\r\n",
		"BREW /pot HTTP/1.1\r\nConnection: Upgrade, close\r\nUpgrade: websocket\r\n\r\n",
	} {
		data := []byte(s)
		head, ok := headOf(data)
		if !ok {
			t.Fatalf("no head in %q", s)
		}
		req, ok := httphead.ParseRequest(head)
		if !ok {
			t.Fatalf("fast path declined %q", s)
		}
		sameAsReadRequest(t, data, len(head), req)
	}
}

// Every head outside the strict subset goes to net/http, which keeps its
// own answers (and refusals) for them.
func TestParseRequestHeadDeclines(t *testing.T) {
	for _, s := range []string{
		"POST / HTTP/1.1\r\nContent-Length: 2\r\n\r\n",
		"POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n",
		"GET / HTTP/1.1\r\nTrailer: X\r\n\r\n",
		"CONNECT up.test:443 HTTP/1.1\r\n\r\n",
		"GET http://[::1]:80/ HTTP/1.1\r\n\r\n",
		"GET http://u:p@up.test/ HTTP/1.1\r\n\r\n",
		"GET /a%2Fb HTTP/1.1\r\n\r\n",
		"GET /a?b#c HTTP/1.1\r\n\r\n",
		"GET /? HTTP/1.1\r\n\r\n",
		"GET //x HTTP/1.1\r\n\r\n",
		"GET * HTTP/1.1\r\n\r\n",
		"GET HTTP://up.test/ HTTP/1.1\r\n\r\n",
		"GET http://up.test:/ HTTP/1.1\r\n\r\n",
		"GET http://up.test:123456/ HTTP/1.1\r\n\r\n",
		"GET http:///x HTTP/1.1\r\n\r\n",
		"GET / HTTP/1.1 \r\n\r\n",
		"GET  / HTTP/1.1\r\n\r\n",
		"GET / HTTP/2.0\r\n\r\n",
		"GET / HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n",
		"GET / HTTP/1.1\r\nX: \x80\r\n\r\n",
		"GET / HTTP/1.1\r\nX: a\x01\r\n\r\n",
		"GET / HTTP/1.1\nHost: a\n\n",
		"GET / HTTP/1.1\r\nX y: a\r\n\r\n",
		"G(T / HTTP/1.1\r\n\r\n",
	} {
		head, ok := headOf([]byte(s))
		if !ok {
			continue
		}
		if _, ok := httphead.ParseRequest(head); ok {
			t.Errorf("fast path took %q", s)
		}
	}
	var many strings.Builder
	many.WriteString("GET / HTTP/1.1\r\n")
	for range httphead.MaxFields + 1 {
		many.WriteString("X: 1\r\n")
	}
	many.WriteString("\r\n")
	if _, ok := httphead.ParseRequest([]byte(many.String())); ok {
		t.Error("fast path took more than httphead.MaxFields lines")
	}
}

// A head split across reads, or not yet whole, goes to net/http too; the
// request it reads is the same.
func TestReadRequestHeadPartialHead(t *testing.T) {
	s := "GET http://up.test/ HTTP/1.1\r\nHost: up.test\r\n\r\n"
	br := bufio.NewReaderSize(strings.NewReader(s), 16) // the head cannot be whole in the buffer
	sc := &headScanner{r: br, maxBytes: 1 << 10, maxLines: 10}
	br2 := bufio.NewReaderSize(sc, 16)
	pre, _ := br2.Peek(br2.Buffered())
	if err := sc.begin(pre); err != nil {
		t.Fatal(err)
	}
	req, err := readRequestHead(br2, sc)
	if err = sc.end(err); err != nil {
		t.Fatal(err)
	}
	if req.Host != "up.test" || req.URL.Path != "/" {
		t.Fatalf("read %+v", req)
	}
}

func FuzzParseRequestHead(f *testing.F) {
	for _, s := range []string{
		"GET http://up.test:8080/a/b?x=1 HTTP/1.1\r\nHost: up.test:8080\r\nUser-Agent: curl/8\r\n\r\n",
		"GET / HTTP/1.0\r\nhost: a\r\nconnection: keep-alive\r\n\r\n",
		"HEAD http://h/ HTTP/1.1\r\nPragma: no-cache\r\n\r\n",
		"GET /x HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n",
		"POST / HTTP/1.1\r\nContent-Length: 1\r\n\r\nx",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		head, ok := headOf(data)
		if !ok {
			return
		}
		req, ok := httphead.ParseRequest(head)
		if !ok {
			return
		}
		sameAsReadRequest(t, data, len(head), req)
	})
}

// BenchmarkRequestHead: a curl-like GET head, parsed in place vs by
// http.ReadRequest (docs/BENCHMARKS.md).
func BenchmarkRequestHead(b *testing.B) {
	head := []byte("GET http://up.test:8080/v1/items?id=42 HTTP/1.1\r\nHost: up.test:8080\r\nUser-Agent: curl/7.88.1\r\nAccept: */*\r\nProxy-Connection: Keep-Alive\r\n\r\n")
	b.Run("in-place", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, ok := httphead.ParseRequest(head); !ok {
				b.Fatal("declined")
			}
		}
	})
	b.Run("net-http", func(b *testing.B) {
		b.ReportAllocs()
		r := bytes.NewReader(head)
		br := bufio.NewReader(r)
		for b.Loop() {
			r.Reset(head)
			br.Reset(r)
			if _, err := http.ReadRequest(br); err != nil {
				b.Fatal(err)
			}
		}
	})
}
