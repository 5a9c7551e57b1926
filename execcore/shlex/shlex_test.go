package shlex

import (
	"reflect"
	"testing"
)

func TestSplit(t *testing.T) {
	cases := map[string][]string{
		"git status -s": {"git", "status", "-s"},
		`git --config color.status=always status`: {"git", "--config", "color.status=always", "status"},
		`a 'b c' "d \"e\" \$f" g\ h`:              {"a", "b c", `d "e" $f`, "g h"},
		"a # comment\nb":                          {"a", "b"},
		"a#b":                                     {"a#b"},
		"":                                        nil,
		`''`:                                      {""},
		"a\\\nb":                                  {"ab"},
	}
	for in, want := range cases {
		got, err := Split(in)
		if err != nil || !reflect.DeepEqual(got, want) {
			t.Errorf("%q: %q %v, want %q", in, got, err, want)
		}
	}
	for _, bad := range []string{`'x`, `"x`, `x\`} {
		if _, err := Split(bad); err == nil {
			t.Errorf("%q: accepted", bad)
		}
	}
}

func TestJoin(t *testing.T) {
	cases := []struct {
		in   []string
		want string
	}{
		{[]string{"rm", "-rf", "/important/data"}, "rm -rf /important/data"},
		{[]string{"bash", "-lc", "rm -rf /some/important/folder"}, "bash -lc 'rm -rf /some/important/folder'"},
		{[]string{"git", "push", "origin"}, "git push origin"},
		{[]string{""}, "''"},
		{[]string{"it's"}, `"it's"`},
		{[]string{"a=b"}, "'a=b'"},
		{[]string{`$HOME "x"`}, `'$HOME "x"'`},
		{[]string{`it's $x`}, `"it's \$x"`},
		{[]string{"^x"}, "'^x'"},
	}
	for _, c := range cases {
		got, err := Join(c.in)
		if err != nil || got != c.want {
			t.Errorf("%q: %s %v, want %s", c.in, got, err, c.want)
		}
	}
	if _, err := Join([]string{"a\x00b"}); err != ErrNUL {
		t.Fatal("NUL must fail")
	}
	if JoinLossy([]string{"a\x00b", "c"}) != "a\x00b c" {
		t.Fatal("lossy join")
	}
}

func FuzzQuoteRoundTrip(f *testing.F) {
	for _, s := range []string{"a b", "it's", `"$x"`, "^", "", "\n", "ü"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, w string) {
		q, err := Quote(w)
		if err != nil {
			return
		}
		got, err := Split(q)
		if err != nil {
			t.Fatalf("Split(Quote(%q)=%q): %v", w, q, err)
		}
		if len(got) != 1 || got[0] != w {
			t.Fatalf("round trip %q -> %q -> %q", w, q, got)
		}
	})
}
