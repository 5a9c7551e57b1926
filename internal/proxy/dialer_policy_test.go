package proxy

import (
	"context"
	"errors"
	"net"
	"net/netip"
	"testing"
	"time"

	"github.com/netproxy/netproxy/hostpolicy"
)

// TestDialTimeAddressEntries: the dialer's re-check applies the policy's
// deny-list address entries and allow-list prefixes of the snapshot
// current at dial time (SPEC 3.2, 3.5).
func TestDialTimeAddressEntries(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			c.Close()
		}
	}()
	port := uint16(ln.Addr().(*net.TCPAddr).Port)
	build := func(entries ...hostpolicy.Entry) *hostpolicy.Snapshot {
		s, err := hostpolicy.Build(hostpolicy.Options{Enabled: true, Mode: hostpolicy.ModeFull, Entries: entries})
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	e := hostpolicy.NewEngine(build(hostpolicy.Entry{Pattern: "127.0.0.0/8", Decision: "allow"}), nil)
	d := &Dialer{ConnectTimeout: time.Second, AllowLocalBinding: e.AllowLocalBinding, CheckAddr: e.CheckDialAddr}
	loop := []netip.Addr{netip.MustParseAddr("127.0.0.1")}
	ctx := context.Background()

	// An allow-list prefix lets a name resolving into it be dialed.
	c, err := d.DialTarget(ctx, Target{Host: "registry.test", Port: port, Addrs: loop})
	if err != nil {
		t.Fatalf("inside an allow prefix: %v", err)
	}
	c.Close()
	// A deny added since the decision wins at dial time, even for an
	// exactly allow-listed local literal.
	e.Swap(build(hostpolicy.Entry{Pattern: "127.0.0.1", Decision: "allow"}, hostpolicy.Entry{Pattern: "127.0.0.0/8", Decision: "deny"}))
	for _, tg := range []Target{{Host: "registry.test", Port: port, Addrs: loop}, {Host: "127.0.0.1", Port: port, Addrs: loop, LocalLiteral: true}} {
		if _, err := d.DialTarget(ctx, tg); !errors.Is(err, ErrNonPublic) {
			t.Fatalf("%s: deny-list address entry at dial time: %v", tg.Host, err)
		}
	}
	// Without a prefix, a private address is refused unless it is the
	// exactly allow-listed literal.
	e.Swap(build(hostpolicy.Entry{Pattern: "127.0.0.1", Decision: "allow"}))
	if _, err := d.DialTarget(ctx, Target{Host: "other.test", Port: port, Addrs: []netip.Addr{netip.MustParseAddr("127.0.0.2")}}); !errors.Is(err, ErrNonPublic) {
		t.Fatalf("private address outside every prefix: %v", err)
	}
	c, err = d.DialTarget(ctx, Target{Host: "localhost", Port: port, Addrs: loop, LocalLiteral: true})
	if err != nil {
		t.Fatalf("exact local literal: %v", err)
	}
	c.Close()
}
