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

// Run blocks until the tunnel is finished. Both sockets are closed on return.
func (t *Tunnel) Run() {
	t.last.Store(time.Now().UnixNano())
	defer func() {
		t.Client.Close()
		t.Upstream.Close()
		if t.Owner != nil {
			t.Owner.Close()
		}
	}()
	if len(t.Early) > 0 {
		n, err := t.Upstream.Write(t.Early)
		t.Meter.Bytes("up", string(t.Protocol), int64(n))
		if err != nil {
			return
		}
	}
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
		deadline := time.Now().Add(busyWindow)
		if t.Idle > 0 {
			if idleAt := time.Unix(0, t.last.Load()).Add(t.Idle); idleAt.Before(deadline) {
				deadline = idleAt
			}
		}
		src.SetReadDeadline(deadline)
		n, err := io.Copy(dst, src)
		total += n
		if n > 0 {
			t.last.Store(time.Now().UnixNano())
		}
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

// waitReadable waits until src has data or reached EOF and returns the
// number of bytes queued (0 at EOF). It honours the idle timeout, which
// counts activity in both directions.
func (t *Tunnel) waitReadable(src *net.TCPConn) (int, error) {
	raw, err := src.SyscallConn()
	if err != nil {
		return 0, err
	}
	for {
		if t.Idle > 0 {
			src.SetReadDeadline(time.Unix(0, t.last.Load()).Add(t.Idle))
		} else {
			src.SetReadDeadline(time.Time{}) // clear the busy window's deadline
		}
		var avail int
		var serr error
		err = raw.Read(func(fd uintptr) bool {
			var b [1]byte
			n, _, e := unix.Recvfrom(int(fd), b[:], unix.MSG_PEEK|unix.MSG_DONTWAIT)
			switch {
			case e == unix.EAGAIN || e == unix.EINTR:
				return false
			case e != nil:
				serr = e
			case n == 0:
				avail = 0
			default:
				avail, e = unix.IoctlGetInt(int(fd), unix.SIOCINQ)
				if e != nil || avail < 1 {
					avail = 1
				}
			}
			return true
		})
		if err == nil {
			if t.Idle > 0 {
				src.SetReadDeadline(time.Time{})
			}
			return avail, serr
		}
		if errors.Is(err, os.ErrDeadlineExceeded) {
			// The other direction may have been busy: idle only when
			// neither moved a byte for the whole period.
			if time.Since(time.Unix(0, t.last.Load())) < t.Idle {
				continue
			}
		}
		return 0, err
	}
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
