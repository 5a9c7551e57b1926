package proxy

import (
	"errors"
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
// descriptors) for as long as it waits, so a direction quiet for a second
// gives it back and waits for readability without one; quiet for
// Parker.After, it gives up its goroutine too and is parked (tunnelpark.go).
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
	// its connection slot is released). Closing it from elsewhere (a
	// revocation, the kill switch, a shutdown) ends the tunnel, parked
	// directions included.
	Owner *Conn
	// Parker, when set, takes the tunnel's quiet directions (nil: each
	// direction keeps its goroutine while it waits).
	Parker *Parker
	// HalfCloseGrace, when set, closes both sockets this long after either
	// direction ended (an upgraded connection whose client left must not
	// stay open for as long as the upstream likes). 0: each direction
	// runs to its own end (CONNECT tunnels keep half-close semantics).
	HalfCloseGrace time.Duration
	// TLSName, when set, is the tunnel's host: its first client bytes, if
	// a TLS ClientHello, must name no host or this one, or the tunnel is
	// closed before a byte goes upstream (tunnelname.go, SPEC §3.11).
	TLSName string

	last atomic.Int64 // unix nanos of the last byte moved
	live atomic.Int32 // directions not yet ended
	// flags are stateAborted and stateHandedOver, in one word: the Tunnel
	// stays in a smaller size class (every idle tunnel holds one).
	flags  atomic.Uint32
	parkID uint64 // this tunnel's keys in Parker (two: one per direction)
	// wg, when set, counts the tunnel until it is finished (a pointer, not
	// a wg.Done closure: one allocation less per tunnel).
	wg *sync.WaitGroup
	// budget counts the tunnel's bytes against its execution's egress
	// budget (budget.go); nil: none.
	budget *tunnelBudget
	// sni reports a tunnel closed by the TLS-name check (tunnelname.go);
	// nil: nothing reports it.
	sni *sniReport
	// acc is the tunnel's access record (access.go); nil: none.
	acc *tunnelAccess
	// capture, set on a captured connection's tunnel, takes the client's
	// connection over when its first bytes are plain HTTP (capturehttp.go).
	capture *captureConnect
}

// Tunnel.flags.
const (
	// stateAborted: both sockets closed by abort (or finish).
	stateAborted = 1 << iota
	// stateHandedOver: a captured connection's plain HTTP took the client
	// over (capturehttp.go); the tunnel then ends without closing it.
	stateHandedOver
)

func (t *Tunnel) aborted() bool    { return t.flags.Load()&stateAborted != 0 }
func (t *Tunnel) handedOver() bool { return t.flags.Load()&stateHandedOver != 0 }

// The two directions. up: client → upstream; down: upstream → client.
const (
	dirUp   = 0
	dirDown = 1
)

var dirName = [2]string{"up", "down"}

// Start prepares the tunnel on the caller's goroutine and runs it on two
// new ones (one per direction); wg (when set) counts the tunnel until it is
// finished.
//
// Everything with a deep call chain (the early bytes' write, arming the
// deadlines) happens here, so the direction goroutines wait with the
// runtime's smallest stack; the deep splice path runs only while bytes
// flow, and a quiet direction is parked without a goroutine at all.
func (t *Tunnel) Start(wg *sync.WaitGroup) {
	if wg != nil {
		wg.Add(1)
		t.wg = wg
	}
	if !t.prepare() {
		t.live.Store(0)
		t.finish()
		return
	}
	if t.Parker != nil {
		// Both directions start parked: one with bytes already queued is
		// resumed at once (epoll reports a ready socket when it is added),
		// and a tunnel that carries nothing never takes a goroutine.
		if t.peeksFirst() && len(t.Early) > 0 {
			// The ClientHello came with the request: check it now.
			go t.runDir(dirUp)
		} else {
			t.Parker.park(t, dirUp, t.Client)
		}
		t.Parker.park(t, dirDown, t.Upstream)
		return
	}
	go t.runDir(dirUp)
	go t.runDir(dirDown)
}

// Run blocks until the tunnel is finished. Both sockets are closed on return.
func (t *Tunnel) Run() {
	var wg sync.WaitGroup
	t.Start(&wg)
	wg.Wait()
}

// prepare writes the early bytes, arms both directions' deadlines and
// hooks the owner's Close; false means the tunnel is already over.
func (t *Tunnel) prepare() bool {
	t.live.Store(2)
	t.last.Store(time.Now().UnixNano())
	if t.Parker != nil {
		t.parkID = t.Parker.id()
	}
	if t.Owner != nil {
		t.Owner.tunnel.Store(t)
		if t.Owner.closed.Load() {
			return false // closed before the hook was in place
		}
	}
	if len(t.Early) > 0 && !t.peeksFirst() { // else checkTLSName sends them
		n, err := t.Upstream.Write(t.Early)
		t.Meter.Bytes("up", string(t.Protocol), int64(n))
		t.budget.count(dirUp, int64(n))
		t.acc.count(dirUp, int64(n))
		t.Early = nil
		if err != nil {
			return false
		}
	}
	// A read deadline lives in the socket's poll descriptor: the limits
	// cost no allocation and no timer of their own. (A parked direction
	// arms its own when it resumes.)
	if at, ok := t.nextDeadline(); ok && t.Parker == nil {
		t.Client.SetReadDeadline(at)
		t.Upstream.SetReadDeadline(at)
	}
	return true
}

// nextDeadline is when a waiting direction must look up again: at the idle
// limit, or earlier to park; ok is false when neither applies.
func (t *Tunnel) nextDeadline() (time.Time, bool) {
	var at time.Time
	if t.Idle > 0 {
		at = time.Unix(0, t.last.Load()).Add(t.Idle)
	}
	if t.Parker != nil {
		if p := time.Now().Add(t.Parker.After); at.IsZero() || p.Before(at) {
			at = p
		}
	}
	return at, !at.IsZero()
}

// abort closes both sockets and ends the directions that are parked (a
// direction on its goroutine sees the closed socket and ends itself).
func (t *Tunnel) abort() {
	if t.flags.Or(stateAborted)&stateAborted != 0 {
		return
	}
	if !t.handedOver() {
		t.Client.Close()
	}
	t.Upstream.Close()
	if t.Parker != nil {
		for _, parked := range t.Parker.takeTunnel(t) {
			if parked {
				t.dirEnded()
			}
		}
	}
}

// dirEnded counts a direction out; the last one finishes the tunnel.
func (t *Tunnel) dirEnded() {
	if t.HalfCloseGrace > 0 && !t.aborted() {
		time.AfterFunc(t.HalfCloseGrace, t.abort)
	}
	if t.live.Add(-1) == 0 {
		t.finish()
	}
}

// finish closes both sockets and the owner, once both directions ended.
func (t *Tunnel) finish() {
	t.flags.Or(stateAborted)
	if !t.handedOver() {
		t.Client.Close()
	}
	t.Upstream.Close()
	if t.Owner != nil && !t.handedOver() {
		t.Owner.Close()
	}
	t.acc.done() // before onFinish: a shutdown waits for the line
	if t.wg != nil {
		t.wg.Done()
	}
}

// ends returns a direction's destination and source.
func (t *Tunnel) ends(dir int) (dst, src *net.TCPConn) {
	if dir == dirUp {
		return t.Upstream, t.Client
	}
	return t.Client, t.Upstream
}

// resume continues a parked direction whose socket became readable.
func (t *Tunnel) resume(dir int) {
	_, src := t.ends(dir)
	t.Parker.forget(src)
	if at, ok := t.nextDeadline(); ok {
		src.SetReadDeadline(at) // the one that parked it has passed
	}
	t.runDir(dir)
}

// runDir copies src → dst until EOF, an error, or a quiet spell long
// enough to park. While bytes flow it splices (io.Copy between the two
// *net.TCPConn); after busyWindow without data it gives the pipe back and
// waits for readability without holding anything. On EOF it half-closes
// dst so the peer sees the end while the other direction keeps flowing; on
// error it closes both so the other direction stops too.
func (t *Tunnel) runDir(dir int) {
	dst, src := t.ends(dir)
	if dir == dirUp && t.peeksFirst() && len(t.Early) > 0 && !t.firstBytes() {
		return
	}
	for {
		// Wait first: a direction that never carries data never takes a pipe.
		avail, park, err := t.waitReadable(src)
		if park {
			t.Parker.park(t, dir, src)
			return
		}
		if err != nil {
			t.acc.readFailed(dir, err)
			t.abort()
			t.dirEnded()
			return
		}
		if dir == dirUp && t.peeksFirst() && avail > 0 && !t.firstBytes() {
			return
		}
		if avail == 0 { // orderly EOF
			t.acc.setCause(eofCause[dir])
			dst.CloseWrite()
			src.CloseRead()
			t.dirEnded()
			return
		}
		n, err := t.burst(dst, src, dir)
		t.Meter.Bytes(dirName[dir], string(t.Protocol), n)
		t.acc.count(dir, n)
		if err == nil { // orderly EOF
			t.acc.setCause(eofCause[dir])
			dst.CloseWrite()
			src.CloseRead()
			t.dirEnded()
			return
		}
		if !errors.Is(err, os.ErrDeadlineExceeded) {
			t.acc.setCause(errCause(err))
			t.abort()
			t.dirEnded()
			return
		}
	}
}

// busyWindow is how long a direction keeps its splice pipe after the last
// byte before it falls back to waiting without one.
const busyWindow = time.Second

// burst splices src → dst until EOF, an error, or a window passes without
// a byte; it returns with src's deadline re-armed.
func (t *Tunnel) burst(dst, src *net.TCPConn, dir int) (int64, error) {
	window := busyWindow
	if t.Idle > 0 && t.Idle/2 < window {
		window = t.Idle / 2 // the other direction must see this one's bytes in time
	}
	if t.Parker != nil && t.Parker.After < window {
		window = t.Parker.After
	}
	var total int64
	for {
		src.SetReadDeadline(time.Now().Add(window))
		n, err := t.copyDir(dst, src, dir)
		total += n
		if n > 0 {
			t.last.Store(time.Now().UnixNano())
		}
		if err != nil && errors.Is(err, os.ErrDeadlineExceeded) && n > 0 {
			continue // still busy: a new window from now
		}
		t.armWait(src)
		return total, err
	}
}

// armWait sets src's read deadline for the wait that follows a burst.
func (t *Tunnel) armWait(src *net.TCPConn) {
	if at, ok := t.nextDeadline(); ok {
		src.SetReadDeadline(at)
	} else {
		src.SetReadDeadline(time.Time{})
	}
}

// waitReadable waits until src has data or reached EOF and returns the
// number of bytes queued (0 at EOF). It holds no buffer. When its deadline
// passes it closes an idle tunnel (err), parks a direction that has been
// quiet for Parker.After (park), or waits on.
func (t *Tunnel) waitReadable(src *net.TCPConn) (avail int, park bool, err error) {
	raw, err := src.SyscallConn()
	if err != nil {
		return 0, false, err
	}
	for {
		var serr error
		err = raw.Read(func(fd uintptr) bool {
			avail, serr = peekQueued(int(fd))
			return serr != unix.EAGAIN && serr != unix.EINTR
		})
		if err == nil {
			return avail, false, serr
		}
		if !errors.Is(err, os.ErrDeadlineExceeded) {
			return 0, false, err
		}
		quiet := time.Duration(time.Now().UnixNano() - t.last.Load())
		if t.Idle > 0 && quiet >= t.Idle {
			return 0, false, err // idle: neither direction moved a byte
		}
		if t.Parker != nil && quiet >= t.Parker.After {
			return 0, true, nil
		}
		t.armWait(src)
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
