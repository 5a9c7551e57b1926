package proxy

import (
	"bufio"
	"errors"
	"net/http"
	"strings"
	"testing"
	"testing/iotest"
)

// TestHeadScannerByteByByte: limits, field-name checks and the raw Host
// capture hold whatever the read boundaries (one byte per read here, the
// whole head in one read in TestRawHostHeader).
func TestHeadScannerByteByByte(t *testing.T) {
	many := func(n int) string {
		var b strings.Builder
		for i := 0; i < n; i++ {
			b.WriteString("h:\r\n")
		}
		return b.String()
	}
	cases := []struct {
		head string
		host string
		err  error
	}{
		{"GET http://a/ HTTP/1.1\r\nX: 1\r\nHoSt:  b:8080 \r\n\r\nHost: body", "b:8080", nil},
		{"GET / HTTP/1.1\nhost:c\n\n", "c", nil},
		{"GET / HTTP/1.1\r\nHos: x\r\nHost-X: y\r\n\r\n", "", nil},
		{"GET / HTTP/1.1\r\n" + many(5) + "\r\n", "", nil},
		{"GET / HTTP/1.1\r\n" + many(6) + "\r\n", "", errTooManyHeaders},
		{"GET / HTTP/1.1\r\nX: " + strings.Repeat("a", 300) + "\r\n\r\n", "", errHeaderTooLarge},
		{"POST / HTTP/1.1\r\nTransfer-Encoding : chunked\r\n\r\n", "", errBadFieldName},
		{"GET / HTTP/1.1\r\nX: a\r\n folded\r\n\r\n", "", errBadFieldName},
		{"GET / HTTP/1.1\r\n: empty\r\n\r\n", "", errBadFieldName},
		{"GET / HTTP/1.1\r\nX\x00Y: 1\r\n\r\n", "", errBadFieldName},
	}
	for _, c := range cases {
		for _, oneByte := range []bool{true, false} {
			var r = strings.NewReader(c.head)
			sc := &headScanner{r: r, maxBytes: 256, maxLines: 5}
			if oneByte {
				sc.r = iotest.OneByteReader(r)
			}
			br := bufio.NewReaderSize(sc, 16)
			err := sc.begin(nil)
			if err == nil {
				_, err = http.ReadRequest(br)
			}
			err = sc.end(err)
			if c.err != nil {
				if !errors.Is(err, c.err) {
					t.Errorf("%q (one byte %t): error %v, want %v", c.head, oneByte, err, c.err)
				}
				continue
			}
			if err != nil {
				t.Errorf("%q (one byte %t): %v", c.head, oneByte, err)
				continue
			}
			if got := sc.hostValue(); got != c.host {
				t.Errorf("%q (one byte %t): host %q, want %q", c.head, oneByte, got, c.host)
			}
		}
	}
}

// FuzzHeadScanner: the head scanner agrees with itself whatever the read
// boundaries (one byte per read or all at once), never lets a head beyond
// its limits reach a successful parse, and its raw Host value is the one
// net/http parsed for an origin-form request.
func FuzzHeadScanner(f *testing.F) {
	for _, s := range []string{
		"GET / HTTP/1.1\r\nHost: a.test\r\n\r\n",
		"GET http://a/ HTTP/1.1\r\nHost: b:80\r\n\r\n",
		"GET / HTTP/1.1\r\nHost: \t a \r\n\r\n",
		"GET / HTTP/1.1\r\nhost:a\r\nhost:b\r\n\r\n",
		"POST / HTTP/1.1\r\nTransfer-Encoding : chunked\r\n\r\n",
		"GET / HTTP/1.1\nh:\nh:\nh:\nh:\nh:\nh:\n\n",
		"GET / HTTP/1.1\r\nX: a\r\n b\r\nHost: c\r\n\r\n",
	} {
		f.Add([]byte(s))
	}
	type result struct {
		err  string
		host string
		ok   bool
	}
	parse := func(data []byte, oneByte bool) (result, *http.Request) {
		r := strings.NewReader(string(data))
		sc := &headScanner{r: r, maxBytes: 200, maxLines: 5}
		if oneByte {
			sc.r = iotest.OneByteReader(r)
		}
		br := bufio.NewReaderSize(sc, 16)
		err := sc.begin(nil)
		var req *http.Request
		if err == nil {
			req, err = http.ReadRequest(br)
		}
		err = sc.end(err)
		switch {
		case errors.Is(err, errHeaderTooLarge), errors.Is(err, errTooManyHeaders), errors.Is(err, errBadFieldName):
			return result{err: err.Error()}, nil
		case err != nil:
			return result{err: "parse"}, nil
		}
		if sc.n > sc.maxBytes || sc.lines-1 > sc.maxLines {
			panic("a head beyond the limits was parsed")
		}
		return result{host: sc.hostValue(), ok: true}, req
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		a, req := parse(data, false)
		b, _ := parse(data, true)
		if a.ok != b.ok || a.host != b.host || (!a.ok && a.err != b.err && a.err != "parse" && b.err != "parse") {
			t.Fatalf("read boundaries change the result: %+v vs %+v for %q", a, b, data)
		}
		if a.ok && !req.URL.IsAbs() && a.host != req.Host {
			t.Fatalf("scanner Host %q, parser Host %q for %q", a.host, req.Host, data)
		}
	})
}
