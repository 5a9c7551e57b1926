package attribution

import (
	"encoding/base64"
	"testing"
)

func TestClientsAuthenticate(t *testing.T) {
	var c Clients
	if c.Enabled() || c.Required() {
		t.Fatal("the zero Clients is enabled")
	}
	if _, ok := c.Authenticate("ci", "x"); ok {
		t.Fatal("authenticated with no clients")
	}
	c.Set(false, []ClientSpec{{Name: "ci", Secret: "s3cret"}, {Name: "dev", Secret: "other"}}, BudgetLimits{})
	if !c.Enabled() || c.Required() || c.Len() != 2 {
		t.Fatalf("enabled %t required %t len %d", c.Enabled(), c.Required(), c.Len())
	}
	cl, ok := c.Authenticate("ci", "s3cret")
	if !ok || cl.Name != "ci" || cl.SessionID != "client:ci" || cl.Budget != nil {
		t.Fatalf("ci: %+v %t", cl, ok)
	}
	for _, bad := range [][2]string{{"ci", "s3cre"}, {"ci", "s3cret "}, {"ci", ""}, {"dev", "s3cret"}, {"nobody", "s3cret"}, {"", ""}, {"CI", "s3cret"}} {
		if _, ok := c.Authenticate(bad[0], bad[1]); ok {
			t.Errorf("authenticated %q with %q", bad[0], bad[1])
		}
	}
	// required alone enables it (every unframed connection must authenticate).
	var r Clients
	r.Set(true, nil, BudgetLimits{})
	if !r.Enabled() || !r.Required() {
		t.Fatal("required without clients is not enabled")
	}
}

// A reload keeps a client's budget (its usage over its lifetime); new
// limits carry the usage on; a removed client no longer authenticates.
func TestClientsReloadKeepsBudget(t *testing.T) {
	var c Clients
	lim := BudgetLimits{Requests: 3}
	c.Set(false, []ClientSpec{{Name: "ci", Secret: "a"}, {Name: "dev", Secret: "b"}}, lim)
	ci, _ := c.Authenticate("ci", "a")
	if ci.Budget == nil {
		t.Fatal("no budget under [budgets]")
	}
	ci.Budget.Admit("h1.test")
	ci.Budget.Admit("h2.test")
	c.Set(false, []ClientSpec{{Name: "ci", Secret: "rotated"}}, lim)
	if _, ok := c.Authenticate("ci", "a"); ok {
		t.Fatal("the old secret still works after a reload")
	}
	ci2, ok := c.Authenticate("ci", "rotated")
	if !ok || ci2.Budget != ci.Budget {
		t.Fatal("the reload did not keep ci's budget")
	}
	if _, ok := c.Authenticate("dev", "b"); ok {
		t.Fatal("a removed client still authenticates")
	}
	c.Set(false, []ClientSpec{{Name: "ci", Secret: "rotated"}}, BudgetLimits{Requests: 10, Hosts: 5})
	ci3, _ := c.Authenticate("ci", "rotated")
	if u := ci3.Budget.Usage(); u.Requests != 2 || u.Hosts != 2 || ci3.Budget.Limits().Requests != 10 {
		t.Fatalf("usage under new limits: %+v %+v", u, ci3.Budget.Limits())
	}
	if ci3.Budget.Admit("h1.test") != "" || ci3.Budget.Usage().Hosts != 2 {
		t.Fatal("a host seen before the reload counted again")
	}
}

func TestParseBasic(t *testing.T) {
	enc := func(s string) string { return base64.StdEncoding.EncodeToString([]byte(s)) }
	for _, tc := range []struct {
		in, name, secret string
		ok               bool
	}{
		{"Basic " + enc("ci:s3cret"), "ci", "s3cret", true},
		{"basic  " + enc("ci:a:b") + " ", "ci", "a:b", true},
		{"BASIC " + enc("ci:"), "ci", "", true},
		{"Basic " + enc("nocolon"), "", "", false},
		{"Bearer " + enc("ci:s3cret"), "", "", false},
		{"Basic !!!", "", "", false},
		{"Basic", "", "", false},
		{"", "", "", false},
	} {
		n, s, ok := ParseBasic(tc.in)
		if n != tc.name || s != tc.secret || ok != tc.ok {
			t.Errorf("ParseBasic(%q) = %q %q %t", tc.in, n, s, ok)
		}
	}
}
