package proxy

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"net"
	"net/http"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/netproxy/netproxy/internal/observe"
	"github.com/netproxy/netproxy/metrics/audit"
)

// endLog collects connection_end events.
type endLog struct {
	mu  sync.Mutex
	evs []observe.ConnectionEndEvent
}

func (l *endLog) ConnectionEnd(e observe.ConnectionEndEvent) {
	l.mu.Lock()
	l.evs = append(l.evs, e)
	l.mu.Unlock()
}

func (l *endLog) wait(t *testing.T, n int) []observe.ConnectionEndEvent {
	t.Helper()
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		l.mu.Lock()
		got := append([]observe.ConnectionEndEvent(nil), l.evs...)
		l.mu.Unlock()
		if len(got) >= n {
			return got
		}
	}
	t.Fatalf("fewer than %d connection ends", n)
	return nil
}

// TestAccessRecords: two keep-alive requests end with one record each
// (status, body bytes); a CONNECT tunnel's record has its bytes each way
// and the side that closed first; a tunnel closed by a change says so.
func TestAccessRecords(t *testing.T) {
	_, port := upstream(t)
	log := &endLog{}
	s := newStackWith(t, testPolicy, Limits{}, stackParts{ends: log})
	c, err := net.Dial("tcp", s.httpAddr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	br := bufio.NewReader(c)
	for i := 0; i < 2; i++ {
		fmt.Fprintf(c, "GET http://up.test:%d/ HTTP/1.1\r\nHost: up.test:%d\r\n\r\n", port, port)
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
	}
	evs := log.wait(t, 2)
	for _, e := range evs {
		if e.Status != 200 || e.BytesIn != 5 || e.BytesOut != 0 || e.Close != EndComplete || e.Method != "GET" || e.Host != "up.test" || e.Started.After(e.Time) {
			t.Fatalf("keep-alive record: %+v", e)
		}
	}

	// A tunnel: 3 bytes up, the upstream answers 4 and closes.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		u, err := ln.Accept()
		if err != nil {
			return
		}
		io.ReadFull(u, make([]byte, 3))
		u.Write([]byte("pong"))
		u.Close()
	}()
	tp := ln.Addr().(*net.TCPAddr).Port
	tc, err := net.Dial("tcp", s.httpAddr)
	if err != nil {
		t.Fatal(err)
	}
	defer tc.Close()
	fmt.Fprintf(tc, "CONNECT up.test:%d HTTP/1.1\r\nHost: up.test:%d\r\n\r\n", tp, tp)
	tbr := bufio.NewReader(tc)
	if resp, err := http.ReadResponse(tbr, &http.Request{Method: "CONNECT"}); err != nil || resp.StatusCode != 200 {
		t.Fatalf("CONNECT: %v %v", resp, err)
	}
	tc.Write([]byte("pin"))
	if b, _ := io.ReadAll(tbr); !bytes.Equal(b, []byte("pong")) {
		t.Fatalf("tunnel: %q", b)
	}
	tc.Close()
	evs = log.wait(t, 3)
	if e := evs[2]; e.Method != "CONNECT" || e.BytesOut != 3 || e.BytesIn != 4 || e.Status != 0 || e.Close != EndUpstreamClosed {
		t.Fatalf("tunnel record: %+v", e)
	}

	// A tunnel closed by a change (SPEC §3.9): policy_closed.
	kc, err := net.Dial("tcp", s.httpAddr)
	if err != nil {
		t.Fatal(err)
	}
	defer kc.Close()
	fmt.Fprintf(kc, "CONNECT up.test:%d HTTP/1.1\r\nHost: up.test:%d\r\n\r\n", port, port)
	if resp, err := http.ReadResponse(bufio.NewReader(kc), &http.Request{Method: "CONNECT"}); err != nil || resp.StatusCode != 200 {
		t.Fatalf("CONNECT: %v %v", resp, err)
	}
	// (The idle keep-alive connection is closed too: it has no request
	// under way, so no record.)
	if n := s.core.CloseAllFor(CloseProxyDisabled); n != 2 {
		t.Fatalf("closed %d connections, want 2", n)
	}
	evs = log.wait(t, 4)
	if e := evs[3]; e.Close != EndPolicyClosed || e.Port != uint16(port) || e.Method != "CONNECT" {
		t.Fatalf("closed tunnel record: %+v", e)
	}
	time.Sleep(100 * time.Millisecond)
	if evs = log.wait(t, 4); len(evs) != 4 {
		t.Fatalf("%d records, want 4: %+v", len(evs), evs)
	}
}

// BenchmarkHTTPKeepAliveAudited is BenchmarkHTTPKeepAlive with the audit
// writer behind the decisions and the access records: what the audit
// costs a keep-alive request (docs/BENCHMARKS.md).
func BenchmarkHTTPKeepAliveAudited(b *testing.B) {
	up := http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "hello") })}
	ln, _ := net.Listen("tcp", "127.0.0.1:0")
	go up.Serve(ln)
	defer up.Close()
	port := ln.Addr().(*net.TCPAddr).Port
	w, err := audit.Open(filepath.Join(b.TempDir(), "audit.jsonl"), 0, nil)
	if err != nil {
		b.Fatal(err)
	}
	defer w.Close(b.Context())
	benchKeepAlive(b, newStackWith(b, testPolicy, Limits{}, stackParts{sink: w, ends: w}), port)
}
