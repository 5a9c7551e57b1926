package proxy

import (
	"bytes"
	"errors"
	"io"
	"net"
	"strings"

	"github.com/netproxy/netproxy/hostpolicy"
	"github.com/netproxy/netproxy/internal/httphead"
)

// Request heads (SPEC §7.2): a head may take at most max_header_bytes
// (request line and header lines) and max_headers header fields; beyond
// either the client gets a 431. Memory is bounded by what was received: the
// bytes pass once from the socket through the connection's read buffer into
// the parser (reqhead.go's in-place parse of a whole body-less head, else
// http.ReadRequest); the headScanner below only watches them go by. It never keeps a copy of the head — only the raw Host line,
// which SPEC §3.7 needs and which http.ReadRequest drops for absolute-form
// requests.

var (
	errHeaderTooLarge = errors.New("request header too large")
	errTooManyHeaders = errors.New("too many request header fields")
	// errBadFieldName: a header field name that is not a token, such as
	// "Transfer-Encoding " before its colon (RFC 9112 §5.1) or an obs-fold
	// continuation line; net/textproto would accept some of them.
	errBadFieldName = errors.New("malformed header field name")
)

// headScanner sits between a client socket and the connection's
// bufio.Reader. While a head is being read it counts the head's bytes and
// lines as they pass and fails the read that would exceed a limit; it also
// records the value of the head's first Host line. It owns no buffer of the
// head and must never hold more than the Host line.
type headScanner struct {
	r        io.Reader
	maxBytes int
	maxLines int

	active  bool // a head is being read
	n       int  // head bytes so far
	lines   int  // complete lines so far (the request line included)
	cur     int  // bytes of the current line so far (CR included)
	prefix  [5]byte
	inName  bool   // the current header line's field name is being read
	inHost  bool   // the current line is a Host line
	host    []byte // the Host line's bytes after "host:" (first Host line only)
	gotHost bool
	err     error
}

// begin starts watching a new head; pre are bytes of it already buffered.
func (s *headScanner) begin(pre []byte) error {
	s.active, s.n, s.lines, s.cur, s.inHost, s.inName, s.gotHost, s.err = true, 0, 0, 0, false, false, false, nil
	s.host = s.host[:0]
	if cap(s.host) > 1024 {
		s.host = nil
	}
	s.scan(pre)
	return s.err
}

// end stops watching (the head was parsed, or the connection is done) and
// returns the head's error: the scanner's own when it failed a read (the
// parser then reports a cut line in its own words), else err.
func (s *headScanner) end(err error) error {
	s.active = false
	if s.err != nil {
		return s.err
	}
	return err
}

// hostValue is the head's raw Host header value ("" when absent).
func (s *headScanner) hostValue() string { return s.hostValueLike("") }

// hostValueLike is hostValue, returning like itself when the value is the
// same (the parsed request's Host usually is): no copy per request.
func (s *headScanner) hostValueLike(like string) string {
	if !s.gotHost {
		return ""
	}
	v := bytes.TrimSpace(bytes.TrimSuffix(s.host, []byte("\r")))
	if string(v) == like {
		return like
	}
	return string(v)
}

func (s *headScanner) Read(p []byte) (int, error) {
	if s.active && s.err != nil {
		return 0, s.err
	}
	n, err := s.r.Read(p)
	if s.active && n > 0 {
		// scan stops at the head's end, so a limit crossed means the head
		// itself is too large: the read fails (the bytes are dropped, the
		// connection is answered and closed).
		if s.scan(p[:n]); s.err != nil {
			return 0, s.err
		}
	}
	return n, err
}

// scan watches b go by, up to the end of the head.
func (s *headScanner) scan(b []byte) {
	for len(b) > 0 && s.active && s.err == nil {
		i := bytes.IndexByte(b, '\n')
		seg := b
		if i >= 0 {
			seg = b[:i+1]
		}
		b = b[len(seg):]
		if s.n += len(seg); s.n > s.maxBytes {
			s.err = errHeaderTooLarge
			return
		}
		if s.lines > 0 && s.cur == 0 {
			s.inName = true
		}
		if s.inName {
			s.checkName(seg)
			if s.err != nil {
				return
			}
		}
		// The first bytes of the line decide whether it is a Host line.
		l := len(seg)
		if s.cur < len(s.prefix) {
			k := copy(s.prefix[s.cur:], seg)
			if s.cur+k == len(s.prefix) && s.lines > 0 && !s.gotHost {
				if s.inHost = httphead.EqualFoldLower(s.prefix[:], "host:"); s.inHost {
					seg = seg[k:]
				}
			}
		}
		if s.inHost {
			s.host = append(s.host, bytes.TrimSuffix(seg, []byte("\n"))...)
		}
		s.cur += l
		if i < 0 {
			return // the line goes on in the next read
		}
		// End of a line.
		empty := s.cur == 1 || (s.cur == 2 && s.prefix[0] == '\r')
		if s.inHost {
			s.inHost, s.gotHost = false, true
		}
		s.cur = 0
		if empty && s.lines > 0 {
			s.active = false // the head is complete
			return
		}
		s.lines++
		if s.lines-1 > s.maxLines {
			s.err = errTooManyHeaders
			return
		}
	}
}

// checkName checks the field-name bytes at the start of seg (a header
// line, possibly continued from the previous read).
func (s *headScanner) checkName(seg []byte) {
	for i, c := range seg {
		switch {
		case c == ':':
			s.inName = false
			if s.cur == 0 && i == 0 {
				s.err = errBadFieldName // empty name
			}
			return
		case c == '\r' || c == '\n':
			// The empty line that ends the head, or a line without a
			// colon (the parser refuses it).
			s.inName = false
			return
		case !httphead.IsTokenByte(c):
			s.err = errBadFieldName
			return
		}
	}
}

// rawHostHeader returns the Host header of the request head at the start
// of raw ("" when absent), as the connection loop's headScanner sees it.
func rawHostHeader(raw []byte) string {
	s := headScanner{maxBytes: len(raw) + 1, maxLines: len(raw) + 1}
	s.begin(raw)
	return s.hostValue()
}

// Request targets: the host and port of an absolute-form URL, a Host
// header or a CONNECT authority.

// sameHost compares a host from a URL or header with a decision's
// normalised host.
func sameHost(a, b string) bool {
	na, err := hostpolicy.Normalize(a)
	if err != nil {
		return false
	}
	nb, err := hostpolicy.Normalize(b)
	if err != nil {
		return false
	}
	return na == nb
}

// splitHostPort splits "host[:port]" (IPv6 in brackets) with a default port.
func splitHostPort(hp string, def uint16) (string, uint16, bool) {
	if hp == "" {
		return "", 0, false
	}
	host, portStr, err := net.SplitHostPort(hp)
	if err != nil {
		// No port.
		if strings.HasPrefix(hp, "[") && strings.HasSuffix(hp, "]") {
			return hp[1 : len(hp)-1], def, hp != "[]"
		}
		if strings.Contains(hp, ":") && strings.Count(hp, ":") > 1 {
			return hp, def, true // bare IPv6
		}
		if strings.Contains(hp, ":") {
			return "", 0, false
		}
		return hp, def, true
	}
	if portStr == "" {
		return host, def, host != ""
	}
	p, ok := parsePort(portStr)
	if !ok {
		return "", 0, false
	}
	return host, p, host != ""
}

func parsePort(s string) (uint16, bool) {
	if s == "" || len(s) > 5 {
		return 0, false
	}
	n := 0
	for _, ch := range s {
		if ch < '0' || ch > '9' {
			return 0, false
		}
		n = n*10 + int(ch-'0')
	}
	if n < 1 || n > 65535 {
		return 0, false
	}
	return uint16(n), true
}
