package main

import (
	"fmt"
	"math"
	"math/rand/v2"
	"time"

	"github.com/spannerlock/terraform-provider-spannerlock/lease"
)

// jitter is a uniform random duration in [0, d), so that a release or a
// kill falls at a random phase of the holder's renewals and the waiter's polls.
func jitter(d time.Duration) time.Duration {
	if d <= 0 {
		return 0
	}
	return time.Duration(rand.Int64N(int64(d)))
}

// A release falls steadyWait + U[0, steadyJitter) into the wait: by then a
// waiter's backoff (25 ms doubling to the 1 s poll interval, +25% jitter)
// has reached its steady poll interval, so the release lands at a random
// phase of it rather than among the quick first polls.
const (
	steadyWait   = 2500 * time.Millisecond
	steadyJitter = 1250 * time.Millisecond
)

// handoff measures the time from a holder's Release returning to a waiter
// holding the lease: in one process, across processes (at the default poll
// interval and at 250 ms), and for spindle, which has no release.
func (b *bench) handoff() error {
	inproc, err := b.inProcessHandoff()
	if err != nil {
		return err
	}
	cross, err := b.crossProcessHandoff(lease.DefaultPollInterval)
	if err != nil {
		return err
	}
	fast, err := b.crossProcessHandoff(250 * time.Millisecond)
	if err != nil {
		return err
	}
	const spLease = 3 * time.Second
	sp, err := b.spindleHandoff(spLease)
	if err != nil {
		b.results.note("spindle handoff: %v", err)
	}
	b.results.row(resultRow{
		measure: fmt.Sprintf("handoff after Release to a waiter in another process, default poll interval %s (median / max)", lease.DefaultPollInterval),
		target:  "250 ms",
		sl:      fmt.Sprintf("%s / %s", ms(median(cross)), ms(maxOf(cross))), slv: median(cross),
		sp:  fmt.Sprintf("no release; the waiter gets it after expiry: %.2f s / %.2f s (lease %s)", median(sp), maxOf(sp), spLease),
		spv: median(sp),
		met: met(maxOf(cross) <= 0.25),
	})
	b.results.row(resultRow{
		measure: "handoff after Release to a waiter in another process, waiter with WithPollInterval(250ms) (median / max)",
		target:  "250 ms",
		sl:      fmt.Sprintf("%s / %s", ms(median(fast)), ms(maxOf(fast))), slv: median(fast), spv: math.NaN(),
		met: met(maxOf(fast) <= 0.25),
	})
	b.results.row(resultRow{
		measure: "handoff after Release to a waiter in the same process (median / max)",
		target:  "at once",
		sl:      fmt.Sprintf("%s / %s", ms(median(inproc)), ms(maxOf(inproc))), slv: median(inproc), spv: math.NaN(),
		met: met(maxOf(inproc) <= 0.25),
	})
	b.results.detail("Handoff, from the holder's Release returning (after its commit) to the waiter's Acquire returning; the release falls at a random moment 2.5 s + U[0, 1.25 s) into the wait, once the waiter polls at its steady interval. "+
		"Other process, poll %s (%d trials): %s. Other process, poll 250 ms: %s. Same process (two Clients on one spanner.Client): %s. "+
		"spindle (lease %s, Unlock stops its loop; the row stays until it expires): %s.",
		lease.DefaultPollInterval, len(cross), list(cross, ms), list(fast, ms), list(inproc, ms), spLease, list(sp, func(x float64) string { return fmt.Sprintf("%.2f s", x) }))
	return nil
}

func (b *bench) inProcessHandoff() ([]float64, error) {
	db, err := b.newDB("spannerlock")
	if err != nil {
		return nil, err
	}
	sc, _, err := b.newSpanner(db)
	if err != nil {
		return nil, err
	}
	defer sc.Close()
	holder, err := lease.NewClient(sc, slTable, lease.WithTTL(b.steadyTTL), lease.WithLogger(quietLogger()))
	if err != nil {
		return nil, err
	}
	defer func() { _ = holder.Close() }()
	waiter, err := lease.NewClient(sc, slTable, lease.WithTTL(b.steadyTTL), lease.WithLogger(quietLogger()))
	if err != nil {
		return nil, err
	}
	defer func() { _ = waiter.Close() }()
	var out []float64
	for i := range b.nHandoff {
		name := fmt.Sprintf("inproc-%d", i)
		l, err := holder.TryAcquire(b.ctx, name)
		if err != nil {
			return nil, err
		}
		got := make(chan time.Time, 1)
		errc := make(chan error, 1)
		go func() {
			w, err := waiter.Acquire(b.ctx, name)
			if err != nil {
				errc <- err
				return
			}
			got <- time.Now()
			_ = w.Release(b.ctx)
		}()
		time.Sleep(steadyWait + jitter(steadyJitter))
		if err := l.Release(b.ctx); err != nil {
			return nil, err
		}
		released := time.Now()
		select {
		case t := <-got:
			out = append(out, t.Sub(released).Seconds())
		case err := <-errc:
			return nil, err
		case <-time.After(time.Minute):
			return nil, fmt.Errorf("in-process waiter did not acquire %s", name)
		}
	}
	return out, nil
}

func (b *bench) crossProcessHandoff(poll time.Duration) ([]float64, error) {
	db, err := b.newDB("spannerlock")
	if err != nil {
		return nil, err
	}
	h, err := b.startChild("sl-holder", childOpts{lib: "spannerlock", db: db, table: slTable, ttl: b.steadyTTL})
	if err != nil {
		return nil, err
	}
	defer h.stop()
	w, err := b.startChild("sl-waiter", childOpts{lib: "spannerlock", db: db, table: slTable, ttl: b.steadyTTL, poll: poll})
	if err != nil {
		return nil, err
	}
	defer w.stop()
	var out []float64
	for i := range b.nHandoff {
		name := fmt.Sprintf("handoff-%d", i)
		if err := h.send("acquire %s", name); err != nil {
			return nil, err
		}
		if _, err := h.next("acquired", time.Minute); err != nil {
			return nil, err
		}
		if err := w.send("acquire %s", name); err != nil {
			return nil, err
		}
		if _, err := w.next("acquiring", time.Minute); err != nil {
			return nil, err
		}
		time.Sleep(steadyWait + jitter(steadyJitter))
		if err := h.send("release %s", name); err != nil {
			return nil, err
		}
		rel, err := h.next("released", time.Minute)
		if err != nil {
			return nil, err
		}
		acq, err := w.next("acquired", time.Minute)
		if err != nil {
			return nil, err
		}
		out = append(out, nanosToDur(acq.T-rel.T).Seconds())
		if err := w.send("release %s", name); err != nil {
			return nil, err
		}
		if _, err := w.next("released", time.Minute); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// spindleHandoff: the holder calls Unlock (which stops its loop; spindle
// has no release) and a lock.Lock waiter in another process takes over.
func (b *bench) spindleHandoff(leaseDur time.Duration) ([]float64, error) {
	db, err := b.newDB("spindle")
	if err != nil {
		return nil, err
	}
	h, err := b.startChild("sp-holder", childOpts{lib: "spindle", db: db, table: spTable, ttl: leaseDur})
	if err != nil {
		return nil, err
	}
	defer h.stop()
	w, err := b.startChild("sp-waiter", childOpts{lib: "spindle", db: db, table: spTable, ttl: leaseDur})
	if err != nil {
		return nil, err
	}
	defer w.stop()
	var out []float64
	for i := range b.nSpHandoff {
		name := fmt.Sprintf("handoff-%d", i)
		if err := h.send("run %s", name); err != nil {
			return nil, err
		}
		if _, err := h.next("leading", 5*leaseDur+time.Minute); err != nil {
			return nil, err
		}
		if err := w.send("lock %s", name); err != nil {
			return nil, err
		}
		if _, err := w.next("acquiring", time.Minute); err != nil {
			return nil, err
		}
		time.Sleep(time.Second + jitter(leaseDur))
		if err := h.send("unlock %s", name); err != nil {
			return nil, err
		}
		rel, err := h.next("released", time.Minute)
		if err != nil {
			return nil, err
		}
		acq, err := w.next("acquired", 10*leaseDur+time.Minute)
		if err != nil {
			return nil, err
		}
		out = append(out, nanosToDur(acq.T-rel.T).Seconds())
		if err := w.send("unlock %s", name); err != nil {
			return nil, err
		}
		if _, err := w.next("released", time.Minute); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// failover measures, as a multiple of the TTL, the time from SIGKILL of the
// holder process to a waiter in another process holding the lease.
func (b *bench) failover() error {
	for _, ttl := range []time.Duration{3 * time.Second, 10 * time.Second} {
		n := b.nFail3
		if ttl > 3*time.Second {
			n = b.nFail10
		}
		if n == 0 {
			continue
		}
		sl, err := b.slFailover(ttl, n)
		if err != nil {
			return err
		}
		sp, err := b.spFailover(ttl, n)
		if err != nil {
			b.results.note("spindle failover at %s: %v", ttl, err)
		}
		b.results.failoverTrials("spannerlock", ttl, sl)
		b.results.failoverTrials("spindle", ttl, sp)
		b.results.row(resultRow{
			measure: fmt.Sprintf("failover after SIGKILL of the holder, TTL %s, %d trial%s (median / max, × TTL)", ttl, len(sl), plural(len(sl))),
			target:  "≤ 1.25×",
			sl:      fmt.Sprintf("%.2f× / %.2f×", median(sl), maxOf(sl)), slv: median(sl),
			sp: fmt.Sprintf("%.2f× / %.2f×", median(sp), maxOf(sp)), spv: median(sp),
			met: met(maxOf(sl) <= 1.25),
		})
		f := func(x float64) string { return fmt.Sprintf("%.2f×", x) }
		b.results.detail("Failover at TTL %s (spindle: lease duration %s), from SIGKILL of the holder process (at a random moment 1 s + U[0, TTL/3) after the waiter started waiting; for spindle 1 s + U[0, lease), after its first heartbeat) "+
			"to the waiter in another process holding the lease: spannerlock %s; spindle (waiter in lock.Lock) %s.", ttl, ttl, list(sl, f), list(sp, f))
	}
	return nil
}

func (b *bench) slFailover(ttl time.Duration, n int) ([]float64, error) {
	db, err := b.newDB("spannerlock")
	if err != nil {
		return nil, err
	}
	w, err := b.startChild("sl-waiter", childOpts{lib: "spannerlock", db: db, table: slTable, ttl: ttl})
	if err != nil {
		return nil, err
	}
	defer w.stop()
	var out []float64
	for i := range n {
		name := fmt.Sprintf("failover-%d", i)
		h, err := b.startChild("sl-victim", childOpts{lib: "spannerlock", db: db, table: slTable, ttl: ttl})
		if err != nil {
			return nil, err
		}
		if err := h.send("acquire %s", name); err != nil {
			return nil, err
		}
		if _, err := h.next("acquired", time.Minute); err != nil {
			h.kill()
			return nil, err
		}
		if err := w.send("acquire %s", name); err != nil {
			return nil, err
		}
		if _, err := w.next("acquiring", time.Minute); err != nil {
			return nil, err
		}
		time.Sleep(time.Second + jitter(ttl/3))
		killed := h.kill()
		acq, err := w.next("acquired", 3*ttl+time.Minute)
		<-h.done
		if err != nil {
			return nil, err
		}
		out = append(out, float64(acq.T-killed.UnixNano())/float64(ttl))
		if err := w.send("release %s", name); err != nil {
			return nil, err
		}
		if _, err := w.next("released", time.Minute); err != nil {
			return nil, err
		}
	}
	return out, nil
}

func (b *bench) spFailover(ttl time.Duration, n int) ([]float64, error) {
	db, err := b.newDB("spindle")
	if err != nil {
		return nil, err
	}
	w, err := b.startChild("sp-waiter", childOpts{lib: "spindle", db: db, table: spTable, ttl: ttl})
	if err != nil {
		return nil, err
	}
	defer w.stop()
	var out []float64
	for i := range n {
		name := fmt.Sprintf("failover-%d", i)
		h, err := b.startChild("sp-victim", childOpts{lib: "spindle", db: db, table: spTable, ttl: ttl})
		if err != nil {
			return nil, err
		}
		if err := h.send("run %s", name); err != nil {
			return nil, err
		}
		// Wait for its first heartbeat round, so it holds as it would in steady state.
		if _, err := h.next("leading", 5*ttl+time.Minute); err != nil {
			h.kill()
			return nil, err
		}
		if err := w.send("lock %s", name); err != nil {
			return nil, err
		}
		if _, err := w.next("acquiring", time.Minute); err != nil {
			return nil, err
		}
		time.Sleep(time.Second + jitter(ttl))
		killed := h.kill()
		acq, err := w.next("acquired", 10*ttl+time.Minute)
		<-h.done
		if err != nil {
			return nil, err
		}
		out = append(out, float64(acq.T-killed.UnixNano())/float64(ttl))
		if err := w.send("unlock %s", name); err != nil {
			return nil, err
		}
		if _, err := w.next("released", time.Minute); err != nil {
			return nil, err
		}
	}
	return out, nil
}
