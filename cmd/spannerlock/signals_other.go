//go:build !unix

package main

import (
	"os"
	"syscall"
)

var forwardedSignals = []os.Signal{os.Interrupt, syscall.SIGTERM}

func signalName(sig os.Signal) string { return sig.String() }

// dieOf does nothing here: the caller exits with 128+N.
func dieOf(os.Signal, bool) {}
