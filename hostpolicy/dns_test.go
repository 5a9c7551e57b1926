package hostpolicy

import (
	"context"
	"net"
	"net/netip"
	"strings"
	"testing"
	"time"

	"golang.org/x/net/dns/dnsmessage"
)

// dnsServer is a real UDP DNS server on loopback answering A/AAAA queries
// from a table; names listed in silent are never answered (timeouts), other
// names get NXDOMAIN.
type dnsServer struct {
	addr   string
	conn   net.PacketConn
	a      map[string][]netip.Addr
	silent map[string]bool
}

func startDNS(t *testing.T, answers map[string][]string, silent ...string) *dnsServer {
	t.Helper()
	pc, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := &dnsServer{addr: pc.LocalAddr().String(), conn: pc, a: map[string][]netip.Addr{}, silent: map[string]bool{}}
	for n, as := range answers {
		for _, a := range as {
			s.a[strings.ToLower(n)+"."] = append(s.a[strings.ToLower(n)+"."], netip.MustParseAddr(a))
		}
	}
	for _, n := range silent {
		s.silent[n+"."] = true
	}
	t.Cleanup(func() { pc.Close() })
	go s.serve()
	return s
}

func (s *dnsServer) serve() {
	buf := make([]byte, 1500)
	for {
		n, from, err := s.conn.ReadFrom(buf)
		if err != nil {
			return
		}
		var p dnsmessage.Parser
		h, err := p.Start(buf[:n])
		if err != nil {
			continue
		}
		q, err := p.Question()
		if err != nil {
			continue
		}
		name := strings.ToLower(q.Name.String())
		if s.silent[name] {
			continue
		}
		rh := dnsmessage.Header{ID: h.ID, Response: true, Authoritative: true}
		as, ok := s.a[name]
		if !ok {
			rh.RCode = dnsmessage.RCodeNameError
		}
		b := dnsmessage.NewBuilder(nil, rh)
		b.EnableCompression()
		b.StartQuestions()
		b.Question(q)
		b.StartAnswers()
		for _, a := range as {
			rr := dnsmessage.ResourceHeader{Name: q.Name, Class: dnsmessage.ClassINET, TTL: 60}
			if a.Is4() && q.Type == dnsmessage.TypeA {
				b.AResource(rr, dnsmessage.AResource{A: a.As4()})
			}
			if a.Is6() && q.Type == dnsmessage.TypeAAAA {
				b.AAAAResource(rr, dnsmessage.AAAAResource{AAAA: a.As16()})
			}
		}
		msg, err := b.Finish()
		if err != nil {
			continue
		}
		s.conn.WriteTo(msg, from)
	}
}

// resolver returns the production resolver type wired to this server
// instead of /etc/resolv.conf.
func (s *dnsServer) resolver(static map[string][]netip.Addr, timeout time.Duration) Resolver {
	r := NewResolver(static, timeout).(*staticThenSystem)
	r.system = &net.Resolver{PreferGo: true, Dial: func(ctx context.Context, _, _ string) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, "udp", s.addr)
	}}
	return r
}

func TestResolverStaticFirstThenSystem(t *testing.T) {
	srv := startDNS(t, map[string][]string{"pub.test": {"8.8.8.8"}, "both.test": {"1.1.1.1", "2606:4700::1111"}, "static.test": {"9.9.9.9"}})
	r := srv.resolver(map[string][]netip.Addr{"Static.Test.": {netip.MustParseAddr("10.0.0.1")}}, time.Second)
	ctx := context.Background()

	got, err := r.LookupNetIP(ctx, "static.test")
	if err != nil || len(got) != 1 || got[0].String() != "10.0.0.1" {
		t.Fatalf("static answer: %v %v", got, err)
	}
	got, err = r.LookupNetIP(ctx, "pub.test")
	if err != nil || len(got) != 1 || got[0].String() != "8.8.8.8" {
		t.Fatalf("system answer: %v %v", got, err)
	}
	got, err = r.LookupNetIP(ctx, "both.test")
	if err != nil || len(got) != 2 {
		t.Fatalf("A+AAAA answer: %v %v", got, err)
	}
	if _, err := r.LookupNetIP(ctx, "nothing.test"); err == nil {
		t.Fatal("NXDOMAIN must be an error")
	}
}

func TestResolverTimeoutFailsClosed(t *testing.T) {
	srv := startDNS(t, nil, "slow.test")
	r := srv.resolver(nil, 150*time.Millisecond)
	start := time.Now()
	_, err := r.LookupNetIP(context.Background(), "slow.test")
	if err == nil {
		t.Fatal("a lookup that never answers must fail")
	}
	if el := time.Since(start); el > 5*time.Second {
		t.Fatalf("lookup took %v; the timeout is 150ms", el)
	}
}

func TestResolverDefaultTimeoutIsTwoSeconds(t *testing.T) {
	if r := NewResolver(nil, 0).(*staticThenSystem); r.timeout != 2*time.Second {
		t.Fatalf("default timeout %v, want 2s", r.timeout)
	}
}

func TestEngineDNSThroughRealServer(t *testing.T) {
	srv := startDNS(t, map[string][]string{
		"pub.test": {"8.8.8.8"}, "rebind.test": {"127.0.0.1"}, "mixed.test": {"8.8.8.8", "10.0.0.1"},
		"v6ula.test": {"fd00::1"}, "mapped.test": {"::ffff:169.254.169.254"}, "nat64.test": {"64:ff9b::a9fe:a9fe"},
	}, "slow.test")
	p := mustCompile(t, map[string]string{"*": "allow"}, false)
	e := newTestEngine(p, srv.resolver(nil, 200*time.Millisecond), ModeFull, nil)
	for host, want := range map[string]Reason{
		"pub.test": ReasonNone, "rebind.test": ReasonNotAllowedLocal, "mixed.test": ReasonNotAllowedLocal,
		"v6ula.test": ReasonNotAllowedLocal, "mapped.test": ReasonNotAllowedLocal, "nat64.test": ReasonNotAllowedLocal,
		"slow.test": ReasonNotAllowedLocal, "nxdomain.test": ReasonNotAllowedLocal,
	} {
		d := e.Evaluate(context.Background(), Request{Trace: true, Host: host, Port: 80, Protocol: ProtoHTTP, Method: "GET"})
		if d.Reason != want {
			t.Errorf("%s: reason %q, want %q (steps %+v)", host, d.Reason, want, d.Steps)
		}
	}
	d := e.Evaluate(context.Background(), Request{Trace: true, Host: "pub.test", Port: 80, Protocol: ProtoHTTP, Method: "GET"})
	if len(d.Addrs) != 1 || d.Addrs[0].String() != "8.8.8.8" {
		t.Errorf("allowed decision must pin the checked addresses, got %v", d.Addrs)
	}
}
