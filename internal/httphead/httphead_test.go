package httphead

import (
	"bufio"
	"bytes"
	"net/http"
	"strings"
	"testing"
)

// ParseRequest's equivalence with http.ReadRequest is fuzzed where the
// data path delimits heads (internal/proxy FuzzParseRequestHead) and
// through the interception's inner requests (mitm's tests); these are the
// line-level pieces.

func TestIsTokenByte(t *testing.T) {
	for c := range 256 {
		want := 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || strings.ContainsRune("!#$%&'*+-.^_`|~", rune(c))
		if IsTokenByte(byte(c)) != want {
			t.Errorf("IsTokenByte(%q) = %v", byte(c), !want)
		}
	}
}

func TestSplitField(t *testing.T) {
	for _, c := range []struct {
		line, name, value string
		ok                bool
	}{
		{"Host: a.test", "Host", "a.test", true},
		{"X:\t v \t", "X", "v", true},
		{"X:", "X", "", true},
		{": v", "", "", false},
		{"X Y: v", "", "", false},
		{"X: a\rb", "", "", false},
		{"X: a\x7f", "", "", false},
		{"novalue", "", "", false},
	} {
		n, v, ok := SplitField([]byte(c.line))
		if ok != c.ok || string(n) != c.name || string(v) != c.value {
			t.Errorf("SplitField(%q) = %q %q %v", c.line, n, v, ok)
		}
	}
	if !EqualFoldLower([]byte("Content-LENGTH"), "content-length") || EqualFoldLower([]byte("content-lengt"), "content-length") {
		t.Error("EqualFoldLower")
	}
}

func TestParseRequestRefusesWithoutCopy(t *testing.T) {
	head := []byte("POST / HTTP/1.1\r\nContent-Length: 1\r\n\r\n")
	if n := testing.AllocsPerRun(100, func() { ParseRequest(head) }); n != 0 {
		t.Fatalf("a declined head cost %v allocations", n)
	}
}

// FuzzWriteHeaderSorted: the request head's fields are written byte for
// byte as http.Header.WriteSubset writes them.
func FuzzWriteHeaderSorted(f *testing.F) {
	f.Add("Accept", "*/*", "X-B", " v\r\nw ", "host", "h")
	f.Add("User-Agent", "x", "Content-Length", "1", "Bad Name", "v")
	f.Add("Z", "1", "a", "2", "M", "\t3\t")
	f.Fuzz(func(t *testing.T, k1, v1, k2, v2, k3, v3 string) {
		h := http.Header{}
		for _, kv := range [][2]string{{k1, v1}, {k2, v2}, {k3, v3}} {
			h[kv[0]] = append(h[kv[0]], kv[1])
		}
		var want, got bytes.Buffer
		if err := h.WriteSubset(&want, requestWriteExclude); err != nil {
			t.Fatal(err)
		}
		bw := bufio.NewWriter(&got)
		if err := WriteRequestFields(bw, h); err != nil {
			t.Fatal(err)
		}
		bw.Flush()
		if got.String() != want.String() {
			t.Fatalf("wrote\n%q\nWriteSubset\n%q", got.String(), want.String())
		}
	})
}
