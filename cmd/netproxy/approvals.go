package main

import (
	"fmt"
	"io"
)

// TODO(owner): replace with the real implementation.
func runApprovals(args []string, stdout, stderr io.Writer) int {
	fmt.Fprintln(stderr, "netproxy approvals: not implemented yet")
	return 2
}
