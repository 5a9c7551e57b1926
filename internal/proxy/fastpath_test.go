package proxy

import (
	"bufio"
	"bytes"
	"net/http"
	"strings"
	"testing"
)

// headsFor parses raw as a client request the way ServeConn does, prepares
// it as forward does, and returns what writeRequestHead and
// http.Request.Write send upstream for it.
func headsFor(t testing.TB, raw string) (fast, std []byte, ok bool) {
	req, err := http.ReadRequest(bufio.NewReader(strings.NewReader(raw)))
	if err != nil || !bodyless(req) || !req.URL.IsAbs() {
		return nil, nil, false
	}
	req.URL.Scheme = "http"
	req.Host = req.URL.Host
	req.RequestURI = ""
	removeHopByHop(req.Header)
	var a, b bytes.Buffer
	wa, wb := bufio.NewWriter(&a), bufio.NewWriter(&b)
	errA := writeRequestHead(wa, req)
	errB := req.Write(wb)
	wa.Flush()
	wb.Flush()
	if (errA == nil) != (errB == nil) {
		t.Fatalf("writeRequestHead error %v, http.Request.Write error %v for %q", errA, errB, raw)
	}
	return a.Bytes(), b.Bytes(), true
}

// TestWriteRequestHeadMatchesRequestWrite: the forwarding path sends upstream
// exactly the bytes http.Request.Write would send.
func TestWriteRequestHeadMatchesRequestWrite(t *testing.T) {
	for _, raw := range []string{
		"GET http://up.test:8080/ HTTP/1.1\r\nHost: up.test:8080\r\n\r\n",
		"GET http://up.test/a/b?q=1&r=%20x HTTP/1.1\r\nHost: up.test\r\nAccept: */*\r\nX-B: 2\r\nX-A: 1\r\nX-A: 3\r\n\r\n",
		"HEAD http://up.test/ HTTP/1.1\r\nHost: up.test\r\nUser-Agent: curl/8.0\r\n\r\n",
		"GET http://up.test/ HTTP/1.1\r\nHost: up.test\r\nUser-Agent:\r\n\r\n",
		"GET http://up.test/ HTTP/1.1\r\nHost: up.test\r\nUser-Agent:   spaced  \r\n\r\n",
		"POST http://up.test/form HTTP/1.1\r\nHost: up.test\r\nContent-Length: 0\r\n\r\n",
		"PUT http://up.test/x HTTP/1.1\r\nHost: up.test\r\n\r\n",
		"DELETE http://up.test/x HTTP/1.1\r\nHost: up.test\r\n\r\n",
		"OPTIONS http://up.test/ HTTP/1.1\r\nHost: up.test\r\n\r\n",
		"GET http://up.test/ HTTP/1.1\r\nHost: up.test\r\nConnection: close, X-Drop\r\nX-Drop: 1\r\nX-Keep: 2\r\n\r\n",
		"GET http://up.test/ HTTP/1.0\r\nHost: up.test\r\n\r\n",
		"GET http://[::1]:8080/ HTTP/1.1\r\nHost: [::1]:8080\r\n\r\n",
		"GET http://xn--bcher-kva.test/ HTTP/1.1\r\nHost: xn--bcher-kva.test\r\n\r\n",
		"GET http://b\xc3\xbccher.test/ HTTP/1.1\r\nHost: b\xc3\xbccher.test\r\n\r\n",
		"GET http://up.test/%0d%0a HTTP/1.1\r\nHost: up.test\r\nProxy-Authorization: Basic eA==\r\nTe: trailers\r\n\r\n",
	} {
		fast, std, ok := headsFor(t, raw)
		if !ok {
			t.Fatalf("could not prepare %q", raw)
		}
		if !bytes.Equal(fast, std) {
			t.Errorf("for %q\nfast path sent\n%q\nhttp.Request.Write sends\n%q", raw, fast, std)
		}
	}
}

// FuzzWriteRequestHead: for any request the front end accepts, the fast
// path's request head equals http.Request.Write's, and nothing panics.
func FuzzWriteRequestHead(f *testing.F) {
	f.Add("GET http://up.test:8080/ HTTP/1.1\r\nHost: up.test:8080\r\n\r\n")
	f.Add("POST http://up.test/ HTTP/1.1\r\nHost: up.test\r\nUser-Agent: x\r\nConnection: close\r\n\r\n")
	f.Add("GET http://b\xc3\xbccher.test/?a=%00 HTTP/1.0\r\nHost: x\r\n\r\n")
	f.Fuzz(func(t *testing.T, raw string) {
		fast, std, ok := headsFor(t, raw)
		if ok && !bytes.Equal(fast, std) {
			t.Fatalf("for %q\nfast path sent\n%q\nhttp.Request.Write sends\n%q", raw, fast, std)
		}
	})
}
