package proxy

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"testing"
)

// BenchmarkHTTPKeepAlive measures one keep-alive client connection sending
// absolute-form GETs through the HTTP front end to a loopback upstream.
func BenchmarkHTTPKeepAlive(b *testing.B) {
	t := &testing.T{}
	_ = t
	up := http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "hello") })}
	ln, _ := net.Listen("tcp", "127.0.0.1:0")
	go up.Serve(ln)
	defer up.Close()
	port := ln.Addr().(*net.TCPAddr).Port
	benchKeepAlive(b, newBenchStack(b), port)
}

// benchKeepAlive sends b.N absolute-form GETs to up.test:port over one
// keep-alive connection to s.
func benchKeepAlive(b *testing.B, s *stack, port int) {
	c, err := net.Dial("tcp", s.httpAddr)
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	br := bufio.NewReader(c)
	req := fmt.Sprintf("GET http://up.test:%d/ HTTP/1.1\r\nHost: up.test:%d\r\n\r\n", port, port)
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		io.WriteString(c, req)
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			b.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
	}
}

// BenchmarkTunnelThroughput moves 64 MiB per iteration through a Tunnel.
func BenchmarkTunnelThroughput(b *testing.B) {
	const size = 64 << 20
	ln, _ := net.Listen("tcp", "127.0.0.1:0")
	defer ln.Close()
	buf := make([]byte, 256<<10)
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				for left := size; left > 0; left -= len(buf) {
					if _, err := c.Write(buf); err != nil {
						return
					}
				}
			}()
		}
	}()
	pl, _ := net.Listen("tcp", "127.0.0.1:0")
	defer pl.Close()
	go func() {
		for {
			c, err := pl.Accept()
			if err != nil {
				return
			}
			up, err := net.Dial("tcp", ln.Addr().String())
			if err != nil {
				c.Close()
				continue
			}
			go (&Tunnel{Client: c.(*net.TCPConn), Upstream: up.(*net.TCPConn)}).Run()
		}
	}()
	b.SetBytes(size)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		c, err := net.Dial("tcp", pl.Addr().String())
		if err != nil {
			b.Fatal(err)
		}
		n, _ := io.CopyBuffer(io.Discard, struct{ io.Reader }{c}, buf)
		c.Close()
		if n != size {
			b.Fatalf("%d bytes", n)
		}
	}
}

// BenchmarkHTTPNewConnection measures one request per client connection
// (Connection: close) through the HTTP front end to a keep-alive upstream.
func BenchmarkHTTPNewConnection(b *testing.B) {
	up := http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "hello") })}
	ln, _ := net.Listen("tcp", "127.0.0.1:0")
	go up.Serve(ln)
	defer up.Close()
	port := ln.Addr().(*net.TCPAddr).Port
	s := newBenchStack(b)
	req := fmt.Sprintf("GET http://up.test:%d/ HTTP/1.1\r\nHost: up.test:%d\r\nConnection: close\r\n\r\n", port, port)
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		c, err := net.Dial("tcp", s.httpAddr)
		if err != nil {
			b.Fatal(err)
		}
		io.WriteString(c, req)
		resp, err := http.ReadResponse(bufio.NewReader(c), nil)
		if err != nil {
			b.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		c.Close()
	}
}
