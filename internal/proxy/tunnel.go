package proxy

import (
	"errors"
	"io"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"

	"github.com/netproxy/netproxy/hostpolicy"
	"github.com/netproxy/netproxy/metrics"
)

// Tunnel copies bytes both ways between a client and an upstream socket
// until both directions end, then closes both.
//
// Bytes move with io.Copy between the two *net.TCPConn values, which the
// runtime turns into splice(2). The runtime's splice keeps a pipe (two
// descriptors) for as long as it waits, so an idle direction gives it back
// and waits for readability without one: thousands of idle tunnels would
// otherwise exhaust descriptors.
type Tunnel struct {
	Client, Upstream *net.TCPConn
	// Early holds client bytes already read past the request (e.g. a TLS
	// ClientHello sent with the CONNECT); they go upstream first.
	Early []byte
	// Idle closes the tunnel after this long without a byte either way
	// (0: never).
	Idle     time.Duration
	Protocol hostpolicy.Protocol
	Meter    *metrics.Metrics
	// Owner, when set, is closed at the end (the admitted client Conn, so
	// its connection slot is released).
	Owner io.Closer
	// HalfCloseGrace, when set, closes both sockets this long after either
	// direction ended (an upgraded connection whose client left must not
	// stay open for as long as the upstream likes). 0: each direction
	// runs to its own end (CONNECT tunnels keep half-close semantics).
	HalfCloseGrace time.Duration

	last atomic.Int64 // unix nanos of the last byte moved
}

// Start prepares the tunnel on the caller's goroutine and runs it on two
// new ones; wg (when set) counts the tunnel until it is finished.
//
// An idle tunnel holds two parked goroutines and nothing else: no buffer,
// no splice pipe, no timer. Everything with a deep call chain (the early
// bytes' write, arming the inactivity deadlines) happens here, so the two
// goroutines wait with the runtime's smallest stack; the deep splice path
// runs only while bytes flow.
func (t *Tunnel) Start(wg *sync.WaitGroup) {
	if !t.prepare() {
		t.finish()
		return
	}
	if wg != nil {
		wg.Add(1)
	}
	go func() {
		t.run()
		if wg != nil {
			wg.Done()
		}
	}()
}

// Run blocks until the tunnel is finished. Both sockets are closed on return.
func (t *Tunnel) Run() {
	if t.prepare() {
		t.run()
		return
	}
	t.finish()
}

// prepare writes the early bytes and arms both directions' inactivity
// deadlines; false means the tunnel is already over.
func (t *Tunnel) prepare() bool {
	t.last.Store(time.Now().UnixNano())
	if len(t.Early) > 0 {
		n, err := t.Upstream.Write(t.Early)
		t.Meter.Bytes("up", string(t.Protocol), int64(n))
		t.Early = nil
		if err != nil {
			return false
		}
	}
	if t.Idle > 0 {
		// A read deadline lives in the socket's poll descriptor: the
		// inactivity limit costs no allocation and no timer of its own.
		at := time.Now().Add(t.Idle)
		t.Client.SetReadDeadline(at)
		t.Upstream.SetReadDeadline(at)
	}
	return true
}

// finish closes both sockets and the owner.
func (t *Tunnel) finish() {
	t.Client.Close()
	t.Upstream.Close()
	if t.Owner != nil {
		t.Owner.Close()
	}
}

func (t *Tunnel) run() {
	defer t.finish()
	var wg sync.WaitGroup
	var ended func() // nil unless HalfCloseGrace: CONNECT tunnels pay nothing
	if t.HalfCloseGrace > 0 {
		var once sync.Once
		ended = func() {
			once.Do(func() {
				time.AfterFunc(t.HalfCloseGrace, func() {
					t.Client.Close()
					t.Upstream.Close()
				})
			})
		}
	}
	wg.Add(1)
	go func() {
		defer wg.Done()
		t.pipe(t.Upstream, t.Client, "up")
		if ended != nil {
			ended()
		}
	}()
	t.pipe(t.Client, t.Upstream, "down")
	if ended != nil {
		ended()
	}
	wg.Wait()
}

// busyWindow is how long a direction keeps its splice pipe after the last
// byte before it falls back to waiting without one.
const busyWindow = time.Second

// pipe copies src → dst until EOF or error. While bytes flow it splices
// (io.Copy between the two *net.TCPConn); after busyWindow without data it
// gives the pipe back and waits for readability without holding anything.
// On EOF it half-closes dst so the peer sees the end while the other
// direction keeps flowing; on error it closes both so the other direction
// stops too.
func (t *Tunnel) pipe(dst, src *net.TCPConn, dir string) {
	var total int64
	defer func() { t.Meter.Bytes(dir, string(t.Protocol), total) }()
	for {
		// Wait first: a direction that never carries data never takes a pipe.
		avail, err := t.waitReadable(src)
		if err != nil {
			dst.Close()
			src.Close()
			return
		}
		if avail == 0 { // orderly EOF
			dst.CloseWrite()
			src.CloseRead()
			return
		}
		n, err := t.burst(dst, src)
		total += n
		if err == nil { // orderly EOF
			dst.CloseWrite()
			src.CloseRead()
			return
		}
		if !errors.Is(err, os.ErrDeadlineExceeded) {
			dst.Close()
			src.Close()
			return
		}
	}
}

// burst splices src → dst until EOF, an error, or a window passes without
// a byte; it returns with src's inactivity deadline re-armed.
func (t *Tunnel) burst(dst, src *net.TCPConn) (int64, error) {
	window := busyWindow
	if t.Idle > 0 && t.Idle/2 < window {
		window = t.Idle / 2 // the other direction must see this one's bytes in time
	}
	var total int64
	for {
		src.SetReadDeadline(time.Now().Add(window))
		n, err := io.Copy(dst, src)
		total += n
		if n > 0 {
			t.last.Store(time.Now().UnixNano())
		}
		if err != nil && errors.Is(err, os.ErrDeadlineExceeded) && n > 0 {
			continue // still busy: a new window from now
		}
		t.armIdle(src)
		return total, err
	}
}

// armIdle sets src's read deadline to the tunnel's idle limit, counted
// from the last byte either way (none when there is no limit).
func (t *Tunnel) armIdle(src *net.TCPConn) {
	if t.Idle > 0 {
		src.SetReadDeadline(time.Unix(0, t.last.Load()).Add(t.Idle))
	} else {
		src.SetReadDeadline(time.Time{})
	}
}

// waitReadable waits until src has data or reached EOF and returns the
// number of bytes queued (0 at EOF). It holds no buffer. Its deadline is the
// idle limit: when it passes while the other direction moved bytes, the
// wait goes on from the last byte; otherwise the tunnel is idle.
func (t *Tunnel) waitReadable(src *net.TCPConn) (int, error) {
	raw, err := src.SyscallConn()
	if err != nil {
		return 0, err
	}
	for {
		var avail int
		var serr error
		err = raw.Read(func(fd uintptr) bool {
			avail, serr = peekQueued(int(fd))
			return serr != unix.EAGAIN && serr != unix.EINTR
		})
		if err == nil {
			return avail, serr
		}
		if errors.Is(err, os.ErrDeadlineExceeded) && t.Idle > 0 &&
			time.Since(time.Unix(0, t.last.Load())) < t.Idle {
			t.armIdle(src)
			continue
		}
		return 0, err
	}
}

// peekQueued reports how many bytes fd has queued (0 at EOF) without
// consuming any: EAGAIN when there is nothing yet.
func peekQueued(fd int) (int, error) {
	n, errno := peekOne(fd)
	switch {
	case errno != 0:
		return 0, errno
	case n == 0:
		return 0, nil
	}
	avail, err := unix.IoctlGetInt(fd, unix.SIOCINQ)
	if err != nil || avail < 1 {
		avail = 1
	}
	return avail, nil
}

// rawTCP returns the socket under an admitted connection.
func rawTCP(c net.Conn) (*net.TCPConn, bool) {
	switch v := c.(type) {
	case *Conn:
		return v.TCPConn, true
	case *net.TCPConn:
		return v, true
	}
	return nil, false
}
