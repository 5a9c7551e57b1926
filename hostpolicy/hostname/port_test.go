package hostname

import (
	"strings"
	"testing"
)

func TestSplitEntryPort(t *testing.T) {
	for _, c := range []struct {
		in, host string
		lo, hi   uint16
	}{
		{"example.com", "example.com", 0, 0},
		{"api.example.com:443", "api.example.com", 443, 443},
		{" db.corp.test:5432 ", "db.corp.test", 5432, 5432},
		{"*.corp.test:8000-8999", "*.corp.test", 8000, 8999},
		{"**.x.test:1-65535", "**.x.test", 1, 65535},
		{"[fd00::1]:443", "[fd00::1]", 443, 443},
		{"[fd00::1]", "[fd00::1]", 0, 0},
		{"fe80::1", "fe80::1", 0, 0},
		{"fe80::1%eth0", "fe80::1%eth0", 0, 0},
		{"10.0.0.0/8:5432", "10.0.0.0/8", 5432, 5432},
		{"[fd00::/8]:5432", "fd00::/8", 5432, 5432},
		{"[fd00::/8]", "fd00::/8", 0, 0},
		{"fd00::/8", "fd00::/8", 0, 0},
		{"*:443", "*", 443, 443},
		{"[*]:443", "[*]", 443, 443},
		{"127.0.0.1:8080", "127.0.0.1", 8080, 8080},
	} {
		host, r, err := SplitEntryPort(c.in)
		if err != nil || host != c.host || r.Lo != c.lo || r.Hi != c.hi {
			t.Errorf("SplitEntryPort(%q) = %q %+v %v; want %q %d-%d", c.in, host, r, err, c.host, c.lo, c.hi)
		}
	}
	for _, c := range []struct{ in, want string }{
		{"a.test:0", "outside 1-65535"},
		{"a.test:70000", "outside 1-65535"},
		{"a.test:9-3", "must not be above"},
		{"a.test:https", "not a number"},
		{"a.test:", "empty port"},
		{"a.test:80-", "empty port"},
		{"a.test:-80", "empty port"},
		{"a.test:+80", "not a number"},
		{"[::1]:0", "outside 1-65535"},
		{"[fd00::/8]:x", "not a number"},
		{":443", "no host"},
		{"10.0.0.0/8:99999999999999999999", "outside 1-65535"},
	} {
		_, _, err := SplitEntryPort(c.in)
		if err == nil || !strings.Contains(err.Error(), c.want) || !strings.Contains(err.Error(), c.in) {
			t.Errorf("SplitEntryPort(%q) error %v; want one naming the entry and mentioning %q", c.in, err, c.want)
		}
	}
}

func TestPortRange(t *testing.T) {
	any := PortRange{}
	if !any.Any() || !any.Contains(0) || !any.Contains(443) || any.String() != "" {
		t.Fatalf("unscoped range: %+v %q", any, any.String())
	}
	r := PortRange{8000, 8999}
	if r.Contains(0) || r.Contains(7999) || !r.Contains(8000) || !r.Contains(8999) || r.Contains(9000) || r.String() != ":8000-8999" {
		t.Fatalf("range: %q", r.String())
	}
	if s := (PortRange{443, 443}).String(); s != ":443" {
		t.Fatalf("single port: %q", s)
	}
}

// FuzzSplitEntryPort: never panics; a scoped result has a valid range and
// a non-empty host, and a plain host with its range splits back to the
// same parts.
func FuzzSplitEntryPort(f *testing.F) {
	for _, s := range append(fuzzSeeds, "a:1-2", "[::1]:443", "10.0.0.0/8:5432", "[fd00::/8]:1", "a:0", ":", "[]:1", "a:65535-65535") {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, in string) {
		host, r, err := SplitEntryPort(in)
		if err != nil {
			return
		}
		if r.Any() {
			return
		}
		if host == "" || r.Lo == 0 || r.Hi < r.Lo {
			t.Fatalf("SplitEntryPort(%q) = %q %+v", in, host, r)
		}
		if strings.ContainsAny(host, "[]:/ \t") {
			return // the host parser judges what is left
		}
		h2, r2, err := SplitEntryPort(host + r.String())
		if err != nil || r2 != r || h2 != host {
			t.Fatalf("round trip %q → %q%s → %q %+v %v", in, host, r.String(), h2, r2, err)
		}
	})
}
