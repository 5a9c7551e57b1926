package sandbox

import (
	"net"
	"net/netip"
	"os"
	"os/exec"
	"testing"
	"time"
)

func TestParseProcNetAddr(t *testing.T) {
	got, ok := parseProcNetAddr("0100007F:1F90")
	if !ok || got != netip.MustParseAddrPort("127.0.0.1:8080") {
		t.Fatalf("got %v %v", got, ok)
	}
	for _, bad := range []string{"", "0100007F", "0100007:1F90", "ZZ00007F:1F90", "0100007F:FFFFF", "0100007F:"} {
		if _, ok := parseProcNetAddr(bad); ok {
			t.Errorf("%q parsed", bad)
		}
	}
	// /proc/net/tcp6: four host-order words.
	got, ok = parseProcNetAddr("00000000000000000000000001000000:1F90")
	if !ok || got != netip.MustParseAddrPort("[::1]:8080") {
		t.Fatalf("tcp6 ::1: got %v %v", got, ok)
	}
}

func FuzzParseProcNetAddr(f *testing.F) {
	for _, s := range []string{"0100007F:1F90", "00000000:0000", "x:y"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		if ap, ok := parseProcNetAddr(s); ok && ap.Addr().Is4() != (len(s) > 8 && s[8] == ':') {
			t.Fatalf("%q gave %v: IPv4 only from 8 hex digits", s, ap)
		}
	})
}

// A connection from this process is admitted only for a tree rooted at
// this process, never for an unrelated one.
func TestPeerTreeAdmitsOnlyItsTree(t *testing.T) {
	ln, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	other := exec.Command("sleep", "30")
	if err := other.Start(); err != nil {
		t.Fatal(err)
	}
	defer other.Process.Kill()
	c, err := net.DialTimeout("tcp4", ln.Addr().String(), 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	srv, err := ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	var mine, foreign, unset peerTree
	mine.set(os.Getpid())
	foreign.set(other.Process.Pid)
	if !mine.owns(srv) {
		t.Fatal("a connection of the tree's own process was refused")
	}
	if foreign.owns(srv) {
		t.Fatal("a connection from outside the tree was admitted")
	}
	if unset.owns(srv) {
		t.Fatal("admitted before the tree's root was known")
	}
}
