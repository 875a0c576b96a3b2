//go:build windows

package provider

import (
	"os"
	"os/signal"

	"golang.org/x/sys/windows"
)

// watchTerraform ties what the process holds to Terraform, its parent: when
// the parent process exits, the provider stops acquiring, lets the
// acquisitions in flight leave their lines, and exits, leaving the leases
// still held to expire a TTL after their last renewal (it cannot tell
// whether what Terraform started still runs); Ctrl-C (os.Interrupt) ends
// waits. A parent that is already gone, or that cannot be opened, is not
// watched. served, called when serving ends, stops and settles likewise: a
// lease still held then belongs to a run that failed or was interrupted
// (Terraform closes every lease of a run that ends normally), and expires
// a TTL after its last renewal.
func watchTerraform(leases *leaseRegistry) (served func()) {
	interrupted := make(chan os.Signal, 1)
	signal.Notify(interrupted, os.Interrupt)
	go func() {
		for range interrupted {
			leases.interrupt(errInterrupted)
		}
	}()
	parent, err := windows.OpenProcess(windows.SYNCHRONIZE, false, uint32(os.Getppid()))
	if err != nil {
		return
	}
	go func() {
		defer func() { _ = windows.CloseHandle(parent) }()
		if _, err := windows.WaitForSingleObject(parent, windows.INFINITE); err != nil {
			return
		}
		leases.stop(errTerraformGone)
		leases.settle(settleTimeout)
		os.Exit(1)
	}()
	return func() {
		leases.stop(errShutdown)
		leases.settle(settleTimeout)
	}
}

// guardProvider does nothing on Windows: the provider does not outlive
// Terraform there.
func guardProvider() {}
