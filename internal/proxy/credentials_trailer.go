package proxy

import (
	"context"
	"errors"
	"io"
	"net/http"

	"github.com/netproxy/netproxy/credentials"
	"github.com/netproxy/netproxy/hostpolicy"
)

// Request trailers and the credential broker (docs/credentials.md): a
// chunked request's trailers arrive after its body, so they are checked
// when the body reader reaches its end, before the last chunk and the
// trailers go upstream. A block is audited like a head's; the upstream
// request is aborted (its connection closed before the last chunk), and the
// client gets the 403 if no answer has begun.

// trailerCheck decides the trailers of req (filled in: its body has ended).
func (c *Core) trailerCheck(conn *Conn, host string, port uint16, proto hostpolicy.Protocol, req *http.Request) *hostpolicy.Decision {
	if c.Credentials == nil || len(req.Trailer) == 0 {
		return nil
	}
	execID := ""
	if conn.Attributed {
		execID = conn.Exec.ID
	}
	if act, name := c.Credentials.CheckTrailer(execID, host, req.Trailer); act == credentials.Block {
		return c.credentialMisuse(conn, host, port, proto, req.Method, name)
	}
	return nil
}

// errTrailerBlocked ends a request body whose trailers were blocked; the
// upstream writer then closes the upstream connection (upstream.go).
var errTrailerBlocked = errors.New("request trailers blocked")

// trailerGuard is a chunked request body on the plain path: at its end the
// trailers are checked.
type trailerGuard struct {
	rc      io.ReadCloser
	check   func() *hostpolicy.Decision
	blocked *hostpolicy.Decision
}

func (g *trailerGuard) Read(p []byte) (int, error) {
	if g.blocked != nil {
		return 0, errTrailerBlocked
	}
	n, err := g.rc.Read(p)
	if err == io.EOF {
		if d := g.check(); d != nil {
			g.blocked = d
			return 0, errTrailerBlocked // not even this read's last bytes
		}
	}
	return n, err
}

func (g *trailerGuard) Close() error { return g.rc.Close() }

// guardTrailers puts the guard on a chunked request's body when the broker
// has credentials (a request without a chunked body costs nothing). The
// guard is kept on pc for forward to answer a block.
func (h *HTTPProxy) guardTrailers(pc *plainConn, req *http.Request, d hostpolicy.Decision) {
	pc.trailers = nil
	if h.core.Credentials == nil || h.core.Credentials.Len() == 0 || len(req.TransferEncoding) == 0 {
		return
	}
	// Only what the check needs: capturing d itself would move every
	// request's decision to the heap, guarded or not.
	host, port := d.Host, d.Port
	g := &trailerGuard{rc: req.Body}
	g.check = func() *hostpolicy.Decision {
		return h.core.trailerCheck(pc.c, host, port, hostpolicy.ProtoHTTP, req)
	}
	req.Body = g
	pc.trailers = g
}

// trailerBlock is the decision of a block by the current request's
// trailers, nil when none.
func (pc *plainConn) trailerBlock() *hostpolicy.Decision {
	if pc.trailers == nil {
		return nil
	}
	return pc.trailers.blocked
}

// mitmTrailerCheck is the interception's trailer check for one tunnel.
func (c *Core) mitmTrailerCheck(conn *Conn, host string, port uint16) func(context.Context, *http.Request) *http.Response {
	if c.Credentials == nil || c.Credentials.Len() == 0 {
		return nil
	}
	return func(_ context.Context, req *http.Request) *http.Response {
		if bd := c.trailerCheck(conn, host, port, hostpolicy.ProtoHTTPS, req); bd != nil {
			return blockedJSONResponse(req, *bd)
		}
		return nil
	}
}
