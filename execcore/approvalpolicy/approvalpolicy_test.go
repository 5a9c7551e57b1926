package approvalpolicy

import (
	"strings"
	"testing"
)

func TestParse(t *testing.T) {
	ok := map[string]Policy{
		"never":                               {Kind: Never},
		"on-request":                          {Kind: OnRequest},
		"untrusted":                           {Kind: Untrusted},
		"unless-trusted":                      {Kind: Untrusted},
		" on-request ":                        {Kind: OnRequest},
		"granular":                            {Kind: Granular},
		"granular:":                           {Kind: Granular},
		"granular:rules":                      {Kind: Granular, Rules: true},
		"granular:sandbox_approval":           {Kind: Granular, SandboxApproval: true},
		"granular:sandbox_approval,rules":     {Kind: Granular, SandboxApproval: true, Rules: true},
		"granular: rules , sandbox_approval ": {Kind: Granular, SandboxApproval: true, Rules: true},
		"granular:skill_approval,rules":       {Kind: Granular, Rules: true},
		"granular:mcp_elicitations,request_permissions": {Kind: Granular},
	}
	for in, want := range ok {
		got, err := Parse(in)
		if err != nil || got != want {
			t.Errorf("Parse(%q) = %+v, %v; want %+v", in, got, err, want)
		}
	}
	bad := map[string]string{
		"":               `"" is not never`,
		"always":         `"always" is not never, on-request, untrusted or granular[:sandbox_approval,rules]`,
		"Never":          `"Never" is not`,
		"on-failure":     `"on-failure" was removed; use on-request or untrusted`,
		"granular:bogus": `granular flag "bogus" is unknown; the flags are sandbox_approval and rules`,
		"never:rules":    `"never:rules" is not`,
		"granularrules":  `"granularrules" is not`,
	}
	for in, want := range bad {
		if _, err := Parse(in); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("Parse(%q) error = %v, want it to contain %q", in, err, want)
		}
	}
}

func TestStringRoundTrips(t *testing.T) {
	for _, p := range []Policy{
		{Kind: Never}, {Kind: OnRequest}, {Kind: Untrusted}, {Kind: Granular},
		{Kind: Granular, Rules: true}, {Kind: Granular, SandboxApproval: true}, {Kind: Granular, SandboxApproval: true, Rules: true},
	} {
		got, err := Parse(p.String())
		if err != nil || got != p {
			t.Errorf("Parse(%q) = %+v, %v; want %+v", p.String(), got, err, p)
		}
	}
	if d := (Policy{Kind: Granular, Rules: true}).Debug(); !strings.Contains(d, "sandbox_approval: false, rules: true") {
		t.Errorf("Debug = %s", d)
	}
	if d := (Policy{Kind: Untrusted}).Debug(); d != "UnlessTrusted" {
		t.Errorf("Debug = %s", d)
	}
}

func TestNarrow(t *testing.T) {
	p := func(s string) Policy {
		t.Helper()
		v, err := Parse(s)
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	cases := []struct{ base, req, want string }{
		{"on-request", "never", "never"},
		{"on-request", "untrusted", "untrusted"},
		{"on-request", "granular:rules", "granular:rules"},
		{"never", "on-request", "never"},
		{"untrusted", "on-request", "untrusted"},
		{"untrusted", "granular", "untrusted"},
		{"granular:sandbox_approval,rules", "granular:rules", "granular:rules"},
		{"granular:rules", "granular:sandbox_approval,rules", "granular:rules"},
		{"granular:rules", "on-request", "granular:rules"},
	}
	for _, c := range cases {
		if got := Narrow(p(c.base), p(c.req)).String(); got != c.want {
			t.Errorf("Narrow(%s, %s) = %s, want %s", c.base, c.req, got, c.want)
		}
	}
	// An unknown kind can only narrow: it ranks with never.
	if got := Narrow(p("on-request"), Policy{Kind: "bogus"}); got.Kind != "bogus" {
		t.Errorf("unknown kind widened: %+v", got)
	}
}

// FuzzParse: registration strings reach Parse from the control API, so it
// must never panic, and whatever it accepts must re-parse to itself.
func FuzzParse(f *testing.F) {
	for _, s := range []string{"", "never", "on-request", "untrusted", "granular", "granular:sandbox_approval,rules", "granular:,,", "on-failure", "granular:\x00"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		p, err := Parse(s)
		if err != nil {
			return
		}
		again, err := Parse(p.String())
		if err != nil || again != p {
			t.Fatalf("Parse(%q) = %+v, but its String %q re-parses to %+v, %v", s, p, p.String(), again, err)
		}
	})
}
