package attribution

import (
	"bytes"
	"encoding/binary"
	"errors"
	"io"
	"net"
	"strings"
	"testing"
	"time"
)

func frameBytes(tok string) []byte {
	b := []byte(Magic)
	b = binary.BigEndian.AppendUint16(b, uint16(len(tok)))
	return append(b, tok...)
}

func TestWriteDecodeRoundTrip(t *testing.T) {
	for _, tok := range []string{"a", strings.Repeat("x", 128), "tökén"} {
		var buf bytes.Buffer
		if err := WriteFrame(&buf, tok); err != nil {
			t.Fatalf("WriteFrame(%q): %v", tok, err)
		}
		buf.WriteString("GET / HTTP/1.1\r\n")
		got, err := DecodeFrame(&buf)
		if err != nil || got != tok {
			t.Fatalf("DecodeFrame = %q, %v; want %q", got, err, tok)
		}
		if rest := buf.String(); rest != "GET / HTTP/1.1\r\n" {
			t.Fatalf("DecodeFrame consumed protocol bytes; rest %q", rest)
		}
	}
}

func TestWriteFrameRejects(t *testing.T) {
	if err := WriteFrame(io.Discard, ""); !errors.Is(err, ErrBadLength) {
		t.Fatalf("empty token: %v", err)
	}
	if err := WriteFrame(io.Discard, strings.Repeat("a", 129)); !errors.Is(err, ErrBadLength) {
		t.Fatalf("129-byte token: %v", err)
	}
	if err := WriteFrame(io.Discard, "\xff"); !errors.Is(err, ErrBadUTF8) {
		t.Fatalf("non-UTF-8 token: %v", err)
	}
}

func TestDecodeFrameErrors(t *testing.T) {
	bad := frameBytes("tok")
	bad[7] = '2'
	cases := []struct {
		name string
		in   []byte
		want error
		res  string
	}{
		{"bad magic", bad, ErrBadMagic, "bad_magic"},
		{"length 0", []byte(Magic + "\x00\x00"), ErrBadLength, "bad_length"},
		{"length 129", append(binary.BigEndian.AppendUint16([]byte(Magic), 129), strings.Repeat("a", 129)...), ErrBadLength, "bad_length"},
		{"non-utf8", frameBytes("\xff\xfe"), ErrBadUTF8, "bad_utf8"},
	}
	for _, c := range cases {
		_, err := DecodeFrame(bytes.NewReader(c.in))
		if !errors.Is(err, c.want) {
			t.Errorf("%s: err %v, want %v", c.name, err, c.want)
		}
		if Result(err) != c.res {
			t.Errorf("%s: Result %q, want %q", c.name, Result(err), c.res)
		}
	}
	if _, err := DecodeFrame(bytes.NewReader([]byte(Magic[:4]))); err == nil {
		t.Fatal("truncated frame decoded")
	}
}

// tcpPair returns both ends of a real loopback TCP connection.
func tcpPair(t *testing.T) (client, server net.Conn) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	client, err = net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	server, err = ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { client.Close(); server.Close() })
	return client, server
}

func TestReadFrameUnframedConsumesNothing(t *testing.T) {
	c, s := tcpPair(t)
	c.Write([]byte("GET / HTTP/1.1\r\n"))
	tok, framed, err := ReadFrame(s, time.Second)
	if err != nil || framed || tok != "" {
		t.Fatalf("ReadFrame = %q %t %v", tok, framed, err)
	}
	buf := make([]byte, 3)
	io.ReadFull(s, buf)
	if string(buf) != "GET" {
		t.Fatalf("first bytes after peek %q, want GET", buf)
	}
}

func TestReadFrameFramed(t *testing.T) {
	c, s := tcpPair(t)
	WriteFrame(c, "secret-token")
	c.Write([]byte{0x05, 0x01, 0x00})
	tok, framed, err := ReadFrame(s, time.Second)
	if err != nil || !framed || tok != "secret-token" {
		t.Fatalf("ReadFrame = %q %t %v", tok, framed, err)
	}
	buf := make([]byte, 3)
	io.ReadFull(s, buf)
	if !bytes.Equal(buf, []byte{5, 1, 0}) {
		t.Fatalf("protocol bytes after frame %v", buf)
	}
}

func TestReadFrameTimeout(t *testing.T) {
	c, s := tcpPair(t)
	c.Write([]byte("\x00CDX"))
	start := time.Now()
	_, framed, err := ReadFrame(s, 200*time.Millisecond)
	if !framed || !errors.Is(err, ErrTimeout) {
		t.Fatalf("ReadFrame framed=%t err=%v; want timeout", framed, err)
	}
	if d := time.Since(start); d < 150*time.Millisecond || d > 2*time.Second {
		t.Fatalf("timed out after %s, want about 200ms", d)
	}
}

func TestReadFrameEOF(t *testing.T) {
	c, s := tcpPair(t)
	c.Close()
	if _, _, err := ReadFrame(s, time.Second); err == nil {
		t.Fatal("ReadFrame on a closed connection returned no error")
	}
}

func TestReadFrameNeedsSocket(t *testing.T) {
	a, b := net.Pipe()
	defer a.Close()
	defer b.Close()
	if _, _, err := ReadFrame(a, time.Second); !errors.Is(err, ErrNoPeek) {
		t.Fatalf("ReadFrame on a pipe: %v, want ErrNoPeek", err)
	}
}

func FuzzDecodeFrame(f *testing.F) {
	f.Add(frameBytes("token"))
	f.Add([]byte(Magic + "\x00\x00"))
	f.Add([]byte(Magic + "\x00\x81"))
	f.Add(frameBytes("\xff"))
	f.Add([]byte{0})
	f.Fuzz(func(t *testing.T, data []byte) {
		r := bytes.NewReader(data)
		tok, err := DecodeFrame(r)
		if err != nil {
			return
		}
		if len(tok) == 0 || len(tok) > MaxTokenLen {
			t.Fatalf("accepted token of length %d", len(tok))
		}
		consumed := len(data) - r.Len()
		if consumed != len(Magic)+2+len(tok) {
			t.Fatalf("consumed %d bytes for a %d-byte token", consumed, len(tok))
		}
		var buf bytes.Buffer
		if err := WriteFrame(&buf, tok); err != nil || !bytes.Equal(buf.Bytes(), data[:consumed]) {
			t.Fatalf("re-encoding differs: %v", err)
		}
	})
}
