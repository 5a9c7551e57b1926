package proxy

import (
	"errors"
	"net"
	"os"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// Parker holds the quiet directions of every tunnel: a direction that has
// carried no byte for Parker.After gives up its goroutine and is parked
// here, its source socket watched by one epoll set that the Go runtime's
// own poller watches in turn. When the socket becomes readable (data, end
// of stream or an error) the direction is resumed on a fresh goroutine. An
// idle tunnel therefore costs its sockets and a few hundred bytes, not two
// goroutines.
//
// The Parker never reads, writes or closes a socket itself, and it never
// touches a socket by descriptor number outside the runtime's reference on
// it (every epoll_ctl runs inside RawConn.Control), so a descriptor closed
// and reused meanwhile cannot be confused with a parked one. Every way a
// tunnel ends goes through Tunnel.abort or a direction's own end, which
// take the tunnel's parked directions back (take), so exactly one party
// ends each direction.
type Parker struct {
	// After is how long a direction must be quiet before it is parked.
	After time.Duration

	file *os.File // the epoll instance, non-blocking, in the runtime's poller
	raw  syscall.RawConn

	mu sync.Mutex
	// parked maps a parked direction's key (Tunnel.parkID | dir) to its
	// tunnel: the key's low bit is the direction.
	parked map[uint64]*Tunnel
	nextID uint64
	done   chan struct{}
}

// DefaultParkAfter is how long a tunnel direction stays on its goroutine
// without traffic before it is parked.
const DefaultParkAfter = 2 * time.Second

// NewParker creates the epoll set and starts the goroutine that resumes
// parked directions and closes tunnels idle past their limit. Close stops
// it.
func NewParker() (*Parker, error) {
	fd, err := unix.EpollCreate1(unix.EPOLL_CLOEXEC)
	if err != nil {
		return nil, os.NewSyscallError("epoll_create1", err)
	}
	if err := unix.SetNonblock(fd, true); err != nil {
		unix.Close(fd)
		return nil, os.NewSyscallError("fcntl", err)
	}
	// Non-blocking: os.NewFile registers it with the runtime's poller, so
	// waiting for parked sockets holds no thread.
	f := os.NewFile(uintptr(fd), "tunnel-parker")
	raw, err := f.SyscallConn()
	if err != nil {
		f.Close()
		return nil, err
	}
	p := &Parker{After: DefaultParkAfter, file: f, raw: raw, parked: make(map[uint64]*Tunnel), done: make(chan struct{})}
	go p.run()
	return p, nil
}

// Close stops the Parker. Tunnels still parked stay parked: close their
// connections first (a server shutdown closes every connection).
func (p *Parker) Close() error {
	err := p.file.Close()
	<-p.done
	return err
}

// Parked reports how many tunnel directions are parked.
func (p *Parker) Parked() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.parked)
}

// id gives a tunnel its key space (two keys: one per direction).
func (p *Parker) id() uint64 {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.nextID++
	return p.nextID << 1
}

// park hands direction dir of t, reading from src, to the Parker; the
// caller's goroutine returns right after. When src is closed meanwhile the
// direction ends here (unless the closer took it first).
func (p *Parker) park(t *Tunnel, dir int, src *net.TCPConn) {
	key := t.parkID | uint64(dir)
	p.mu.Lock()
	p.parked[key] = t
	p.mu.Unlock()
	ev := unix.EpollEvent{Events: unix.EPOLLIN | unix.EPOLLRDHUP | unix.EPOLLONESHOT,
		Fd: int32(uint32(key)), Pad: int32(uint32(key >> 32))}
	err := p.ctl(unix.EPOLL_CTL_ADD, src, &ev)
	if err != nil || t.aborted() {
		// Closed meanwhile: whoever takes the entry ends the direction.
		if p.take(key) {
			t.dirEnded()
		}
	}
}

// forget removes src's (disarmed) registration before its direction
// waits on its own again. Nothing to do when src is closed.
func (p *Parker) forget(src *net.TCPConn) {
	p.ctl(unix.EPOLL_CTL_DEL, src, nil)
}

// ctl runs epoll_ctl for src while the runtime holds both descriptors
// (the epoll set's and src's): neither can be closed, and so neither
// number reused, during the call. It fails when either is closed.
func (p *Parker) ctl(op int, src *net.TCPConn, ev *unix.EpollEvent) error {
	sraw, err := src.SyscallConn()
	if err != nil {
		return err
	}
	var cerr error
	err = p.raw.Control(func(epfd uintptr) {
		err := sraw.Control(func(fd uintptr) {
			cerr = unix.EpollCtl(int(epfd), op, int(fd), ev)
		})
		if cerr == nil {
			cerr = err
		}
	})
	if err != nil {
		return err
	}
	return cerr
}

// take removes a parked direction; false when it is not (or no longer)
// parked. Taking is the one step that decides who continues a direction.
func (p *Parker) take(key uint64) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if _, ok := p.parked[key]; !ok {
		return false
	}
	delete(p.parked, key)
	return true
}

// takeTunnel takes every parked direction of t and returns them.
func (p *Parker) takeTunnel(t *Tunnel) (dirs [2]bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for d := 0; d < 2; d++ {
		key := t.parkID | uint64(d)
		if _, ok := p.parked[key]; ok {
			delete(p.parked, key)
			dirs[d] = true
		}
	}
	return dirs
}

// sweepEvery is how often parked tunnels are checked against their idle
// limit (a tunnel may outlive its limit by up to this much).
const sweepEvery = time.Second

func (p *Parker) run() {
	defer close(p.done)
	events := make([]unix.EpollEvent, 256)
	for {
		p.file.SetReadDeadline(time.Now().Add(sweepEvery))
		var n int
		err := p.raw.Read(func(fd uintptr) bool {
			var werr error
			n, werr = unix.EpollWait(int(fd), events, 0)
			if werr != nil {
				n = 0
				return werr != unix.EINTR && werr != unix.EAGAIN
			}
			return n > 0
		})
		switch {
		case errors.Is(err, os.ErrDeadlineExceeded):
			p.sweep()
			continue
		case err != nil:
			return // closed
		}
		for _, ev := range events[:n] {
			key := uint64(uint32(ev.Fd)) | uint64(uint32(ev.Pad))<<32
			p.mu.Lock()
			t, ok := p.parked[key]
			delete(p.parked, key)
			p.mu.Unlock()
			if ok {
				go t.resume(int(key & 1))
			}
		}
	}
}

// sweep closes tunnels whose every direction has been parked past the
// tunnel's idle limit (a direction on its goroutine keeps its own
// deadline).
func (p *Parker) sweep() {
	now := time.Now().UnixNano()
	var idle []*Tunnel
	p.mu.Lock()
	for _, t := range p.parked {
		if t.Idle > 0 && now-t.last.Load() >= int64(t.Idle) {
			idle = append(idle, t)
		}
	}
	p.mu.Unlock()
	for _, t := range idle {
		t.acc.setCause(causeIdle)
		t.abort()
	}
}
