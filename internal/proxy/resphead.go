package proxy

import (
	"bytes"
	"io"
	"net/http"
	"strconv"
	"strings"

	"github.com/netproxy/netproxy/internal/httphead"
)

// The response head forwarded as bytes (issue 29 item 2). Most upstream
// answers are an HTTP/1.1 head with a Content-Length (or no body at all),
// already whole in the connection's read buffer. scanResponseHead accepts
// exactly those, strictly (CRLF lines, token names, values without control
// bytes, one decimal Content-Length, no Transfer-Encoding, no Trailer, no
// 1xx or 101), and copies the head's lines as they are with the hop-by-hop
// ones dropped — no header map, no re-serialisation. Anything else, or a
// head not yet whole in the buffer, is left to http.ReadResponse and the
// map-based writer as before, so every unusual case (chunked bodies and
// trailers, 1xx, 101, close-delimited bodies, HTTP/1.0, obs-fold) keeps
// the path its fidelity tests cover. FuzzScanResponseHead holds the
// scanner to net/http's parse on every head it accepts.

// respHead is what the forwarding needs of an accepted head.
type respHead struct {
	code          int
	contentLength int64 // -1: none (a body-less answer)
	close         bool  // the upstream's Connection: close
}

// maxConnLines bounds the Connection lines a fast-path head may carry.
const maxConnLines = 4

// scanResponseHead parses the head at the start of buf for a request with
// method. It returns the head, the head's length in buf, and out with the
// forwarded head appended ("HTTP/1.1 code text" and the kept lines, each
// ending in CRLF; no final empty line). ok is false when the head is not
// one the fast path takes (out is then unchanged in length).
func scanResponseHead(buf []byte, method string, out []byte) (h respHead, n int, res []byte, ok bool) {
	end := bytes.Index(buf, []byte("\r\n\r\n"))
	if end < 0 {
		return h, 0, out, false
	}
	head := buf[:end+2] // every line with its CRLF
	n = end + 4
	// Status line: "HTTP/1.1 DDD[ reason]".
	eol := bytes.Index(head, []byte("\r\n"))
	line := head[:eol]
	if len(line) < 12 || string(line[:9]) != "HTTP/1.1 " || (len(line) > 12 && line[12] != ' ') {
		return h, 0, out, false
	}
	for _, c := range line[9:12] {
		if c < '0' || c > '9' {
			return h, 0, out, false
		}
	}
	h.code = int(line[9]-'0')*100 + int(line[10]-'0')*10 + int(line[11]-'0')
	if h.code < 200 || h.code > 599 {
		return h, 0, out, false
	}
	for _, c := range line[12:] {
		if c < ' ' && c != '\t' || c == 0x7f {
			return h, 0, out, false
		}
	}
	h.contentLength = -1
	noBody := method == http.MethodHead || h.code == http.StatusNoContent || h.code == http.StatusNotModified
	// First pass: check every line, find the framing and the Connection
	// tokens.
	var conn [maxConnLines][]byte
	nconn := 0
	for rest := head[eol+2:]; len(rest) > 0; {
		i := bytes.Index(rest, []byte("\r\n"))
		name, value, good := httphead.SplitField(rest[:i])
		rest = rest[i+2:]
		if !good {
			return h, 0, out, false
		}
		switch {
		case httphead.EqualFoldLower(name, "content-length"):
			if h.contentLength >= 0 || len(value) == 0 || len(value) > 18 {
				return h, 0, out, false
			}
			var v int64
			for _, c := range value {
				if c < '0' || c > '9' {
					return h, 0, out, false
				}
				v = v*10 + int64(c-'0')
			}
			h.contentLength = v
		case httphead.EqualFoldLower(name, "transfer-encoding"), httphead.EqualFoldLower(name, "trailer"):
			return h, 0, out, false
		case httphead.EqualFoldLower(name, "connection"):
			if nconn == maxConnLines {
				return h, 0, out, false
			}
			conn[nconn] = value
			nconn++
			if hasToken(value, "close") {
				h.close = true
			}
		}
	}
	if h.contentLength < 0 && !noBody {
		return h, 0, out, false // chunked or close-delimited: the full parser
	}
	if noBody {
		// The framing of a body-less answer is its status (or the method).
		h.contentLength = -1
	}
	text := http.StatusText(h.code)
	if text == "" {
		text = "status code " + strconv.Itoa(h.code)
	}
	out = append(out, "HTTP/1.1 "...)
	out = strconv.AppendInt(out, int64(h.code), 10)
	out = append(append(append(out, ' '), text...), "\r\n"...)
	// Second pass: copy the lines that are not hop-by-hop.
	for rest := head[eol+2:]; len(rest) > 0; {
		i := bytes.Index(rest, []byte("\r\n"))
		line := rest[:i+2]
		name, _, _ := httphead.SplitField(rest[:i])
		rest = rest[i+2:]
		if hopByHopName(name) {
			continue
		}
		named := false
		for _, v := range conn[:nconn] {
			if hasTokenBytes(v, name) {
				named = true
				break
			}
		}
		if !named {
			out = append(out, line...)
		}
	}
	return h, n, out, true
}

// hopByHopLower is hopByHop in lower case, for asciiEqualFold.
var hopByHopLower = func() []string {
	l := make([]string, len(hopByHop))
	for i, h := range hopByHop {
		l[i] = strings.ToLower(h)
	}
	return l
}()

// hopByHopName: the names removeHopByHop drops, compared without case.
func hopByHopName(name []byte) bool {
	for _, h := range hopByHopLower {
		if httphead.EqualFoldLower(name, h) {
			return true
		}
	}
	return false
}

// hasToken reports whether the comma-separated list v holds token.
func hasToken(v []byte, token string) bool {
	for len(v) > 0 {
		i := bytes.IndexByte(v, ',')
		t := v
		if i >= 0 {
			t, v = v[:i], v[i+1:]
		} else {
			v = nil
		}
		if equalFoldBytes(bytes.Trim(t, " \t"), token) {
			return true
		}
	}
	return false
}

func hasTokenBytes(v, token []byte) bool { return hasToken(v, string(token)) }

// equalFoldBytes compares ASCII without case on both sides.
func equalFoldBytes(b []byte, s string) bool {
	if len(b) != len(s) {
		return false
	}
	for i := range b {
		x, y := b[i], s[i]
		if 'A' <= x && x <= 'Z' {
			x += 'a' - 'A'
		}
		if 'A' <= y && y <= 'Z' {
			y += 'a' - 'A'
		}
		if x != y {
			return false
		}
	}
	return true
}

// clBody is a fast-path answer's body: contentLength bytes of the
// connection's buffered reader, then io.EOF (io.ErrUnexpectedEOF when the
// upstream ends it early).
type clBody struct {
	r io.Reader
	n int64
}

func (b *clBody) Read(p []byte) (int, error) {
	if b.n <= 0 {
		return 0, io.EOF
	}
	if int64(len(p)) > b.n {
		p = p[:b.n]
	}
	n, err := b.r.Read(p)
	b.n -= int64(n)
	if err == io.EOF {
		if b.n > 0 {
			return n, io.ErrUnexpectedEOF
		}
		err = nil
	}
	if b.n == 0 && err == nil {
		err = io.EOF
	}
	return n, err
}

func (b *clBody) Close() error { return nil }

// writeRawHead writes a head accepted by scanResponseHead (buffered): its
// kept lines, then this connection's own Connection line.
func (w *respWriter) writeRawHead(code int, contentLength int64, head []byte) {
	if w.wroteHeader {
		return
	}
	w.wroteHeader = true
	w.noBody = contentLength < 0
	w.remaining = contentLength
	w.bw.Write(head)
	if w.closeAfter {
		w.bw.WriteString("Connection: close\r\n")
	} else if !w.req.ProtoAtLeast(1, 1) {
		w.bw.WriteString("Connection: keep-alive\r\n")
	}
	w.bw.WriteString("\r\n")
}
