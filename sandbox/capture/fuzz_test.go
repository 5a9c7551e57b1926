package capture

import (
	"net/netip"
	"testing"

	"golang.org/x/net/dns/dnsmessage"
)

// FuzzAnswer: any input gets no reply or a well-formed response to the
// same ID, and never a panic.
func FuzzAnswer(f *testing.F) {
	for _, typ := range []dnsmessage.Type{dnsmessage.TypeA, dnsmessage.TypeAAAA, dnsmessage.TypeTXT} {
		f.Add(query(f, 9, "allowed.test.", typ))
	}
	f.Add([]byte{})
	r := &Resolver{Pool: NewDefaultPool()}
	f.Fuzz(func(t *testing.T, in []byte) {
		out := r.Answer(in)
		if out == nil {
			return
		}
		var m dnsmessage.Message
		if err := m.Unpack(out); err != nil {
			t.Fatalf("reply does not parse: %v", err)
		}
		if !m.Response || m.ID != uint16(in[0])<<8|uint16(in[1]) || len(out) > maxUDPReply {
			t.Fatalf("bad reply %+v (%d bytes)", m.Header, len(out))
		}
		for _, a := range m.Answers {
			var addr netip.Addr
			switch b := a.Body.(type) {
			case *dnsmessage.AResource:
				addr = netip.AddrFrom4(b.A)
			case *dnsmessage.AAAAResource:
				addr = netip.AddrFrom16(b.AAAA)
			default:
				t.Fatalf("answer of type %T", a.Body)
			}
			// Only pool addresses ever: a real address would be a lookup.
			if _, ok := r.Pool.Name(addr); !ok {
				t.Fatalf("answer %v is not a mapped pool address", addr)
			}
		}
	})
}
