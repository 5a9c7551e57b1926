package config

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/netproxy/netproxy/attribution"
)

func TestBudgets(t *testing.T) {
	c, err := Parse([]byte("[budgets]\nbytes_out = \"100MiB\"\nbytes_in = 2000000\nrequests = 7\nhosts = 2\n"), "b.toml")
	if err != nil {
		t.Fatal(err)
	}
	if got := c.BudgetLimits(); got != (attribution.BudgetLimits{BytesOut: 100 << 20, BytesIn: 2000000, Requests: 7, Hosts: 2}) {
		t.Fatalf("%+v", got)
	}
	if d := Default().BudgetLimits(); !d.IsZero() {
		t.Fatalf("default budgets %+v", d)
	}
	// Every bad value is reported with file:line and its key path.
	p := filepath.Join(t.TempDir(), "bad.toml")
	os.WriteFile(p, []byte("[budgets]\nbytes_out = \"lots\"\nbytes_in = -5\nrequests = -1\nhosts = 1\nspeed = 3\n"), 0o644)
	var msgs []string
	for _, e := range Validate(p) {
		msgs = append(msgs, e.Error())
	}
	all := strings.Join(msgs, "\n")
	for _, want := range []string{"bad.toml:2: budgets.bytes_out", "bad.toml:3: budgets.bytes_in", "bad.toml:4: budgets.requests", "budgets.speed"} {
		if !strings.Contains(all, want) {
			t.Errorf("no %q in:\n%s", want, all)
		}
	}
}
