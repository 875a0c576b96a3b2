//go:build unix

package main

import (
	"os"
	"os/signal"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// forwardedSignals are passed on to CMD's process group. SIGINT from a
// terminal reaches spannerlock alone, since CMD runs in a group of its own,
// so CMD sees it once.
var forwardedSignals = []os.Signal{
	syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP, syscall.SIGQUIT, syscall.SIGUSR1, syscall.SIGUSR2,
}

// signalName is SIGTERM for SIGTERM.
func signalName(sig os.Signal) string {
	if s, ok := sig.(syscall.Signal); ok {
		if name := unix.SignalName(s); name != "" {
			return name
		}
	}
	return sig.String()
}

// dieOf ends spannerlock by sig's default action, sent to its whole
// process group if group is set; should that not happen at once, it
// returns, and the caller exits with 128+N.
func dieOf(sig os.Signal, group bool) {
	s, ok := sig.(syscall.Signal)
	if !ok {
		return
	}
	signal.Reset(sig)
	pid := os.Getpid()
	if group {
		pid = 0
	}
	if syscall.Kill(pid, s) == nil {
		time.Sleep(time.Second)
	}
}
