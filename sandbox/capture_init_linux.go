package sandbox

import (
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/google/nftables"
	"github.com/google/nftables/expr"
	"golang.org/x/sys/unix"
)

// Transparent capture, the init's side (SPEC §6.6, docs/sandbox.md
// "Transparent capture"): in the sandbox's own network namespace, while the
// init still holds CAP_NET_ADMIN, it routes every destination to lo, adds
// nftables rules that redirect TCP for anything but loopback to the capture
// listener and refuse every other non-loopback packet, opens the resolver's
// and the capture listener's sockets and hands them to execwrap, which
// serves them (capture_linux.go). Nothing outside the namespace changes.

// In-sandbox addresses of capture.
const (
	// captureResolverAddr is the resolver in the sandbox's resolv.conf
	// (UDP and TCP port 53).
	captureResolverAddr = "127.0.0.53"
	// capturePort is the capture listener's port on 127.0.0.1 and ::1. A
	// privileged port: the command (no capabilities) cannot bind one, so
	// it never collides with a server the command starts itself.
	capturePort = 1
	// captureTable is the nftables table holding the rules.
	captureTable = "execwrap_capture"
)

// captureConfig asks the init for capture (namespaces tier, proxied).
type captureConfig struct {
	Port int `json:"port"`
}

// Roles of the fds a msgCapture carries, in this order; the IPv6 listener
// is absent when the namespace has no IPv6 (then IPv6 gets no route).
const (
	captureFDResolverUDP = iota
	captureFDResolverTCP
	captureFDListen4
	captureFDListen6
)

// initCapture sets capture up and sends its sockets to the parent. Called
// after the mounts (resolv.conf is bound over the read-only root) and with
// lo up.
func initCapture(ctl int, cc *captureConfig) ([]string, error) {
	v6 := ipv6Available()
	if err := addDefaultRoutes(v6); err != nil {
		return nil, stepErr("capture_routes", err)
	}
	if err := installCaptureRules(cc.Port); err != nil {
		return nil, stepErr("capture_nftables", err)
	}
	notes, err := writeResolvConf("nameserver " + captureResolverAddr + "\noptions edns0\n")
	if err != nil {
		return nil, stepErr("capture_resolv_conf", err)
	}
	fds, err := captureSockets(cc.Port, v6)
	if err != nil {
		return nil, stepErr("capture_listen", err)
	}
	if !v6 {
		notes = append(notes, "capture_no_ipv6")
	}
	err = ctlSend(ctl, ctlMsg{Type: msgCapture}, fds...)
	closeFDs(fds)
	if err != nil {
		return nil, stepErr("send_capture", err)
	}
	return notes, nil
}

// ipv6Available: lo has ::1 once up, unless IPv6 is disabled.
func ipv6Available() bool {
	b, err := os.ReadFile("/proc/sys/net/ipv6/conf/lo/disable_ipv6")
	return err == nil && strings.TrimSpace(string(b)) == "0"
}

// captureSockets opens the resolver's UDP and TCP sockets and the capture
// listeners (close-on-exec), in the captureFD* order.
func captureSockets(port int, v6 bool) ([]int, error) {
	var fds []int
	fail := func(err error) ([]int, error) {
		closeFDs(fds)
		return nil, err
	}
	res := [4]byte{127, 0, 0, 53}
	for _, typ := range []int{unix.SOCK_DGRAM, unix.SOCK_STREAM} {
		fd, err := bindSocket(unix.AF_INET, typ, &unix.SockaddrInet4{Port: 53, Addr: res})
		if err != nil {
			return fail(fmt.Errorf("resolver %s:53: %w", captureResolverAddr, err))
		}
		fds = append(fds, fd)
	}
	fd, err := bindSocket(unix.AF_INET, unix.SOCK_STREAM, &unix.SockaddrInet4{Port: port, Addr: [4]byte{127, 0, 0, 1}})
	if err != nil {
		return fail(fmt.Errorf("capture listener 127.0.0.1:%d: %w", port, err))
	}
	fds = append(fds, fd)
	if v6 {
		fd, err := bindSocket(unix.AF_INET6, unix.SOCK_STREAM, &unix.SockaddrInet6{Port: port, Addr: [16]byte{15: 1}})
		if err != nil {
			return fail(fmt.Errorf("capture listener [::1]:%d: %w", port, err))
		}
		fds = append(fds, fd)
	}
	return fds, nil
}

// bindSocket makes a bound socket (listening, for a stream one).
func bindSocket(family, typ int, sa unix.Sockaddr) (int, error) {
	fd, err := unix.Socket(family, typ|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return -1, err
	}
	if family == unix.AF_INET6 {
		_ = unix.SetsockoptInt(fd, unix.IPPROTO_IPV6, unix.IPV6_V6ONLY, 1)
	}
	err = unix.Bind(fd, sa)
	if err == nil && typ == unix.SOCK_STREAM {
		err = unix.Listen(fd, 1024)
	}
	if err != nil {
		unix.Close(fd)
		return -1, err
	}
	return fd, nil
}

// addDefaultRoutes routes every destination (IPv4, and IPv6 when present)
// to lo, so that connect() to any address reaches the output hook, where
// the rules redirect or refuse it; without a route it would fail with
// ENETUNREACH before any rule saw it. The IPv4 route's source is 127.0.0.1
// (otherwise the kernel picks 0.0.0.0 for a non-loopback destination).
func addDefaultRoutes(v6 bool) error {
	lo, err := interfaceIndex("lo")
	if err != nil {
		return err
	}
	if err := addRoute(unix.AF_INET, lo, []byte{127, 0, 0, 1}); err != nil {
		return fmt.Errorf("IPv4 default route via lo: %w", err)
	}
	if v6 {
		if err := addRoute(unix.AF_INET6, lo, nil); err != nil {
			return fmt.Errorf("IPv6 default route via lo: %w", err)
		}
	}
	return nil
}

func interfaceIndex(name string) (int, error) {
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return 0, err
	}
	defer unix.Close(fd)
	ifr, err := unix.NewIfreq(name)
	if err != nil {
		return 0, err
	}
	if err := unix.IoctlIfreq(fd, unix.SIOCGIFINDEX, ifr); err != nil {
		return 0, err
	}
	return int(ifr.Uint32()), nil
}

// addRoute adds a default route of family out of interface oif with an
// optional preferred source, over a raw rtnetlink socket (one message; a
// netlink library is not needed for it).
func addRoute(family, oif int, prefsrc []byte) error {
	fd, err := unix.Socket(unix.AF_NETLINK, unix.SOCK_RAW|unix.SOCK_CLOEXEC, unix.NETLINK_ROUTE)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	if err := unix.Bind(fd, &unix.SockaddrNetlink{Family: unix.AF_NETLINK}); err != nil {
		return err
	}
	attr := func(typ uint16, data []byte) []byte {
		a := make([]byte, unix.NLA_HDRLEN, nlaAlign(unix.NLA_HDRLEN+len(data)))
		binary.NativeEndian.PutUint16(a[0:], uint16(unix.NLA_HDRLEN+len(data)))
		binary.NativeEndian.PutUint16(a[2:], typ)
		a = append(a, data...)
		return a[:cap(a)]
	}
	oifb := make([]byte, 4)
	binary.NativeEndian.PutUint32(oifb, uint32(oif))
	body := []byte{byte(family), 0, 0, 0, unix.RT_TABLE_MAIN, unix.RTPROT_BOOT, unix.RT_SCOPE_LINK, unix.RTN_UNICAST, 0, 0, 0, 0} // struct rtmsg
	body = append(body, attr(unix.RTA_OIF, oifb)...)
	if prefsrc != nil {
		body = append(body, attr(unix.RTA_PREFSRC, prefsrc)...)
	}
	msg := make([]byte, unix.NLMSG_HDRLEN, unix.NLMSG_HDRLEN+len(body))
	binary.NativeEndian.PutUint32(msg[0:], uint32(unix.NLMSG_HDRLEN+len(body)))
	binary.NativeEndian.PutUint16(msg[4:], unix.RTM_NEWROUTE)
	binary.NativeEndian.PutUint16(msg[6:], unix.NLM_F_REQUEST|unix.NLM_F_ACK|unix.NLM_F_CREATE|unix.NLM_F_EXCL)
	binary.NativeEndian.PutUint32(msg[8:], 1) // seq
	msg = append(msg, body...)
	if err := unix.Sendto(fd, msg, 0, &unix.SockaddrNetlink{Family: unix.AF_NETLINK}); err != nil {
		return err
	}
	buf := make([]byte, 4096)
	n, _, err := unix.Recvfrom(fd, buf, 0)
	if err != nil {
		return err
	}
	// One answer: struct nlmsghdr, then for NLMSG_ERROR an int32 errno
	// (0 is the acknowledgement).
	if n < unix.NLMSG_HDRLEN+4 || binary.NativeEndian.Uint16(buf[4:]) != unix.NLMSG_ERROR {
		return errors.New("rtnetlink: no acknowledgement")
	}
	if e := int32(binary.NativeEndian.Uint32(buf[unix.NLMSG_HDRLEN:])); e != 0 {
		return unix.Errno(-e)
	}
	return nil
}

func nlaAlign(n int) int { return (n + unix.NLA_ALIGNTO - 1) &^ (unix.NLA_ALIGNTO - 1) }

// installCaptureRules adds, in one netlink batch, table inet
// execwrap_capture:
//
//	chain nat_out  { type nat hook output priority -100
//	  ip daddr 127.0.0.0/8 return; ip6 daddr ::1 return
//	  meta l4proto tcp redirect to :PORT }
//	chain filter_out { type filter hook output priority 0
//	  ct status dnat accept              # captured flows, both ways
//	  ip daddr 127.0.0.0/8 accept; ip6 daddr ::1 accept
//	  meta l4proto tcp reject with tcp reset
//	  reject with icmpx port-unreachable }   # UDP (QUIC), ICMP, the rest
//
// Loopback stays the sandbox's own (its resolver, proxy listeners and any
// server the command starts); nothing of the host is on it.
func installCaptureRules(port int) error {
	c, err := nftables.New()
	if err != nil {
		return err
	}
	t := c.AddTable(&nftables.Table{Family: nftables.TableFamilyINet, Name: captureTable})
	accept := nftables.ChainPolicyAccept
	nat := c.AddChain(&nftables.Chain{Name: "nat_out", Table: t, Type: nftables.ChainTypeNAT,
		Hooknum: nftables.ChainHookOutput, Priority: nftables.ChainPriorityNATDest, Policy: &accept})
	filter := c.AddChain(&nftables.Chain{Name: "filter_out", Table: t, Type: nftables.ChainTypeFilter,
		Hooknum: nftables.ChainHookOutput, Priority: nftables.ChainPriorityFilter, Policy: &accept})
	rule := func(ch *nftables.Chain, e ...expr.Any) { c.AddRule(&nftables.Rule{Table: t, Chain: ch, Exprs: e}) }
	verdict := func(k expr.VerdictKind) expr.Any { return &expr.Verdict{Kind: k} }

	rule(nat, append(loopback4(), verdict(expr.VerdictReturn))...)
	rule(nat, append(loopback6(), verdict(expr.VerdictReturn))...)
	rule(nat, append(l4proto(unix.IPPROTO_TCP),
		&expr.Immediate{Register: 1, Data: binary.BigEndian.AppendUint16(nil, uint16(port))},
		&expr.Redir{RegisterProtoMin: 1})...)

	const ipsDstNAT = 1 << 5 // IPS_DST_NAT: a redirected flow
	rule(filter,
		&expr.Ct{Register: 1, Key: expr.CtKeySTATUS},
		&expr.Bitwise{SourceRegister: 1, DestRegister: 1, Len: 4,
			Mask: binary.NativeEndian.AppendUint32(nil, ipsDstNAT), Xor: make([]byte, 4)},
		&expr.Cmp{Op: expr.CmpOpNeq, Register: 1, Data: make([]byte, 4)},
		verdict(expr.VerdictAccept))
	rule(filter, append(loopback4(), verdict(expr.VerdictAccept))...)
	rule(filter, append(loopback6(), verdict(expr.VerdictAccept))...)
	rule(filter, append(l4proto(unix.IPPROTO_TCP), &expr.Reject{Type: unix.NFT_REJECT_TCP_RST})...)
	rule(filter, &expr.Reject{Type: unix.NFT_REJECT_ICMPX_UNREACH, Code: unix.NFT_REJECT_ICMPX_PORT_UNREACH})
	return c.Flush()
}

// loopback4 matches IPv4 packets to 127.0.0.0/8.
func loopback4() []expr.Any {
	return []expr.Any{
		&expr.Meta{Key: expr.MetaKeyNFPROTO, Register: 1},
		&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: []byte{unix.NFPROTO_IPV4}},
		&expr.Payload{DestRegister: 1, Base: expr.PayloadBaseNetworkHeader, Offset: 16, Len: 4},
		&expr.Bitwise{SourceRegister: 1, DestRegister: 1, Len: 4, Mask: []byte{255, 0, 0, 0}, Xor: make([]byte, 4)},
		&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: []byte{127, 0, 0, 0}},
	}
}

// loopback6 matches IPv6 packets to ::1.
func loopback6() []expr.Any {
	return []expr.Any{
		&expr.Meta{Key: expr.MetaKeyNFPROTO, Register: 1},
		&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: []byte{unix.NFPROTO_IPV6}},
		&expr.Payload{DestRegister: 1, Base: expr.PayloadBaseNetworkHeader, Offset: 24, Len: 16},
		&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: []byte{15: 1}},
	}
}

func l4proto(p byte) []expr.Any {
	return []expr.Any{
		&expr.Meta{Key: expr.MetaKeyL4PROTO, Register: 1},
		&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: []byte{p}},
	}
}

// writeResolvConf points the sandbox's /etc/resolv.conf at the resolver: a
// file in the private /run bound read-only over it, or, when it is a
// symlink into the private /run or /tmp (systemd-resolved's stub), written
// at its target there.
func writeResolvConf(content string) ([]string, error) {
	target := "/etc/resolv.conf"
	for range 8 {
		fi, err := os.Lstat(target)
		if err != nil || fi.Mode()&os.ModeSymlink == 0 {
			break
		}
		l, err := os.Readlink(target)
		if err != nil {
			return nil, err
		}
		if !filepath.IsAbs(l) {
			l = filepath.Join(filepath.Dir(target), l)
		}
		target = filepath.Clean(l)
	}
	for _, priv := range []string{"/run/", "/tmp/"} {
		if strings.HasPrefix(target, priv) {
			if err := os.MkdirAll(filepath.Dir(target), 0o755); err != nil {
				return nil, err
			}
			return nil, os.WriteFile(target, []byte(content), 0o644)
		}
	}
	if _, err := os.Stat(target); err != nil {
		// No resolv.conf to cover: the C library then asks 127.0.0.1:53,
		// where nothing answers; connections to addresses are still captured.
		return []string{"capture_no_resolv_conf"}, nil
	}
	src := "/run/execwrap/resolv.conf"
	if err := os.MkdirAll(filepath.Dir(src), 0o755); err != nil {
		return nil, err
	}
	if err := os.WriteFile(src, []byte(content), 0o444); err != nil {
		return nil, err
	}
	if err := unix.Mount(src, target, "", unix.MS_BIND, ""); err != nil {
		return nil, fmt.Errorf("bind %s over %s: %w", src, target, err)
	}
	if err := unix.Mount("", target, "", unix.MS_BIND|unix.MS_REMOUNT|unix.MS_RDONLY|unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, ""); err != nil {
		return nil, fmt.Errorf("remount %s read-only: %w", target, err)
	}
	return nil, nil
}
