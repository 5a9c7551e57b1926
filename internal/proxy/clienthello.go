package proxy

import "encoding/binary"

// The TLS name of an opaque tunnel (SPEC §3.11): the first client bytes of
// a CONNECT or SOCKS5 tunnel to a name are read as far as a TLS
// ClientHello's server_name, and a name other than the tunnel's closes it
// before any byte reaches the upstream (domain fronting). A minimal parser
// rather than crypto/tls: crypto/tls parses a ClientHello only inside a
// server handshake, which would consume the bytes and answer the client.
//
// Decisions on the edges (docs/proxy.md "The TLS name on an opaque
// tunnel"): bytes that are not a TLS handshake record, or a first handshake
// message that is not a ClientHello, pass untouched (an upstream TLS server
// rejects them itself); a ClientHello that does not fit in
// maxClientHello bytes, or that is malformed inside, is closed — fail
// closed, since a lenient server could read a name the parser did not.

// maxClientHello bounds the bytes read before a decision (records and
// their headers). Real ClientHellos, post-quantum key shares included,
// are well under 4 KiB.
const maxClientHello = 16 << 10

// helloVerdict is what the first client bytes say.
type helloVerdict uint8

const (
	helloMore      helloVerdict = iota // a ClientHello begun: read more
	helloNotTLS                        // not a ClientHello: pass
	helloName                          // a complete ClientHello; its names are returned
	helloMalformed                     // a ClientHello that cannot be parsed or is too long
)

// parseClientHello reads b, the client's first bytes, as TLS records
// carrying a ClientHello. With helloName it returns the host_name entries
// of server_name (none: no SNI). It never panics on any input.
func parseClientHello(b []byte) (names []string, v helloVerdict) {
	// Reassemble the handshake message from consecutive handshake records.
	var msg []byte
	need := -1 // the handshake message's length with its 4-byte header
	for off := 0; ; {
		if len(b)-off < 5 {
			if off == 0 && len(b) > 0 && b[0] != 0x16 {
				return nil, helloNotTLS
			}
			if off == 0 && len(b) > 1 && b[1] != 3 {
				return nil, helloNotTLS
			}
			return nil, moreOrTooLong(len(b))
		}
		hdr := b[off : off+5]
		if hdr[0] != 0x16 || hdr[1] != 3 {
			if off == 0 {
				return nil, helloNotTLS
			}
			return nil, helloMalformed // the ClientHello stopped short of its length
		}
		rl := int(binary.BigEndian.Uint16(hdr[3:5]))
		if rl == 0 || rl > 1<<14 {
			return nil, helloMalformed
		}
		if len(b)-off-5 < rl {
			// A partial record: what it holds so far may already settle it.
			msg = append(msg, b[off+5:]...)
			if v, done := helloHead(msg, &need); done {
				return nil, v
			}
			return nil, moreOrTooLong(len(b))
		}
		msg = append(msg, b[off+5:off+5+rl]...)
		off += 5 + rl
		if v, done := helloHead(msg, &need); done {
			return nil, v
		}
		if need >= 0 && len(msg) >= need {
			if len(msg) > need {
				return nil, helloMalformed // another message after the ClientHello
			}
			return clientHelloNames(msg[4:need])
		}
	}
}

// helloHead checks the handshake header once it is there: a message that
// is not a ClientHello passes, one too long is malformed.
func helloHead(msg []byte, need *int) (helloVerdict, bool) {
	if *need >= 0 || len(msg) < 1 {
		return 0, false
	}
	if msg[0] != 1 {
		return helloNotTLS, true
	}
	if len(msg) < 4 {
		return 0, false
	}
	n := int(msg[1])<<16 | int(msg[2])<<8 | int(msg[3])
	if n+4 > maxClientHello {
		return helloMalformed, true
	}
	*need = n + 4
	return 0, false
}

func moreOrTooLong(n int) helloVerdict {
	if n >= maxClientHello {
		return helloMalformed
	}
	return helloMore
}

// clientHelloNames parses a ClientHello body (RFC 8446 §4.1.2) to its
// server_name extension (RFC 6066 §3).
func clientHelloNames(p []byte) ([]string, helloVerdict) {
	r := helloReader(p)
	if !r.skip(2+32) || !r.skipVec(1) || !r.skipVec(2) || !r.skipVec(1) {
		return nil, helloMalformed
	}
	if len(r) == 0 {
		return nil, helloName // no extensions: no SNI
	}
	exts, ok := r.vec(2)
	if !ok || len(r) != 0 {
		return nil, helloMalformed
	}
	var names []string
	seen := false
	for len(exts) > 0 {
		typ, ok1 := exts.u16()
		data, ok2 := exts.vec(2)
		if !ok1 || !ok2 {
			return nil, helloMalformed
		}
		if typ != 0 {
			continue
		}
		if seen {
			return nil, helloMalformed // a second server_name extension
		}
		seen = true
		list, ok := data.vec(2)
		if !ok || len(data) != 0 || len(list) == 0 {
			return nil, helloMalformed
		}
		for len(list) > 0 {
			nt, ok1 := list.u8()
			name, ok2 := list.vec(2)
			if !ok1 || !ok2 || len(name) == 0 {
				return nil, helloMalformed
			}
			if nt == 0 {
				names = append(names, string(name))
			}
		}
	}
	return names, helloName
}

// helloReader is a cursor over a ClientHello's bytes.
type helloReader []byte

func (r *helloReader) skip(n int) bool {
	if len(*r) < n {
		return false
	}
	*r = (*r)[n:]
	return true
}

func (r *helloReader) u8() (byte, bool) {
	if len(*r) < 1 {
		return 0, false
	}
	v := (*r)[0]
	*r = (*r)[1:]
	return v, true
}

func (r *helloReader) u16() (uint16, bool) {
	if len(*r) < 2 {
		return 0, false
	}
	v := binary.BigEndian.Uint16(*r)
	*r = (*r)[2:]
	return v, true
}

// vec reads a vector with a lenBytes-byte (1 or 2) length prefix.
func (r *helloReader) vec(lenBytes int) (helloReader, bool) {
	var n int
	if lenBytes == 1 {
		v, ok := r.u8()
		if !ok {
			return nil, false
		}
		n = int(v)
	} else {
		v, ok := r.u16()
		if !ok {
			return nil, false
		}
		n = int(v)
	}
	if len(*r) < n {
		return nil, false
	}
	v := (*r)[:n]
	*r = (*r)[n:]
	return v, true
}

func (r *helloReader) skipVec(lenBytes int) bool {
	_, ok := r.vec(lenBytes)
	return ok
}
