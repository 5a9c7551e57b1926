package main

import (
	"fmt"
	"io"
)

// TODO(owner): replace with the real implementation.
func runCheck(args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	fmt.Fprintln(stderr, "execwrap check: not implemented yet")
	return 2
}
