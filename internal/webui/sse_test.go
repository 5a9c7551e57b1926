package webui

import (
	"errors"
	"io"
	"strings"
	"testing"
)

func TestSSEReaderFormat(t *testing.T) {
	in := "retry: 2000\n: comment\n\n" +
		"event: approval_created\ndata: {\"id\":\"a\"}\n\n" +
		"data: line1\r\ndata:line2\r\n\r\n" + // default name, CRLF, no space after colon
		"event: skipped_no_data\n\n" +
		"event: blocked\rdata: x\r\r" + // lone CR line endings
		"id: 7\nevent: last\ndata: tail" // no final blank line: not dispatched
	rd := NewSSEReader(strings.NewReader(in))
	want := []Event{
		{Name: "approval_created", Data: []byte(`{"id":"a"}`)},
		{Name: "message", Data: []byte("line1\nline2")},
		{Name: "blocked", Data: []byte("x")},
	}
	for _, w := range want {
		ev, err := rd.Next()
		if err != nil {
			t.Fatalf("want %q: %v", w.Name, err)
		}
		if ev.Name != w.Name || string(ev.Data) != string(w.Data) {
			t.Fatalf("got %q %q, want %q %q", ev.Name, ev.Data, w.Name, w.Data)
		}
	}
	if _, err := rd.Next(); err != io.EOF {
		t.Fatalf("end: %v, want EOF", err)
	}
}

func TestSSEReaderLineTooLong(t *testing.T) {
	in := "data: " + strings.Repeat("x", MaxSSELine+10) + "\n\n"
	_, err := NewSSEReader(strings.NewReader(in)).Next()
	if !errors.Is(err, ErrSSELineTooLong) {
		t.Fatalf("err %v, want ErrSSELineTooLong", err)
	}
	// Many short data lines adding up past the bound are refused too.
	in = strings.Repeat("data: "+strings.Repeat("y", 1000)+"\n", MaxSSELine/1000+2) + "\n"
	_, err = NewSSEReader(strings.NewReader(in)).Next()
	if !errors.Is(err, ErrSSELineTooLong) {
		t.Fatalf("joined data: err %v, want ErrSSELineTooLong", err)
	}
}

func TestSSERoundTripThroughFormatEvent(t *testing.T) {
	ev := Event{Name: EventApprovalDecided, Data: []byte(`{"id":"x","decision":"deny"}`)}
	got, err := NewSSEReader(strings.NewReader(formatEvent(ev))).Next()
	if err != nil || got.Name != ev.Name || string(got.Data) != string(ev.Data) {
		t.Fatalf("round trip: %q %q %v", got.Name, got.Data, err)
	}
}

func FuzzSSEReader(f *testing.F) {
	f.Add([]byte("event: a\ndata: {}\n\n"))
	f.Add([]byte("data: x\r\ndata: y\r\r\n\n:c\n"))
	f.Add([]byte("\r"))
	f.Add([]byte("event\ndata\n\n"))
	f.Fuzz(func(t *testing.T, in []byte) {
		rd := NewSSEReader(strings.NewReader(string(in)))
		for i := 0; i < len(in)+2; i++ {
			ev, err := rd.Next()
			if err != nil {
				return
			}
			if strings.ContainsAny(ev.Name, "\r\n") {
				t.Fatalf("event name %q contains a line break", ev.Name)
			}
		}
		t.Fatalf("reader produced more events than input bytes")
	})
}
