//go:build !unix

package main

import (
	"os"
	"syscall"
)

var forwardedSignals = []os.Signal{os.Interrupt, syscall.SIGTERM}

func signalName(sig os.Signal) string { return sig.String() }
