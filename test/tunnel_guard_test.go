package test

import (
	"bufio"
	"bytes"
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"net/http"
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
		p, pool := startLimitedMITM(t, &Upstream{Port: up.Port, TLS: true})
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
