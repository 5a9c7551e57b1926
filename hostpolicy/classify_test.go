package hostpolicy

import (
	"net/netip"
	"testing"
)

func TestIsNonPublic(t *testing.T) {
	nonPublic := []string{
		// reference §9.2 is_non_public_ip row
		"127.0.0.1", "10.0.0.1", "192.168.0.1", "100.64.0.1", "192.0.0.1", "192.0.2.1", "198.18.0.1",
		"198.51.100.1", "203.0.113.1", "240.0.0.1", "0.1.2.3", "::ffff:127.0.0.1", "::ffff:10.0.0.1",
		"::1", "fe80::1", "fc00::1",
		// every SPEC §3.3 range, both edges
		"0.0.0.0", "0.255.255.255", "10.255.255.255", "100.127.255.255", "127.255.255.255",
		"169.254.0.0", "169.254.169.254", "169.254.255.255", "172.16.0.0", "172.31.255.255",
		"192.0.0.255", "192.0.2.255", "192.168.255.255", "198.19.255.255", "198.51.100.255",
		"203.0.113.255", "224.0.0.1", "239.255.255.255", "240.0.0.0", "255.255.255.255",
		"::", "fdff:ffff::1", "fd00::1", "febf::1", "fec0::1", "feff::1", "ff02::1", "ff00::",
		"2001:db8::1", "2001:db8:ffff::1",
		// embedded IPv4: mapped, compatible, NAT64, 6to4, Teredo
		"::ffff:169.254.169.254", "::ffff:a9fe:a9fe", "::ffff:0.0.0.0", "::ffff:7f00:1",
		"::127.0.0.1", "::10.0.0.1", "::7f00:1", "::169.254.169.254",
		"64:ff9b::127.0.0.1", "64:ff9b::a9fe:a9fe", "64:ff9b::10.1.2.3", "64:FF9B::C0A8:0101",
		"2002:7f00:1::", "2002:a9fe:a9fe::1", "2002:c0a8:101:ffff::1", "2002:0a00:0001::",
		// Teredo: client address is the bit-inverted last 32 bits (127.0.0.1 → 80ff:fffe)
		"2001:0:4136:e378:8000:63bf:80ff:fffe", "2001::ffff:ffff:5601:5601", "2001:0::f5ff:fffe",
		// local-use NAT64 prefix as a whole
		"64:ff9b:1::1", "64:ff9b:1:ffff::8.8.8.8",
		// beyond SPEC: SIIT-translated, discard-only, benchmarking, new documentation block
		"::ffff:0:127.0.0.1", "::ffff:0:a9fe:a9fe", "100::1", "2001:2::1", "3fff::1",
		// zones are ignored
		"fe80::1%eth0", "fd00::1%lo",
	}
	public := []string{
		"8.8.8.8", "1.1.1.1", "93.184.216.34", "9.255.255.255", "11.0.0.0", "100.63.255.255",
		"100.128.0.0", "126.255.255.255", "128.0.0.0", "169.253.255.255", "169.255.0.0",
		"172.15.255.255", "172.32.0.0", "192.0.1.0", "192.0.3.0", "192.167.255.255", "192.169.0.0",
		"198.17.255.255", "198.20.0.0", "198.51.99.255", "198.51.101.0", "203.0.112.255",
		"203.0.114.0", "223.255.255.255",
		"::ffff:8.8.8.8", "::8.8.8.8", "64:ff9b::8.8.8.8", "2002:808:808::1", "2606:4700::1111",
		"2001:4860:4860::8888", "2001:0:4136:e378:8000:63bf:f7f7:f7f7", "2001:db9::1", "fbff::1",
		"64:ff9b:2::1", "::ffff:0:808:808", "100:0:0:1::1", "2001:3::1", "4000::1",
	}
	for _, s := range nonPublic {
		if !IsNonPublic(netip.MustParseAddr(s)) {
			t.Errorf("IsNonPublic(%s) = false, want true", s)
		}
	}
	for _, s := range public {
		if IsNonPublic(netip.MustParseAddr(s)) {
			t.Errorf("IsNonPublic(%s) = true, want false", s)
		}
	}
	if !IsNonPublic(netip.Addr{}) {
		t.Error("the zero Addr must be non-public (fail closed)")
	}
}

func TestEmbeddedIPv4(t *testing.T) {
	for in, want := range map[string]string{
		"::ffff:1.2.3.4": "1.2.3.4", "::1.2.3.4": "1.2.3.4", "64:ff9b::1.2.3.4": "1.2.3.4",
		"2002:102:304::": "1.2.3.4", "2001:0:4136:e378:8000:63bf:fefd:fcfb": "1.2.3.4",
	} {
		got, ok := EmbeddedIPv4(netip.MustParseAddr(in))
		if !ok || got.String() != want {
			t.Errorf("EmbeddedIPv4(%s) = %v, %v; want %s", in, got, ok, want)
		}
	}
	if _, ok := EmbeddedIPv4(netip.MustParseAddr("2606:4700::1111")); ok {
		t.Error("a native IPv6 address has no embedded IPv4")
	}
}
