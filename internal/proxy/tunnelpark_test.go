package proxy

import (
	"bytes"
	"crypto/rand"
	"io"
	"net"
	"runtime"
	"sync"
	"testing"
	"time"
)

// tunnelPair is a Tunnel between two real socket pairs: the test holds the
// far ends (client and upstream) and the tunnel the near ends.
type tunnelPair struct {
	t                *Tunnel
	client, upstream *net.TCPConn // the test's ends
	owner            *Conn
	done             chan struct{}
}

func socketPair(t *testing.T) (a, b *net.TCPConn) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	c, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	s, err := ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	return c.(*net.TCPConn), s.(*net.TCPConn)
}

func newParkedPair(t *testing.T, p *Parker, idle time.Duration) *tunnelPair {
	t.Helper()
	client, nearClient := socketPair(t)
	nearUp, upstream := socketPair(t)
	tr := NewTracker(0, nil)
	owner := &Conn{TCPConn: nearClient, Listener: "http", tracker: tr}
	tr.add(owner)
	tp := &tunnelPair{client: client, upstream: upstream, owner: owner, done: make(chan struct{})}
	tp.t = &Tunnel{Client: nearClient, Upstream: nearUp, Idle: idle, Owner: owner, Parker: p}
	var wg sync.WaitGroup
	tp.t.Start(&wg)
	go func() { wg.Wait(); close(tp.done) }()
	t.Cleanup(func() { client.Close(); upstream.Close() })
	return tp
}

func newTestParker(t *testing.T, after time.Duration) *Parker {
	t.Helper()
	p, err := NewParker()
	if err != nil {
		t.Fatal(err)
	}
	p.After = after
	t.Cleanup(func() { p.Close() })
	return p
}

func waitParked(t testing.TB, p *Parker, n int) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for p.Parked() != n {
		if time.Now().After(deadline) {
			t.Fatalf("%d directions parked, want %d", p.Parked(), n)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func echoOnce(t *testing.T, from, to *net.TCPConn, msg []byte) {
	t.Helper()
	if _, err := from.Write(msg); err != nil {
		t.Fatal(err)
	}
	got := make([]byte, len(msg))
	to.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := io.ReadFull(to, got); err != nil || !bytes.Equal(got, msg) {
		t.Fatalf("got %q, %v; want %q", got, err, msg)
	}
}

// TestParkedTunnelWakesBothWays: both directions park when quiet and each
// resumes on its own socket's data, bytes intact, again and again.
func TestParkedTunnelWakesBothWays(t *testing.T) {
	p := newTestParker(t, 30*time.Millisecond)
	tp := newParkedPair(t, p, 0)
	for i := 0; i < 5; i++ {
		waitParked(t, p, 2)
		echoOnce(t, tp.client, tp.upstream, []byte("to the upstream"))
		waitParked(t, p, 2)
		echoOnce(t, tp.upstream, tp.client, []byte("to the client"))
	}
	// A larger burst after parking arrives whole.
	waitParked(t, p, 2)
	big := make([]byte, 4<<20)
	rand.Read(big)
	go tp.upstream.Write(big)
	got := make([]byte, len(big))
	tp.client.SetReadDeadline(time.Now().Add(10 * time.Second))
	if _, err := io.ReadFull(tp.client, got); err != nil || !bytes.Equal(got, big) {
		t.Fatalf("4 MiB after parking: %v", err)
	}
}

// TestParkedTunnelHalfClose: the upstream's end of stream reaches a client
// whose direction is parked, and the tunnel finishes when both ended.
func TestParkedTunnelHalfClose(t *testing.T) {
	p := newTestParker(t, 30*time.Millisecond)
	tp := newParkedPair(t, p, 0)
	waitParked(t, p, 2)
	tp.upstream.CloseWrite()
	tp.client.SetReadDeadline(time.Now().Add(5 * time.Second))
	if n, err := tp.client.Read(make([]byte, 1)); n != 0 || err != io.EOF {
		t.Fatalf("client read %d, %v; want EOF", n, err)
	}
	// The other way still works, then the client ends too.
	echoOnce(t, tp.client, tp.upstream, []byte("after half-close"))
	tp.client.CloseWrite()
	select {
	case <-tp.done:
	case <-time.After(5 * time.Second):
		t.Fatal("tunnel did not finish after both ends closed")
	}
	if !tp.owner.closed.Load() {
		t.Fatal("owner not closed at the end")
	}
}

// TestParkedTunnelEndsWhenOwnerClosed: a revocation, the kill switch or a
// shutdown closes the client Conn; a fully parked tunnel must finish at
// once (slot released, upstream closed), not when a byte comes.
func TestParkedTunnelEndsWhenOwnerClosed(t *testing.T) {
	p := newTestParker(t, 30*time.Millisecond)
	tp := newParkedPair(t, p, 0)
	waitParked(t, p, 2)
	tp.owner.Close()
	select {
	case <-tp.done:
	case <-time.After(2 * time.Second):
		t.Fatal("parked tunnel did not finish when its connection was closed")
	}
	if p.Parked() != 0 {
		t.Fatalf("%d directions still parked", p.Parked())
	}
	tp.upstream.SetReadDeadline(time.Now().Add(2 * time.Second))
	if _, err := tp.upstream.Read(make([]byte, 1)); err != io.EOF {
		t.Fatalf("upstream read %v, want EOF (its socket closed)", err)
	}
}

// TestParkedTunnelIdleLimit: a tunnel parked in both directions is still
// closed at its idle limit.
func TestParkedTunnelIdleLimit(t *testing.T) {
	p := newTestParker(t, 30*time.Millisecond)
	tp := newParkedPair(t, p, 300*time.Millisecond)
	waitParked(t, p, 2)
	select {
	case <-tp.done:
	case <-time.After(3 * time.Second): // the limit plus one sweep
		t.Fatal("idle parked tunnel not closed")
	}
}

// TestParkedTunnelsHoldNoGoroutines: many quiet tunnels park and leave no
// goroutine behind; all of them still work afterwards.
func TestParkedTunnelsHoldNoGoroutines(t *testing.T) {
	p := newTestParker(t, 30*time.Millisecond)
	before := runtime.NumGoroutine()
	const n = 200
	pairs := make([]*tunnelPair, n)
	for i := range pairs {
		pairs[i] = newParkedPair(t, p, 0)
	}
	waitParked(t, p, 2*n)
	// One goroutine per pair is the test's own (it waits for the end).
	if g := runtime.NumGoroutine() - before - n; g > 10 {
		t.Fatalf("%d goroutines for %d parked tunnels", g, n)
	}
	for i, tp := range pairs {
		echoOnce(t, tp.client, tp.upstream, []byte{byte(i)})
		echoOnce(t, tp.upstream, tp.client, []byte{byte(i), 1})
	}
	for _, tp := range pairs {
		tp.owner.Close()
		<-tp.done
	}
	if p.Parked() != 0 {
		t.Fatalf("%d directions still parked", p.Parked())
	}
}

// TestParkRacesClose: closing a tunnel while its directions park and
// wake never leaves a direction behind or ends one twice (-race).
func TestParkRacesClose(t *testing.T) {
	p := newTestParker(t, time.Millisecond)
	for i := 0; i < 200; i++ {
		tp := newParkedPair(t, p, 0)
		go func() {
			for j := 0; j < 3; j++ {
				tp.client.Write([]byte("x"))
				time.Sleep(time.Millisecond)
			}
		}()
		time.Sleep(time.Duration(i%4) * time.Millisecond)
		tp.owner.Close()
		select {
		case <-tp.done:
		case <-time.After(5 * time.Second):
			t.Fatalf("tunnel %d did not finish", i)
		}
		if live := tp.t.live.Load(); live != 0 {
			t.Fatalf("tunnel %d finished with %d live directions", i, live)
		}
	}
	waitParked(t, p, 0)
}
