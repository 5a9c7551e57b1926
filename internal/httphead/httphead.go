// Package httphead parses and writes HTTP/1.x head bytes for the data
// path's common cases: a whole body-less request head (ParseRequest),
// single header lines (SplitField) and a forwarded request's fields
// (WriteRequestFields, shared by the plain path and the interception). It
// owns only functions over the bytes and writer it is given — no sockets,
// no state — and must never accept a head that net/http would read
// differently, or write bytes net/http would not: whatever it declines,
// the caller hands to net/http (FuzzParseRequestHead in internal/proxy
// holds the parse to http.ReadRequest field for field, FuzzWriteHeaderSorted
// the fields to Header.WriteSubset).
package httphead

import (
	"bufio"
	"bytes"
	"net/http"
	"net/textproto"
	"net/url"
	"strings"

	"golang.org/x/net/http/httpguts"
)

// The request head parsed in place (issue 29). Most plain-HTTP requests an
// agent sends are a body-less GET or HEAD whose whole head arrived in one
// read. ParseRequest accepts exactly those, strictly — a CRLF-only
// head, "METHOD SP target SP HTTP/1.x", an origin-form path or an
// "http://host[:port]" absolute form in a plain character set, token field
// names, values without control bytes or obs-text, no Content-Length, no
// Transfer-Encoding, no Trailer, at most one Host — and builds the request
// http.ReadRequest would build for them from one copy of the head: every
// string of the request is a slice of it, so a request costs a handful of
// allocations instead of one per line. Anything else (a body, CONNECT, a
// percent-encoded or bracketed target, obs-fold, a head split across
// reads) is the caller's to give to http.ReadRequest.

// MaxFields bounds the header lines of a head ParseRequest takes.
const MaxFields = 64

// ParseRequest parses b, one whole request head ending in its empty
// line. ok is false when the head is not one the fast path takes.
func ParseRequest(b []byte) (req *http.Request, ok bool) {
	if len(b) < 4 || string(b[len(b)-4:]) != "\r\n\r\n" {
		return nil, false
	}
	// Check every byte before copying: a refused head costs no allocation.
	eol := bytes.Index(b, []byte("\r\n"))
	line := b[:eol]
	sp1 := bytes.IndexByte(line, ' ')
	if sp1 <= 0 {
		return nil, false
	}
	sp2 := bytes.IndexByte(line[sp1+1:], ' ')
	if sp2 <= 0 {
		return nil, false
	}
	sp2 += sp1 + 1
	var minor int
	switch string(line[sp2+1:]) {
	case "HTTP/1.1":
		minor = 1
	case "HTTP/1.0":
	default:
		return nil, false
	}
	for _, c := range line[:sp1] {
		if !IsTokenByte(c) {
			return nil, false
		}
	}
	if string(line[:sp1]) == http.MethodConnect {
		return nil, false
	}
	target := line[sp1+1 : sp2]
	hostEnd, pathEnd, absolute, good := splitTarget(target)
	if !good {
		return nil, false
	}
	// Header lines: offsets of name and value in b.
	type field struct{ n0, n1, v0, v1 int }
	var fields [MaxFields]field
	nf := 0
	for at := eol + 2; ; {
		i := bytes.Index(b[at:], []byte("\r\n"))
		if i == 0 {
			break // the empty line
		}
		if nf == MaxFields {
			return nil, false
		}
		name, value, good := SplitField(b[at : at+i])
		if !good {
			return nil, false
		}
		for _, c := range value {
			if c >= 0x80 {
				return nil, false // obs-text: net/http's path
			}
		}
		n0 := at + (cap(b[at:]) - cap(name))
		v0 := at + (cap(b[at:]) - cap(value))
		fields[nf] = field{n0, n0 + len(name), v0, v0 + len(value)}
		nf++
		switch {
		case EqualFoldLower(name, "content-length"), EqualFoldLower(name, "transfer-encoding"), EqualFoldLower(name, "trailer"):
			return nil, false
		}
		at += i + 2
	}

	// Accepted so far: one copy of the head, and the request from it.
	s := string(b)
	values := make([]string, nf)
	h := make(http.Header, nf)
	// Host never enters the map: http.ReadRequest deletes it (the head
	// scanner keeps the raw line for SPEC §3.7's check).
	host, hosts := "", 0
	for i, f := range fields[:nf] {
		key := textproto.CanonicalMIMEHeaderKey(s[f.n0:f.n1])
		values[i] = s[f.v0:f.v1]
		if key == "Host" {
			if hosts++; hosts > 1 {
				return nil, false // net/http refuses it: its words, its path
			}
			host = values[i]
			continue
		}
		if vv := h[key]; vv != nil {
			h[key] = append(vv, values[i])
		} else {
			h[key] = values[i : i+1 : i+1]
		}
	}
	uri := s[sp1+1 : sp2]
	u := &url.URL{}
	rest := uri
	if absolute {
		u.Scheme = "http"
		u.Host = uri[len("http://"):hostEnd]
		rest = uri[hostEnd:]
		pathEnd -= hostEnd
	}
	u.Path = rest[:pathEnd]
	if pathEnd < len(rest) {
		u.RawQuery = rest[pathEnd+1:]
	}
	req = &http.Request{
		Method:     internMethod(s[:sp1]),
		URL:        u,
		Proto:      s[sp2+1 : eol],
		ProtoMajor: 1,
		ProtoMinor: minor,
		Header:     h,
		Body:       http.NoBody,
		Host:       u.Host,
		RequestURI: uri,
	}
	if req.Host == "" {
		req.Host = host
	}
	// As net/http's fixPragmaCacheControl and shouldClose.
	if p := h["Pragma"]; len(p) > 0 && p[0] == "no-cache" {
		if _, ok := h["Cache-Control"]; !ok {
			h["Cache-Control"] = []string{"no-cache"}
		}
	}
	conn := h["Connection"]
	req.Close = httpguts.HeaderValuesContainsToken(conn, "close")
	if minor == 0 {
		req.Close = req.Close || !httpguts.HeaderValuesContainsToken(conn, "keep-alive")
	}
	return req, true
}

// splitTarget checks a request target for the fast path: an origin-form
// "/path[?query]" or an absolute "http://host[:port][/path][?query]".
// hostEnd is where the authority ends (absolute form) and pathEnd where
// the path ends, both as offsets in target.
func splitTarget(t []byte) (hostEnd, pathEnd int, absolute, ok bool) {
	at := 0
	switch {
	case len(t) > 0 && t[0] == '/':
		if len(t) > 1 && t[1] == '/' {
			return 0, 0, false, false // "//x": net/http's path
		}
	case len(t) > len("http://") && string(t[:len("http://")]) == "http://":
		absolute = true
		at = len("http://")
		hostStart := at
		colon := -1
		for ; at < len(t) && t[at] != '/' && t[at] != '?'; at++ {
			c := t[at]
			switch {
			case c == ':':
				if colon >= 0 {
					return 0, 0, false, false
				}
				colon = at
			case colon >= 0:
				if c < '0' || c > '9' {
					return 0, 0, false, false
				}
			case !isHostNameByte(c):
				return 0, 0, false, false
			}
		}
		if at == hostStart || colon == hostStart || colon == at-1 || colon >= 0 && at-colon-1 > 5 {
			return 0, 0, false, false // empty host or port
		}
		hostEnd = at
	default:
		return 0, 0, false, false
	}
	for ; at < len(t) && t[at] != '?'; at++ {
		if !isPlainPathByte(t[at]) {
			return 0, 0, false, false
		}
	}
	pathEnd = at
	if at < len(t) {
		if at == len(t)-1 {
			return 0, 0, false, false // "?" alone: url.URL.ForceQuery
		}
		for _, c := range t[at+1:] {
			if c <= ' ' || c >= 0x7f || c == '#' {
				return 0, 0, false, false
			}
		}
	}
	return hostEnd, pathEnd, absolute, true
}

// isHostNameByte: letters, digits, '-', '.', '_' (what url.Parse keeps
// as it is in a host).
func isHostNameByte(c byte) bool {
	return 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '-' || c == '.' || c == '_'
}

// isPlainPathByte: the bytes url.URL keeps unescaped in a path (so
// RawPath stays empty): letters, digits and -_.~$&+,/:;=@.
func isPlainPathByte(c byte) bool {
	if 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' {
		return true
	}
	return strings.IndexByte("-_.~$&+,/:;=@", c) >= 0
}

// internMethod returns the constant for a common method, so a request's
// method does not keep its head's copy alive after the request.
func internMethod(m string) string {
	switch m {
	case http.MethodGet:
		return http.MethodGet
	case http.MethodHead:
		return http.MethodHead
	case http.MethodPost:
		return http.MethodPost
	case http.MethodPut:
		return http.MethodPut
	case http.MethodDelete:
		return http.MethodDelete
	case http.MethodOptions:
		return http.MethodOptions
	case http.MethodPatch:
		return http.MethodPatch
	}
	return m
}

// SplitField splits "name: value" (value trimmed of SP and HTAB) and
// checks it strictly: a token name right before the colon, no control
// byte in the value.
func SplitField(line []byte) (name, value []byte, ok bool) {
	colon := bytes.IndexByte(line, ':')
	if colon <= 0 {
		return nil, nil, false
	}
	name = line[:colon]
	for _, c := range name {
		if !IsTokenByte(c) {
			return nil, nil, false
		}
	}
	value = line[colon+1:]
	for _, c := range value {
		if c < ' ' && c != '\t' || c == 0x7f {
			return nil, nil, false
		}
	}
	for len(value) > 0 && (value[0] == ' ' || value[0] == '\t') {
		value = value[1:]
	}
	for len(value) > 0 && (value[len(value)-1] == ' ' || value[len(value)-1] == '\t') {
		value = value[:len(value)-1]
	}
	return name, value, true
}

// IsTokenByte reports whether c may appear in an RFC 9110 token.
func IsTokenByte(c byte) bool { return tokenBytes[c] }

// tokenBytes is the RFC 9110 tchar set as a table: every header name byte
// of every request is looked up (read-only after package init).
var tokenBytes = func() (t [256]bool) {
	for c := range 256 {
		t[c] = 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || strings.IndexByte("!#$%&'*+-.^_`|~", byte(c)) >= 0
	}
	return t
}()

// EqualFoldLower reports whether b is lower, ASCII case-insensitively
// (lower must be lower case).
func EqualFoldLower(b []byte, lower string) bool {
	if len(b) != len(lower) {
		return false
	}
	for i := range b {
		c := b[i]
		if 'A' <= c && c <= 'Z' {
			c += 'a' - 'A'
		}
		if c != lower[i] {
			return false
		}
	}
	return true
}

// maxSortedHeaders bounds the fields WriteRequestFields sorts on the stack.
const maxSortedHeaders = 24

// requestWriteExclude are the fields http.Request.Write writes from the
// request's own fields (or never) rather than from its header map.
var requestWriteExclude = map[string]bool{"Host": true, "User-Agent": true, "Content-Length": true, "Transfer-Encoding": true, "Trailer": true}

// WriteRequestFields writes a request's header fields as http.Request.Write
// does: h.WriteSubset(bw, requestWriteExclude), the same bytes —
// keys in sorted order, invalid names dropped, values with CR/LF turned
// into spaces and trimmed — without its pooled sorter, closure sort and
// exclude-map lookups. A header with more fields than fit the stack, or a
// value that needs rewriting, takes WriteSubset itself.
func WriteRequestFields(bw *bufio.Writer, h http.Header) error {
	if len(h) > maxSortedHeaders {
		return h.WriteSubset(bw, requestWriteExclude)
	}
	var keys [maxSortedHeaders]string
	n := 0
	for k, vv := range h {
		if requestWriteExclude[k] {
			continue
		}
		for _, v := range vv {
			if strings.ContainsAny(v, "\r\n") {
				return h.WriteSubset(bw, requestWriteExclude)
			}
		}
		// Insertion sort: a request has a handful of fields.
		i := n
		for ; i > 0 && keys[i-1] > k; i-- {
			keys[i] = keys[i-1]
		}
		keys[i] = k
		n++
	}
	for _, k := range keys[:n] {
		if !httpguts.ValidHeaderFieldName(k) {
			continue
		}
		for _, v := range h[k] {
			bw.WriteString(k)
			bw.WriteString(": ")
			bw.WriteString(textproto.TrimString(v))
			if _, err := bw.WriteString("\r\n"); err != nil {
				return err
			}
		}
	}
	return nil
}
