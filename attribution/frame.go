// Package attribution owns the link between a network connection and the
// command execution that opened it (SPEC §4): the attribution frame that a
// trusted bridge writes before any protocol byte, the registry of active
// executions and their secret tokens, per-execution event streams, and the
// control API served on a 0600 unix socket.
//
// It must never log, print or audit a token, and never decide whether a
// request is allowed (hostpolicy does).
package attribution

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"syscall"
	"time"
	"unicode/utf8"

	"golang.org/x/sys/unix"
)

// Magic opens every attribution frame: "\0CDXPXY1" (compatible with the
// Codex bridge).
const Magic = "\x00CDXPXY1"

// MaxTokenLen is the largest token a frame may carry.
const MaxTokenLen = 128

// FrameTimeout is how long a connection whose first byte is 0x00 has to
// deliver the rest of its frame (SPEC §4.1).
const FrameTimeout = 3 * time.Second

// Frame errors. Each maps to one netproxy_attribution_total result (Result).
var (
	ErrBadMagic  = errors.New("invalid network proxy attribution frame")
	ErrBadLength = errors.New("invalid network proxy attribution token length")
	ErrBadUTF8   = errors.New("network proxy attribution token is not UTF-8")
	ErrTimeout   = errors.New("network proxy attribution frame timed out")
	ErrNoPeek    = errors.New("connection does not support peeking its first byte")
)

// Result names an error for the attribution_total metric.
func Result(err error) string {
	switch {
	case err == nil:
		return "ok"
	case errors.Is(err, ErrBadMagic):
		return "bad_magic"
	case errors.Is(err, ErrBadLength):
		return "bad_length"
	case errors.Is(err, ErrBadUTF8):
		return "bad_utf8"
	case errors.Is(err, ErrTimeout):
		return "timeout"
	default:
		return "error"
	}
}

// WriteFrame writes the attribution frame for token to w in one write, so a
// bridge can put it on a fresh connection before the client's first byte.
func WriteFrame(w io.Writer, token string) error {
	if len(token) == 0 || len(token) > MaxTokenLen {
		return ErrBadLength
	}
	if !utf8.ValidString(token) {
		return ErrBadUTF8
	}
	buf := make([]byte, 0, len(Magic)+2+len(token))
	buf = append(buf, Magic...)
	buf = binary.BigEndian.AppendUint16(buf, uint16(len(token)))
	buf = append(buf, token...)
	_, err := w.Write(buf)
	return err
}

// DecodeFrame reads one whole frame (magic included) from r and returns its
// token. It reads exactly the frame's bytes and nothing after them, so the
// protocol bytes that follow stay in r.
func DecodeFrame(r io.Reader) (string, error) {
	var head [len(Magic) + 2]byte
	if _, err := io.ReadFull(r, head[:]); err != nil {
		return "", readErr(err)
	}
	if string(head[:len(Magic)]) != Magic {
		return "", ErrBadMagic
	}
	n := int(binary.BigEndian.Uint16(head[len(Magic):]))
	if n == 0 || n > MaxTokenLen {
		return "", ErrBadLength
	}
	tok := make([]byte, n)
	if _, err := io.ReadFull(r, tok); err != nil {
		return "", readErr(err)
	}
	if !utf8.Valid(tok) {
		return "", ErrBadUTF8
	}
	return string(tok), nil
}

func readErr(err error) error {
	if errors.Is(err, os.ErrDeadlineExceeded) {
		return ErrTimeout
	}
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		return ErrTimeout
	}
	return fmt.Errorf("reading attribution frame: %w", err)
}

// ReadFrame peeks the first byte of conn without consuming it. When it is not
// 0x00 the connection is unattributed and nothing is consumed (framed=false).
// When it is 0x00 the whole frame must arrive within timeout; it is consumed
// and its token returned. conn must expose its socket (syscall.Conn) so the
// peek leaves the byte in the kernel; callers set any first-byte deadline on
// conn beforehand. The read deadline is cleared on return.
func ReadFrame(conn net.Conn, timeout time.Duration) (token string, framed bool, err error) {
	first, err := PeekByte(conn)
	if err != nil {
		return "", false, err
	}
	if first != 0x00 {
		return "", false, conn.SetReadDeadline(time.Time{})
	}
	if err := conn.SetReadDeadline(time.Now().Add(timeout)); err != nil {
		return "", true, err
	}
	token, err = DecodeFrame(conn)
	if err != nil {
		return "", true, err
	}
	return token, true, conn.SetReadDeadline(time.Time{})
}

// PeekByte returns the next byte of conn without consuming it (MSG_PEEK),
// waiting for it under conn's read deadline.
func PeekByte(conn net.Conn) (byte, error) {
	sc, ok := conn.(syscall.Conn)
	if !ok {
		return 0, ErrNoPeek
	}
	raw, err := sc.SyscallConn()
	if err != nil {
		return 0, err
	}
	var (
		buf   [1]byte
		n     int
		rerr  error
		gotIt bool
	)
	err = raw.Read(func(fd uintptr) bool {
		n, _, rerr = unix.Recvfrom(int(fd), buf[:], unix.MSG_PEEK|unix.MSG_DONTWAIT)
		if rerr == unix.EAGAIN || rerr == unix.EINTR {
			return false // wait for readability under the deadline
		}
		gotIt = true
		return true
	})
	if err != nil {
		return 0, readErr(err)
	}
	if !gotIt {
		return 0, io.ErrUnexpectedEOF
	}
	if rerr != nil {
		return 0, rerr
	}
	if n == 0 {
		return 0, io.EOF
	}
	return buf[0], nil
}
