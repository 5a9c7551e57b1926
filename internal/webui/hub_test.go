package webui

import (
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

func TestHubStreamsEventsInOrder(t *testing.T) {
	hub := NewHub(HubOptions{Heartbeat: 50 * time.Millisecond})
	srv := httptest.NewServer(hub)
	defer srv.Close()

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, "GET", srv.URL, nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if ct := resp.Header.Get("Content-Type"); ct != "text/event-stream; charset=utf-8" {
		t.Fatalf("content-type %q", ct)
	}
	waitSubscribers(t, hub, 1)
	hub.Publish(EventApprovalCreated, map[string]any{"id": "a1", "host": "alpha.test"})
	hub.Publish(EventApprovalDecided, map[string]any{"id": "a1", "decision": "allow_session"})

	rd := NewSSEReader(resp.Body)
	for _, want := range []string{EventApprovalCreated, EventApprovalDecided} {
		ev, err := rd.Next()
		if err != nil {
			t.Fatalf("reading %s: %v", want, err)
		}
		if ev.Name != want {
			t.Fatalf("event %q, want %q", ev.Name, want)
		}
		var m map[string]any
		if err := json.Unmarshal(ev.Data, &m); err != nil || m["id"] != "a1" {
			t.Fatalf("data %s: %v", ev.Data, err)
		}
	}
}

func waitSubscribers(t *testing.T, hub *Hub, n int) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for hub.Subscribers() != n {
		if time.Now().After(deadline) {
			t.Fatalf("subscribers = %d, want %d", hub.Subscribers(), n)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func TestHubPublishNeverBlocksAndDropsSlowSubscriber(t *testing.T) {
	hub := NewHub(HubOptions{Buffer: 4})
	slow, cancelSlow := hub.Subscribe()
	defer cancelSlow()
	fast, cancelFast := hub.Subscribe()
	defer cancelFast()

	for i := 0; i < 100; i++ {
		hub.Publish(EventBlocked, map[string]int{"n": i})
		if _, ok := <-fast; !ok { // a reader that keeps up is never cut off
			t.Fatalf("fast subscriber cut off at event %d", i)
		}
	}
	// The slow subscriber got its 4 events and then its channel closed.
	got := 0
	for range slow {
		got++
	}
	if got != 4 {
		t.Fatalf("slow subscriber got %d events before being cut off, want 4", got)
	}
	if hub.Subscribers() != 1 {
		t.Fatalf("subscribers = %d, want 1 (fast one)", hub.Subscribers())
	}
	hub.Close()
	if _, ok := <-fast; ok {
		t.Fatal("Close did not end the fast subscriber")
	}
	// After Close, a new subscription is closed at once.
	ch, _ := hub.Subscribe()
	if _, ok := <-ch; ok {
		t.Fatal("subscription after Close delivered an event")
	}
}

func TestHubRejectsInvalidNamesAndData(t *testing.T) {
	hub := NewHub(HubOptions{})
	ch, cancel := hub.Subscribe()
	defer cancel()
	hub.Publish("bad\nname", 1)
	hub.Publish("", 1)
	hub.Publish(EventBlocked, make(chan int)) // does not marshal
	hub.Publish(EventBlocked, map[string]string{"host": "a\nb"})
	ev := <-ch
	if ev.Name != EventBlocked || string(ev.Data) != `{"host":"a\nb"}` {
		t.Fatalf("got %q %s", ev.Name, ev.Data)
	}
	select {
	case ev := <-ch:
		t.Fatalf("unexpected extra event %q", ev.Name)
	default:
	}
}

func TestHubEndsStreamOnCloseAndHeartbeats(t *testing.T) {
	hub := NewHub(HubOptions{Heartbeat: 20 * time.Millisecond})
	srv := httptest.NewServer(hub)
	defer srv.Close()
	resp, err := http.Get(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	waitSubscribers(t, hub, 1)
	time.Sleep(70 * time.Millisecond) // let heartbeats flow
	hub.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	if got := string(body); len(got) == 0 || !contains(got, ": ping") || !contains(got, "retry: 2000") {
		t.Fatalf("stream %q lacks retry or heartbeat", got)
	}
}

func TestHubRefusesNonGET(t *testing.T) {
	hub := NewHub(HubOptions{})
	rec := httptest.NewRecorder()
	hub.ServeHTTP(rec, httptest.NewRequest("POST", "/api/events", nil))
	if rec.Code != http.StatusMethodNotAllowed {
		t.Fatalf("POST answered %d", rec.Code)
	}
}

func contains(s, sub string) bool { return strings.Contains(s, sub) }

func BenchmarkHubPublish100Subscribers(b *testing.B) {
	hub := NewHub(HubOptions{Buffer: 1 << 16})
	for i := 0; i < 100; i++ {
		ch, cancel := hub.Subscribe()
		defer cancel()
		go func() {
			for range ch {
			}
		}()
	}
	payload := map[string]any{"id": "a1", "host": "alpha.test", "port": 443, "protocol": "https"}
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		hub.Publish(EventApprovalCreated, payload)
	}
}

// BenchmarkHubToSSEClient is one event from Publish to a parsed event in
// an SSE client over a real loopback socket.
func BenchmarkHubToSSEClient(b *testing.B) {
	hub := NewHub(HubOptions{Buffer: 1 << 16})
	srv := httptest.NewServer(hub)
	defer srv.Close()
	defer hub.Close()
	resp, err := http.Get(srv.URL)
	if err != nil {
		b.Fatal(err)
	}
	defer resp.Body.Close()
	for hub.Subscribers() == 0 {
		time.Sleep(time.Millisecond)
	}
	rd := NewSSEReader(resp.Body)
	payload := map[string]any{"id": "a1", "host": "alpha.test", "port": 443, "protocol": "https"}
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		hub.Publish(EventApprovalCreated, payload)
		if _, err := rd.Next(); err != nil {
			b.Fatal(err)
		}
	}
}

func TestHubClosesStreamsOnServerShutdown(t *testing.T) {
	hub := NewHub(HubOptions{})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: hub}
	go srv.Serve(ln)
	resp, err := http.Get("http://" + ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	waitSubscribers(t, hub, 1)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	start := time.Now()
	if err := srv.Shutdown(ctx); err != nil {
		t.Fatalf("Shutdown with an open stream: %v", err)
	}
	if d := time.Since(start); d > 2*time.Second {
		t.Fatalf("Shutdown took %s with an open stream", d)
	}
	if _, err := io.ReadAll(resp.Body); err != nil {
		t.Fatalf("stream did not end cleanly: %v", err)
	}
}
