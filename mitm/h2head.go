package mitm

import (
	"crypto/tls"
	"net"
	"net/http"
	"time"
)

// HTTP/2 frame types and flags the head guard reads (RFC 9113 §6).
const (
	h2FrameHeaders      = 0x1
	h2FrameContinuation = 0x9
	h2FlagEndHeaders    = 0x4
	h2FrameHeaderLen    = 9
)

// h2HeadGuard times HTTP/2 header blocks as limits.header_timeout times an
// HTTP/1.1 head: from the first byte of a HEADERS frame to the end of its
// last CONTINUATION, reads must finish within timeout, or the connection
// is closed (x/net/http2 has no such limit: an unfinished block would hold
// its buffer for the idle timeout). It follows the frame boundaries of the
// client's byte stream as it passes, keeping nothing but a 9-byte header;
// between blocks no deadline is set, so an idle connection is left to the
// server's IdleTimeout.
type h2HeadGuard struct {
	net.Conn
	tls     *tls.Conn
	timeout time.Duration

	preface     int // client preface bytes still to skip
	hdr         [h2FrameHeaderLen]byte
	hdrN        int
	payloadLeft int
	endsBlock   bool // the frame being read ends its header block
	inBlock     bool // a header block has begun and not ended
	armed       bool
}

// ConnectionState lets x/net/http2 see the TLS state through the guard.
func (g *h2HeadGuard) ConnectionState() tls.ConnectionState { return g.tls.ConnectionState() }

func (g *h2HeadGuard) Read(p []byte) (int, error) {
	n, err := g.Conn.Read(p)
	g.follow(p[:n])
	switch {
	case g.inBlock && !g.armed:
		g.armed = true
		g.Conn.SetReadDeadline(time.Now().Add(g.timeout))
	case !g.inBlock && g.armed:
		g.armed = false
		g.Conn.SetReadDeadline(time.Time{})
	}
	return n, err
}

// follow advances the frame parser over b.
func (g *h2HeadGuard) follow(b []byte) {
	for len(b) > 0 {
		switch {
		case g.preface > 0:
			k := min(g.preface, len(b))
			g.preface -= k
			b = b[k:]
		case g.payloadLeft > 0:
			k := min(g.payloadLeft, len(b))
			g.payloadLeft -= k
			b = b[k:]
			if g.payloadLeft == 0 && g.endsBlock {
				g.inBlock = false
			}
		default:
			k := copy(g.hdr[g.hdrN:], b)
			g.hdrN += k
			b = b[k:]
			if g.hdrN < h2FrameHeaderLen {
				continue
			}
			g.hdrN = 0
			length := int(g.hdr[0])<<16 | int(g.hdr[1])<<8 | int(g.hdr[2])
			typ, flags := g.hdr[3], g.hdr[4]
			g.endsBlock = false
			if typ == h2FrameHeaders || typ == h2FrameContinuation {
				g.inBlock = true
				g.endsBlock = flags&h2FlagEndHeaders != 0
			}
			g.payloadLeft = length
			if length == 0 && g.endsBlock {
				g.inBlock = false
			}
		}
	}
}

// fieldCount is the number of header fields of an HTTP/2 request (each
// value of a repeated name counts).
func fieldCount(h http.Header) int {
	n := 0
	for _, vs := range h {
		n += len(vs)
	}
	return n
}
