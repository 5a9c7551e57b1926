package credentials

import (
	"fmt"
	"net/http"
	"strings"
	"testing"
)

// BenchmarkRewrite is the broker's per-request cost: a browser-like head
// (12 fields, a 300-byte cookie of base62 runs) with no placeholder, with
// the execution's own placeholder injected, and with live placeholders of
// 1 000 other executions held by the broker.
func BenchmarkRewrite(b *testing.B) {
	head := func() http.Header {
		return http.Header{
			"User-Agent":      {"Mozilla/5.0 (X11; Linux x86_64) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/120.0 Safari/537.36"},
			"Accept":          {"text/html,application/xhtml+xml,application/xml;q=0.9,*/*;q=0.8"},
			"Accept-Language": {"en-US,en;q=0.5"},
			"Accept-Encoding": {"gzip, deflate, br"},
			"Cookie":          {"sid=" + strings.Repeat("Ab3dE5gH7jK9mN1pQ3sT5vW7yZ", 6) + "; theme=dark; csrftoken=" + strings.Repeat("x9Y8", 20)},
			"Referer":         {"https://example.com/some/path/page.html?query=value&other=thing"},
			"Sec-Fetch-Dest":  {"document"},
			"Sec-Fetch-Mode":  {"navigate"},
			"Sec-Fetch-Site":  {"same-origin"},
			"Cache-Control":   {"max-age=0"},
			"X-Request-Id":    {"7f3a9c1d-5b2e-8f60-4a1c-3e5d7b9f1a2c"},
			"Authorization":   {"Bearer none"},
		}
	}
	line := "GET /v1/models?limit=20&after=abc123def456 api.openai.com"
	for _, live := range []int{1, 1000} {
		br := NewBroker(nil)
		set, err := Load([]Spec{openAI()}, env(map[string]string{"OPENAI_KEY": testSecret}))
		if err != nil {
			b.Fatal(err)
		}
		br.Swap(set)
		ph, _ := br.Mint("exec_0")
		for i := 1; i < live; i++ {
			br.Mint(fmt.Sprintf("exec_%d", i))
		}
		b.Run(fmt.Sprintf("live=%d/no-placeholder", live), func(b *testing.B) {
			h := head()
			b.ReportAllocs()
			for i := 0; i < b.N; i++ {
				if a, _ := br.Rewrite("exec_0", "api.openai.com", h, line); a != Pass {
					b.Fatal(a)
				}
			}
		})
		b.Run(fmt.Sprintf("live=%d/injected", live), func(b *testing.B) {
			b.ReportAllocs()
			for i := 0; i < b.N; i++ {
				h := head()
				h["Authorization"] = []string{"Bearer " + ph[0].Value}
				if a, _ := br.Rewrite("exec_0", "api.openai.com", h, line); a != Injected {
					b.Fatal(a)
				}
			}
		})
	}
}
