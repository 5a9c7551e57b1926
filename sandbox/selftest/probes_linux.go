package selftest

import (
	"bufio"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"crypto/tls"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"os"
	"path/filepath"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
	"unsafe"

	"golang.org/x/net/dns/dnsmessage"
	"golang.org/x/sys/unix"
)

// probeTimeout bounds one probe; the battery runs them concurrently.
const probeTimeout = 6 * time.Second

// dialTimeout bounds one connection attempt: a fence answers at once
// (EACCES, ENETUNREACH, RST); a wait means a packet went somewhere.
const dialTimeout = 2 * time.Second

// ProbeMain is the probe side: argv is [PLAN-JSON]. It runs every probe
// and prints one ResultsMarker line. Exit 0 unless the plan is unreadable.
func ProbeMain(args []string, stdout io.Writer) int {
	if len(args) != 1 {
		fmt.Fprintln(os.Stderr, "execwrap "+ProbeArg+": want one argument, the plan (internal; run `execwrap selftest`)")
		return 2
	}
	var p Plan
	if err := json.Unmarshal([]byte(args[0]), &p); err != nil {
		fmt.Fprintln(os.Stderr, "execwrap "+ProbeArg+": plan:", err)
		return 2
	}
	ctx, cancel := context.WithTimeout(context.Background(), 4*probeTimeout)
	defer cancel()
	b, err := json.Marshal(Probe(ctx, &p))
	if err != nil {
		return 2
	}
	fmt.Fprintf(stdout, "%s%s\n", ResultsMarker, b)
	return 0
}

type probeFunc func(ctx context.Context, p *Plan, name string) Result

// probes maps every name of Names to its function.
func probes() map[string]probeFunc {
	m := map[string]probeFunc{
		"net.raw-socket":          socketProbe(unix.AF_INET, unix.SOCK_RAW, unix.IPPROTO_ICMP),
		"net.packet-socket":       socketProbe(unix.AF_PACKET, unix.SOCK_RAW, 0),
		"net.netlink-socket":      socketProbe(unix.AF_NETLINK, unix.SOCK_RAW, unix.NETLINK_ROUTE),
		"net.unix-socket":         socketProbe(unix.AF_UNIX, unix.SOCK_STREAM, 0),
		"net.tfo4":                probeTFO,
		"net.tfo6":                probeTFO,
		"dns.resolver":            probeResolver,
		"dns.proxy":               probeDNSProxy,
		"capture.denied-connect":  probeCaptureDenied,
		"capture.udp-9":           probeCaptureUDP,
		"capture.dns-txt":         probeCaptureTXT,
		"netproxy.direct":         probeNetproxyDirect,
		"netproxy.control-socket": probeControlSocket,
		"proxy.self-loop":         probeSelfLoop,
		"proxy.forged-frame":      probeForgedFrame,
		"tls.sni-fronting":        probeSNI,
		"fs.write-etc":            writeProbe("/etc"),
		"fs.write-tmp":            writeProbe("/tmp"),
		"fs.write-home":           func(ctx context.Context, p *Plan, n string) Result { return writeProbe(p.Home)(ctx, p, n) },
		"fs.protected-git":        protectedProbe(".git", ""),
		"fs.protected-git-config": protectedProbe(".git", "config"),
		"fs.protected-git-hooks":  protectedProbe(".git", "hooks"),
		"fs.protected-hg":         protectedProbe(".hg", ""),
		"fs.protected-svn":        protectedProbe(".svn", ""),
		"fs.protected-codex":      protectedProbe(".codex", ""),
		"fs.protected-execwrap":   protectedProbe(".execwrap", ""),
		"fs.protected-netproxy":   protectedProbe(".netproxy", ""),
		"fs.setuid":               modeProbe(04755, false),
		"fs.setgid":               modeProbe(02755, false),
		"fs.setuid-open":          modeProbe(04755, true),
		"fs.file-caps":            probeFileCaps,
		"tty.tiocsti":             probeTIOCSTI,
		"sys.ptrace-init":         probePtrace,
		"sys.pidfd-getfd-init":    probePidfdGetfd,
		"sys.proc1-environ":       probeProc1,
		"sys.mount":               probeMount,
		"sys.unshare-userns":      probeUnshare,
		"sys.keyctl":              probeKeyctl,
		"sys.bpf":                 probeBPF,
		"sys.perf-event-open":     probePerf,
		"sys.io-uring-setup":      probeIOUring,
		"sys.open-by-handle-at":   probeOpenByHandle,
		"sys.userfaultfd":         syscallProbe(unix.SYS_USERFAULTFD, unix.O_CLOEXEC, 0, 0),
	}
	for _, n := range []string{"net.tcp4-loopback", "net.tcp6-loopback", "net.tcp4-host", "net.tcp6-host"} {
		m[n] = probeTCP
	}
	for _, n := range []string{"net.udp4-loopback", "net.udp6-loopback", "net.udp4-host", "net.udp6-host"} {
		m[n] = probeUDP
	}
	for n, host := range spellings {
		m[n] = spellingProbe(host)
	}
	for _, n := range Names {
		if strings.HasPrefix(n, "fs.secret-") {
			m[n] = probeSecret
		}
	}
	return m
}

// spellings are loopback and metadata addresses in the spellings a parser
// might not normalise (SPEC §3.1); "PORT" becomes the host's spell listener.
var spellings = map[string]string{
	"proxy.addr-127.1":            "127.1",
	"proxy.addr-2130706433":       "2130706433",
	"proxy.addr-0x7f000001":       "0x7f000001",
	"proxy.addr-mapped-127.0.0.1": "[::ffff:127.0.0.1]",
	"proxy.addr-169.254.169.254":  "169.254.169.254",
	"proxy.addr-fd00-ec2--254":    "[fd00:ec2::254]",
}

// Probe runs every probe of Names concurrently (each bounded by
// probeTimeout) and returns their results in Names order.
func Probe(ctx context.Context, p *Plan) []Result {
	fns := probes()
	out := make([]Result, len(Names))
	var wg sync.WaitGroup
	for i, name := range Names {
		if why, ok := p.Skip[name]; ok {
			out[i] = Result{Name: name, Result: Skipped, Evidence: why}
			continue
		}
		fn := fns[name]
		if fn == nil {
			out[i] = Result{Name: name, Result: Error, Evidence: "no probe of this name in this execwrap"}
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			pctx, cancel := context.WithTimeout(ctx, probeTimeout)
			defer cancel()
			done := make(chan Result, 1)
			go func() {
				defer func() {
					if v := recover(); v != nil {
						done <- Result{Name: name, Result: Error, Evidence: fmt.Sprint("probe panicked: ", v)}
					}
				}()
				r := fn(pctx, p, name)
				r.Name = name
				done <- r
			}()
			select {
			case r := <-done:
				out[i] = r
			case <-pctx.Done():
				out[i] = Result{Name: name, Result: Error, Evidence: "the probe did not finish within " + probeTimeout.String()}
			}
		}()
	}
	wg.Wait()
	return out
}

func held(ev string, a ...any) Result { return Result{Result: Held, Evidence: fmt.Sprintf(ev, a...)} }
func escaped(ev string, a ...any) Result {
	return Result{Result: Escaped, Evidence: fmt.Sprintf(ev, a...)}
}
func failed(ev string, a ...any) Result {
	return Result{Result: Error, Evidence: fmt.Sprintf(ev, a...)}
}

// errText names an error by its errno where there is one.
func errText(err error) string {
	var en unix.Errno
	if errors.As(err, &en) {
		if name := unix.ErrnoName(en); name != "" {
			return name
		}
	}
	return err.Error()
}

// ---- network ----

func probeTCP(ctx context.Context, p *Plan, name string) Result {
	targets := p.Targets[name]
	if len(targets) == 0 {
		return failed("no target address in the plan")
	}
	var ev []string
	for _, a := range targets {
		d := net.Dialer{Timeout: dialTimeout}
		c, err := d.DialContext(ctx, "tcp", a)
		if err == nil {
			fmt.Fprintf(c, "execwrap-selftest %s %s\n", p.Nonce, name)
			if p.Capture {
				// Capture accepts every connect inside the sandbox and
				// hands it to netproxy, which refuses a host address: the
				// host's listener (Judge) says whether the nonce arrived.
				ev = append(ev, a+": accepted by capture, then "+capturedEnd(c))
				continue
			}
			c.Close()
			return escaped("connected to host listener %s", a)
		}
		ev = append(ev, a+": "+errText(err))
	}
	return held("%s", strings.Join(ev, "; "))
}

func probeUDP(ctx context.Context, p *Plan, name string) Result {
	targets := p.Targets[name]
	if len(targets) == 0 {
		return failed("no target address in the plan")
	}
	q, err := dnsQuery(p.ExfilName("udp"))
	if err != nil {
		return failed("build query: %v", err)
	}
	var ev []string
	for _, a := range targets {
		ev = append(ev, a+": "+udpExchange(ctx, a, q))
	}
	for _, e := range ev {
		if strings.Contains(e, "answered") {
			return escaped("%s", strings.Join(ev, "; "))
		}
	}
	// The host's listener decides whether a datagram left (Merge).
	return held("%s", strings.Join(ev, "; "))
}

// udpExchange sends q and waits briefly for an answer.
func udpExchange(ctx context.Context, addr string, q []byte) string {
	s, _ := udpExchangeMsg(ctx, addr, q)
	return s
}

// udpExchangeMsg is udpExchange with the answer's bytes (nil: none).
func udpExchangeMsg(ctx context.Context, addr string, q []byte) (string, []byte) {
	d := net.Dialer{Timeout: dialTimeout}
	c, err := d.DialContext(ctx, "udp", addr)
	if err != nil {
		return errText(err), nil
	}
	defer c.Close()
	if _, err := c.Write(q); err != nil {
		return "send: " + errText(err), nil
	}
	c.SetReadDeadline(time.Now().Add(time.Second))
	buf := make([]byte, 512)
	n, err := c.Read(buf)
	if err != nil {
		return "sent, no answer (" + errText(err) + ")", nil
	}
	return fmt.Sprintf("answered %d bytes", n), buf[:n]
}

// probeTFO sends data with MSG_FASTOPEN (a connect that is not connect(2),
// which Landlock does not see) to each host listener.
func probeTFO(ctx context.Context, p *Plan, name string) Result {
	targets := p.Targets[name]
	if len(targets) == 0 {
		return failed("no target address in the plan")
	}
	var ev []string
	for _, a := range targets {
		ap, err := netip.ParseAddrPort(a)
		if err != nil {
			return failed("target %q: %v", a, err)
		}
		family, sa := unix.AF_INET, unix.Sockaddr(nil)
		if ap.Addr().Is4() {
			sa = &unix.SockaddrInet4{Port: int(ap.Port()), Addr: ap.Addr().As4()}
		} else {
			family = unix.AF_INET6
			sa = &unix.SockaddrInet6{Port: int(ap.Port()), Addr: ap.Addr().As16()}
		}
		fd, err := unix.Socket(family, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
		if err != nil {
			ev = append(ev, a+": socket: "+errText(err))
			continue
		}
		tv := unix.NsecToTimeval(dialTimeout.Nanoseconds())
		unix.SetsockoptTimeval(fd, unix.SOL_SOCKET, unix.SO_SNDTIMEO, &tv)
		err = unix.Sendto(fd, []byte("execwrap-selftest "+p.Nonce+" "+name+"\n"), unix.MSG_FASTOPEN, sa)
		unix.Close(fd)
		if err == nil {
			return escaped("sendto(MSG_FASTOPEN) to %s succeeded", a)
		}
		ev = append(ev, a+": sendto(MSG_FASTOPEN): "+errText(err))
	}
	return held("%s", strings.Join(ev, "; "))
}

func socketProbe(family, typ, proto int) probeFunc {
	return func(ctx context.Context, p *Plan, name string) Result {
		fd, err := unix.Socket(family, typ|unix.SOCK_CLOEXEC, proto)
		if err != nil {
			return held("socket(%d, %d, %d): %s", family, typ, proto, errText(err))
		}
		unix.Close(fd)
		return escaped("socket(%d, %d, %d) created", family, typ, proto)
	}
}

// dnsQuery is an A query for name.
func dnsQuery(name string) ([]byte, error) {
	n, err := dnsmessage.NewName(name + ".")
	if err != nil {
		return nil, err
	}
	var id [2]byte
	rand.Read(id[:])
	b := dnsmessage.NewBuilder(nil, dnsmessage.Header{ID: binary.BigEndian.Uint16(id[:]), RecursionDesired: true})
	if err := b.StartQuestions(); err != nil {
		return nil, err
	}
	if err := b.Question(dnsmessage.Question{Name: n, Type: dnsmessage.TypeA, Class: dnsmessage.ClassINET}); err != nil {
		return nil, err
	}
	return b.Finish()
}

// probeResolver asks the sandbox's resolvers (/etc/resolv.conf) for a
// unique denied name, over UDP and TCP: any answer means the query left
// the sandbox (a resolver forwards it to the name's zone: exfiltration).
func probeResolver(ctx context.Context, p *Plan, name string) Result {
	b, err := os.ReadFile("/etc/resolv.conf")
	if err != nil {
		return held("no /etc/resolv.conf inside (%s): no resolver to ask", errText(err))
	}
	var servers []string
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Fields(line)
		if len(f) >= 2 && f[0] == "nameserver" {
			servers = append(servers, net.JoinHostPort(strings.SplitN(f[1], "%", 2)[0], "53"))
		}
	}
	if len(servers) == 0 {
		return held("/etc/resolv.conf names no nameserver")
	}
	q, err := dnsQuery(p.ExfilName("resolver"))
	if err != nil {
		return failed("build query: %v", err)
	}
	var ev []string
	out := false
	for _, s := range servers {
		u, ua := udpExchangeMsg(ctx, s, q)
		t, ta := tcpDNSMsg(ctx, s, q)
		// The sandbox's own capture resolver answers every valid name from
		// its pool without asking anyone: that answer is no escape, any
		// other is.
		own := p.Capture && s == captureResolver
		if own && ua != nil && poolAnswer(ua) {
			u = "the sandbox's own resolver answered from its pool"
		}
		if own && ta != nil && poolAnswer(ta) {
			t = "the sandbox's own resolver answered from its pool"
		}
		out = out || strings.HasPrefix(u, "answered") || strings.HasPrefix(t, "answered")
		ev = append(ev, s+" udp: "+u+", tcp: "+t)
	}
	if out {
		return escaped("a resolver answered a query for %s: %s", p.ExfilName("resolver"), strings.Join(ev, "; "))
	}
	return held("%s", strings.Join(ev, "; "))
}

// tcpDNSMsg sends q over TCP and returns what happened and the answer's
// bytes (nil: none).
func tcpDNSMsg(ctx context.Context, addr string, q []byte) (string, []byte) {
	d := net.Dialer{Timeout: dialTimeout}
	c, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return errText(err), nil
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(dialTimeout))
	msg := append(binary.BigEndian.AppendUint16(nil, uint16(len(q))), q...)
	if _, err := c.Write(msg); err != nil {
		return "send: " + errText(err), nil
	}
	var l [2]byte
	if _, err := io.ReadFull(c, l[:]); err != nil {
		return "connected, no answer (" + errText(err) + ")", nil
	}
	ans := make([]byte, binary.BigEndian.Uint16(l[:]))
	if _, err := io.ReadFull(c, ans); err != nil {
		return "answered (truncated)", nil
	}
	return "answered", ans
}

// proxyAddr is the HTTP proxy the sandbox was given ("" when none).
func proxyAddr() string {
	for _, k := range []string{"HTTP_PROXY", "http_proxy"} {
		if v := os.Getenv(k); v != "" {
			if u, err := url.Parse(v); err == nil && u.Host != "" {
				return u.Host
			}
		}
	}
	return ""
}

// noProxy handles a proxy probe under --network none: there must be no
// proxy and no network at all.
func noProxy(ctx context.Context, p *Plan) (Result, bool) {
	if p.Network != "none" {
		return Result{}, false
	}
	if a := proxyAddr(); a != "" {
		return escaped("network none, yet HTTP_PROXY points at %s", a), true
	}
	d := net.Dialer{Timeout: dialTimeout}
	if c, err := d.DialContext(ctx, "tcp", "127.0.0.1:3128"); err == nil {
		c.Close()
		return escaped("network none, yet 127.0.0.1:3128 accepts connections"), true
	} else {
		return held("network none: no proxy (HTTP_PROXY unset; 127.0.0.1:3128: %s)", errText(err)), true
	}
}

type proxyAnswer struct {
	status int
	header http.Header
	body   string
	conn   net.Conn // open after a 200 to CONNECT; else nil
}

func (a proxyAnswer) String() string {
	s := strconv.Itoa(a.status)
	if e := a.header.Get("X-Proxy-Error"); e != "" {
		s += " " + e
	}
	if ap := a.header.Get("X-Proxy-Approval"); ap != "" {
		s += " approval=" + ap
	}
	if a.body != "" {
		s += " " + strings.TrimSpace(a.body)
	}
	return s
}

// proxyRequest writes raw (prefix, then a request) to the proxy and reads
// the answer; method tells how to read its body.
func proxyRequest(ctx context.Context, proxy, method string, raw []byte) (proxyAnswer, error) {
	d := net.Dialer{Timeout: dialTimeout}
	c, err := d.DialContext(ctx, "tcp", proxy)
	if err != nil {
		return proxyAnswer{}, err
	}
	c.SetDeadline(time.Now().Add(probeTimeout - time.Second))
	if _, err := c.Write(raw); err != nil {
		c.Close()
		return proxyAnswer{}, err
	}
	br := bufio.NewReader(c)
	resp, err := http.ReadResponse(br, &http.Request{Method: method})
	if err != nil {
		c.Close()
		return proxyAnswer{}, err
	}
	a := proxyAnswer{status: resp.StatusCode, header: resp.Header}
	if method == http.MethodConnect && resp.StatusCode == 200 {
		a.conn = &bufConn{Conn: c, r: br}
		return a, nil
	}
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 2048))
	a.body = string(body)
	c.Close()
	return a, nil
}

type bufConn struct {
	net.Conn
	r *bufio.Reader
}

func (b *bufConn) Read(p []byte) (int, error) { return b.r.Read(p) }

func connectReq(target string) []byte {
	return []byte("CONNECT " + target + " HTTP/1.1\r\nHost: " + target + "\r\nx-proxy-approval-wait: 0\r\n\r\n")
}

func getReq(target string) []byte {
	return []byte("GET http://" + target + "/ HTTP/1.1\r\nHost: " + target + "\r\nx-proxy-approval-wait: 0\r\nConnection: close\r\n\r\n")
}

// blockedAnswer classifies a proxy's answer to a request it must refuse:
// a 4xx (or 503, proxy off) refused it; a 2xx admitted it and a 502/504
// means the proxy tried to dial: both escaped.
func blockedAnswer(a proxyAnswer) Outcome {
	switch {
	case a.status >= 400 && a.status < 500, a.status == 503:
		return Held
	case a.status >= 200 && a.status < 300, a.status == 502, a.status == 504:
		return Escaped
	}
	return Error
}

// viaProxy sends a CONNECT and a plain GET for target and judges both.
func viaProxy(ctx context.Context, proxy, target string) (Outcome, string) {
	var ev []string
	worst := Held
	for _, m := range []string{http.MethodConnect, http.MethodGet} {
		raw := connectReq(target)
		if m == http.MethodGet {
			raw = getReq(target)
		}
		a, err := proxyRequest(ctx, proxy, m, raw)
		if a.conn != nil {
			a.conn.Close()
		}
		if err != nil {
			// A proxy that drops the connection without an answer did not
			// admit the request.
			ev = append(ev, m+" "+target+": no answer ("+errText(err)+")")
			continue
		}
		o := blockedAnswer(a)
		if o == Escaped || (o == Error && worst == Held) {
			worst = o
		}
		ev = append(ev, m+" "+target+": "+a.String())
	}
	return worst, strings.Join(ev, "; ")
}

func needProxy(ctx context.Context, p *Plan) (string, Result, bool) {
	if r, ok := noProxy(ctx, p); ok {
		return "", r, false
	}
	a := proxyAddr()
	if a == "" {
		return "", failed("network proxied, but the sandbox has no HTTP_PROXY"), false
	}
	return a, Result{}, true
}

func spellingProbe(host string) probeFunc {
	return func(ctx context.Context, p *Plan, name string) Result {
		proxy, r, ok := needProxy(ctx, p)
		if !ok {
			return r
		}
		port := "80" // metadata: nothing of the host's listens there
		if t := p.Targets[name]; len(t) > 0 {
			// A loopback spelling names the host listener's port, so an
			// admitted request is also seen arriving.
			_, port, _ = net.SplitHostPort(t[0])
		}
		o, ev := viaProxy(ctx, proxy, host+":"+port)
		return Result{Result: o, Evidence: ev}
	}
}

// probeDNSProxy asks the proxy for a unique name it must deny without a
// DNS query (SPEC §3.4): a block that says the name could not be resolved
// means netproxy sent the query.
func probeDNSProxy(ctx context.Context, p *Plan, name string) Result {
	proxy, r, ok := needProxy(ctx, p)
	if !ok {
		return r
	}
	var ev []string
	out := Held
	for _, m := range []string{http.MethodConnect, http.MethodGet} {
		target := p.ExfilName(strings.ToLower(m)) + ":443"
		raw := connectReq(target)
		if m == http.MethodGet {
			target = p.ExfilName("get") + ":80"
			raw = getReq(target)
		}
		a, err := proxyRequest(ctx, proxy, m, raw)
		if a.conn != nil {
			a.conn.Close()
		}
		if err != nil {
			ev = append(ev, m+": no answer ("+errText(err)+")")
			continue
		}
		ev = append(ev, m+" "+target+": "+a.String())
		low := strings.ToLower(a.body)
		switch {
		case a.status == 200, a.status == 502, a.status == 504,
			strings.Contains(low, "dns_error"), strings.Contains(low, "dns_timeout"),
			strings.Contains(low, "could not be resolved"):
			out = Escaped
		case blockedAnswer(a) != Held && out == Held:
			out = Error
		}
	}
	return Result{Result: out, Evidence: strings.Join(ev, "; ")}
}

// probeNetproxyDirect dials each of netproxy's own listeners without the
// bridge (so unframed, unattributed).
func probeNetproxyDirect(ctx context.Context, p *Plan, name string) Result {
	if len(p.Netproxy) == 0 {
		return failed("no netproxy listener in the plan")
	}
	own := map[string]bool{}
	for _, k := range []string{"HTTP_PROXY", "ALL_PROXY"} {
		if u, err := url.Parse(os.Getenv(k)); err == nil && u.Host != "" {
			own[u.Host] = true
		}
	}
	var ev []string
	for _, a := range p.Netproxy {
		if own[a] {
			// The same address inside is the sandbox's own bridge (its
			// loopback is not the host's); net.tcp4-loopback proves the
			// host's loopback is out of reach.
			ev = append(ev, a+": the sandbox's own bridge listener (host loopback: see net.tcp4-loopback)")
			continue
		}
		d := net.Dialer{Timeout: dialTimeout}
		c, err := d.DialContext(ctx, "tcp", a)
		if err == nil {
			c.Close()
			return escaped("connected to netproxy's listener %s directly", a)
		}
		ev = append(ev, a+": "+errText(err))
	}
	return held("%s", strings.Join(ev, "; "))
}

func probeControlSocket(ctx context.Context, p *Plan, name string) Result {
	if p.Control == "" {
		return failed("no control socket in the plan")
	}
	fd, err := unix.Socket(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return held("socket(AF_UNIX): %s", errText(err))
	}
	defer unix.Close(fd)
	if err := unix.Connect(fd, &unix.SockaddrUnix{Name: p.Control}); err != nil {
		return held("connect(%s): %s", p.Control, errText(err))
	}
	return escaped("connected to netproxy's control socket %s", p.Control)
}

// probeSelfLoop asks the proxy to dial netproxy's own listeners (SPEC §3.5:
// never).
func probeSelfLoop(ctx context.Context, p *Plan, name string) Result {
	proxy, r, ok := needProxy(ctx, p)
	if !ok {
		return r
	}
	if len(p.Netproxy) == 0 {
		return failed("no netproxy listener in the plan")
	}
	var ev []string
	out := Held
	for _, a := range p.Netproxy {
		o, e := viaProxy(ctx, proxy, a)
		if o == Escaped || (o == Error && out == Held) {
			out = o
		}
		ev = append(ev, e)
	}
	return Result{Result: out, Evidence: strings.Join(ev, "; ")}
}

// probeForgedFrame sends an attribution frame with a random token ahead of
// a request: the proxy must not act on the request behind it.
func probeForgedFrame(ctx context.Context, p *Plan, name string) Result {
	proxy, r, ok := needProxy(ctx, p)
	if !ok {
		return r
	}
	tok := make([]byte, 16)
	rand.Read(tok)
	t := hex.EncodeToString(tok)
	frame := append([]byte("\x00CDXPXY1"), byte(len(t)>>8), byte(len(t)))
	frame = append(frame, t...)
	target := p.ExfilName("frame") + ":80"
	a, err := proxyRequest(ctx, proxy, http.MethodGet, append(frame, getReq(target)...))
	if err != nil {
		return held("forged frame to %s: closed without an answer (%s)", proxy, errText(err))
	}
	// 400: the frame bytes were taken as a bad request (the bridge's own
	// frame came first). Anything that judged the request behind the
	// forged frame means the frame was read as one.
	if a.status == 400 {
		return held("forged frame to %s: %s", proxy, a.String())
	}
	return escaped("the request behind a forged frame was processed: %s", a.String())
}

// probeSNI opens a tunnel to an allowed name and sends a ClientHello for
// another name (domain fronting): SPEC §3.11 closes the tunnel before any
// byte reaches the upstream.
func probeSNI(ctx context.Context, p *Plan, name string) Result {
	proxy, r, ok := needProxy(ctx, p)
	if !ok {
		return r
	}
	if p.ProbeHost == "" {
		return failed("no --probe-host in the plan")
	}
	a, err := proxyRequest(ctx, proxy, http.MethodConnect, connectReq(p.ProbeHost))
	if err != nil {
		return failed("CONNECT %s: %s", p.ProbeHost, errText(err))
	}
	if a.conn == nil {
		return failed("CONNECT %s was refused (%s): give --probe-host a HOST:PORT netproxy allows", p.ProbeHost, a.String())
	}
	defer a.conn.Close()
	front := p.ExfilName("sni")
	cc := &countConn{Conn: a.conn}
	tc := tls.Client(cc, &tls.Config{ServerName: front, InsecureSkipVerify: true})
	tc.SetDeadline(time.Now().Add(dialTimeout))
	herr := tc.HandshakeContext(ctx)
	if cc.n > 0 {
		return escaped("a ClientHello for %s through a tunnel to %s was answered by the upstream (%d bytes; handshake: %v)", front, p.ProbeHost, cc.n, herr)
	}
	return held("tunnel to %s closed on a ClientHello for %s (%v)", p.ProbeHost, front, herr)
}

type countConn struct {
	net.Conn
	n int
}

func (c *countConn) Read(b []byte) (int, error) {
	n, err := c.Conn.Read(b)
	c.n += n
	return n, err
}

// ---- files ----

// probeSecret reads host secrets: the host compares the hashes and names.
func probeSecret(ctx context.Context, p *Plan, name string) Result {
	ts, ok := p.Secrets[name]
	if !ok || len(ts) == 0 {
		return failed("no path in the plan")
	}
	r := Result{Hashes: map[string]string{}}
	var ev []string
	for _, s := range ts {
		files := s.Files
		if !s.Dir {
			files = []string{s.Path}
		} else if ents, err := os.ReadDir(s.Path); err != nil {
			ev = append(ev, "list "+s.Path+": "+errText(err))
		} else {
			for _, e := range ents {
				r.Names = append(r.Names, e.Name())
			}
			ev = append(ev, fmt.Sprintf("list %s: %d entries", s.Path, len(ents)))
		}
		for _, f := range files {
			b, err := readLimited(f)
			switch {
			case err != nil:
				ev = append(ev, "read "+f+": "+errText(err))
			case len(b) == 0:
				ev = append(ev, "read "+f+": empty")
			default:
				sum := sha256.Sum256(b)
				r.Hashes[f] = hex.EncodeToString(sum[:])
				ev = append(ev, fmt.Sprintf("read %s: %d bytes", f, len(b)))
			}
		}
	}
	r.Result, r.Evidence = Held, strings.Join(ev, "; ")
	return r // the host decides (same bytes or same names → escaped)
}

func readLimited(p string) ([]byte, error) {
	f, err := os.Open(p)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return io.ReadAll(io.LimitReader(f, 1<<20))
}

// writeProbe creates a file in dir; the host decides (did it appear on the
// host?), since a private /tmp accepts writes that never reach the host.
func writeProbe(dir string) probeFunc {
	return func(ctx context.Context, p *Plan, name string) Result {
		if dir == "" {
			return failed("no folder in the plan")
		}
		f := filepath.Join(dir, p.FileName(strings.TrimPrefix(name, "fs.")))
		if err := os.WriteFile(f, []byte("execwrap selftest\n"), 0o644); err != nil {
			return held("create %s: %s", f, errText(err))
		}
		return held("created %s inside (the host checks whether it is the host's)", f)
	}
}

// protectedProbe tries to change a protected name of the workspace
// without destroying anything: open for writing without writing, create a
// new uniquely named file (removed again), or create the missing name.
func protectedProbe(prot, sub string) probeFunc {
	return func(ctx context.Context, p *Plan, name string) Result {
		if p.Workspace == "" {
			return failed("no workspace in the plan")
		}
		base := filepath.Join(p.Workspace, prot)
		fi, err := os.Lstat(base)
		switch {
		case err != nil:
			if err := os.Mkdir(base, 0o755); err != nil {
				return held("mkdir %s: %s", base, errText(err))
			}
			os.Remove(base)
			return escaped("created %s (removed again)", base)
		case fi.Mode()&os.ModeSymlink != 0 || !fi.IsDir():
			f, err := os.OpenFile(base, os.O_WRONLY|os.O_APPEND, 0)
			if err != nil {
				return held("open %s for writing: %s", base, errText(err))
			}
			f.Close()
			return escaped("opened %s for writing (nothing written)", base)
		}
		switch sub {
		case "config":
			f := filepath.Join(base, "config")
			if _, err := os.Lstat(f); err == nil {
				h, err := os.OpenFile(f, os.O_WRONLY|os.O_APPEND, 0)
				if err != nil {
					return held("open %s for writing: %s", f, errText(err))
				}
				h.Close()
				return escaped("opened %s for writing (nothing written)", f)
			}
			return createIn(base, p.FileName("config"))
		case "hooks":
			hooks := filepath.Join(base, "hooks")
			if _, err := os.Lstat(hooks); err != nil {
				if err := os.Mkdir(hooks, 0o755); err != nil {
					return held("mkdir %s: %s", hooks, errText(err))
				}
				os.Remove(hooks)
				return escaped("created %s (removed again)", hooks)
			}
			return createIn(hooks, p.FileName("hook"))
		}
		return createIn(base, p.FileName("plant"))
	}
}

func createIn(dir, name string) Result {
	f := filepath.Join(dir, name)
	h, err := os.OpenFile(f, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o755)
	if err != nil {
		return held("create %s: %s", f, errText(err))
	}
	h.Close()
	os.Remove(f)
	return escaped("created %s (removed again)", f)
}

// modeProbe creates a file in the workspace (its scratch folder) and sets a setuid/setgid bit
// (with chmod, or in open's mode); the host stats it after the run.
func modeProbe(mode uint32, viaOpen bool) probeFunc {
	return func(ctx context.Context, p *Plan, name string) Result {
		if p.Scratch == "" {
			return failed("no workspace in the plan")
		}
		f := filepath.Join(p.Scratch, p.FileName(strings.TrimPrefix(name, "fs.")))
		if viaOpen {
			fd, err := unix.Open(f, unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL|unix.O_CLOEXEC, mode)
			if err != nil {
				return held("open(O_CREAT, %#o) %s: %s", mode, f, errText(err))
			}
			unix.Close(fd)
			return held("open(O_CREAT, %#o) %s: ok (the host checks the mode)", mode, f)
		}
		if err := os.WriteFile(f, []byte("#!/bin/sh\nid\n"), 0o755); err != nil {
			return failed("create %s: %s", f, errText(err))
		}
		if err := unix.Chmod(f, mode); err != nil {
			return held("chmod %#o %s: %s", mode, f, errText(err))
		}
		return held("chmod %#o %s: ok (the host checks the mode)", mode, f)
	}
}

// probeFileCaps sets security.capability (cap_net_raw, effective) on a new
// workspace file; the host reads the attribute after the run.
func probeFileCaps(ctx context.Context, p *Plan, name string) Result {
	if p.Scratch == "" {
		return failed("no workspace in the plan")
	}
	f := filepath.Join(p.Scratch, p.FileName("file-caps"))
	if err := os.WriteFile(f, []byte("#!/bin/sh\nid\n"), 0o755); err != nil {
		return failed("create %s: %s", f, errText(err))
	}
	// vfs_cap_data revision 2: magic|effective, then permitted/inheritable.
	v := make([]byte, 20)
	binary.LittleEndian.PutUint32(v[0:], 0x02000000|1)
	binary.LittleEndian.PutUint32(v[4:], 1<<unix.CAP_NET_RAW)
	if err := unix.Setxattr(f, "security.capability", v, 0); err != nil {
		return held("setxattr security.capability %s: %s", f, errText(err))
	}
	return held("setxattr security.capability %s: ok (the host checks it)", f)
}

// ---- terminal, syscalls ----

// probeTIOCSTI pushes a byte into a terminal's input: on the standard
// streams and /dev/tty (the caller's terminal would be there), and on a pty
// of its own (always at hand, so seccomp's refusal is tested even without
// a terminal).
func probeTIOCSTI(ctx context.Context, p *Plan, name string) Result {
	var ev []string
	try := func(label string, fd int) bool {
		c := byte('#')
		_, _, e := unix.Syscall(unix.SYS_IOCTL, uintptr(fd), unix.TIOCSTI, uintptr(unsafe.Pointer(&c)))
		if e == 0 {
			ev = append(ev, label+": injected")
			return true
		}
		ev = append(ev, label+": "+errText(e))
		return false
	}
	out := false
	for fd := 0; fd <= 2; fd++ {
		out = try("fd "+strconv.Itoa(fd), fd) || out
	}
	if fd, err := unix.Open("/dev/tty", unix.O_RDWR|unix.O_NOCTTY|unix.O_CLOEXEC, 0); err == nil {
		out = try("/dev/tty", fd) || out
		unix.Close(fd)
	} else {
		ev = append(ev, "/dev/tty: "+errText(err))
	}
	if m, err := unix.Open("/dev/ptmx", unix.O_RDWR|unix.O_NOCTTY|unix.O_CLOEXEC, 0); err == nil {
		defer unix.Close(m)
		unix.IoctlSetPointerInt(m, unix.TIOCSPTLCK, 0)
		if n, err := unix.IoctlGetInt(m, unix.TIOCGPTN); err == nil {
			if s, err := unix.Open("/dev/pts/"+strconv.Itoa(n), unix.O_RDWR|unix.O_NOCTTY|unix.O_CLOEXEC, 0); err == nil {
				out = try("own pty", s) || out
				unix.Close(s)
			} else {
				ev = append(ev, "own pty: "+errText(err))
			}
		}
	} else {
		ev = append(ev, "/dev/ptmx: "+errText(err))
	}
	if out {
		return escaped("TIOCSTI worked: %s", strings.Join(ev, "; "))
	}
	return held("%s", strings.Join(ev, "; "))
}

// onThread runs f on a fresh OS thread that is thrown away afterwards (a
// successful ptrace or unshare changes the thread).
func onThread(f func() Result) Result {
	ch := make(chan Result, 1)
	go func() {
		runtime.LockOSThread() // never unlocked: the thread dies with the goroutine
		ch <- f()
	}()
	return <-ch
}

func probePtrace(ctx context.Context, p *Plan, name string) Result {
	return onThread(func() Result {
		if err := unix.PtraceAttach(1); err != nil {
			return held("ptrace(PTRACE_ATTACH, 1): %s", errText(err))
		}
		unix.PtraceDetach(1)
		return escaped("ptrace(PTRACE_ATTACH, 1) succeeded")
	})
}

func probePidfdGetfd(ctx context.Context, p *Plan, name string) Result {
	pfd, err := unix.PidfdOpen(1, 0)
	if err != nil {
		return held("pidfd_open(1): %s", errText(err))
	}
	defer unix.Close(pfd)
	fd, err := unix.PidfdGetfd(pfd, 0, 0)
	if err != nil {
		return held("pidfd_getfd(pid 1, fd 0): %s", errText(err))
	}
	unix.Close(fd)
	return escaped("pidfd_getfd took fd 0 of pid 1")
}

func probeProc1(ctx context.Context, p *Plan, name string) Result {
	var ev []string
	for _, f := range []string{"/proc/1/environ", "/proc/1/mem"} {
		h, err := os.Open(f)
		if err != nil {
			ev = append(ev, f+": "+errText(err))
			continue
		}
		b := make([]byte, 64)
		n, rerr := h.Read(b)
		h.Close()
		if n > 0 {
			return escaped("read %d bytes of %s", n, f)
		}
		if rerr != nil && rerr != io.EOF {
			ev = append(ev, f+": opened, read: "+errText(rerr))
		} else {
			ev = append(ev, f+": empty")
		}
	}
	return held("%s", strings.Join(ev, "; "))
}

func probeMount(ctx context.Context, p *Plan, name string) Result {
	dir, err := os.MkdirTemp("", "execwrap-selftest-mnt-")
	if err != nil {
		dir = "/tmp"
	} else {
		defer os.Remove(dir)
	}
	if err := unix.Mount("selftest", dir, "tmpfs", 0, "size=1m"); err != nil {
		return held("mount tmpfs on %s: %s", dir, errText(err))
	}
	unix.Unmount(dir, unix.MNT_DETACH)
	return escaped("mounted a tmpfs on %s", dir)
}

// probeUnshare makes a user namespace the two ways a process can: a child
// cloned into one, and a (single-threaded) child that unshares; a Go
// process's own unshare(CLONE_NEWUSER) fails with EINVAL for being
// multi-threaded, which would prove nothing. The child is this binary with
// no plan: it exits at once.
func probeUnshare(ctx context.Context, p *Plan, name string) Result {
	var ev []string
	for _, how := range []struct {
		label string
		attr  syscall.SysProcAttr
	}{
		{"clone(CLONE_NEWUSER)", syscall.SysProcAttr{Cloneflags: unix.CLONE_NEWUSER}},
		{"unshare(CLONE_NEWUSER)", syscall.SysProcAttr{Unshareflags: unix.CLONE_NEWUSER}},
	} {
		attr := how.attr
		pid, err := syscall.ForkExec("/proc/self/exe", []string{"execwrap", ProbeArg}, &syscall.ProcAttr{Sys: &attr})
		if err != nil {
			ev = append(ev, how.label+": "+errText(err))
			continue
		}
		var ws unix.WaitStatus
		unix.Wait4(pid, &ws, 0, nil)
		return escaped("%s made a child in a new user namespace", how.label)
	}
	return held("%s", strings.Join(ev, "; "))
}

func syscallProbe(nr, a1, a2, a3 uintptr) probeFunc {
	return func(ctx context.Context, p *Plan, name string) Result {
		r, _, e := unix.Syscall(nr, a1, a2, a3)
		if e != 0 {
			return held("syscall %d: %s", nr, errText(e))
		}
		if strings.HasSuffix(name, "userfaultfd") {
			unix.Close(int(r))
		}
		return escaped("syscall %d succeeded (%d)", nr, int(r))
	}
}

func probeKeyctl(ctx context.Context, p *Plan, name string) Result {
	id, err := unix.KeyctlGetKeyringID(unix.KEY_SPEC_SESSION_KEYRING, false)
	if err != nil {
		return held("keyctl(KEYCTL_GET_KEYRING_ID, session): %s", errText(err))
	}
	return escaped("keyctl reached the session keyring %d", id)
}

func probeBPF(ctx context.Context, p *Plan, name string) Result {
	// BPF_MAP_CREATE of a one-entry array map.
	attr := [5]uint32{unix.BPF_MAP_TYPE_ARRAY, 4, 4, 1, 0}
	r, _, e := unix.Syscall(unix.SYS_BPF, unix.BPF_MAP_CREATE, uintptr(unsafe.Pointer(&attr)), unsafe.Sizeof(attr))
	if e != 0 {
		return held("bpf(BPF_MAP_CREATE): %s", errText(e))
	}
	unix.Close(int(r))
	return escaped("bpf(BPF_MAP_CREATE) returned a map")
}

func probePerf(ctx context.Context, p *Plan, name string) Result {
	attr := unix.PerfEventAttr{Type: unix.PERF_TYPE_SOFTWARE, Config: unix.PERF_COUNT_SW_CPU_CLOCK}
	attr.Size = uint32(unsafe.Sizeof(attr))
	attr.Bits = unix.PerfBitDisabled
	fd, err := unix.PerfEventOpen(&attr, -1, 0, -1, unix.PERF_FLAG_FD_CLOEXEC)
	if err != nil {
		return held("perf_event_open(cpu clock, all processes on cpu 0): %s", errText(err))
	}
	unix.Close(fd)
	return escaped("perf_event_open on every process of cpu 0 succeeded")
}

func probeIOUring(ctx context.Context, p *Plan, name string) Result {
	var params [120]byte
	r, _, e := unix.Syscall(unix.SYS_IO_URING_SETUP, 1, uintptr(unsafe.Pointer(&params)), 0)
	if e != 0 {
		return held("io_uring_setup: %s", errText(e))
	}
	unix.Close(int(r))
	return escaped("io_uring_setup returned a ring")
}

func probeOpenByHandle(ctx context.Context, p *Plan, name string) Result {
	h, _, err := unix.NameToHandleAt(unix.AT_FDCWD, "/etc/hostname", 0)
	if err != nil {
		return held("name_to_handle_at: %s", errText(err))
	}
	// Any fd on the same file system names the mount (the landlock tier
	// cannot open "/" itself).
	root, err := unix.Open("/etc", unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return failed("open /etc: %s", errText(err))
	}
	defer unix.Close(root)
	fd, err := unix.OpenByHandleAt(root, h, unix.O_RDONLY|unix.O_CLOEXEC)
	if err != nil {
		return held("open_by_handle_at: %s", errText(err))
	}
	unix.Close(fd)
	return escaped("open_by_handle_at opened a file by handle")
}

// sortedKeys is used by the host side to print evidence deterministically.
func sortedKeys[M ~map[string]V, V any](m M) []string {
	ks := make([]string, 0, len(m))
	for k := range m {
		ks = append(ks, k)
	}
	sort.Strings(ks)
	return ks
}
