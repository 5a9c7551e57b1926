package sandbox

import (
	"fmt"

	"golang.org/x/net/bpf"
)

// Seccomp return actions and the seccomp_data layout (linux/seccomp.h).
const (
	seccompRetKillProcess = 0x80000000
	seccompRetErrno       = 0x00050000
	seccompRetAllow       = 0x7fff0000
	errnoEPERM            = 1
	errnoENOSYS           = 38
	errnoEOPNOTSUPP       = 95

	seccompDataNr   = 0
	seccompDataArch = 4
	seccompDataArg0 = 16 // low 32 bits on little-endian arches
	seccompDataArg1 = 24
	seccompDataArg2 = 32
	seccompDataArg3 = 40

	afUnix       = 1
	afInet       = 2
	afInet6      = 10
	sockStream   = 1
	sockSeqpack  = 5
	sockTypeMask = 0xf // SOCK_NONBLOCK/SOCK_CLOEXEC live above the type
	ipprotoTCP   = 6

	// ioctl requests refused outright: TIOCSTI pushes bytes into a
	// terminal's input queue (bubblewrap's CVE-2017-5226), TIOCLINUX can
	// do the same on a virtual console. ioctl's request is an unsigned int,
	// so the low 32 bits of the argument are what the kernel sees.
	tiocsti   = 0x5412
	tioclinux = 0x541c

	x32SyscallBit = 0x40000000

	// msgFastOpen makes sendto/sendmsg/sendmmsg connect a fresh TCP socket
	// inside the send (tcp_sendmsg_fastopen), past the socket_connect LSM
	// hook that Landlock's TCP rules rely on. The flags are unsigned ints.
	msgFastOpen = 0x20000000

	// setIDBits are S_ISUID|S_ISGID: a file with either, written into a
	// workspace, runs with its host owner's (often root's) ids once someone
	// on the host executes it. The kernel reads modes as umode_t (16 bits),
	// so the low 32 bits of the argument hold every bit it uses.
	setIDBits = 0o6000
	// openCreates are O_CREAT|__O_TMPFILE (the same on amd64 and arm64):
	// only with one of them does open's mode argument create a file mode.
	openCreates = 0o100 | 0o20000000

	// cloneNewUser is CLONE_NEWUSER: a nested user namespace hands the
	// sandboxed process a full capability set over fresh namespaces — the
	// kernel's largest attack surface for an unprivileged process — and
	// nothing a command needs (as Docker's default profile and bwrap
	// --disable-userns refuse it).
	cloneNewUser = 0x10000000

	noSyscall = ^uint32(0) // the arch has no such syscall (arm64: chmod, open, …)
)

// archSyscalls holds the syscall numbers the filter names, per GOARCH, so
// the filter can be assembled (and tested) for an arch other than the host's.
type archSyscalls struct {
	auditArch                                   uint32
	x32                                         bool // amd64: deny the x32 ABI
	socket, socketpair, ioctl                   uint32
	ptrace, processVMReadv, processVMWritev     uint32
	ioUringSetup, ioUringEnter, ioUringRegister uint32
	addKey, requestKey, keyctl                  uint32
	sendto, sendmsg, sendmmsg, listen           uint32
	// Mode setters, by where the mode is: argument 1 (chmod, fchmod,
	// creat, mknod) or 2 (fchmodat, fchmodat2, mknodat).
	modeArg1, modeArg2 []uint32
	open, openat       uint32 // mode only with openCreates in the flags
	openat2            uint32 // mode inside a struct seccomp cannot read
	setxattrs          []uint32
	// Namespace creation: the flags are argument 0 of unshare and clone;
	// clone3 keeps them in a struct seccomp cannot read.
	unshare, clone, clone3 uint32
}

var syscallTables = map[string]archSyscalls{
	"amd64": {auditArch: 0xc000003e, x32: true, socket: 41, socketpair: 53, ioctl: 16,
		ptrace: 101, processVMReadv: 310, processVMWritev: 311,
		ioUringSetup: 425, ioUringEnter: 426, ioUringRegister: 427,
		addKey: 248, requestKey: 249, keyctl: 250,
		sendto: 44, sendmsg: 46, sendmmsg: 307, listen: 50,
		modeArg1: []uint32{90 /* chmod */, 91 /* fchmod */, 85 /* creat */, 133 /* mknod */},
		modeArg2: []uint32{268 /* fchmodat */, 452 /* fchmodat2 */, 259 /* mknodat */},
		open:     2, openat: 257, openat2: 437,
		setxattrs: []uint32{188, 189, 190, 463 /* setxattrat */},
		unshare:   272, clone: 56, clone3: 435},
	"arm64": {auditArch: 0xc00000b7, socket: 198, socketpair: 199, ioctl: 29,
		ptrace: 117, processVMReadv: 270, processVMWritev: 271,
		ioUringSetup: 425, ioUringEnter: 426, ioUringRegister: 427,
		addKey: 217, requestKey: 218, keyctl: 219,
		sendto: 206, sendmsg: 211, sendmmsg: 269, listen: 201,
		modeArg1: []uint32{52 /* fchmod */},
		modeArg2: []uint32{53 /* fchmodat */, 452 /* fchmodat2 */, 33 /* mknodat */},
		open:     noSyscall, openat: 56, openat2: 437,
		setxattrs: []uint32{5, 6, 7, 463 /* setxattrat */},
		unshare:   97, clone: 220, clone3: 435},
}

// FilterOptions chooses what the seccomp filter lets through.
type FilterOptions struct {
	Arch string // GOARCH of the filtered process
	// AllowInet allows socket(AF_INET|AF_INET6, …). In the namespaces tier
	// the empty netns already confines these; in the landlock tier Landlock
	// limits TCP connects to the bridge ports. A SOCK_STREAM socket is
	// always limited to protocol 0 or IPPROTO_TCP: Landlock's TCP rules do
	// not cover MPTCP (262) or SCTP.
	AllowInet bool
	// InetStreamOnly restricts AF_INET/AF_INET6 sockets to SOCK_STREAM
	// (landlock tier: Landlock cannot confine UDP on ABI < 10).
	InetStreamOnly bool
	// AllowUnix allows socket(AF_UNIX, …). Off by default: host unix sockets
	// on read-only mounts (e.g. netproxy's control socket) stay connectable,
	// so AF_UNIX would be a way out. socketpair(2) is allowed for AF_UNIX
	// SOCK_STREAM and SOCK_SEQPACKET only: a datagram socket can sendto()
	// any named host socket (/dev/log) even from a pair.
	AllowUnix bool
	// DenyListen refuses listen(2) (landlock tier): on an unbound socket it
	// autobinds an ephemeral port without Landlock's bind hook, and the
	// listener is on the host's interfaces, where anything can connect in.
	// Nothing inside could connect to it anyway (connects go to the
	// bridge ports only).
	DenyListen bool
}

// BuildFilter assembles the seccomp program: wrong arch → kill; x32 → EPERM;
// socket() only for the allowed families (stream sockets only as TCP);
// socketpair() only AF_UNIX stream/seqpacket; ioctl TIOCSTI/TIOCLINUX,
// add_key/request_key/keyctl, io_uring_*, ptrace and
// process_vm_readv/writev → EPERM; MSG_FASTOPEN on sendto/sendmsg/sendmmsg
// → EPERM; listen → EPERM with DenyListen; S_ISUID/S_ISGID in the mode of
// chmod/fchmod/fchmodat/fchmodat2/creat/mknod/mknodat, and of
// open/openat when they create → EPERM; openat2 → ENOSYS (libc and Go
// fall back to openat); CLONE_NEWUSER in unshare/clone → EPERM and clone3
// → ENOSYS (callers fall back to clone); the setxattr family → EOPNOTSUPP (the name is a
// pointer, and security.capability is a file capability; tools treat
// EOPNOTSUPP as a file system without xattrs); everything else allowed.
func BuildFilter(o FilterOptions) ([]bpf.RawInstruction, error) {
	t, ok := syscallTables[o.Arch]
	if !ok {
		return nil, fmt.Errorf("seccomp: no syscall table for GOARCH %q (supported: amd64, arm64)", o.Arch)
	}
	var a asm
	eperm := bpf.RetConstant{Val: seccompRetErrno | errnoEPERM}
	a.op(bpf.LoadAbsolute{Off: seccompDataArch, Size: 4})
	a.jeq(t.auditArch, "", "kill")
	a.op(bpf.LoadAbsolute{Off: seccompDataNr, Size: 4})
	if t.x32 {
		a.jge(x32SyscallBit, "eperm", "")
	}
	a.jeq(t.ioctl, "ioctl", "")
	a.jeq(t.socket, "socket", "")
	a.jeq(t.socketpair, "socketpair", "")
	a.jeq(t.sendto, "flagsArg3", "")
	a.jeq(t.sendmmsg, "flagsArg3", "")
	a.jeq(t.sendmsg, "flagsArg2", "")
	a.jeq(t.openat, "openat", "")
	if t.open != noSyscall {
		a.jeq(t.open, "open", "")
	}
	for _, nr := range t.modeArg1 {
		a.jeq(nr, "modeArg1", "")
	}
	for _, nr := range t.modeArg2 {
		a.jeq(nr, "modeArg2", "")
	}
	a.jeq(t.openat2, "enosys", "")
	a.jeq(t.unshare, "nsArg0", "")
	a.jeq(t.clone, "nsArg0", "")
	// clone3's flags are in a struct: ENOSYS makes glibc fall back to clone.
	a.jeq(t.clone3, "enosys", "")
	for _, nr := range t.setxattrs {
		a.jeq(nr, "eopnotsupp", "")
	}
	if o.DenyListen {
		a.jeq(t.listen, "eperm", "")
	}
	for _, nr := range []uint32{t.ioUringSetup, t.ioUringEnter, t.ioUringRegister, t.ptrace, t.processVMReadv, t.processVMWritev,
		t.addKey, t.requestKey, t.keyctl} {
		a.jeq(nr, "eperm", "")
	}
	a.op(bpf.RetConstant{Val: seccompRetAllow})

	a.label("ioctl")
	a.op(bpf.LoadAbsolute{Off: seccompDataArg1, Size: 4})
	a.jeq(tiocsti, "eperm", "")
	a.jeq(tioclinux, "eperm", "allow")

	// Argument bit tests: (low 32 bits of the argument) & mask == 0 → clear,
	// else → set.
	// - flagsArg2/3: MSG_FASTOPEN in sendmsg's / sendto's and sendmmsg's
	//   flags. The destination of sendmsg/sendmmsg is inside the msghdr,
	//   out of seccomp's reach; the flags are what can be checked.
	// - open/openat: the mode counts only when the flags create (the kernel
	//   ignores a stray mode otherwise, so it must not fail the open).
	// - modeArgN: S_ISUID|S_ISGID in the mode.
	for _, b := range []struct {
		label      string
		off, mask  uint32
		clear, set string
	}{
		{"flagsArg2", seccompDataArg2, msgFastOpen, "allow", "eperm"},
		{"flagsArg3", seccompDataArg3, msgFastOpen, "allow", "eperm"},
		{"open", seccompDataArg1, openCreates, "allow", "modeArg2"},
		{"openat", seccompDataArg2, openCreates, "allow", "modeArg3"},
		{"modeArg1", seccompDataArg1, setIDBits, "allow", "eperm"},
		{"modeArg2", seccompDataArg2, setIDBits, "allow", "eperm"},
		{"modeArg3", seccompDataArg3, setIDBits, "allow", "eperm"},
		{"nsArg0", seccompDataArg0, cloneNewUser, "allow", "eperm"},
	} {
		a.label(b.label)
		a.op(bpf.LoadAbsolute{Off: b.off, Size: 4})
		a.op(bpf.ALUOpConstant{Op: bpf.ALUOpAnd, Val: b.mask})
		a.jeq(0, b.clear, b.set)
	}

	a.label("socketpair")
	a.op(bpf.LoadAbsolute{Off: seccompDataArg0, Size: 4})
	a.jeq(afUnix, "", "eperm")
	a.op(bpf.LoadAbsolute{Off: seccompDataArg1, Size: 4})
	a.op(bpf.ALUOpConstant{Op: bpf.ALUOpAnd, Val: sockTypeMask})
	a.jeq(sockStream, "allow", "")
	a.jeq(sockSeqpack, "allow", "eperm")

	a.label("socket")
	a.op(bpf.LoadAbsolute{Off: seccompDataArg0, Size: 4})
	if o.AllowInet {
		a.jeq(afInet, "inet", "")
		a.jeq(afInet6, "inet", "")
	}
	if o.AllowUnix {
		a.jeq(afUnix, "allow", "")
	}
	a.op(eperm)
	if o.AllowInet {
		a.label("inet")
		a.op(bpf.LoadAbsolute{Off: seccompDataArg1, Size: 4})
		a.op(bpf.ALUOpConstant{Op: bpf.ALUOpAnd, Val: sockTypeMask})
		if o.InetStreamOnly {
			a.jeq(sockStream, "", "eperm")
		} else {
			a.jeq(sockStream, "", "allow")
		}
		// A stream socket: plain TCP only (protocol 0 or IPPROTO_TCP).
		a.op(bpf.LoadAbsolute{Off: seccompDataArg2, Size: 4})
		a.jeq(0, "allow", "")
		a.jeq(ipprotoTCP, "allow", "eperm")
	}
	a.label("allow")
	a.op(bpf.RetConstant{Val: seccompRetAllow})
	a.label("eperm")
	a.op(eperm)
	a.label("enosys")
	a.op(bpf.RetConstant{Val: seccompRetErrno | errnoENOSYS})
	a.label("eopnotsupp")
	a.op(bpf.RetConstant{Val: seccompRetErrno | errnoEOPNOTSUPP})
	a.label("kill")
	a.op(bpf.RetConstant{Val: seccompRetKillProcess})
	return a.assemble()
}

// asm is a tiny label-resolving assembler: classic BPF jumps are relative
// skip counts, which are easy to get wrong by hand.
type asm struct {
	ins    []asmIns
	labels map[string]int
}

type asmIns struct {
	op     bpf.Instruction
	cond   bpf.JumpTest
	val    uint32
	jt, jf string // labels; "" = fall through
	isJump bool
}

func (a *asm) op(i bpf.Instruction) { a.ins = append(a.ins, asmIns{op: i}) }

func (a *asm) jeq(v uint32, jt, jf string) {
	a.ins = append(a.ins, asmIns{isJump: true, cond: bpf.JumpEqual, val: v, jt: jt, jf: jf})
}

func (a *asm) jge(v uint32, jt, jf string) {
	a.ins = append(a.ins, asmIns{isJump: true, cond: bpf.JumpGreaterOrEqual, val: v, jt: jt, jf: jf})
}

func (a *asm) label(name string) {
	if a.labels == nil {
		a.labels = map[string]int{}
	}
	a.labels[name] = len(a.ins)
}

func (a *asm) assemble() ([]bpf.RawInstruction, error) {
	prog := make([]bpf.Instruction, len(a.ins))
	for i, in := range a.ins {
		if !in.isJump {
			prog[i] = in.op
			continue
		}
		skip := func(l string) (uint8, error) {
			if l == "" {
				return 0, nil
			}
			at, ok := a.labels[l]
			if !ok {
				return 0, fmt.Errorf("seccomp: undefined label %q", l)
			}
			d := at - i - 1
			if d < 0 || d > 255 {
				return 0, fmt.Errorf("seccomp: jump to %q out of range (%d)", l, d)
			}
			return uint8(d), nil
		}
		jt, err := skip(in.jt)
		if err != nil {
			return nil, err
		}
		jf, err := skip(in.jf)
		if err != nil {
			return nil, err
		}
		prog[i] = bpf.JumpIf{Cond: in.cond, Val: in.val, SkipTrue: jt, SkipFalse: jf}
	}
	return bpf.Assemble(prog)
}
