package mitm

import (
	"context"
	"errors"
	"io"
	"net/http"
	"sync/atomic"
)

// Request trailers (an HTTP/1.1 chunked body's, or an HTTP/2 request's
// trailing HEADERS) are known only once the client's body has ended. A
// trailerGate sits between the client's body and the upstream request: at
// the body's end it asks the tunnel's CheckTrailer; allowed trailers are
// copied to the outgoing request (which the upstream client sends after
// the last data), a block ends the upstream body with an error instead —
// the upstream client then aborts the request (HTTP/1.1: the connection is
// closed before the last chunk; HTTP/2: the stream is reset), so the
// upstream never receives a complete request — and keeps the answer for
// the client.

// TrailerCheck decides the trailers of a request (req.Trailer, filled in)
// once its body has ended: nil forwards them, a response blocks the
// request.
type TrailerCheck func(ctx context.Context, req *http.Request) *http.Response

var errTrailerBlocked = errors.New("mitm: request trailers blocked")

type trailerGate struct {
	body    io.ReadCloser // the client's
	in, out *http.Request
	check   TrailerCheck
	blocked atomic.Pointer[http.Response]
}

// gateTrailers puts a gate on out's body when the request may carry
// trailers and the tunnel checks them; nil otherwise (no cost).
func gateTrailers(t *Tunnel, in, out *http.Request) *trailerGate {
	if t.CheckTrailer == nil || out.Body == nil || out.Body == http.NoBody {
		return nil
	}
	if in.ContentLength >= 0 && in.Trailer == nil {
		return nil // HTTP/1.1 trailers need chunking; HTTP/2 ones are announced
	}
	if out.Trailer == nil {
		// Filled at the body's end; the upstream client writes what the
		// map holds then (and announces only what it held at first).
		out.Trailer = http.Header{}
	}
	g := &trailerGate{body: out.Body, in: in, out: out, check: t.CheckTrailer}
	out.Body = g
	return g
}

func (g *trailerGate) Read(p []byte) (int, error) {
	if g.blocked.Load() != nil {
		return 0, errTrailerBlocked
	}
	n, err := g.body.Read(p)
	if err == io.EOF {
		if resp := g.check(g.in.Context(), g.in); resp != nil {
			g.blocked.Store(resp)
			return 0, errTrailerBlocked // not even this read's last bytes
		}
		for k, vs := range g.in.Trailer {
			g.out.Trailer[k] = vs
		}
	}
	return n, err
}

func (g *trailerGate) Close() error { return g.body.Close() }

// block is the answer kept for the client when the trailers were blocked.
func (g *trailerGate) block() *http.Response {
	if g == nil {
		return nil
	}
	return g.blocked.Load()
}
