package sandbox

import (
	"encoding/binary"
	"fmt"
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
		allow      = seccompRetAllow
		eperm      = seccompRetErrno | errnoEPERM
		enosys     = seccompRetErrno | errnoENOSYS
		eopnotsupp = seccompRetErrno | errnoEOPNOTSUPP
		kill       = seccompRetKillProcess
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
			{"i386 socketcall killed", FilterOptions{AllowInet: true}, seccompData(0x40000003, 102 /* socketcall */, 1), kill},

			// Item 1 of issue 22: TCP Fast Open connects inside the send.
			{"sendto MSG_FASTOPEN denied", FilterOptions{AllowInet: true}, seccompData(tab.auditArch, tab.sendto, 3, 0, 10, msgFastOpen), eperm},
			{"sendto FASTOPEN|NOSIGNAL denied", FilterOptions{AllowInet: true}, seccompData(tab.auditArch, tab.sendto, 3, 0, 10, msgFastOpen|0x4000), eperm},
			{"sendto NOSIGNAL allowed", FilterOptions{AllowInet: true}, seccompData(tab.auditArch, tab.sendto, 3, 0, 10, 0x4000), allow},
			{"sendmsg MSG_FASTOPEN denied", FilterOptions{AllowInet: true}, seccompData(tab.auditArch, tab.sendmsg, 3, 0, msgFastOpen), eperm},
			{"sendmsg plain allowed", FilterOptions{AllowInet: true}, seccompData(tab.auditArch, tab.sendmsg, 3, 0, 0x40), allow},
			{"sendmmsg MSG_FASTOPEN denied", FilterOptions{AllowInet: true}, seccompData(tab.auditArch, tab.sendmmsg, 3, 0, 1, msgFastOpen), eperm},
			{"sendmmsg vlen = MSG_FASTOPEN bit allowed", FilterOptions{AllowInet: true}, seccompData(tab.auditArch, tab.sendmmsg, 3, 0, msgFastOpen, 0), allow},
			{"listen allowed by default", FilterOptions{AllowInet: true}, seccompData(tab.auditArch, tab.listen, 3, 1), allow},
			{"listen denied in the landlock tier", FilterOptions{AllowInet: true, InetStreamOnly: true, DenyListen: true}, seccompData(tab.auditArch, tab.listen, 3, 1), eperm},

			// Item 6: setuid/setgid bits and file capabilities.
			{"fchmodat 0755 allowed", FilterOptions{}, seccompData(tab.auditArch, tab.modeArg2[0], 0xffffff9c, 0, 0o755), allow},
			{"fchmodat 1777 allowed", FilterOptions{}, seccompData(tab.auditArch, tab.modeArg2[0], 0xffffff9c, 0, 0o1777), allow},
			{"fchmodat 4755 denied", FilterOptions{}, seccompData(tab.auditArch, tab.modeArg2[0], 0xffffff9c, 0, 0o4755), eperm},
			{"fchmodat 2755 denied", FilterOptions{}, seccompData(tab.auditArch, tab.modeArg2[0], 0xffffff9c, 0, 0o2755), eperm},
			{"fchmodat2 6755 denied", FilterOptions{}, seccompData(tab.auditArch, 452, 0xffffff9c, 0, 0o6755, 0), eperm},
			{"chmod/fchmod 4755 denied", FilterOptions{}, seccompData(tab.auditArch, tab.modeArg1[0], 3, 0o4755), eperm},
			{"chmod/fchmod 0644 allowed", FilterOptions{}, seccompData(tab.auditArch, tab.modeArg1[0], 3, 0o644), allow},
			{"mknodat S_IFREG|4755 denied", FilterOptions{}, seccompData(tab.auditArch, tab.modeArg2[len(tab.modeArg2)-1], 0xffffff9c, 0, 0o104755, 0), eperm},
			{"openat O_CREAT 0644 allowed", FilterOptions{}, seccompData(tab.auditArch, tab.openat, 0xffffff9c, 0, 0o101, 0o644), allow},
			{"openat O_CREAT 4755 denied", FilterOptions{}, seccompData(tab.auditArch, tab.openat, 0xffffff9c, 0, 0o101, 0o4755), eperm},
			{"openat O_TMPFILE 2755 denied", FilterOptions{}, seccompData(tab.auditArch, tab.openat, 0xffffff9c, 0, 0o20200001, 0o2755), eperm},
			{"openat without O_CREAT ignores the mode", FilterOptions{}, seccompData(tab.auditArch, tab.openat, 0xffffff9c, 0, 0, 0o4755), allow},
			{"openat2 ENOSYS", FilterOptions{}, seccompData(tab.auditArch, tab.openat2, 0xffffff9c, 0, 0, 24), enosys},
		}
		for _, nr := range tab.setxattrs {
			cases = append(cases, struct {
				name string
				o    FilterOptions
				data []byte
				want uint32
			}{fmt.Sprintf("setxattr family %d EOPNOTSUPP", nr), FilterOptions{}, seccompData(tab.auditArch, nr), eopnotsupp})
		}
		if arch == "amd64" {
			for _, c := range []struct {
				name string
				nr   uint32
				args []uint32
				want uint32
			}{
				{"chmod 4755", 90, []uint32{0, 0o4755}, eperm},
				{"chmod 755", 90, []uint32{0, 0o755}, allow},
				{"creat 2755", 85, []uint32{0, 0o2755}, eperm},
				{"mknod 4755", 133, []uint32{0, 0o104755}, eperm},
				{"open O_CREAT 4755", 2, []uint32{0, 0o101, 0o4755}, eperm},
				{"open O_CREAT 755", 2, []uint32{0, 0o101, 0o755}, allow},
				{"open O_RDONLY junk mode", 2, []uint32{0, 0, 0o6777}, allow},
			} {
				cases = append(cases, struct {
					name string
					o    FilterOptions
					data []byte
					want uint32
				}{c.name, FilterOptions{}, seccompData(tab.auditArch, c.nr, c.args...), c.want})
			}
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
