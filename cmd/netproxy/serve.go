package main

import (
	"fmt"
	"io"
)

// TODO(owner): replace with the real implementation.
func runServe(args []string, stdout, stderr io.Writer) int {
	fmt.Fprintln(stderr, "netproxy serve: not implemented yet")
	return 2
}
