package main

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"net/netip"
	"strconv"
	"time"

	"github.com/elazarl/goproxy"
)

// originBody is the peer bench's response body: size bytes of a fixed,
// checkable pattern.
func originBody(size int) []byte {
	const pattern = "0123456789abcdefghijklmnopqrstuvwxyz\n"
	b := make([]byte, size)
	for i := range b {
		b[i] = pattern[i%len(pattern)]
	}
	return b
}

// benchHosts is the static name table of the bench: the origin's name, as
// netproxy's [dns.hosts] and Squid's hosts_file have it.
var benchHosts = map[string]string{"up.test": "127.0.0.1"}

// serveGoproxyLib is the "goproxy library alone" peer: the smallest proxy
// one can write on github.com/elazarl/goproxy (the library netproxy is
// built on), with the library's defaults except
//   - logging off (Verbose is already false by default; the logger discards);
//   - the bench's static name table (up.test → 127.0.0.1) in its dialers,
//     so every proxy gets the same request bytes;
//   - 64 idle upstream connections per host, netproxy's pool size
//     (net/http's default of 2 churns upstream connections under 64
//     concurrent clients and runs out of ephemeral ports).
//
// It serves plain-HTTP forwarding (absolute-form requests, through the
// library's http.Transport) and CONNECT (the library's hijack-and-copy
// tunnel), with no policy of any kind.
func serveGoproxyLib(ln net.Listener) error {
	p := goproxy.NewProxyHttpServer()
	p.Logger = log.New(io.Discard, "", 0)
	var d net.Dialer
	dial := func(ctx context.Context, network, addr string) (net.Conn, error) {
		if host, port, err := net.SplitHostPort(addr); err == nil {
			if ip, ok := benchHosts[host]; ok {
				addr = net.JoinHostPort(ip, port)
			}
		}
		return d.DialContext(ctx, network, addr)
	}
	p.Tr = &http.Transport{DialContext: dial, MaxIdleConnsPerHost: 64, IdleConnTimeout: 90 * time.Second}
	p.ConnectDial = func(network, addr string) (net.Conn, error) {
		return dial(context.Background(), network, addr)
	}
	return (&http.Server{Handler: p, ErrorLog: log.New(io.Discard, "", 0)}).Serve(ln)
}

// socks5Connect runs a SOCKS5 client handshake on c: no authentication,
// then CONNECT to host:port (an IPv4 literal as an address, anything else
// as a domain name, so the proxy resolves it after its policy). It reads
// the whole reply, leaving no tunnel byte behind.
func socks5Connect(c net.Conn, host string, port int) error {
	c.SetDeadline(time.Now().Add(10 * time.Second))
	defer c.SetDeadline(time.Time{})
	if _, err := c.Write([]byte{5, 1, 0}); err != nil {
		return err
	}
	var greet [2]byte
	if _, err := io.ReadFull(c, greet[:]); err != nil {
		return fmt.Errorf("socks5 method reply: %w", err)
	}
	if greet != [2]byte{5, 0} {
		return fmt.Errorf("socks5 method reply %x, want 0500 (no authentication)", greet)
	}
	req := []byte{5, 1, 0}
	if a, err := netip.ParseAddr(host); err == nil && a.Is4() {
		b := a.As4()
		req = append(append(req, 1), b[:]...)
	} else {
		if len(host) > 255 {
			return errors.New("socks5: host name too long")
		}
		req = append(append(req, 3, byte(len(host))), host...)
	}
	req = binary.BigEndian.AppendUint16(req, uint16(port))
	if _, err := c.Write(req); err != nil {
		return err
	}
	var head [4]byte
	if _, err := io.ReadFull(c, head[:]); err != nil {
		return fmt.Errorf("socks5 reply: %w", err)
	}
	if head[0] != 5 || head[1] != 0 {
		return fmt.Errorf("socks5 CONNECT %s:%d refused: reply code %d", host, port, head[1])
	}
	var rest int
	switch head[3] {
	case 1:
		rest = 4 + 2
	case 4:
		rest = 16 + 2
	case 3:
		var l [1]byte
		if _, err := io.ReadFull(c, l[:]); err != nil {
			return err
		}
		rest = int(l[0]) + 2
	default:
		return fmt.Errorf("socks5 reply: address type %d", head[3])
	}
	if _, err := io.ReadFull(c, make([]byte, rest)); err != nil {
		return fmt.Errorf("socks5 reply address: %w", err)
	}
	return nil
}

// httpConnect sends a CONNECT for target on c and checks for a 2xx answer,
// reading the head byte by byte so no tunnel byte is left in a buffer.
func httpConnect(c net.Conn, target string) error {
	if _, err := fmt.Fprintf(c, "CONNECT %s HTTP/1.1\r\nHost: %s\r\n\r\n", target, target); err != nil {
		return err
	}
	head, err := readHead(c)
	if err != nil {
		return fmt.Errorf("CONNECT %s: %w", target, err)
	}
	if len(head) < 12 || string(head[:7]) != "HTTP/1." || head[9] != '2' {
		return fmt.Errorf("CONNECT %s answered %q", target, head)
	}
	return nil
}

// tunnelVia says how a client reaches the origin through one peer: a
// direct dial, an HTTP CONNECT or a SOCKS5 CONNECT to host (the port is the
// origin's).
type tunnelVia struct {
	addr  string // where the client dials
	kind  string // "direct" (also the bare relay), "connect", "socks5"
	host  string // the target host named to the proxy
	label string
}

// open dials v.addr and, for a proxy, sets up the tunnel to host:port.
func (v tunnelVia) open(port int) (net.Conn, error) {
	c, err := net.DialTimeout("tcp", v.addr, 10*time.Second)
	if err != nil {
		return nil, err
	}
	switch v.kind {
	case "connect":
		err = httpConnect(c, net.JoinHostPort(v.host, strconv.Itoa(port)))
	case "socks5":
		err = socks5Connect(c, v.host, port)
	}
	if err != nil {
		c.Close()
		return nil, err
	}
	return c, nil
}
