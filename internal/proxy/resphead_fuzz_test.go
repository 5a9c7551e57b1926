package proxy

import (
	"bufio"
	"bytes"
	"net/http"
	"net/textproto"
	"reflect"
	"testing"
)

// FuzzScanResponseHead: the scanner never panics, and every head it
// accepts is one net/http parses to the same status, framing and
// connection close, with the forwarded lines equal to net/http's header
// map less the hop-by-hop fields.
func FuzzScanResponseHead(f *testing.F) {
	for _, s := range []string{
		"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nX-A: b\r\n\r\nok",
		"HTTP/1.1 204 No Content\r\nConnection: close, X-Hop\r\nX-Hop: 1\r\nX-Keep: 2\r\n\r\n",
		"HTTP/1.1 304 Not Modified\r\nETag: \"x\"\r\n\r\n",
		"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nTrailer: X-T\r\n\r\n0\r\n\r\n",
		"HTTP/1.1 200\r\nContent-Length: 0\r\nKeep-Alive: timeout=5\r\nSet-Cookie: a=1\r\nSet-Cookie: b=2\r\n\r\n",
		"HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\r\n",
		"HTTP/1.0 200 OK\r\nContent-Length: 1\r\n\r\nx",
		"HTTP/1.1 200 OK\r\nContent-Length: 1\r\nContent-Length: 1\r\n\r\nx",
		"HTTP/1.1 200 OK\r\nX:  a \t\r\n Folded\r\nContent-Length: 0\r\n\r\n",
	} {
		f.Add([]byte(s), false)
		f.Add([]byte(s), true)
	}
	f.Fuzz(func(t *testing.T, data []byte, head bool) {
		method := "GET"
		if head {
			method = "HEAD"
		}
		rh, n, out, ok := scanResponseHead(data, method, nil)
		if !ok {
			return
		}
		if n > len(data) || !bytes.HasSuffix(data[:n], []byte("\r\n\r\n")) {
			t.Fatalf("head length %d does not end the head", n)
		}
		resp, err := http.ReadResponse(bufio.NewReader(bytes.NewReader(data)), &http.Request{Method: method})
		if err != nil {
			t.Fatalf("accepted a head net/http refuses: %v\n%q", err, data)
		}
		if resp.StatusCode != rh.code || resp.Close != rh.close {
			t.Fatalf("status %d close %v; net/http %d %v", rh.code, rh.close, resp.StatusCode, resp.Close)
		}
		if rh.contentLength >= 0 && resp.ContentLength != rh.contentLength {
			t.Fatalf("content length %d; net/http %d", rh.contentLength, resp.ContentLength)
		}
		want := resp.Header.Clone()
		// net/http drops "Connection: close" itself (and with it the
		// names it lists): take them from the raw head.
		raw := textproto.NewReader(bufio.NewReader(bytes.NewReader(data)))
		raw.ReadLine()
		if rawHdr, err := raw.ReadMIMEHeader(); err == nil {
			want["Connection"] = rawHdr["Connection"]
		}
		removeHopByHop(want)
		// The forwarded lines, parsed back after the status line.
		r := textproto.NewReader(bufio.NewReader(bytes.NewReader(append(out, "\r\n"...))))
		if _, err := r.ReadLine(); err != nil {
			t.Fatal(err)
		}
		got, err := r.ReadMIMEHeader()
		if err != nil {
			t.Fatalf("forwarded head does not parse: %v\n%q", err, out)
		}
		if len(got) == 0 && len(want) == 0 {
			return
		}
		if !reflect.DeepEqual(http.Header(got), want) {
			t.Fatalf("forwarded %v; net/http less hop-by-hop %v\n%q", got, want, data)
		}
	})
}
