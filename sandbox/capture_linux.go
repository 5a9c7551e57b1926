package sandbox

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"os"
	"strconv"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/netproxy/netproxy/sandbox/capture"
	"golang.org/x/sys/unix"
)

// Transparent capture, execwrap's side (SPEC §6.6; the init's side is
// capture_init_linux.go). The sockets live in the sandbox's network
// namespace; this process serves them: the resolver answers from the run's
// pool, and each captured connection goes to netproxy through the bridge,
// framed with the execution's token, as CONNECT name:port (a pool address)
// or ip:port (any other). netproxy judges it as that explicit request; a
// non-2xx answer resets the client.

// capturer is one run's capture.
type capturer struct {
	pool     *capture.Pool
	target   *ProxyTarget
	captured atomic.Int64 // connections handed to netproxy
	refused  atomic.Int64 // connections netproxy refused (reset)
}

// acceptCapture validates the sockets of a msgCapture and serves them.
func acceptCapture(ctx context.Context, br *bridge, p *ProxyTarget, fds []int) (*capturer, error) {
	if br == nil {
		return nil, errors.New("sandbox: unexpected capture sockets without a proxied network")
	}
	if len(fds) != 3 && len(fds) != 4 {
		return nil, fmt.Errorf("sandbox: capture: want 3 or 4 sockets, got %d", len(fds))
	}
	want := []struct {
		typ  int
		addr netip.AddrPort
	}{
		captureFDResolverUDP: {unix.SOCK_DGRAM, netip.MustParseAddrPort(captureResolverAddr + ":53")},
		captureFDResolverTCP: {unix.SOCK_STREAM, netip.MustParseAddrPort(captureResolverAddr + ":53")},
		captureFDListen4:     {unix.SOCK_STREAM, netip.AddrPortFrom(netip.MustParseAddr("127.0.0.1"), capturePort)},
		captureFDListen6:     {unix.SOCK_STREAM, netip.AddrPortFrom(netip.IPv6Loopback(), capturePort)},
	}
	for i, fd := range fds {
		if err := checkSocket(fd, want[i].typ, want[i].addr); err != nil {
			return nil, fmt.Errorf("sandbox: capture socket %d: %w", i, err)
		}
	}
	files := make([]*os.File, len(fds))
	for i, fd := range fds {
		dup, err := unix.FcntlInt(uintptr(fd), unix.F_DUPFD_CLOEXEC, 0)
		if err != nil {
			return nil, err
		}
		files[i] = os.NewFile(uintptr(dup), "sandbox-capture-"+strconv.Itoa(i))
		defer files[i].Close()
	}
	pc, err := net.FilePacketConn(files[captureFDResolverUDP])
	if err != nil {
		return nil, fmt.Errorf("sandbox: capture resolver: %w", err)
	}
	var lns []net.Listener
	for _, f := range files[captureFDResolverTCP:] {
		l, err := net.FileListener(f)
		if err != nil {
			pc.Close()
			for _, l := range lns {
				l.Close()
			}
			return nil, fmt.Errorf("sandbox: capture listener: %w", err)
		}
		lns = append(lns, l)
	}
	c := &capturer{pool: capture.NewDefaultPool(), target: p}
	res := &capture.Resolver{Pool: c.pool}
	br.serveSocket(pc, func() { _ = res.ServeUDP(ctx, pc) })
	tcpDNS := lns[0]
	br.serveSocket(tcpDNS, func() { _ = res.ServeTCP(ctx, tcpDNS) })
	for _, l := range lns[1:] {
		br.acceptLoop(l, func(conn net.Conn) { c.handle(ctx, br, conn) })
	}
	return c, nil
}

// checkSocket: fd is a socket of type typ bound to addr (and listening,
// for a stream socket).
func checkSocket(fd, typ int, addr netip.AddrPort) error {
	if v, err := unix.GetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_TYPE); err != nil || v != typ {
		return fmt.Errorf("not a socket of type %d", typ)
	}
	if typ == unix.SOCK_STREAM {
		if v, err := unix.GetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_ACCEPTCONN); err != nil || v != 1 {
			return errors.New("not listening")
		}
	}
	sa, err := unix.Getsockname(fd)
	if err != nil {
		return err
	}
	var got netip.AddrPort
	switch a := sa.(type) {
	case *unix.SockaddrInet4:
		got = netip.AddrPortFrom(netip.AddrFrom4(a.Addr), uint16(a.Port))
	case *unix.SockaddrInet6:
		got = netip.AddrPortFrom(netip.AddrFrom16(a.Addr), uint16(a.Port))
	}
	if got != addr {
		return fmt.Errorf("bound to %s, want %s", got, addr)
	}
	return nil
}

// signals reports what capture did (counts only, never a name).
func (c *capturer) signals() []string {
	if c == nil {
		return nil
	}
	out := []string{"capture_connections:" + strconv.FormatInt(c.captured.Load(), 10)}
	if n := c.refused.Load(); n > 0 {
		out = append(out, "capture_refused:"+strconv.FormatInt(n, 10))
	}
	return out
}

// handle sends one captured connection to netproxy as an explicit CONNECT.
func (c *capturer) handle(ctx context.Context, br *bridge, client net.Conn) {
	defer client.Close()
	br.track(client, true)
	defer br.track(client, false)
	dst, err := originalDst(client)
	if err != nil {
		resetConn(client)
		return
	}
	authority := dst.String() // ip:port, [v6]:port
	if name, ok := c.pool.Name(dst.Addr()); ok {
		authority = net.JoinHostPort(name, strconv.Itoa(int(dst.Port())))
	}
	// An unmapped pool address goes as the address: netproxy blocks it as
	// non-public (SPEC §3.3), and the block is listed like any other.
	up, early, err := c.connect(ctx, authority)
	if err != nil {
		c.refused.Add(1)
		resetConn(client)
		return
	}
	defer up.Close()
	br.track(up, true)
	defer br.track(up, false)
	c.captured.Add(1)
	if len(early) > 0 {
		if _, err := client.Write(early); err != nil {
			return
		}
	}
	splice(client, up)
}

// connect dials netproxy's HTTP listener, writes the frame and a CONNECT
// for authority, and returns the tunnel and any bytes of the upstream that
// came with the answer (a server that speaks first: SSH, SMTP). Anything
// but 200 is an error: the connection was refused.
func (c *capturer) connect(ctx context.Context, authority string) (net.Conn, []byte, error) {
	p := c.target
	dial := p.Dial
	if dial == nil {
		var d net.Dialer
		dial = d.DialContext
	}
	dctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	up, err := dial(dctx, "tcp", p.HTTPAddr)
	cancel()
	if err != nil {
		return nil, nil, err
	}
	// Frame and CONNECT in one write: one segment, one wake-up of netproxy.
	var head bytes.Buffer
	if p.WriteFrame == nil || p.WriteFrame(&head, p.Token) != nil {
		up.Close()
		return nil, nil, errors.New("frame not written")
	}
	head.WriteString("CONNECT " + authority + " HTTP/1.1\r\nHost: " + authority + "\r\n\r\n")
	_ = up.SetWriteDeadline(time.Now().Add(5 * time.Second))
	if _, err := up.Write(head.Bytes()); err != nil {
		up.Close()
		return nil, nil, err
	}
	_ = up.SetWriteDeadline(time.Time{})
	// No read deadline: the decision may wait for an approval. The run's
	// end closes up (tracked by the caller only after this returns, so
	// watch ctx here).
	stop := context.AfterFunc(ctx, func() { _ = up.Close() })
	rd := bufio.NewReader(up)
	resp, err := http.ReadResponse(rd, &http.Request{Method: http.MethodConnect})
	stop()
	if err != nil {
		up.Close()
		return nil, nil, err
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		up.Close()
		return nil, nil, fmt.Errorf("netproxy answered %d", resp.StatusCode)
	}
	var early []byte
	if n := rd.Buffered(); n > 0 {
		early, _ = rd.Peek(n)
	}
	return up, early, nil
}

// resetConn closes c with an RST (SO_LINGER 0): the client sees its
// connection reset, as SPEC §6.6 asks for a block.
func resetConn(c net.Conn) {
	if tc, ok := c.(*net.TCPConn); ok {
		_ = tc.SetLinger(0)
	}
	_ = c.Close()
}

// originalDst is the destination the sandboxed program connected to,
// before the redirect (SO_ORIGINAL_DST / IP6T_SO_ORIGINAL_DST from the
// conntrack entry of the sandbox's namespace).
func originalDst(c net.Conn) (netip.AddrPort, error) {
	tc, ok := c.(*net.TCPConn)
	if !ok {
		return netip.AddrPort{}, errors.New("not a TCP connection")
	}
	la, _ := tc.LocalAddr().(*net.TCPAddr)
	rc, err := tc.SyscallConn()
	if err != nil {
		return netip.AddrPort{}, err
	}
	var (
		out  netip.AddrPort
		serr error
	)
	err = rc.Control(func(fd uintptr) {
		var buf [unix.SizeofSockaddrInet6]byte
		level := unix.SOL_IP
		if la != nil && la.IP.To4() == nil {
			level = unix.SOL_IPV6
		}
		n := uint32(len(buf))
		_, _, e := unix.Syscall6(unix.SYS_GETSOCKOPT, fd, uintptr(level), unix.SO_ORIGINAL_DST,
			uintptr(unsafe.Pointer(&buf[0])), uintptr(unsafe.Pointer(&n)), 0)
		if e != 0 {
			serr = e
			return
		}
		port := uint16(buf[2])<<8 | uint16(buf[3]) // network order in both sockaddrs
		if level == unix.SOL_IP {
			out = netip.AddrPortFrom(netip.AddrFrom4([4]byte(buf[4:8])), port)
		} else {
			out = netip.AddrPortFrom(netip.AddrFrom16([16]byte(buf[8:24])), port)
		}
	})
	if err == nil {
		err = serr
	}
	return out, err
}
