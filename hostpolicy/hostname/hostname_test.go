package hostname

import (
	"strings"
	"testing"
)

func TestNormalize(t *testing.T) {
	cases := []struct{ in, want string }{
		// reference §9.2 normalize_host rows
		{"  ExAmPlE.CoM  ", "example.com"},
		{"example.com:1234", "example.com"},
		{"2001:db8::1", "2001:db8::1"},
		{"example.com.", "example.com"},
		{"ExAmPlE.CoM.", "example.com"},
		{"example.com.:443", "example.com"},
		{"[::1]", "::1"},
		{"[::1]:443", "::1"},
		{"fe80::1%lo0", "fe80::1%lo0"},
		{"[fe80::1%lo0]", "fe80::1%lo0"},
		{"[fe80::1%25lo0]", "fe80::1%lo0"},
		{"[fe80::1%25lo0]:443", "fe80::1%lo0"},
		// more normalisation
		{"example.com...", "example.com"},
		{"example.com:", "example.com"},
		{"\texample.com\n", "example.com"},
		{"LOCALHOST.", "localhost"},
		{"[0:0:0:0:0:0:0:1]", "::1"},
		{"[2001:DB8::0001]", "2001:db8::1"},
		{"[::FFFF:127.0.0.1]", "::ffff:127.0.0.1"},
		{"_dmarc.example.com", "_dmarc.example.com"},
		{"r3---sn-abc.googlevideo.com", "r3---sn-abc.googlevideo.com"},
		// IDNA
		{"bücher.example", "xn--bcher-kva.example"},
		{"BÜCHER.example", "xn--bcher-kva.example"},
		{"xn--bcher-kva.example", "xn--bcher-kva.example"},
		{"münchen.de:443", "xn--mnchen-3ya.de"},
		{"例え.テスト", "xn--r8jz45g.xn--zckzah"},
		{"bücher.example。", "xn--bcher-kva.example"},
		{"ＥＸＡＭＰＬＥ.com", "example.com"},       // fullwidth letters map to ASCII
		{"ex\u00adample.com", "example.com"}, // soft hyphen is ignored (UTS #46)
		{"exa\u200bmple.com", "example.com"}, // zero-width space is ignored
		{"faß.de", "xn--fa-hia.de"},          // non-transitional: ß kept
		{"☃.net", "xn--n3h.net"},
		// numeric IPv4 spellings (SPEC §3.1)
		{"127.0.0.1", "127.0.0.1"},
		{"127.1", "127.0.0.1"},
		{"127.0.1", "127.0.0.1"},
		{"2130706433", "127.0.0.1"},
		{"0x7f000001", "127.0.0.1"},
		{"0X7F000001", "127.0.0.1"},
		{"0177.0.0.1", "127.0.0.1"},
		{"0x7f.1", "127.0.0.1"},
		{"0x7f.0x0.0x0.0x1", "127.0.0.1"},
		{"017700000001", "127.0.0.1"},
		{"127.000.000.001", "127.0.0.1"},
		{"2852039166", "169.254.169.254"},
		{"0xa9fea9fe", "169.254.169.254"},
		{"0", "0.0.0.0"},
		{"0x", "0.0.0.0"},
		{"127.0.0.1.", "127.0.0.1"},
		{"2130706433:80", "127.0.0.1"},
		{"4294967295", "255.255.255.255"},
		{"1.2.3.4", "1.2.3.4"},
		// Unicode dots and fullwidth digits map to ASCII before the IPv4 parser
		{"127。0。0。1", "127.0.0.1"},
		{"１２７.０.０.１", "127.0.0.1"},
		{"１２７．０．０．１", "127.0.0.1"},
		{"127｡0｡0｡1", "127.0.0.1"},
		{"ⓛⓞⓒⓐⓛⓗⓞⓢⓣ", "localhost"},
		{"ｌｏｃａｌｈｏｓｔ", "localhost"},
		// percent-encoding is decoded once
		{"127%2e0%2e0%2e1", "127.0.0.1"},
		{"127%2E0%2E0%2E1", "127.0.0.1"},
		{"%6c%6f%63%61%6c%68%6f%73%74", "localhost"},
		{"b%C3%BCcher.example", "xn--bcher-kva.example"},
	}
	for _, c := range cases {
		got, err := Normalize(c.in)
		if err != nil || got != c.want {
			t.Errorf("Normalize(%q) = %q, %v; want %q", c.in, got, err, c.want)
		}
	}
}

func TestNormalizeRejects(t *testing.T) {
	for _, in := range []string{
		"", "   ", ".", "...", ":443", "[]", "[::1", "[::1]x", "[1.2.3.4]", "[example.com]",
		"a..b", ".example.com", "exa mple.com", "example.com/path", "user@example.com",
		"*.example.com", "ex*ample.com", "1.2.3.4.5", "256.1.1.1", "1.2.3.256",
		"4294967296", "0x100000000", "08.0.0.1", "0x7g.0.0.1", "1.2.3.999999",
		"example.123", "::ffff:1.2.3", "127.0.0.1%25eth0", "127.0.0.1%eth0",
		"fe80::1%", "fe80::1%e/h", "127%252e0%252e0%252e1", "%zz",
		"example.com%00", strings.Repeat("a", 64) + ".com", strings.Repeat("a.", 127) + "com",
		"\u200b", "xn--\u00e9", "\u0300x.test", "a\u200db.test", "١٢٧.0.0.1", "a.test:b.test", "example.com:123456", "[::1]:abc",
		"127.0.0.1:80@evil.test",
	} {
		if got, err := Normalize(in); err == nil {
			t.Errorf("Normalize(%q) = %q, want an error", in, got)
		}
	}
}

func TestParseIPv4Boundaries(t *testing.T) {
	good := map[string]string{
		"1.16777215": "1.255.255.255", "1.2.65535": "1.2.255.255", "255.255.255.255": "255.255.255.255",
		"0x0.0x0.0x0.0x0": "0.0.0.0", "00000000000177.1": "127.0.0.1",
	}
	for in, want := range good {
		a, err := ParseIPv4(in)
		if err != nil || a.String() != want {
			t.Errorf("ParseIPv4(%q) = %v, %v; want %s", in, a, err, want)
		}
	}
	for _, in := range []string{"1.16777216", "1.2.65536", "256.0.0.1", "1.2.3.4.5", "1..2", "", "0x1g", "09"} {
		if a, err := ParseIPv4(in); err == nil {
			t.Errorf("ParseIPv4(%q) = %v, want error", in, a)
		}
	}
}

func TestParsePattern(t *testing.T) {
	cases := []struct {
		in   string
		kind Kind
		text string
	}{
		{"example.com", Exact, "example.com"},
		{"Example.COM.", Exact, "example.com"},
		{"*.Example.COM.", Subdomains, "*.example.com"},
		{"**.Example.COM.", ApexAndSubdomains, "**.example.com"},
		{"*", All, "*"},
		{"[*]", All, "*"},
		{"[::1]", Exact, "::1"},
		{"[fe80::1%25lo0]", Exact, "fe80::1%lo0"},
		{"api.ported.test:8443", Exact, "api.ported.test"},
		{"127.1", Exact, "127.0.0.1"},
		{"0x7f000001", Exact, "127.0.0.1"},
		{"bücher.example", Exact, "xn--bcher-kva.example"},
		{"*.bücher.example", Subdomains, "*.xn--bcher-kva.example"},
		{"region*.v2.argotunnel.com", Glob, "region*.v2.argotunnel.com"},
		{"Region*.V2.ArgoTunnel.com:443", Glob, "region*.v2.argotunnel.com"},
		{"host?.q.test", Glob, "host?.q.test"},
		{"10.*", Glob, "10.*"},
		{"**", Glob, "**"},
		{"*.*", Glob, "*.*"},
		{"**.[*]", Glob, "**.*"},
		{"x[0-9].test", Glob, "x[0-9].test"},
	}
	for _, c := range cases {
		p, err := ParsePattern(c.in)
		if err != nil || p.Kind != c.kind || p.Text != c.text {
			t.Errorf("ParsePattern(%q) = %+v, %v; want kind %d text %q", c.in, p, err, c.kind, c.text)
		}
	}
	for _, in := range []string{"", "  ", "[", "a[", "*.", "**.", "foo{a,b}.com", "exa mple.com", "*.[", "ü*.example"} {
		if p, err := ParsePattern(in); err == nil {
			t.Errorf("ParsePattern(%q) = %+v, want error", in, p)
		}
	}
}

func TestPatternMatch(t *testing.T) {
	cases := []struct {
		pattern string
		yes, no []string
	}{
		// reference §9.2–9.3 compile_globset rows
		{"Example.COM.", []string{"example.com"}, []string{"api.example.com", "not-example.com"}},
		{"*.Example.COM.", []string{"api.example.com", "a.b.example.com"}, []string{"example.com", "evilexample.com"}},
		{"**.Example.COM.", []string{"example.com", "api.example.com"}, []string{"evilexample.com"}},
		{"region*.v2.argotunnel.com", []string{"region1.v2.argotunnel.com", "region.v2.argotunnel.com", "regionx.y.v2.argotunnel.com"}, []string{"xregion1.v2.argotunnel.com", "foo.region1.v2.argotunnel.com"}},
		{"[::1]", []string{"::1"}, []string{"::2"}},
		{"[fe80::1%25lo0]", []string{"fe80::1%lo0"}, []string{"fe80::1%lo1", "fe80::1"}},
		{"*.openai.com", []string{"api.openai.com"}, []string{"openai.com", "evilopenai.com"}},
		{"**.openai.com", []string{"openai.com", "api.openai.com"}, []string{"evilopenai.com"}},
		{"*", []string{"example.com", "api.openai.com", "localhost"}, nil},
		{"host?.q.test", []string{"host1.q.test"}, []string{"host12.q.test", "host.q.test"}},
	}
	for _, c := range cases {
		p, err := ParsePattern(c.pattern)
		if err != nil {
			t.Fatalf("ParsePattern(%q): %v", c.pattern, err)
		}
		for _, h := range c.yes {
			if !p.Match(h) {
				t.Errorf("%q should match %q", c.pattern, h)
			}
		}
		for _, h := range c.no {
			if p.Match(h) {
				t.Errorf("%q should not match %q", c.pattern, h)
			}
		}
	}
}

func TestCheckDeny(t *testing.T) {
	for _, in := range []string{"*", "[*]", "**.[*]", "**", "?*", "**.*"} {
		p, err := ParsePattern(in)
		if err != nil {
			t.Fatalf("ParsePattern(%q): %v", in, err)
		}
		if CheckDeny(p) == nil {
			t.Errorf("CheckDeny(%q) accepted a global wildcard", in)
		}
	}
	for _, in := range []string{"example.com", "*.example.com", "**.example.com", "10.*", "region*.x.test"} {
		p, _ := ParsePattern(in)
		if err := CheckDeny(p); err != nil {
			t.Errorf("CheckDeny(%q) = %v, want nil", in, err)
		}
	}
}

func TestGlobSuffixKey(t *testing.T) {
	for g, want := range map[string]string{
		"region*.glob.test": "glob.test", "host?.q.test": "q.test", "10.*": "", "?*.a*b.com": "com",
		"x[.]y": "", "*": "", "a*.": "",
	} {
		if got := GlobSuffixKey(g); got != want {
			t.Errorf("GlobSuffixKey(%q) = %q, want %q", g, got, want)
		}
	}
}
