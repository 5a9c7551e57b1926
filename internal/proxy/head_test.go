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
