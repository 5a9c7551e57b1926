package capture

import (
	"context"
	"errors"
	"net"
	"strings"

	"github.com/netproxy/netproxy/hostpolicy/hostname"
	"golang.org/x/net/dns/dnsmessage"
)

// TTL of every answer: the mapping is stable for the run, so a client may
// cache it as long as it likes; 300 s keeps a forgotten entry from living
// on in a long-lived process's cache.
const answerTTL = 300

// maxUDPReply is the classic DNS payload limit; one A or AAAA record always
// fits, so no reply is ever truncated.
const maxUDPReply = 512

// Resolver answers the sandbox's DNS queries from a Pool: A/AAAA for a valid
// name (SPEC §3.1) get that name's pool address, every other type is
// REFUSED, and nothing is ever forwarded or resolved.
type Resolver struct {
	Pool *Pool
}

// Answer returns the reply to one DNS query message, or nil when req is not
// a query worth answering (unparseable header, or a response), which the
// caller drops. It never panics on any input.
func (r *Resolver) Answer(req []byte) []byte {
	var p dnsmessage.Parser
	h, err := p.Start(req)
	if err != nil || h.Response {
		return nil
	}
	reply := dnsmessage.Header{ID: h.ID, Response: true, OpCode: h.OpCode, RecursionDesired: h.RecursionDesired, RecursionAvailable: true}
	if h.OpCode != 0 {
		reply.RCode = dnsmessage.RCodeNotImplemented
		return build(reply, nil, nil)
	}
	qs, err := p.AllQuestions()
	if err != nil || len(qs) != 1 {
		reply.RCode = dnsmessage.RCodeFormatError
		return build(reply, nil, nil)
	}
	q := qs[0]
	if q.Class != dnsmessage.ClassINET || (q.Type != dnsmessage.TypeA && q.Type != dnsmessage.TypeAAAA) {
		reply.RCode = dnsmessage.RCodeRefused
		return build(reply, &q, nil)
	}
	name, ok := poolName(q.Name.String())
	if !ok {
		reply.RCode = dnsmessage.RCodeNameError
		return build(reply, &q, nil)
	}
	v4, v6, err := r.Pool.Addrs(name)
	if err != nil {
		reply.RCode = dnsmessage.RCodeServerFailure
		return build(reply, &q, nil)
	}
	reply.Authoritative = true
	rh := dnsmessage.ResourceHeader{Name: q.Name, Type: q.Type, Class: dnsmessage.ClassINET, TTL: answerTTL}
	var body dnsmessage.ResourceBody
	if q.Type == dnsmessage.TypeA {
		body = &dnsmessage.AResource{A: v4.As4()}
	} else {
		body = &dnsmessage.AAAAResource{AAAA: v6.As16()}
	}
	return build(reply, &q, &answer{rh, body})
}

type answer struct {
	h    dnsmessage.ResourceHeader
	body dnsmessage.ResourceBody
}

// build serialises a reply; a question or an answer that cannot be written
// (never expected: both came from a parsed message) degrades to SERVFAIL
// without them.
func build(h dnsmessage.Header, q *dnsmessage.Question, a *answer) []byte {
	b := dnsmessage.NewBuilder(make([]byte, 0, maxUDPReply), h)
	b.EnableCompression()
	ok := b.StartQuestions() == nil
	if ok && q != nil {
		ok = b.Question(*q) == nil
	}
	if ok && a != nil {
		ok = b.StartAnswers() == nil
		if ok {
			switch body := a.body.(type) {
			case *dnsmessage.AResource:
				ok = b.AResource(a.h, *body) == nil
			case *dnsmessage.AAAAResource:
				ok = b.AAAAResource(a.h, *body) == nil
			}
		}
	}
	if !ok {
		if q == nil && a == nil {
			return nil
		}
		h.RCode, h.Authoritative = dnsmessage.RCodeServerFailure, false
		return build(h, nil, nil)
	}
	msg, err := b.Finish()
	if err != nil {
		return nil
	}
	return msg
}

// poolName is the name a query may be mapped under: the SPEC §3.1 form of a
// valid host name. IP literals (including numeric IPv4 spellings) and
// reverse-lookup names get no pool address: a literal is never a name to
// look up, and netproxy judges a connection to an address as that address.
func poolName(qname string) (string, bool) {
	// Normalize accepts host[:port] and [v6] spellings; a DNS name carries
	// neither, so such bytes make it invalid rather than stripped.
	if strings.ContainsAny(qname, ":[]% \t") {
		return "", false
	}
	n, err := hostname.Normalize(strings.TrimSuffix(qname, "."))
	if err != nil || n == "" || strings.ContainsAny(n, ":%") {
		return "", false
	}
	if _, err := hostname.ParseIPv4(n); err == nil {
		return "", false
	}
	if strings.HasSuffix(n, ".arpa") || n == "arpa" {
		return "", false
	}
	return n, true
}

// ServeUDP answers queries on pc until ctx ends or pc is closed; it closes
// pc when ctx ends.
func (r *Resolver) ServeUDP(ctx context.Context, pc net.PacketConn) error {
	stop := context.AfterFunc(ctx, func() { _ = pc.Close() })
	defer stop()
	buf := make([]byte, 65535)
	for {
		n, from, err := pc.ReadFrom(buf)
		if err != nil {
			retry, end := serveErr(ctx, err)
			if !retry {
				return end
			}
			continue
		}
		if out := r.Answer(buf[:n]); out != nil {
			_, _ = pc.WriteTo(out, from) // a sender that went away loses its reply
		}
	}
}

// serveErr sorts a read or accept error of a serve loop: a timeout is
// retried; the end of ctx or a closed socket ends the loop cleanly; any
// other error ends it with that error.
func serveErr(ctx context.Context, err error) (retry bool, end error) {
	if ctx.Err() != nil || errors.Is(err, net.ErrClosed) {
		return false, nil
	}
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		return true, nil
	}
	return false, err
}
