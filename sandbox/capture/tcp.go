package capture

import (
	"bufio"
	"context"
	"encoding/binary"
	"io"
	"net"
	"sync"
	"time"
)

// tcpIdle closes a DNS-over-TCP connection that sends nothing for this long
// (RFC 7766 suggests seconds; the sandbox's own clients only).
const tcpIdle = 10 * time.Second

// ServeTCP answers DNS over TCP (RFC 1035 §4.2.2: a two-byte length before
// each message, several per connection) on l until ctx ends or l is closed;
// it closes l and every open connection when ctx ends.
func (r *Resolver) ServeTCP(ctx context.Context, l net.Listener) error {
	var wg sync.WaitGroup
	defer wg.Wait()
	stop := context.AfterFunc(ctx, func() { _ = l.Close() })
	defer stop()
	for {
		c, err := l.Accept()
		if err != nil {
			retry, end := serveErr(ctx, err)
			if !retry {
				return end
			}
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer c.Close()
			stopConn := context.AfterFunc(ctx, func() { _ = c.Close() })
			defer stopConn()
			r.serveConn(c)
		}()
	}
}

// serveConn answers the messages of one connection in order; a message the
// resolver drops (a response, a bad header) ends the connection.
func (r *Resolver) serveConn(c net.Conn) {
	br := bufio.NewReader(c)
	var lenb [2]byte
	for {
		_ = c.SetReadDeadline(time.Now().Add(tcpIdle))
		if _, err := io.ReadFull(br, lenb[:]); err != nil {
			return
		}
		msg := make([]byte, binary.BigEndian.Uint16(lenb[:]))
		if _, err := io.ReadFull(br, msg); err != nil {
			return
		}
		out := r.Answer(msg)
		if out == nil {
			return
		}
		_ = c.SetWriteDeadline(time.Now().Add(tcpIdle))
		if _, err := c.Write(append(binary.BigEndian.AppendUint16(nil, uint16(len(out))), out...)); err != nil {
			return
		}
	}
}
