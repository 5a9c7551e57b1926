package mitm

import (
	"bufio"
	"context"
	"crypto/tls"
	"errors"
	"io"
	"net/http"
	"sync"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"
)

// h1Upstream is an HTTP/1.1 client tunnel's own keep-alive connection to
// the upstream, used for the requests that are most of a keep-alive
// stream: body-less GET, HEAD, OPTIONS and TRACE without an upgrade. It
// runs on the tunnel's goroutine — no read and write loop goroutines and
// no channel hand-offs per request as in http.Transport — and its read
// buffer tells the response writer whether the next body read will wait
// (the client's writer is flushed only then: a small answer goes to the
// client in one TLS record and one system call, head and body together).
// Everything else (bodies, upgrades, other methods) takes the tunnel's
// http.Transport, whose retry rule for non-idempotent requests stays.
type h1Upstream struct {
	i    *Interceptor
	t    *Tunnel
	conn *tls.Conn
	// br is held only while an exchange is in flight (or bytes wait in
	// it): a kept connection between requests holds no 64 KiB buffer.
	br   *bufio.Reader
	raw  syscall.RawConn // the TCP socket under conn (nil: not a socket)
	used bool            // the connection carried an exchange (a failure may be a stale close)
	stop func() bool
	// peek is the socket probe handed to raw.Read, made once per
	// connection so that a probe per response allocates nothing;
	// readable is its answer.
	peek     func(fd uintptr) bool
	readable bool
	peekBuf  [1]byte
	// body and answer wrap the one response in flight (an exchange ends
	// before the next begins, on the tunnel's goroutine): reused rather
	// than allocated per response.
	body   h1Body
	answer flushBeforeRead
}

// h1Eligible reports whether req goes over the tunnel's own connection.
func h1Eligible(req *http.Request, upType string) bool {
	if upType != "" || req.ContentLength != 0 || len(req.TransferEncoding) != 0 {
		return false
	}
	switch req.Method {
	case http.MethodGet, http.MethodHead, http.MethodOptions, http.MethodTrace:
		return true
	}
	return false
}

var (
	bulkReaders = sync.Pool{New: func() any { return bufio.NewReaderSize(nil, bulkBuffer) }}
	headWriters = sync.Pool{New: func() any { return bufio.NewWriterSize(nil, 4<<10) }}
	bulkWriters = sync.Pool{New: func() any { return bufio.NewWriterSize(nil, bulkBuffer) }}
)

// dial opens and verifies a connection that speaks HTTP/1.1.
func (u *h1Upstream) dial(ctx context.Context) error {
	raw, err := u.t.Dial(ctx)
	if err != nil {
		return err
	}
	cfg := u.i.shared().upstreamConfig(u.t.Host)
	cfg.NextProtos = []string{"http/1.1"}
	tc := tls.Client(raw, cfg)
	if err := tc.HandshakeContext(ctx); err != nil {
		raw.Close()
		return err
	}
	u.conn, u.used, u.raw = tc, false, nil
	if sc, ok := raw.(syscall.Conn); ok {
		u.raw, _ = sc.SyscallConn()
	}
	if u.peek == nil {
		u.peek = u.peekSocket
	}
	// The tunnel's end (ctx) cuts a read in progress.
	u.stop = context.AfterFunc(ctx, func() { tc.Close() })
	return nil
}

// close drops the connection and returns its buffers.
func (u *h1Upstream) close() {
	if u.conn == nil {
		return
	}
	u.stop()
	u.conn.Close()
	u.release()
	u.conn = nil
}

// release returns the read buffer to the pool (it holds no bytes, or the
// connection is being dropped).
func (u *h1Upstream) release() {
	if u.br == nil {
		return
	}
	u.br.Reset(nil)
	bulkReaders.Put(u.br)
	u.br = nil
}

// errBeforeResponse marks a failure before any response byte.
type errBeforeResponse struct{ error }

func (e errBeforeResponse) Unwrap() error { return e.error }

// roundTrip sends req and reads the final response head; 1xx answers go
// to on1xx as they come. A kept connection that fails before any byte of
// an answer (the upstream closed it while idle) is replaced once: every
// request on this path is idempotent and body-less, as net/http retries.
func (u *h1Upstream) roundTrip(ctx context.Context, req *http.Request, on1xx *interim) (*http.Response, error) {
	for attempt := 0; ; attempt++ {
		if u.conn == nil {
			if err := u.dial(ctx); err != nil {
				return nil, err
			}
		}
		resp, err := u.exchange(req, on1xx)
		if err == nil {
			return resp, nil
		}
		stale := u.used
		u.close()
		var nb errBeforeResponse
		if !stale || attempt > 0 || ctx.Err() != nil || !errors.As(err, &nb) {
			return nil, err
		}
	}
}

func (u *h1Upstream) exchange(req *http.Request, on1xx *interim) (*http.Response, error) {
	// The head writer is held only while the head is written.
	bw := headWriters.Get().(*bufio.Writer)
	bw.Reset(u.conn)
	err := writeRequestHead(bw, req)
	if err == nil {
		err = bw.Flush()
	}
	bw.Reset(nil)
	headWriters.Put(bw)
	if err != nil {
		return nil, errBeforeResponse{err}
	}
	if u.br == nil {
		u.br = bulkReaders.Get().(*bufio.Reader)
		u.br.Reset(u.conn)
	}
	for {
		if _, err := u.br.Peek(1); err != nil {
			return nil, errBeforeResponse{err}
		}
		resp, err := http.ReadResponse(u.br, req)
		if err != nil {
			return nil, err
		}
		switch {
		case resp.StatusCode == http.StatusSwitchingProtocols:
			return nil, errors.New("mitm: upstream switched protocols without an upgrade request")
		case resp.StatusCode >= 100 && resp.StatusCode < 200:
			on1xx.relay(resp.StatusCode, resp.Header)
			continue
		}
		u.used = true
		u.body = h1Body{rc: resp.Body, u: u, keep: !resp.Close}
		resp.Body = &u.body
		return resp, nil
	}
}

// ready reports whether a body read will not wait: bytes are buffered, or
// the socket has some queued (a non-blocking peek), so that the client's
// writer gathers a bulk body into 64 KiB writes instead of one per record.
func (u *h1Upstream) ready() bool {
	if u.br == nil {
		return false
	}
	if u.br.Buffered() > 0 {
		return true
	}
	if u.raw == nil {
		return false
	}
	u.readable = false
	u.raw.Read(u.peek)
	return u.readable
}

// h1Body keeps the connection after a body read to its end, and drops it
// otherwise (the stream would be out of step).
type h1Body struct {
	rc   io.ReadCloser
	u    *h1Upstream
	keep bool
	eof  bool
	done bool
}

func (b *h1Body) Read(p []byte) (int, error) {
	n, err := b.rc.Read(p)
	if err == io.EOF {
		b.eof = true
	}
	return n, err
}

func (b *h1Body) Close() error {
	if b.done {
		return nil
	}
	b.done = true
	if !b.keep || !b.eof || b.u.br.Buffered() > 0 {
		// Dropped. The socket is closed first: net/http's Close drains an
		// unread body, which then ends at once. The read buffer goes back
		// to the pool only after that drain (it reads through it).
		if b.u.conn != nil {
			b.u.conn.Close()
		}
		b.rc.Close()
		b.u.close()
		return nil
	}
	b.rc.Close()
	// Kept: the connection waits for the next request without a buffer.
	b.u.release()
	return nil
}

// peekSocket peeks at the socket without blocking (raw.Read's callback:
// it never asks to wait). A bare recvfrom: unix.Recvfrom would allocate
// the sender's address it does not need.
func (u *h1Upstream) peekSocket(fd uintptr) bool {
	n, _, errno := unix.Syscall6(unix.SYS_RECVFROM, fd, uintptr(unsafe.Pointer(&u.peekBuf[0])), 1,
		unix.MSG_PEEK|unix.MSG_DONTWAIT, 0, 0)
	u.readable = errno == 0 && n > 0
	return true
}
