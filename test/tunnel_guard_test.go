package test

import (
	"bufio"
	"bytes"
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strings"
	"sync"
	"testing"
	"time"
)

// rawUpstream is an origin that records every byte it receives and
// answers any head carrying Upgrade with a 101 (then keeps reading: after
// a 101 nothing is HTTP any more), anything else with 200.
type rawUpstream struct {
	Port int
	mu   sync.Mutex
	got  bytes.Buffer
}

func startRawUpstream(t *testing.T, useTLS bool) *rawUpstream {
	t.Helper()
	u := &rawUpstream{}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	u.Port = ln.Addr().(*net.TCPAddr).Port
	if useTLS {
		ln = tls.NewListener(ln, &tls.Config{Certificates: []tls.Certificate{selfSigned(t)}})
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go u.serve(c)
		}
	}()
	return u
}

func (u *rawUpstream) serve(c net.Conn) {
	defer c.Close()
	c.SetDeadline(time.Now().Add(20 * time.Second))
	br := bufio.NewReader(io.TeeReader(c, u))
	for {
		req, err := http.ReadRequest(br)
		if err != nil {
			return
		}
		if req.Header.Get("Upgrade") != "" {
			fmt.Fprintf(c, "HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: %s\r\n\r\n", req.Header.Get("Upgrade"))
			io.Copy(io.Discard, br)
			return
		}
		io.Copy(io.Discard, req.Body)
		io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
	}
}

func (u *rawUpstream) Write(p []byte) (int, error) {
	u.mu.Lock()
	defer u.mu.Unlock()
	return u.got.Write(p)
}

// Received is everything the upstream read so far.
func (u *rawUpstream) Received() string {
	u.mu.Lock()
	defer u.mu.Unlock()
	return u.got.String()
}

// upgradeThenPost sends a GET carrying Upgrade, then (as an attacker
// would after a 101) a raw POST on the same connection, and returns what
// came back.
func upgradeThenPost(c net.Conn, target, host string) string {
	fmt.Fprintf(c, "GET %s HTTP/1.1\r\nHost: %s\r\nConnection: Upgrade\r\nUpgrade: websocket\r\nSec-WebSocket-Version: 13\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n\r\n", target, host)
	time.Sleep(300 * time.Millisecond)
	io.WriteString(c, "POST /upload HTTP/1.1\r\nHost: x\r\nContent-Length: 6\r\n\r\nSECRET")
	c.SetReadDeadline(time.Now().Add(3 * time.Second))
	var out bytes.Buffer
	io.Copy(&out, c)
	return out.String()
}

// TestLimitedModeRefusesUpgrade is issue 24 item 3 (SPEC §3.8): in
// limited mode a GET carrying Upgrade is refused with method_not_allowed,
// on the plain listener and inside an intercepted tunnel alike; before,
// it got a 101 and a splice that carried a raw POST upstream.
func TestLimitedModeRefusesUpgrade(t *testing.T) {
	t.Run("plain", func(t *testing.T) {
		up := startRawUpstream(t, false)
		cfg := StdConfig()
		cfg.Mode = "limited"
		p := StartProxy(t, cfg)
		c, err := net.DialTimeout("tcp", p.HTTP, 5*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		host := fmt.Sprintf("up.test:%d", up.Port)
		out := upgradeThenPost(c, "http://"+host+"/ws", host)
		if !strings.HasPrefix(out, "HTTP/1.1 403") || !strings.Contains(out, `"reason":"method_not_allowed"`) || !strings.Contains(out, `"source":"mode_guard"`) {
			t.Fatalf("limited-mode Upgrade answered:\n%s", out)
		}
		if got := up.Received(); got != "" {
			t.Fatalf("the upstream received %q", got)
		}
	})
	t.Run("intercepted", func(t *testing.T) {
		up := startRawUpstream(t, true)
		p, pool := startLimitedMITM(t, &Upstream{Port: up.Port, TLS: true}, "1s")
		tc := mitmTLS(t, p, pool, "up.test", up.Port, "http/1.1")
		defer tc.Close()
		host := fmt.Sprintf("up.test:%d", up.Port)
		out := upgradeThenPost(tc, "/ws", host)
		if !strings.HasPrefix(out, "HTTP/1.1 403") || !strings.Contains(out, `"reason":"method_not_allowed"`) {
			t.Fatalf("limited-mode Upgrade inside the tunnel answered:\n%s", out)
		}
		if got := up.Received(); strings.Contains(got, "GET") || strings.Contains(got, "SECRET") {
			t.Fatalf("the upstream received %q", got)
		}
	})
}

// tlsThrough runs a TLS handshake with serverName over c (a tunnel) and,
// when it succeeds, a GET /hello; it returns the body or the error.
func tlsThrough(c net.Conn, serverName string) (string, error) {
	tc := tls.Client(c, &tls.Config{ServerName: serverName, InsecureSkipVerify: true, NextProtos: []string{"http/1.1"}})
	tc.SetDeadline(time.Now().Add(5 * time.Second))
	if err := tc.Handshake(); err != nil {
		return "", err
	}
	io.WriteString(tc, "GET /hello HTTP/1.1\r\nHost: up.test\r\nConnection: close\r\n\r\n")
	resp, err := http.ReadResponse(bufio.NewReader(tc), nil)
	if err != nil {
		return "", err
	}
	b, _ := io.ReadAll(resp.Body)
	return string(b), nil
}

func openConnect(t *testing.T, p *Proxy, host string, port int, early []byte) net.Conn {
	t.Helper()
	c, err := net.DialTimeout("tcp", p.HTTP, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	c.Write(append([]byte(fmt.Sprintf("CONNECT %s:%d HTTP/1.1\r\nHost: %s:%d\r\n\r\n", host, port, host, port)), early...))
	br := bufio.NewReader(c)
	resp, err := http.ReadResponse(br, nil)
	if err != nil || resp.StatusCode != 200 || br.Buffered() != 0 {
		t.Fatalf("CONNECT %s: %v %v", host, resp, err)
	}
	return c
}

// captureHello returns the ClientHello a Go TLS client sends for name.
func captureHello(t *testing.T, name string) []byte {
	a, b := net.Pipe()
	go tls.Client(a, &tls.Config{ServerName: name, InsecureSkipVerify: true}).Handshake()
	b.SetReadDeadline(time.Now().Add(5 * time.Second))
	buf := make([]byte, 16<<10)
	n, err := b.Read(buf)
	if err != nil {
		t.Fatal(err)
	}
	a.Close()
	b.Close()
	return buf[:n]
}

// TestOpaqueTunnelTLSName is issue 24 item 5 (SPEC §3.11): an opaque
// CONNECT or SOCKS5 tunnel to up.test whose ClientHello names denied.test
// is closed before any byte reaches the upstream, audited as
// sni_mismatch; the tunnel's own name, no SNI, and bytes that are not TLS
// pass. Before, the ClientHello went through (domain fronting).
func TestOpaqueTunnelTLSName(t *testing.T) {
	raw := startRawUpstream(t, false)
	up := StartUpstream(t, true)
	p := StartProxy(t, StdConfig())

	// Fronting through CONNECT, SOCKS5, and with the ClientHello sent
	// together with the CONNECT head (early bytes).
	if _, err := tlsThrough(openConnect(t, p, "up.test", raw.Port, nil), "denied.test"); err == nil {
		t.Fatal("CONNECT: a handshake naming denied.test completed")
	}
	rep, sc := SocksConnect(t, p.SOCKS, nil, 1, "up.test", raw.Port)
	if rep != 0 {
		t.Fatalf("SOCKS5 CONNECT: reply %d", rep)
	}
	if _, err := tlsThrough(sc, "DENIED.test."); err == nil {
		t.Fatal("SOCKS5: a handshake naming denied.test completed")
	}
	ec := openConnect(t, p, "up.test", raw.Port, captureHello(t, "denied.test"))
	if !closedWithin(ec, 5*time.Second) {
		t.Fatal("CONNECT with an early fronted ClientHello: tunnel stays open")
	}
	time.Sleep(200 * time.Millisecond)
	if got := raw.Received(); got != "" {
		t.Fatalf("the upstream received %d bytes of fronted tunnels", len(got))
	}
	waitAudit(t, p, "network_decision", 3, func(m map[string]any) bool { return m["reason"] == "sni_mismatch" })
	if code, body := p.AdminRequest(t, "GET", "/metrics", p.Token); code != 200 || !strings.Contains(body, `reason="sni_mismatch"`) {
		t.Fatalf("metrics: %d, no sni_mismatch count", code)
	}

	// The tunnel's own name and no SNI pass, over CONNECT and SOCKS5.
	for _, name := range []string{"up.test", ""} {
		if body, err := tlsThrough(openConnect(t, p, "up.test", up.Port, nil), name); err != nil || body != Hello {
			t.Fatalf("CONNECT, SNI %q: %q %v", name, body, err)
		}
		_, sc := SocksConnect(t, p.SOCKS, nil, 1, "up.test", up.Port)
		if body, err := tlsThrough(sc, name); err != nil || body != Hello {
			t.Fatalf("SOCKS5, SNI %q: %q %v", name, body, err)
		}
	}
	// Bytes that are not a ClientHello pass.
	pc := openConnect(t, p, "up.test", raw.Port, nil)
	io.WriteString(pc, "GET /plain HTTP/1.1\r\nHost: up.test\r\n\r\n")
	pc.SetReadDeadline(time.Now().Add(5 * time.Second))
	if resp, err := http.ReadResponse(bufio.NewReader(pc), nil); err != nil || resp.StatusCode != 200 {
		t.Fatalf("plain bytes through CONNECT: %v %v", resp, err)
	}

	// network.check_tls_name = false turns the check off.
	cfg := StdConfig()
	cfg.Extra = ""
	off := WriteProxyConfig(t, cfg)
	b, _ := os.ReadFile(off.ConfigPath)
	os.WriteFile(off.ConfigPath, []byte(strings.Replace(string(b), "[network]\n", "[network]\ncheck_tls_name = false\n", 1)), 0o600)
	off.Start(t)
	if body, err := tlsThrough(openConnect(t, off, "up.test", up.Port, nil), "denied.test"); err != nil || body != Hello {
		t.Fatalf("check_tls_name = false: %q %v", body, err)
	}
}
