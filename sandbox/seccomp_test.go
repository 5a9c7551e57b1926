package sandbox

import (
	"encoding/binary"
	"testing"

	"golang.org/x/net/bpf"
)

// seccompData lays out struct seccomp_data so that x/net/bpf's VM (which
// loads big-endian words) reads the same 32-bit values the kernel would.
func seccompData(arch, nr uint32, args ...uint32) []byte {
	b := make([]byte, 64)
	binary.BigEndian.PutUint32(b[seccompDataNr:], nr)
	binary.BigEndian.PutUint32(b[seccompDataArch:], arch)
	for i, a := range args {
		binary.BigEndian.PutUint32(b[seccompDataArg0+8*i:], a)
	}
	return b
}

func runFilter(t *testing.T, o FilterOptions, data []byte) uint32 {
	t.Helper()
	raw, err := BuildFilter(o)
	if err != nil {
		t.Fatal(err)
	}
	prog, ok := bpf.Disassemble(raw)
	if !ok {
		t.Fatalf("filter does not disassemble: %v", prog)
	}
	vm, err := bpf.NewVM(prog)
	if err != nil {
		t.Fatalf("filter rejected by the BPF VM: %v", err)
	}
	v, err := vm.Run(data)
	if err != nil {
		t.Fatal(err)
	}
	return uint32(v)
}

func TestSeccompFilterDecisions(t *testing.T) {
	const (
		allow = seccompRetAllow
		eperm = seccompRetErrno | errnoEPERM
		kill  = seccompRetKillProcess
	)
	const sockDgram, sockCloexec, afNetlink, afPacket, afVsock = 2, 0x80000, 16, 17, 40
	for _, arch := range []string{"amd64", "arm64"} {
		tab := syscallTables[arch]
		cases := []struct {
			name string
			o    FilterOptions
			data []byte
			want uint32
		}{
			{"read allowed", FilterOptions{AllowInet: true}, seccompData(tab.auditArch, 0), allow},
			{"inet allowed", FilterOptions{AllowInet: true}, seccompData(tab.auditArch, tab.socket, afInet, sockStream), allow},
			{"inet6 udp allowed", FilterOptions{AllowInet: true}, seccompData(tab.auditArch, tab.socket, afInet6, sockDgram), allow},
			{"unix denied", FilterOptions{AllowInet: true}, seccompData(tab.auditArch, tab.socket, afUnix, sockStream), eperm},
			{"unix allowed when asked", FilterOptions{AllowInet: true, AllowUnix: true}, seccompData(tab.auditArch, tab.socket, afUnix, sockStream), allow},
			{"netlink denied", FilterOptions{AllowInet: true, AllowUnix: true}, seccompData(tab.auditArch, tab.socket, afNetlink, 3), eperm},
			{"packet denied", FilterOptions{AllowInet: true}, seccompData(tab.auditArch, tab.socket, afPacket, 3), eperm},
			{"vsock denied", FilterOptions{AllowInet: true}, seccompData(tab.auditArch, tab.socket, afVsock, 1), eperm},
			{"inet denied without AllowInet", FilterOptions{}, seccompData(tab.auditArch, tab.socket, afInet, sockStream), eperm},
			{"stream only: stream|cloexec allowed", FilterOptions{AllowInet: true, InetStreamOnly: true}, seccompData(tab.auditArch, tab.socket, afInet, sockStream|sockCloexec), allow},
			{"stream only: udp denied", FilterOptions{AllowInet: true, InetStreamOnly: true}, seccompData(tab.auditArch, tab.socket, afInet6, sockDgram), eperm},
			{"stream only: tcp protocol allowed", FilterOptions{AllowInet: true, InetStreamOnly: true}, seccompData(tab.auditArch, tab.socket, afInet, sockStream, ipprotoTCP), allow},
			{"stream only: mptcp denied", FilterOptions{AllowInet: true, InetStreamOnly: true}, seccompData(tab.auditArch, tab.socket, afInet, sockStream, 262), eperm},
			{"mptcp denied in the namespaces tier too", FilterOptions{AllowInet: true}, seccompData(tab.auditArch, tab.socket, afInet6, sockStream|sockCloexec, 262), eperm},
			{"sctp stream denied", FilterOptions{AllowInet: true}, seccompData(tab.auditArch, tab.socket, afInet, sockStream, 132), eperm},
			{"udp with protocol allowed in the namespaces tier", FilterOptions{AllowInet: true}, seccompData(tab.auditArch, tab.socket, afInet, sockDgram, 17), allow},
			{"socketpair unix stream allowed", FilterOptions{}, seccompData(tab.auditArch, tab.socketpair, afUnix, sockStream|sockCloexec), allow},
			{"socketpair unix seqpacket allowed", FilterOptions{}, seccompData(tab.auditArch, tab.socketpair, afUnix, sockSeqpack), allow},
			{"socketpair unix dgram denied", FilterOptions{AllowInet: true}, seccompData(tab.auditArch, tab.socketpair, afUnix, sockDgram), eperm},
			{"socketpair inet denied", FilterOptions{AllowInet: true}, seccompData(tab.auditArch, tab.socketpair, afInet, sockStream), eperm},
			{"ioctl TIOCSTI denied", FilterOptions{AllowInet: true}, seccompData(tab.auditArch, tab.ioctl, 0, tiocsti), eperm},
			{"ioctl TIOCLINUX denied", FilterOptions{AllowInet: true}, seccompData(tab.auditArch, tab.ioctl, 0, tioclinux), eperm},
			{"ioctl TCGETS allowed", FilterOptions{AllowInet: true}, seccompData(tab.auditArch, tab.ioctl, 0, 0x5401), allow},
			{"add_key denied", FilterOptions{AllowInet: true}, seccompData(tab.auditArch, tab.addKey), eperm},
			{"request_key denied", FilterOptions{AllowInet: true}, seccompData(tab.auditArch, tab.requestKey), eperm},
			{"keyctl denied", FilterOptions{AllowInet: true}, seccompData(tab.auditArch, tab.keyctl, 1), eperm},
			{"io_uring_setup denied", FilterOptions{AllowInet: true}, seccompData(tab.auditArch, tab.ioUringSetup), eperm},
			{"io_uring_enter denied", FilterOptions{AllowInet: true}, seccompData(tab.auditArch, tab.ioUringEnter), eperm},
			{"io_uring_register denied", FilterOptions{AllowInet: true}, seccompData(tab.auditArch, tab.ioUringRegister), eperm},
			{"ptrace denied", FilterOptions{AllowInet: true}, seccompData(tab.auditArch, tab.ptrace), eperm},
			{"process_vm_readv denied", FilterOptions{AllowInet: true}, seccompData(tab.auditArch, tab.processVMReadv), eperm},
			{"process_vm_writev denied", FilterOptions{AllowInet: true}, seccompData(tab.auditArch, tab.processVMWritev), eperm},
			{"foreign arch killed", FilterOptions{AllowInet: true}, seccompData(0x40000003 /* i386 */, tab.socket, afInet), kill},
		}
		if tab.x32 {
			cases = append(cases, struct {
				name string
				o    FilterOptions
				data []byte
				want uint32
			}{"x32 ABI denied", FilterOptions{AllowInet: true}, seccompData(tab.auditArch, x32SyscallBit|tab.socket, afInet), eperm})
		}
		for _, c := range cases {
			c.o.Arch = arch
			if got := runFilter(t, c.o, c.data); got != c.want {
				t.Errorf("%s/%s: got %#x, want %#x", arch, c.name, got, c.want)
			}
		}
	}
}

func TestSeccompUnknownArch(t *testing.T) {
	if _, err := BuildFilter(FilterOptions{Arch: "mips"}); err == nil {
		t.Fatal("want an error for an arch without a syscall table")
	}
}

func TestAsmRejectsUndefinedLabel(t *testing.T) {
	var a asm
	a.jeq(1, "nowhere", "")
	if _, err := a.assemble(); err == nil {
		t.Fatal("want an error for an undefined label")
	}
}
