package proxy

import (
	"bufio"
	"net/http"

	"github.com/netproxy/netproxy/internal/httphead"
)

// The request head parsed in place (issue 29): a whole body-less head in
// the read buffer is parsed there by httphead.ParseRequest (one copy of
// the head, every string a slice of it); anything it declines, and a head
// not yet whole, goes to http.ReadRequest as before. FuzzParseRequestHead
// holds the two to the same request.

// readRequestHead reads the next request from br. sc has scanned the head
// (begin ran over the buffered bytes): when the whole head is buffered the
// fast path parses it there, else — or when it declines — net/http does.
func readRequestHead(br *bufio.Reader, sc *headScanner) (*http.Request, error) {
	if !sc.active && sc.err == nil && sc.n > 0 && sc.n <= br.Buffered() {
		buf, _ := br.Peek(sc.n)
		if req, ok := httphead.ParseRequest(buf); ok {
			br.Discard(sc.n)
			return req, nil
		}
	}
	return http.ReadRequest(br)
}
