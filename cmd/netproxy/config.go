package main

import (
	"fmt"
	"io"
)

// TODO(owner): replace with the real implementation.
func runConfig(args []string, stdout, stderr io.Writer) int {
	fmt.Fprintln(stderr, "netproxy config: not implemented yet")
	return 2
}
