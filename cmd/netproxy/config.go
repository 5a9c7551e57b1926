package main

import (
	"fmt"
	"io"

	"github.com/netproxy/netproxy/hostpolicy"
	"github.com/netproxy/netproxy/internal/config"
)

// runConfig implements `netproxy config validate FILE`: every error with its
// key path (exit 2), or OK (exit 0) after one warning line per allow entry
// that allows far more than a site (SPEC §3.2).
func runConfig(args []string, stdout, stderr io.Writer) int {
	if len(args) != 2 || args[0] != "validate" {
		fmt.Fprintln(stderr, "usage: netproxy config validate FILE")
		return exitUsage
	}
	path := args[1]
	errs := config.Validate(path)
	var warnings []string
	if len(errs) == 0 {
		// The file is sound; compile the policy too (domain files, rules of
		// patterns) exactly as serve would.
		cfg, err := config.Load(path)
		if err == nil {
			var o hostpolicy.Options
			if o, err = config.PolicyOptions(cfg); err == nil {
				_, err = hostpolicy.Build(o)
				warnings = hostpolicy.Warnings(o)
			}
			if err != nil {
				errs = flatten(err)
			}
		} else {
			errs = flatten(err)
		}
	}
	if len(errs) > 0 {
		for _, e := range errs {
			fmt.Fprintln(stderr, e)
		}
		fmt.Fprintf(stderr, "%s: %d error(s)\n", path, len(errs))
		return exitUsage
	}
	for _, w := range warnings {
		fmt.Fprintf(stderr, "warning: %s\n", w)
	}
	fmt.Fprintf(stdout, "%s: OK\n", path)
	return 0
}
