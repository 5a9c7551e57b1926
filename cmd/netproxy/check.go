package main

import (
	"fmt"
	"io"
)

// TODO(owner): replace with the real implementation.
func runCheck(args []string, stdout, stderr io.Writer) int {
	fmt.Fprintln(stderr, "netproxy check: not implemented yet")
	return 2
}
