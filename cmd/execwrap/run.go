package main

import (
	"fmt"
	"io"

	"github.com/netproxy/netproxy/sandbox"
)

// TODO(owner): replace with the real implementation.
func runRun(args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	fmt.Fprintln(stderr, "execwrap run: not implemented yet")
	return 2
}

// TODO(owner): replace with the real implementation.
func runDoctor(args []string, stdout, stderr io.Writer) int {
	fmt.Fprintln(stderr, "execwrap doctor: not implemented yet")
	return 2
}

// runSandboxInit is the re-executed init inside the sandbox namespaces.
func runSandboxInit(args []string) int { return sandbox.InitMain() }
