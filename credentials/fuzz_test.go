package credentials

import (
	"strings"
	"testing"
)

// FuzzScan: the scanner never panics, and a body embedded between
// non-base62 bytes is always offered.
func FuzzScan(f *testing.F) {
	f.Add("GET /?k=sk-abc HTTP/1.1", "ABCDEFGHIJKLMNOPQRSTUVWX")
	f.Add("", "0123456789012345678901234")
	f.Add("\xff\x00--", "zzzzzzzzzzzzzzzzzzzzzzzz")
	f.Fuzz(func(t *testing.T, text, body string) {
		lens := []int{24, 48}
		Scan(text, lens, func(b string) bool {
			if len(b) != 24 && len(b) != 48 {
				t.Fatalf("offered %q of length %d", b, len(b))
			}
			return true
		})
		if len(body) != 24 {
			return
		}
		for i := 0; i < len(body); i++ {
			if !isBase62(body[i]) {
				return
			}
		}
		clean := strings.Map(func(r rune) rune {
			if r < 128 && isBase62(byte(r)) {
				return '-'
			}
			return r
		}, text)
		found := false
		Scan(clean+"/"+body+"?"+clean, lens, func(b string) bool {
			if b == body {
				found = true
				return false
			}
			return true
		})
		if !found {
			t.Fatalf("body %q not found", body)
		}
	})
}
