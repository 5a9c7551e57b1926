package proxy

import (
	"unsafe"

	"golang.org/x/sys/unix"
)

// peekOne peeks at one byte of a non-blocking socket without consuming it:
// (1, 0) when data is queued, (0, 0) at EOF, (0, EAGAIN) when nothing has
// arrived yet. It allocates nothing (unix.Recvfrom builds the peer's
// address on every call); it runs on every pooled request and every
// tunnel wake-up.
func peekOne(fd int) (int, unix.Errno) {
	var b [1]byte
	n, _, errno := unix.Syscall6(unix.SYS_RECVFROM, uintptr(fd), uintptr(unsafe.Pointer(&b[0])), 1,
		unix.MSG_PEEK|unix.MSG_DONTWAIT, 0, 0)
	return int(n), errno
}
