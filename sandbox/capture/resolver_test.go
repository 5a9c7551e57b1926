package capture

import (
	"context"
	"errors"
	"net"
	"net/netip"
	"testing"

	"golang.org/x/net/dns/dnsmessage"
)

func query(t testing.TB, id uint16, name string, typ dnsmessage.Type) []byte {
	t.Helper()
	b := dnsmessage.NewBuilder(nil, dnsmessage.Header{ID: id, RecursionDesired: true})
	_ = b.StartQuestions()
	if err := b.Question(dnsmessage.Question{Name: dnsmessage.MustNewName(name), Type: typ, Class: dnsmessage.ClassINET}); err != nil {
		t.Fatal(err)
	}
	m, err := b.Finish()
	if err != nil {
		t.Fatal(err)
	}
	return m
}

func parse(t *testing.T, b []byte) dnsmessage.Message {
	t.Helper()
	var m dnsmessage.Message
	if err := m.Unpack(b); err != nil {
		t.Fatalf("reply does not parse: %v", err)
	}
	return m
}

func TestAnswerTypes(t *testing.T) {
	r := &Resolver{Pool: NewDefaultPool()}
	for _, c := range []struct {
		name  string
		typ   dnsmessage.Type
		rcode dnsmessage.RCode
		n     int
	}{
		{"allowed.test.", dnsmessage.TypeA, dnsmessage.RCodeSuccess, 1},
		{"allowed.test.", dnsmessage.TypeAAAA, dnsmessage.RCodeSuccess, 1},
		{"Allowed.TEST.", dnsmessage.TypeA, dnsmessage.RCodeSuccess, 1},
		{"allowed.test.", dnsmessage.TypeTXT, dnsmessage.RCodeRefused, 0},
		{"allowed.test.", dnsmessage.TypeMX, dnsmessage.RCodeRefused, 0},
		{"allowed.test.", dnsmessage.TypeALL, dnsmessage.RCodeRefused, 0},
		{"4.3.2.1.in-addr.arpa.", dnsmessage.TypePTR, dnsmessage.RCodeRefused, 0},
		{"4.3.2.1.in-addr.arpa.", dnsmessage.TypeA, dnsmessage.RCodeNameError, 0},
		{"127.0.0.1.", dnsmessage.TypeA, dnsmessage.RCodeNameError, 0},
		{"2130706433.", dnsmessage.TypeA, dnsmessage.RCodeNameError, 0},
		{"bad\\:name.", dnsmessage.TypeA, dnsmessage.RCodeNameError, 0},
	} {
		m := parse(t, r.Answer(query(t, 77, c.name, c.typ)))
		if m.ID != 77 || !m.Response || m.RCode != c.rcode || len(m.Answers) != c.n || len(m.Questions) != 1 {
			t.Errorf("%s %v: id %d response %v rcode %v answers %d questions %d; want rcode %v, %d answers",
				c.name, c.typ, m.ID, m.Response, m.RCode, len(m.Answers), len(m.Questions), c.rcode, c.n)
		}
	}
}

func TestAnswerStableDistinct(t *testing.T) {
	p := NewDefaultPool()
	r := &Resolver{Pool: p}
	addr := func(name string, typ dnsmessage.Type) netip.Addr {
		m := parse(t, r.Answer(query(t, 1, name, typ)))
		if len(m.Answers) != 1 {
			t.Fatalf("%s: %d answers", name, len(m.Answers))
		}
		switch b := m.Answers[0].Body.(type) {
		case *dnsmessage.AResource:
			return netip.AddrFrom4(b.A)
		case *dnsmessage.AAAAResource:
			return netip.AddrFrom16(b.AAAA)
		}
		t.Fatalf("%s: body %T", name, m.Answers[0].Body)
		return netip.Addr{}
	}
	a1, a2 := addr("a.test.", dnsmessage.TypeA), addr("b.test.", dnsmessage.TypeA)
	if a1 == a2 {
		t.Fatalf("two names share %v", a1)
	}
	if again := addr("A.test.", dnsmessage.TypeA); again != a1 {
		t.Fatalf("a.test changed from %v to %v", a1, again)
	}
	if !DefaultPoolV4.Contains(a1) || !DefaultPoolV4.Contains(a2) {
		t.Fatalf("%v, %v outside %v", a1, a2, DefaultPoolV4)
	}
	v6 := addr("a.test.", dnsmessage.TypeAAAA)
	if !DefaultPoolV6.Contains(v6) {
		t.Fatalf("%v outside %v", v6, DefaultPoolV6)
	}
	for _, a := range []netip.Addr{a1, v6, netip.AddrFrom16(a1.As16())} {
		if n, ok := p.Name(a); !ok || n != "a.test" {
			t.Errorf("Name(%v) = %q, %v; want a.test", a, n, ok)
		}
	}
	for _, a := range []string{"198.18.0.0", "198.19.255.255", "198.18.0.9", "10.0.0.1", "fdc0:ca97:0:53::9", "fdc0:ca97:0:53:1::1"} {
		if n, ok := p.Name(netip.MustParseAddr(a)); ok {
			t.Errorf("Name(%s) = %q, want none", a, n)
		}
	}
}

func TestAnswerMalformed(t *testing.T) {
	r := &Resolver{Pool: NewDefaultPool()}
	if r.Answer(nil) != nil || r.Answer([]byte{1, 2, 3}) != nil {
		t.Fatal("a short message got a reply")
	}
	q := query(t, 5, "a.test.", dnsmessage.TypeA)
	resp := append([]byte(nil), q...)
	resp[2] |= 0x80 // QR: a response is never answered (no reflection loops)
	if r.Answer(resp) != nil {
		t.Fatal("a response got a reply")
	}
	notify := append([]byte(nil), q...)
	notify[2] |= 4 << 3 // opcode NOTIFY
	if m := parse(t, r.Answer(notify)); m.RCode != dnsmessage.RCodeNotImplemented {
		t.Fatalf("opcode 4: rcode %v", m.RCode)
	}
	two := append([]byte(nil), q...)
	two[5] = 2 // QDCOUNT 2, one present
	if m := parse(t, r.Answer(two)); m.RCode != dnsmessage.RCodeFormatError {
		t.Fatalf("qdcount 2: rcode %v", m.RCode)
	}
}

func TestPoolFull(t *testing.T) {
	p, err := NewPool(netip.MustParsePrefix("198.18.0.0/30"), netip.MustParsePrefix("fd00::/126"), 2)
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range []string{"a", "b", "a"} {
		if _, _, err := p.Addrs(n); err != nil {
			t.Fatalf("%s: %v", n, err)
		}
	}
	if _, _, err := p.Addrs("c"); !errors.Is(err, ErrPoolFull) {
		t.Fatalf("third name: %v, want ErrPoolFull", err)
	}
	if m := parse(t, (&Resolver{Pool: p}).Answer(query(t, 1, "c.", dnsmessage.TypeA))); m.RCode != dnsmessage.RCodeServerFailure {
		t.Fatalf("full pool: rcode %v", m.RCode)
	}
	if _, err := NewPool(netip.MustParsePrefix("198.18.0.0/30"), netip.MustParsePrefix("fd00::/64"), 3); err == nil {
		t.Fatal("a /30 accepted for 3 names")
	}
}

// TestServeUDPRealClient drives the resolver over a real UDP socket with
// Go's own DNS client, as a program in the sandbox would.
func TestServeUDPRealClient(t *testing.T) {
	pc, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	r := &Resolver{Pool: NewDefaultPool()}
	go func() { done <- r.ServeUDP(ctx, pc) }()
	res := &net.Resolver{PreferGo: true, Dial: func(ctx context.Context, _, _ string) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, "udp", pc.LocalAddr().String())
	}}
	addrs, err := res.LookupNetIP(ctx, "ip", "allowed.test")
	if err != nil || len(addrs) != 2 {
		t.Fatalf("lookup: %v %v", addrs, err)
	}
	for _, a := range addrs {
		if n, ok := r.Pool.Name(a); !ok || n != "allowed.test" {
			t.Errorf("%v maps to %q %v", a, n, ok)
		}
	}
	if _, err := res.LookupTXT(ctx, "allowed.test"); err == nil {
		t.Error("TXT answered")
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("ServeUDP: %v", err)
	}
}
