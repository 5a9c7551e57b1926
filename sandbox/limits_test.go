package sandbox

import (
	"strings"
	"testing"
)

func TestParseByteSize(t *testing.T) {
	for in, want := range map[string]int64{
		"0": 0, "512": 512, "64M": 64 << 20, "64MiB": 64 << 20, "64mb": 64 << 20, "1G": 1 << 30, "2k": 2048, "1T": 1 << 40,
		"50%": 500, "100%": 1000,
	} {
		got, err := ParseByteSize("--limit-x", in, 1000)
		if err != nil || got != want {
			t.Errorf("%q: got %d %v, want %d", in, got, err, want)
		}
	}
	for _, in := range []string{"", "-1", "1X", "M", "0%", "101%", "abc", "9999999999T"} {
		if _, err := ParseByteSize("--limit-x", in, 1000); err == nil || !strings.Contains(err.Error(), "--limit-x") {
			t.Errorf("%q: want an error naming the flag, got %v", in, err)
		}
	}
	if _, err := ParseByteSize("--limit-x", "50%", 0); err == nil {
		t.Error("a percentage without a known total must fail")
	}
}

func FuzzParseByteSize(f *testing.F) {
	for _, s := range []string{"0", "64M", "50%", "1GiB", "-1", "9999999999T"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		n, err := ParseByteSize("--limit", s, 1<<34)
		if err == nil && n < 0 {
			t.Fatalf("%q parsed to a negative size %d", s, n)
		}
	})
}
