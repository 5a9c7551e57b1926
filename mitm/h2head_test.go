package mitm

import (
	"bytes"
	"testing"

	"golang.org/x/net/http2"
)

// frames writes an HTTP/2 client stream: preface, then the frames fn writes.
func frames(fn func(*http2.Framer)) []byte {
	var b bytes.Buffer
	b.WriteString(http2.ClientPreface)
	fn(http2.NewFramer(&b, nil))
	return b.Bytes()
}

// TestH2HeadGuardFollowsBlocks: a block is open from the first byte of a
// HEADERS frame until the end of the frame carrying END_HEADERS, whatever
// the read boundaries; other frames never open one.
func TestH2HeadGuardFollowsBlocks(t *testing.T) {
	open := frames(func(f *http2.Framer) {
		f.WriteSettings()
		f.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: []byte("abc"), EndHeaders: false})
		f.WriteContinuation(1, false, []byte("def"))
	})
	closed := frames(func(f *http2.Framer) {
		f.WriteSettings()
		f.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: []byte("abc"), EndHeaders: false})
		f.WriteContinuation(1, true, []byte("def"))
		f.WriteData(1, true, []byte("body"))
		f.WritePing(false, [8]byte{})
	})
	for _, c := range []struct {
		name string
		in   []byte
		want bool
	}{{"unfinished", open, true}, {"finished", closed, false}} {
		for _, step := range []int{1, 2, 7, 9, 1 << 20} {
			g := &h2HeadGuard{preface: len(http2.ClientPreface)}
			for b := c.in; len(b) > 0; {
				k := min(step, len(b))
				g.follow(b[:k])
				b = b[k:]
			}
			if g.inBlock != c.want {
				t.Errorf("%s, reads of %d: inBlock %v", c.name, step, g.inBlock)
			}
		}
	}
	// Mid-frame of a HEADERS frame counts as an open block.
	g := &h2HeadGuard{preface: len(http2.ClientPreface)}
	g.follow(closed[:len(http2.ClientPreface)+9+9+2])
	if !g.inBlock {
		t.Error("a HEADERS frame half received is an open block")
	}
}

// FuzzH2HeadGuard: any byte stream, split anywhere, never panics and leaves
// the parser in a consistent state.
func FuzzH2HeadGuard(f *testing.F) {
	f.Add([]byte(http2.ClientPreface+"\x00\x00\x03\x01\x00\x00\x00\x00\x01abc"), 5)
	f.Add([]byte("\x00\x00\x00\x09\x04\x00\x00\x00\x01"), 1)
	f.Fuzz(func(t *testing.T, in []byte, step int) {
		if step <= 0 {
			step = 1
		}
		g := &h2HeadGuard{preface: len(http2.ClientPreface)}
		for b := in; len(b) > 0; {
			k := min(step, len(b))
			g.follow(b[:k])
			b = b[k:]
		}
		if g.payloadLeft < 0 || g.hdrN < 0 || g.hdrN >= h2FrameHeaderLen || g.preface < 0 {
			t.Fatalf("inconsistent state %+v", g)
		}
	})
}
