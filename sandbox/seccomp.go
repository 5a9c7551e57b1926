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

	seccompDataNr   = 0
	seccompDataArch = 4
	seccompDataArg0 = 16 // low 32 bits on little-endian arches
	seccompDataArg1 = 24
	seccompDataArg2 = 32

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
}

var syscallTables = map[string]archSyscalls{
	"amd64": {auditArch: 0xc000003e, x32: true, socket: 41, socketpair: 53, ioctl: 16,
		ptrace: 101, processVMReadv: 310, processVMWritev: 311,
		ioUringSetup: 425, ioUringEnter: 426, ioUringRegister: 427,
		addKey: 248, requestKey: 249, keyctl: 250},
	"arm64": {auditArch: 0xc00000b7, socket: 198, socketpair: 199, ioctl: 29,
		ptrace: 117, processVMReadv: 270, processVMWritev: 271,
		ioUringSetup: 425, ioUringEnter: 426, ioUringRegister: 427,
		addKey: 217, requestKey: 218, keyctl: 219},
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
}

// BuildFilter assembles the seccomp program: wrong arch → kill; x32 → EPERM;
// socket() only for the allowed families (stream sockets only as TCP);
// socketpair() only AF_UNIX stream/seqpacket; ioctl TIOCSTI/TIOCLINUX,
// add_key/request_key/keyctl, io_uring_*, ptrace and
// process_vm_readv/writev → EPERM; everything else allowed.
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
	for _, nr := range []uint32{t.ioUringSetup, t.ioUringEnter, t.ioUringRegister, t.ptrace, t.processVMReadv, t.processVMWritev,
		t.addKey, t.requestKey, t.keyctl} {
		a.jeq(nr, "eperm", "")
	}
	a.op(bpf.RetConstant{Val: seccompRetAllow})

	a.label("ioctl")
	a.op(bpf.LoadAbsolute{Off: seccompDataArg1, Size: 4})
	a.jeq(tiocsti, "eperm", "")
	a.jeq(tioclinux, "eperm", "allow")

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
