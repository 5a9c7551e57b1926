package credentials

import (
	"net/http"
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

// FuzzPlantedPlaceholder: a live placeholder planted anywhere in arbitrary
// text — with or without its prefix, glued to anything on either side — in
// the request line, a header value, a header name (in any case) or a
// trailer is always found and blocked toward another host; text without a
// planted placeholder never panics the scan, and the index stays exact.
func FuzzPlantedPlaceholder(f *testing.F) {
	f.Add("GET /?k= HTTP/1.1", uint16(8), uint8(0), true, "Zz")
	f.Add("", uint16(0), uint8(2), false, "")
	f.Add("x-aaaa\xff\x00", uint16(3), uint8(3), true, "09")
	f.Add(strings.Repeat("sk-", 40), uint16(60), uint8(1), false, "-")
	f.Fuzz(func(t *testing.T, text string, at uint16, where uint8, prefix bool, glue string) {
		b := NewBroker(nil)
		set, err := Load([]Spec{openAI()}, env(map[string]string{"OPENAI_KEY": testSecret}))
		if err != nil {
			t.Fatal(err)
		}
		b.Swap(set)
		other, _ := b.Mint("exec_other") // another live body the text may hit
		ph, _ := b.Mint("exec_1")
		planted := ph[0].Value
		if !prefix {
			planted = planted[3:]
		}
		if len(glue) > 0 {
			planted = glue + planted + glue
		}
		pos := int(at)
		if pos > len(text) {
			pos = len(text)
		}
		s := text[:pos] + planted + text[pos:]
		// The text alone: never panics; blocks only if it holds a live body.
		alone := http.Header{"X-Text": {text}}
		act, _ := b.Rewrite("exec_1", "paste.example", alone, text)
		holds := strings.Contains(text, ph[0].Value[3:]) || strings.Contains(text, other[0].Value[3:])
		if act == Block && !holds && !strings.Contains(strings.ToLower(text), strings.ToLower(ph[0].Value[3:])) &&
			!strings.Contains(strings.ToLower(text), strings.ToLower(other[0].Value[3:])) {
			t.Fatalf("text without a placeholder blocked: %q", text)
		}
		var a Action
		switch where % 4 {
		case 0:
			a, _ = b.Rewrite("exec_1", "paste.example", http.Header{}, s)
		case 1:
			a, _ = b.Rewrite("exec_1", "paste.example", http.Header{"X-Note": {s}}, "GET / HTTP/1.1")
		case 2:
			a, _ = b.Rewrite("exec_1", "paste.example", http.Header{http.CanonicalHeaderKey(s): {"1"}}, "GET / HTTP/1.1")
		case 3:
			a, _ = b.CheckTrailer("exec_1", "paste.example", http.Header{"X-Sum": {s}})
		}
		if a != Block {
			t.Fatalf("planted %q at %d (where %d) not found: %v", planted, pos, where%4, a)
		}
		b.Forget("exec_1")
		b.Forget("exec_other")
		if len(b.index.byLen) != 0 || len(b.index.byFold) != 0 {
			t.Fatal("index not empty after forgetting every execution")
		}
	})
}
