package main

import (
	"context"
	"os"
	"os/signal"
	"sync"
	"sync/atomic"
	"syscall"
)

// signals receives, from start-up on, every signal spannerlock forwards to
// CMD, so none of them kills spannerlock before it has released its lease.
// While CMD runs they go to its process group; otherwise the stopping ones
// end what spannerlock is waiting for and the rest are dropped.
type signals struct {
	ch chan os.Signal
	// interrupted is set once SIGINT has arrived.
	interrupted atomic.Bool
	// jobs receives the job-control signals (SIGTSTP, SIGCONT) while CMD
	// runs (see jobControl); otherwise SIGTSTP stops spannerlock.
	jobs *jobControl
}

func notifySignals() *signals {
	s := &signals{ch: make(chan os.Signal, 16)}
	raw := make(chan os.Signal, 16)
	signal.Notify(raw, notIgnored(forwardedSignals)...)
	go func() {
		for sig := range raw {
			if sig == os.Interrupt {
				s.interrupted.Store(true)
			}
			s.ch <- sig
		}
	}()
	s.jobs = notifyJobControl()
	return s
}

// notIgnored returns sigs without those spannerlock started with ignored,
// as nohup leaves SIGHUP and a non-interactive shell leaves SIGINT for a
// background job: caught, they would reach CMD, and a handler set for them
// would end their being ignored in CMD, which inherits only an ignored
// signal. Go's runtime keeps only SIGHUP and SIGINT as it found them, so
// those are the two that stay ignored.
func notIgnored(sigs []os.Signal) []os.Signal {
	var out []os.Signal
	for _, sig := range sigs {
		if !signal.Ignored(sig) {
			out = append(out, sig)
		}
	}
	return out
}

// stopping reports whether sig asks spannerlock to stop: end a wait, or
// release a lease held without a command.
func stopping(sig os.Signal) bool {
	switch sig {
	case syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP, syscall.SIGQUIT:
		return true
	}
	return false
}

// signalStatus is the shells' exit status for death by sig: 128+N.
func signalStatus(sig os.Signal) int {
	if s, ok := sig.(syscall.Signal); ok {
		return 128 + int(s)
	}
	return exitFailure
}

// watch calls onStop once, on the first stopping signal, until the
// returned function is called; that function stops watching and returns
// the stopping signal that arrived, or nil, however often it is called.
// Only one watch may run at a
// time, and none while CMD runs, which takes the signals itself.
func (s *signals) watch(onStop func()) (end func() os.Signal) {
	done := make(chan struct{})
	var (
		wg  sync.WaitGroup
		got os.Signal
	)
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			select {
			case <-done:
				return
			case sig := <-s.ch:
				if stopping(sig) {
					got = sig
					onStop()
					return
				}
			}
		}
	}()
	var once sync.Once
	return func() os.Signal {
		once.Do(func() {
			close(done)
			wg.Wait()
		})
		return got
	}
}

// interruptible returns a context that the first stopping signal cancels,
// and a function that ends the watch and returns that signal, or nil; it
// may be called more than once.
func (s *signals) interruptible(parent context.Context) (context.Context, func() os.Signal) {
	ctx, cancel := context.WithCancel(parent)
	end := s.watch(cancel)
	return ctx, func() os.Signal {
		sig := end()
		cancel()
		return sig
	}
}
