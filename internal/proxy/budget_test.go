package proxy

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"

	"github.com/netproxy/netproxy/attribution"
)

// keepAliveUpstream serves "hello" on loopback and returns its port.
func keepAliveUpstream(tb testing.TB) int {
	up := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "hello") })}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	go up.Serve(ln)
	tb.Cleanup(func() { up.Close() })
	return ln.Addr().(*net.TCPAddr).Port
}

// framedConn registers an execution with limits (nil: none) and opens a
// framed keep-alive connection of it to the stack's HTTP listener.
func framedConn(tb testing.TB, s *stack, limits *attribution.BudgetLimits) (net.Conn, *bufio.Reader, attribution.Execution) {
	e, tok, err := s.registry.Register(attribution.ExecutionSpec{SessionID: "s", EnvironmentID: "e", Budgets: limits})
	if err != nil {
		tb.Fatal(err)
	}
	c, err := net.Dial("tcp", s.httpAddr)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { c.Close() })
	if err := attribution.WriteFrame(c, tok); err != nil {
		tb.Fatal(err)
	}
	return c, bufio.NewReader(c), e
}

func keepAliveGet(c net.Conn, br *bufio.Reader, req string) (*http.Response, string, error) {
	if _, err := io.WriteString(c, req); err != nil {
		return nil, "", err
	}
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		return nil, "", err
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	return resp, string(b), nil
}

// TestBudgetKeepAlive: requests on one keep-alive connection are counted
// one by one (bytes too), the one past the limit is the JSON block with
// budget_exceeded, and the connection stays usable for the block.
func TestBudgetKeepAlive(t *testing.T) {
	port := keepAliveUpstream(t)
	s := newStack(t, testPolicy, Limits{}, "")
	c, br, e := framedConn(t, s, &attribution.BudgetLimits{Requests: 2})
	req := fmt.Sprintf("GET http://up.test:%d/ HTTP/1.1\r\nHost: up.test:%d\r\n\r\n", port, port)
	for i := 0; i < 2; i++ {
		if resp, body, err := keepAliveGet(c, br, req); err != nil || resp.StatusCode != 200 || body != "hello" {
			t.Fatalf("request %d: %v %v %q", i, resp, err, body)
		}
	}
	resp, body, err := keepAliveGet(c, br, req)
	if err != nil || resp.StatusCode != 403 || resp.Header.Get("X-Proxy-Error") != "blocked-by-budget" ||
		!strings.Contains(body, `"reason":"budget_exceeded"`) || !strings.Contains(body, `"source":"proxy_state"`) {
		t.Fatalf("3rd: %v %v %q", resp, err, body)
	}
	if u := e.Budget.Usage(); u != (attribution.Usage{Requests: 2, Hosts: 1, BytesIn: 10}) {
		t.Fatalf("usage %+v", u)
	}
}

// TestBudgetBytesInCut: a response body that crosses bytes_in is cut: the
// client reads no more than the limit and the connection is closed.
func TestBudgetBytesInCut(t *testing.T) {
	big := strings.Repeat("x", 1<<20)
	up := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, big) })}
	ln, _ := net.Listen("tcp", "127.0.0.1:0")
	go up.Serve(ln)
	defer up.Close()
	port := ln.Addr().(*net.TCPAddr).Port
	s := newStack(t, testPolicy, Limits{}, "")
	c, br, e := framedConn(t, s, &attribution.BudgetLimits{BytesIn: 100 << 10})
	io.WriteString(c, fmt.Sprintf("GET http://up.test:%d/ HTTP/1.1\r\nHost: up.test:%d\r\n\r\n", port, port))
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatal(err)
	}
	n, err := io.Copy(io.Discard, resp.Body)
	if err == nil || n > 100<<10 {
		t.Fatalf("read %d bytes of a 1 MiB body past a 100 KiB budget (err %v)", n, err)
	}
	if u := e.Budget.Usage(); u.BytesIn <= 100<<10 {
		t.Fatalf("usage %+v", u)
	}
}

// BenchmarkHTTPKeepAliveBudget compares a framed keep-alive request of an
// unbudgeted execution with one of a budgeted execution (limits never
// reached): the budget's cost per request (issue 25: within 2 %).
func BenchmarkHTTPKeepAliveBudget(b *testing.B) {
	port := keepAliveUpstream(b)
	req := fmt.Sprintf("GET http://up.test:%d/ HTTP/1.1\r\nHost: up.test:%d\r\n\r\n", port, port)
	for _, bc := range []struct {
		name   string
		limits *attribution.BudgetLimits
	}{
		{"unbudgeted", nil},
		{"budgeted", &attribution.BudgetLimits{BytesOut: 1 << 50, BytesIn: 1 << 50, Requests: 1 << 50, Hosts: 100}},
	} {
		b.Run(bc.name, func(b *testing.B) {
			s := newBenchStack(b)
			c, br, _ := framedConn(b, s, bc.limits)
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				if _, _, err := keepAliveGet(c, br, req); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
