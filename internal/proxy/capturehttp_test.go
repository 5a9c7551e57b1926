package proxy

import "testing"

// TestClassifyFirst: a captured stream's first bytes are plain HTTP only
// when they start an HTTP/1.x request line; a prefix of one asks for more.
func TestClassifyFirst(t *testing.T) {
	for _, c := range []struct {
		in           string
		isHTTP, more bool
	}{
		{"", false, true},
		{"GE", false, true},
		{"GET / HTTP/1.1\r\n", true, false},
		{"POST /x?y HTTP/1.0\n", true, false},
		{"GET / HTTP/1.", false, true},
		{"GET / HTTP/1.1\r", false, true},
		{"GET / HTTP/2.0\r\n", false, false},
		{"GET / HTTP/1.1x", false, false},
		{"GET  / HTTP/1.1\r\n", false, false},
		{"get / HTTP/1.1\r\n", false, false},
		{"\x16\x03\x01\x00", false, false}, // a TLS record
		{"SSH-2.0-x\r\n", false, false},
		{"ABCDEFGHIJKLMNOPQRSTUVWXYZ", false, false}, // no method is this long
		{"GET /aaaaaaaaaaaaaaaaaaaa", true, false},   // at the limit: the loop answers it
	} {
		isHTTP, more := classifyFirst([]byte(c.in), 24)
		if isHTTP != c.isHTTP || more != c.more {
			t.Errorf("classifyFirst(%q) = %v, %v; want %v, %v", c.in, isHTTP, more, c.isHTTP, c.more)
		}
	}
}
