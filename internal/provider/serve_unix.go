//go:build unix

package provider

import (
	"os"
	"os/signal"
	"syscall"
	"time"
)

// parentPoll is how often the provider checks that Terraform is alive: a
// small fraction of the shortest TTL (1s).
const parentPoll = 100 * time.Millisecond

// watchTerraform ties what the process holds to Terraform, its parent:
//
//   - Terraform is gone once this process has another parent (the kernel
//     gives orphans to init or a subreaper). Polling getppid sees that
//     whatever killed Terraform, and unlike PR_SET_PDEATHSIG it is not fooled
//     by the exit of the thread that started this process.
//   - SIGINT is Ctrl-C in a terminal: it ends waits (go-plugin, which serves
//     the provider, ignores it otherwise).
//   - SIGTERM and SIGHUP terminate, as they would by default, but only after
//     releasing what is held.
//
// Signals that were ignored when the process started (nohup, a background
// job) stay ignored. SIGPIPE is ignored: once Terraform is gone, a log line
// written to its closed pipe must not kill the process before it releases.
func watchTerraform(leases *leaseRegistry) {
	signal.Ignore(syscall.SIGPIPE)
	parent := os.Getppid()
	var interrupts, terminations []os.Signal
	if !signal.Ignored(syscall.SIGINT) {
		interrupts = append(interrupts, syscall.SIGINT)
	}
	for _, sig := range []os.Signal{syscall.SIGTERM, syscall.SIGHUP} {
		if !signal.Ignored(sig) {
			terminations = append(terminations, sig)
		}
	}
	interrupted := make(chan os.Signal, 1)
	if len(interrupts) > 0 {
		signal.Notify(interrupted, interrupts...)
	}
	terminated := make(chan os.Signal, 1)
	if len(terminations) > 0 {
		signal.Notify(terminated, terminations...)
	}
	go func() {
		tick := time.NewTicker(parentPoll)
		defer tick.Stop()
		for {
			select {
			case <-interrupted:
				leases.interrupt(errInterrupted)
			case sig := <-terminated:
				leases.releaseAll()
				// Die of the signal, as without this handler.
				signal.Reset(sig)
				if self, err := os.FindProcess(os.Getpid()); err == nil {
					_ = self.Signal(sig)
				}
				os.Exit(1)
			case <-tick.C:
				if os.Getppid() != parent {
					leases.interrupt(errTerraformGone)
					leases.releaseAll()
					os.Exit(1)
				}
			}
		}
	}()
}
