package config

import (
	"fmt"

	"github.com/netproxy/netproxy/attribution"
)

// Budgets is [budgets] (SPEC §3.12, docs/policy.md "Budgets"): each
// execution's egress limits over its lifetime; 0 or absent is unlimited.
// The byte limits take a size string ("100MiB", "1.5GB") or a whole
// number of bytes.
type Budgets struct {
	BytesOut any   `toml:"bytes_out"`
	BytesIn  any   `toml:"bytes_in"`
	Requests int64 `toml:"requests"`
	Hosts    int64 `toml:"hosts"`
}

// budgetSize parses one byte limit as written in TOML.
func budgetSize(v any) (int64, error) {
	switch x := v.(type) {
	case nil:
		return 0, nil
	case int64:
		if x < 0 {
			return 0, fmt.Errorf("%d: must not be negative (0 or absent is unlimited)", x)
		}
		return x, nil
	case string:
		return attribution.ParseSize(x)
	}
	return 0, fmt.Errorf("want a size string such as \"100MiB\" or a number of bytes, got %v (%T)", v, v)
}

// BudgetLimits returns [budgets] (validated at load: a bad value is 0).
func (c *Config) BudgetLimits() attribution.BudgetLimits {
	out, _ := budgetSize(c.Budgets.BytesOut)
	in, _ := budgetSize(c.Budgets.BytesIn)
	return attribution.BudgetLimits{
		BytesOut: attribution.Size(out), BytesIn: attribution.Size(in),
		Requests: c.Budgets.Requests, Hosts: c.Budgets.Hosts,
	}
}

func validateBudgets(c *Config, file string) []error {
	var errs []error
	bad := func(key, format string, a ...any) {
		errs = append(errs, &Error{File: file, Key: key, Msg: fmt.Sprintf(format, a...)})
	}
	for key, v := range map[string]any{"budgets.bytes_out": c.Budgets.BytesOut, "budgets.bytes_in": c.Budgets.BytesIn} {
		if _, err := budgetSize(v); err != nil {
			bad(key, "%v", err)
		}
	}
	if c.Budgets.Requests < 0 {
		bad("budgets.requests", "must not be negative (0 or absent is unlimited)")
	}
	if c.Budgets.Hosts < 0 {
		bad("budgets.hosts", "must not be negative (0 or absent is unlimited)")
	}
	return errs
}
