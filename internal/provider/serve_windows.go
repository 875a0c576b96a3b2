//go:build windows

package provider

import (
	"os"
	"os/signal"

	"golang.org/x/sys/windows"
)

// watchTerraform ties what the process holds to Terraform, its parent: when
// the parent process exits, the provider releases every lease and exits;
// Ctrl-C (os.Interrupt) ends waits. A parent that is already gone, or that
// cannot be opened, is not watched.
func watchTerraform(leases *leaseRegistry) {
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
		leases.interrupt(errTerraformGone)
		leases.releaseAll()
		os.Exit(1)
	}()
}
