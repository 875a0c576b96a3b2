//go:build unix

package provider

import (
	"errors"
	"os"
	"os/signal"
	"sync"
	"syscall"
	"time"
)

// parentPoll is how often the provider checks that Terraform is alive: a
// small fraction of the shortest TTL (1s).
const parentPoll = 100 * time.Millisecond

// workPoll is how often the provider looks at the run's processes once the
// run has ended with leases held, to see whether any still runs: the
// release comes at most this long after the last one ends.
const workPoll = 200 * time.Millisecond

// learnPoll is how often it looks at them while Terraform runs and a lease
// is held, to learn which processes are the run's before they may be
// re-parented. Only a process that also leaves Terraform's process group
// needs it (see procWork.scan); a scan costs about 2 ms of CPU with 150
// processes.
const learnPoll = 500 * time.Millisecond

// workLimit bounds how long a lease that Terraform did not close is kept
// after the run ended, however long what the run started still runs: a job
// hung for ever does not hold the lease for ever. Its holder is named in
// every other holder's error meanwhile, and spannerlock_force_release (or
// `spannerlock release --force`) frees it.
const workLimit = time.Hour

// responseGrace is how long a provider that was told to terminate, once its
// acquisitions returned, waits for Terraform to hear their errors and end
// it, before it exits.
const responseGrace = 500 * time.Millisecond

// runWork is what this process can see of the Terraform run it serves.
type runWork interface {
	// terraformAlive reports whether the Terraform that started this
	// process still runs.
	terraformAlive() bool
	// scan looks at the processes, and returns how many of those the run
	// started (Terraform's descendants, other than its providers) still run,
	// and whether this system lets the provider tell (known).
	scan() (n int, known bool)
	// detach lets this process outlive Terraform's end of serving: it stops
	// using Terraform's standard streams (Terraform waits for them to close)
	// and lets the process Terraform started exit.
	detach()
}

// lifetime is how long what the process holds lasts: it ends the run once,
// whatever ends it first (serving ends, Terraform is gone, a termination
// signal), and keeps the leases Terraform did not close while the run's
// work runs.
type lifetime struct {
	leases *leaseRegistry
	work   runWork
	// workLimit is how long at most what the run started keeps unclosed
	// leases held after the run ended (the constant workLimit; tests
	// shorten it).
	workLimit time.Duration
	once      sync.Once
	// ended is closed once the run has ended and what it held is let go.
	ended chan struct{}
	// served is closed when serving has ended.
	servedOnce sync.Once
	served     chan struct{}
}

// end ends the run with cause and returns once what it held is let go:
//
//  1. No lease is acquired any more: waits end, and each acquisition in
//     flight leaves its line (bounded by settleTimeout).
//  2. If the run closed every lease it opened, nothing is held: done. This
//     is how a run that ends normally ends.
//  3. Otherwise the run failed or was interrupted, or Terraform is gone, and
//     what the leases guard may still run: the commands of local-exec and
//     what they started are Terraform's children, not the provider's, and
//     outlive both. The leases stay held, and renewed, while any of them
//     runs, for at most workLimit, and are released as soon as none runs.
//     Where the provider cannot see the processes, it stops renewing and
//     lets them expire a TTL after their last renewal.
func (l *lifetime) end(cause error) {
	l.once.Do(func() {
		defer close(l.ended)
		l.leases.stop(cause)
		l.leases.settle(settleTimeout)
		if !l.leases.holding() {
			return
		}
		limit := time.Now().Add(l.workLimit)
		for {
			n, known := l.work.scan()
			if !known {
				// The process exits with the leases: they expire.
				return
			}
			if n == 0 || time.Now().After(limit) {
				break
			}
			if l.isServed() || !l.work.terraformAlive() {
				l.work.detach()
			}
			time.Sleep(workPoll)
		}
		l.leases.releaseHeld()
	})
	<-l.ended
}

func (l *lifetime) isServed() bool {
	select {
	case <-l.served:
		return true
	default:
		return false
	}
}

// watchTerraform ties what the process holds to the Terraform run it
// serves, and returns what to call when serving ends (which returns once
// the run's end is done):
//
//   - Terraform is gone once the process that started this one has exited,
//     whatever killed it; the provider watches it by its pid and start
//     time, so that pid reuse does not fool it, and unlike PR_SET_PDEATHSIG
//     it is not fooled by the exit of the thread that started this process.
//   - SIGINT is Ctrl-C in a terminal: it ends waits (go-plugin, which serves
//     the provider, ignores it otherwise).
//   - SIGTERM and SIGHUP end the run, and then the process, of the signal,
//     as they would by default.
//
// Each of these, and the end of serving, ends the run (lifetime.end).
// Signals that were ignored when the process started (nohup, a background
// job) stay ignored. SIGPIPE is ignored: once Terraform is gone, a log line
// written to its closed pipe must not kill the process before it lets go.
func watchTerraform(leases *leaseRegistry) (served func()) {
	signal.Ignore(syscall.SIGPIPE)
	l := &lifetime{leases: leases, work: newRunWork(), workLimit: workLimit, ended: make(chan struct{}), served: make(chan struct{})}
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
		scans := 0
		var terminating sync.Once
		for {
			select {
			case <-interrupted:
				leases.interrupt(errInterrupted)
			case sig := <-terminated:
				// Once: a signal to the group may reach this process twice
				// (guardProvider forwards it too).
				terminating.Do(func() {
					go func() {
						l.end(terminatedBy(sig))
						if l.work.terraformAlive() {
							// Terraform hears the acquisitions' errors, and
							// ends the provider itself.
							select {
							case <-l.served:
							case <-time.After(responseGrace):
							}
						}
						// Die of the signal, as without this handler.
						signal.Reset(sig)
						if self, err := os.FindProcess(os.Getpid()); err == nil {
							_ = self.Signal(sig)
						}
						os.Exit(1)
					}()
				})
			case <-tick.C:
				if !l.work.terraformAlive() {
					leases.interrupt(errTerraformGone)
					l.end(errTerraformGone)
					os.Exit(1)
				}
				// Learn the run's processes while Terraform lives: once
				// it is gone, they are re-parented.
				if scans++; scans%int(learnPoll/parentPoll) == 0 && leases.holding() {
					l.work.scan()
				}
			}
		}
	}()
	return func() {
		l.servedOnce.Do(func() { close(l.served) })
		l.end(errShutdown)
	}
}

// terminatedBy is the cause of the end of waits when the provider is told
// to terminate.
func terminatedBy(sig os.Signal) error {
	name := "a termination signal"
	switch sig {
	case syscall.SIGTERM:
		name = "SIGTERM"
	case syscall.SIGHUP:
		name = "SIGHUP"
	}
	return errors.New("the provider received " + name)
}
