package server

import (
	"os"
	"syscall"
)

var errAddrInUse = syscall.EADDRINUSE

func lookupEnv(name string) string { return os.Getenv(name) }
