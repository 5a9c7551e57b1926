package proxy

import (
	"strings"
	"testing"
)

func TestRawHostHeader(t *testing.T) {
	cases := map[string]string{
		"GET http://a/ HTTP/1.1\r\nHost: b:80\r\n\r\nHost: body":  "b:80",
		"GET http://a/ HTTP/1.1\r\nX: 1\r\nhOsT:   c \r\n\r\n":    "c",
		"GET http://a/ HTTP/1.1\r\nX: 1\r\n\r\nHost: in-body\r\n": "",
		"GET http://a/ HTTP/1.1\nHost: lf-only\n\n":               "lf-only",
	}
	for in, want := range cases {
		if got := rawHostHeader([]byte(in)); got != want {
			t.Errorf("rawHostHeader(%q) = %q, want %q", in, got, want)
		}
	}
}

func FuzzRawHostHeader(f *testing.F) {
	f.Add([]byte("GET http://a/ HTTP/1.1\r\nHost: b\r\n\r\n"))
	f.Add([]byte("\n\n\nhost:"))
	f.Fuzz(func(t *testing.T, data []byte) {
		h := rawHostHeader(data)
		if strings.ContainsAny(h, "\n") {
			t.Fatalf("host spans lines: %q", h)
		}
	})
}

func TestSplitHostPort(t *testing.T) {
	cases := []struct {
		in   string
		host string
		port uint16
		ok   bool
	}{
		{"a.test", "a.test", 80, true},
		{"a.test:8080", "a.test", 8080, true},
		{"[::1]:443", "::1", 443, true},
		{"[::1]", "::1", 80, true},
		{"::1", "::1", 80, true},
		{"a.test:0", "", 0, false},
		{"a.test:99999", "", 0, false},
		{":443", "", 443, false},
		{"", "", 0, false},
	}
	for _, c := range cases {
		h, p, ok := splitHostPort(c.in, 80)
		if ok != c.ok || (ok && (h != c.host || p != c.port)) {
			t.Errorf("splitHostPort(%q) = %q %d %t", c.in, h, p, ok)
		}
	}
	if !sameAuthority("UP.test.", "up.test:80", 80) || sameAuthority("up.test", "up.test:8080", 80) || sameAuthority("a.test:1", "b.test:1", 80) {
		t.Error("sameAuthority")
	}
}

func FuzzSplitHostPort(f *testing.F) {
	for _, s := range []string{"a:1", "[::1]:2", "::1", "[", "a:", ":"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		h, p, ok := splitHostPort(s, 80)
		if ok && (h == "" || p == 0) {
			t.Fatalf("accepted %q as %q:%d", s, h, p)
		}
		sameAuthority(s, s, 80)
	})
}
