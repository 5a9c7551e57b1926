package mitm

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/textproto"
	"strconv"
	"strings"
	"sync"

	"golang.org/x/net/http/httpguts"

	"github.com/netproxy/netproxy/internal/httphead"
)

// The per-request costs of an intercepted HTTP/1.1 keep-alive exchange
// (issue 29) are kept off the heap where the standard library allows:
// these helpers are values the compiler can keep on the tunnel
// goroutine's stack.

// interim relays the upstream's 1xx answers (103 Early Hints; 100
// Continue to a client that asked) to the client as they arrive, as
// ReverseProxy's Got1xxResponse does. It runs while the tunnel's
// goroutine waits for the final answer: bw has one writer at a time.
type interim struct {
	bw           *bufio.Writer
	wantContinue bool
}

func (r *interim) relay(code int, hh http.Header) error {
	if code == http.StatusContinue && !r.wantContinue {
		return nil
	}
	removeHopByHop(hh)
	fmt.Fprintf(r.bw, "HTTP/1.1 %d %s\r\n", code, http.StatusText(code))
	hh.Write(r.bw)
	r.bw.WriteString("\r\n")
	return r.bw.Flush()
}

// writeOnly exposes a bufio.Writer's Write and WriteString but not its
// ReadFrom, which would lend its buffer to a body's Read that flushes the
// same buffer (flushBeforeRead). WriteString spares net/http a []byte
// copy of every header line; one pointer field boxes without allocating.
type writeOnly struct{ w *bufio.Writer }

func (o writeOnly) Write(p []byte) (int, error)       { return o.w.Write(p) }
func (o writeOnly) WriteString(s string) (int, error) { return o.w.WriteString(s) }

// writeRequestHead writes req's head to bw exactly as req.Write(bw)
// would, without its per-request formatting garbage, for the requests the
// tunnel's own connection carries most: GET and HEAD without a body, a
// Connection: close or trailers, with an ASCII Host and a clean
// User-Agent. Anything else goes through req.Write itself.
func writeRequestHead(bw *bufio.Writer, req *http.Request) error {
	host, ruri, ua, ok := plainRequestHead(req)
	if !ok {
		return req.Write(bw)
	}
	bw.WriteString(req.Method)
	bw.WriteByte(' ')
	bw.WriteString(ruri)
	bw.WriteString(" HTTP/1.1\r\n")
	writeField(bw, "Host", host)
	if ua != "" {
		writeField(bw, "User-Agent", ua)
	}
	if err := httphead.WriteRequestFields(bw, req.Header); err != nil {
		return err
	}
	_, err := bw.WriteString("\r\n")
	return err
}

// writeField writes one "name: value" line.
func writeField(bw *bufio.Writer, name, value string) {
	bw.WriteString(name)
	bw.WriteString(": ")
	bw.WriteString(value)
	bw.WriteString("\r\n")
}

// plainRequestHead reports whether writeRequestHead may write req itself,
// with the Host, request target and User-Agent that req.Write would send.
func plainRequestHead(req *http.Request) (host, ruri, ua string, ok bool) {
	if req.Method != http.MethodGet && req.Method != http.MethodHead {
		return "", "", "", false // OPTIONS and TRACE get a Content-Length: 0
	}
	if req.Close || req.ContentLength != 0 || len(req.TransferEncoding) != 0 || req.Trailer != nil ||
		(req.Body != nil && req.Body != http.NoBody) || req.URL == nil {
		return "", "", "", false
	}
	host = req.Host
	if host == "" {
		host = req.URL.Host
	}
	// An ASCII host without a zone is what httpguts.PunycodeHostPort and
	// net/http's zone removal leave unchanged.
	if host == "" || !printableASCII(host) || strings.IndexByte(host, '%') >= 0 || !httpguts.ValidHostHeader(host) {
		return "", "", "", false
	}
	ruri = req.URL.RequestURI()
	if !printableASCII(ruri) {
		return "", "", "", false
	}
	vs, has := req.Header["User-Agent"]
	if !has {
		return "", "", "", false // net/http would add its default
	}
	if len(vs) > 0 {
		ua = vs[0]
	}
	if strings.ContainsAny(ua, "\r\n") || textproto.TrimString(ua) != ua {
		return "", "", "", false
	}
	return host, ruri, ua, true
}

// printableASCII reports whether s holds only bytes from ' ' to '~'.
func printableASCII(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < ' ' || s[i] > '~' {
			return false
		}
	}
	return true
}

// respExcludeHeader is net/http's: the framing fields Response.Write
// writes from the response's own fields.
var respExcludeHeader = map[string]bool{
	"Content-Length":    true,
	"Transfer-Encoding": true,
	"Trailer":           true,
}

// copyBuffers are the 32 KiB buffers a response body is copied through,
// the size net/http's own body copy uses (so the client's writer sees the
// same reads).
var copyBuffers = sync.Pool{New: func() any { return new([32 << 10]byte) }}

// writeAnswer writes resp (its body included) to bw exactly as
// resp.Write(writeOnly{bw}) would, without that call's per-response
// garbage, for the answers a keep-alive stream is made of: a final status
// with a body of known length, no trailers, to a request other than HEAD,
// with its Connection field already removed. Anything else goes through
// resp.Write itself.
func writeAnswer(bw *bufio.Writer, resp *http.Response) error {
	if !plainAnswer(resp) {
		return resp.Write(writeOnly{bw})
	}
	bw.WriteString("HTTP/1.1 ")
	bw.WriteString(resp.Status)
	bw.WriteString("\r\n")
	if resp.Close {
		bw.WriteString("Connection: close\r\n")
	}
	bw.WriteString("Content-Length: ")
	bw.Write(strconv.AppendInt(bw.AvailableBuffer(), resp.ContentLength, 10))
	bw.WriteString("\r\n")
	if err := resp.Header.WriteSubset(bw, respExcludeHeader); err != nil {
		return err
	}
	if _, err := bw.WriteString("\r\n"); err != nil {
		return err
	}
	// The body as net/http's transferWriter copies it: the announced
	// length, then whatever follows drained, the body closed, a length
	// that differs an error.
	closed := false
	defer func() {
		if !closed {
			resp.Body.Close()
		}
	}()
	buf := copyBuffers.Get().(*[32 << 10]byte)
	ncopy, err := copyAtMost(writeOnly{bw}, resp.Body, resp.ContentLength, buf[:])
	copyBuffers.Put(buf)
	if err != nil {
		return err
	}
	nextra, err := io.Copy(io.Discard, resp.Body)
	ncopy += nextra
	if err != nil {
		return err
	}
	closed = true
	if err := resp.Body.Close(); err != nil {
		return err
	}
	if ncopy != resp.ContentLength {
		return fmt.Errorf("http: ContentLength=%d with Body length %d", resp.ContentLength, ncopy)
	}
	return nil
}

// plainAnswer reports whether writeAnswer may write resp itself: the
// status line it would write is "HTTP/1.1 " and resp.Status, as
// Response.Write's is when Status begins with the three-digit code.
func plainAnswer(resp *http.Response) bool {
	if resp.ProtoMajor != 1 || resp.ProtoMinor != 1 || resp.ContentLength <= 0 || len(resp.TransferEncoding) != 0 ||
		resp.Trailer != nil || resp.Body == nil || resp.Request == nil || resp.Request.Method == http.MethodHead {
		return false
	}
	code := resp.StatusCode
	if code < 200 || code > 999 || code == http.StatusNoContent || code == http.StatusNotModified {
		return false
	}
	if _, has := resp.Header["Connection"]; has {
		return false
	}
	s := resp.Status
	return len(s) >= 4 && s[3] == ' ' &&
		s[0] == byte('0'+code/100) && s[1] == byte('0'+code/10%10) && s[2] == byte('0'+code%10)
}

// copyAtMost is io.CopyBuffer(w, io.LimitReader(r, n), buf) for a w
// without ReadFrom, with the limit kept on the stack.
func copyAtMost(w io.Writer, r io.Reader, n int64, buf []byte) (written int64, err error) {
	for n > 0 {
		p := buf
		if int64(len(p)) > n {
			p = p[:n]
		}
		nr, er := r.Read(p)
		n -= int64(nr)
		if nr > 0 {
			nw, ew := w.Write(p[:nr])
			if nw < 0 || nr < nw {
				nw = 0
				if ew == nil {
					ew = errors.New("invalid write result")
				}
			}
			written += int64(nw)
			if ew != nil {
				return written, ew
			}
			if nr != nw {
				return written, io.ErrShortWrite
			}
		}
		if er != nil {
			if er != io.EOF {
				err = er
			}
			return written, err
		}
	}
	return written, nil
}
