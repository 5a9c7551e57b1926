package proxy

import (
	"bytes"
	"crypto/tls"
	"errors"
	"net"
	"slices"
	"testing"
	"time"
)

// helloConn captures what a TLS client writes and fails its reads, so
// that tls.Client.Handshake stops right after the ClientHello.
type helloConn struct {
	net.Conn
	buf bytes.Buffer
}

func (c *helloConn) Write(p []byte) (int, error)      { return c.buf.Write(p) }
func (c *helloConn) Read([]byte) (int, error)         { return 0, errors.New("captured") }
func (c *helloConn) Close() error                     { return nil }
func (c *helloConn) SetDeadline(time.Time) error      { return nil }
func (c *helloConn) SetReadDeadline(time.Time) error  { return nil }
func (c *helloConn) SetWriteDeadline(time.Time) error { return nil }

// realHello is the ClientHello crypto/tls sends for serverName ("": none).
func realHello(t testing.TB, serverName string) []byte {
	c := &helloConn{}
	cfg := &tls.Config{ServerName: serverName, InsecureSkipVerify: serverName == "", NextProtos: []string{"h2", "http/1.1"}}
	tls.Client(c, cfg).Handshake()
	if c.buf.Len() == 0 {
		t.Fatal("no ClientHello captured")
	}
	return c.buf.Bytes()
}

// refragment re-frames a single-record ClientHello into records of at
// most size bytes of handshake data each.
func refragment(rec []byte, size int) []byte {
	msg := rec[5:]
	var out []byte
	for len(msg) > 0 {
		n := min(size, len(msg))
		out = append(out, 0x16, 3, 1, byte(n>>8), byte(n))
		out = append(out, msg[:n]...)
		msg = msg[n:]
	}
	return out
}

func TestParseClientHello(t *testing.T) {
	h := realHello(t, "api.test")
	names, v := parseClientHello(h)
	if v != helloName || !slices.Equal(names, []string{"api.test"}) {
		t.Fatalf("real hello: %v %v", names, v)
	}
	// Every prefix asks for more; split over records it reads the same.
	for i := 0; i < len(h); i++ {
		if _, v := parseClientHello(h[:i]); v != helloMore {
			t.Fatalf("prefix %d: %v", i, v)
		}
	}
	for _, size := range []int{1, 7, 100, 512} {
		names, v := parseClientHello(refragment(h, size))
		if v != helloName || !slices.Equal(names, []string{"api.test"}) {
			t.Fatalf("records of %d: %v %v", size, names, v)
		}
	}
	if names, v := parseClientHello(realHello(t, "")); v != helloName || len(names) != 0 {
		t.Fatalf("no SNI: %v %v", names, v)
	}
	for _, s := range []string{"GET / HTTP/1.1\r\n", "SSH-2.0-OpenSSH_9.6\r\n", "\x16\x02\x00", "\x17\x03\x03\x00\x10"} {
		if _, v := parseClientHello([]byte(s)); v != helloNotTLS {
			t.Errorf("%q: %v, want pass", s, v)
		}
	}
	// A handshake message that is not a ClientHello passes.
	if _, v := parseClientHello([]byte{0x16, 3, 1, 0, 4, 2, 0, 0, 0}); v != helloNotTLS {
		t.Errorf("ServerHello: %v", v)
	}
	// A ClientHello claiming more than the bound is closed at once.
	if _, v := parseClientHello([]byte{0x16, 3, 1, 0, 4, 1, 0x01, 0, 0}); v != helloMalformed {
		t.Errorf("64 KiB ClientHello: %v", v)
	}
	// A truncated body inside a complete message is malformed.
	bad := append([]byte(nil), h...)
	bad = append(bad[:5:5], 1, 0, 0, 3, 3, 3, 0)
	bad[3], bad[4] = 0, 7
	if _, v := parseClientHello(bad); v != helloMalformed {
		t.Errorf("truncated body: %v", v)
	}
}

// FuzzClientHello: the parser never panics, never asks for more past the
// bound, and a ClientHello it reads gives the same names however it is
// split into records.
func FuzzClientHello(f *testing.F) {
	f.Add(realHello(f, "api.test"))
	f.Add(realHello(f, ""))
	f.Add(refragment(realHello(f, "denied.test"), 50))
	f.Add([]byte("GET / HTTP/1.1\r\n\r\n"))
	f.Add([]byte{0x16, 3, 1, 0, 4, 1, 0, 0, 0})
	f.Fuzz(func(t *testing.T, b []byte) {
		names, v := parseClientHello(b)
		if v == helloMore && len(b) >= maxClientHello {
			t.Fatalf("asks for more past the bound (%d bytes)", len(b))
		}
		if v != helloName && names != nil {
			t.Fatalf("names %v with verdict %v", names, v)
		}
		if v == helloName && len(b) >= 5 {
			rl := int(b[3])<<8 | int(b[4])
			if 5+rl == len(b) { // one record: re-split it and compare
				for _, size := range []int{1, 3, 64} {
					n2, v2 := parseClientHello(refragment(b, size))
					if v2 != helloName || !slices.Equal(names, n2) {
						t.Fatalf("records of %d: %v %v, want %v", size, n2, v2, names)
					}
				}
			}
		}
	})
}
