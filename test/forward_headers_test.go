package test

// What a client says about its own connection stays between it and the
// proxy (RFC 9110 §7.6.1), as with net/http/httputil.ReverseProxy: a
// client's "Connection: close" closes the client's connection, not the
// pooled upstream one, and a request without a User-Agent reaches the
// upstream without one (no "Go-http-client/1.1" of netproxy's own).

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

func TestClientConnectionHeadersStayHopByHop(t *testing.T) {
	var conns atomic.Int64
	var mu sync.Mutex
	var heads []http.Header
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{
		Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			mu.Lock()
			heads = append(heads, r.Header.Clone())
			mu.Unlock()
			io.WriteString(w, "ok")
		}),
		ConnState: func(_ net.Conn, s http.ConnState) {
			if s == http.StateNew {
				conns.Add(1)
			}
		},
	}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	port := ln.Addr().(*net.TCPAddr).Port
	p := StartProxy(t, StdConfig())

	const n = 10
	for i := 0; i < n; i++ {
		c, err := net.Dial("tcp", p.HTTP)
		if err != nil {
			t.Fatal(err)
		}
		// No User-Agent; the client wants its connection closed.
		fmt.Fprintf(c, "GET http://up.test:%d/%d HTTP/1.1\r\nHost: up.test:%d\r\nConnection: close\r\n\r\n", port, i, port)
		c.SetReadDeadline(time.Now().Add(5 * time.Second))
		resp, err := http.ReadResponse(bufio.NewReader(c), nil)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != 200 || string(body) != "ok" {
			t.Fatalf("request %d: %d %q", i, resp.StatusCode, body)
		}
		// The client's connection is closed after the answer.
		if n, err := c.Read(make([]byte, 1)); n != 0 || err == nil {
			t.Fatalf("request %d: client connection still open after Connection: close", i)
		}
		c.Close()
	}
	mu.Lock()
	defer mu.Unlock()
	for i, h := range heads {
		if v := h.Values("Connection"); len(v) > 0 {
			t.Errorf("request %d reached the upstream with Connection: %q", i, strings.Join(v, ", "))
		}
		if v, ok := h["User-Agent"]; ok {
			t.Errorf("request %d reached the upstream with User-Agent %q; the client sent none", i, v)
		}
	}
	if got := conns.Load(); got != 1 {
		t.Errorf("%d requests with a client's Connection: close took %d upstream connections, want 1 (pooled)", n, got)
	}
}

// TestBodyRequestKeepsClientClose: a request with a body and the client's
// Connection: close keeps it upstream. An upstream that answers while it
// reads (an echo) streams the whole body back only on a connection that
// closes after: net/http's server discards the unread rest of a keep-alive
// request's body once it answers (the conformance case
// http-allowed-post-body-intact).
func TestBodyRequestKeepsClientClose(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(w, r.Body)
	})}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	port := ln.Addr().(*net.TCPAddr).Port
	p := StartProxy(t, StdConfig())
	body := strings.Repeat("0123456789abcdef", 16<<10) // 256 KiB
	client := &http.Client{Transport: &http.Transport{
		Proxy:             http.ProxyURL(&url.URL{Scheme: "http", Host: p.HTTP}),
		DisableKeepAlives: true, // sends Connection: close
	}}
	resp, err := client.Post(fmt.Sprintf("http://up.test:%d/echo", port), "application/octet-stream", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	got, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if string(got) != body {
		t.Fatalf("echoed %d bytes, want the %d sent", len(got), len(body))
	}
}
