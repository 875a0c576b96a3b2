package main

import (
	"fmt"
	"math"
	"time"
)

// waiters measures the RPCs per second of a process blocked acquiring a
// lease that another process holds, over the whole wait and after its
// first 5 s (steady state).
func (b *bench) waiters() error {
	sl, err := b.waiterRate("spannerlock", 0)
	if err != nil {
		return err
	}
	fast, err := b.waiterRate("spannerlock", 250*time.Millisecond)
	if err != nil {
		return err
	}
	sp, err := b.waiterRate("spindle", 0)
	if err != nil {
		b.results.note("spindle waiter: %v", err)
	}
	b.results.row(resultRow{
		measure: fmt.Sprintf("RPC/s of a blocked waiter, steady state (s 5–%d of the wait)", int(b.waitFor.Seconds())),
		target:  "≤ 1",
		sl:      num(sl.steady), slv: sl.steady,
		sp: num(sp.steady), spv: sp.steady,
		met: met(sl.steady <= 1),
	})
	b.results.row(resultRow{
		measure: fmt.Sprintf("RPC/s of a blocked waiter, whole first %s of the wait", b.waitFor),
		target:  "≤ 1",
		sl:      num(sl.whole), slv: sl.whole,
		sp: num(sp.whole), spv: sp.whole,
		met: met(sl.whole <= 1),
	})
	b.results.row(resultRow{
		measure: "RPC/s of a blocked waiter with WithPollInterval(250ms), steady state / whole wait",
		target:  "≤ 1",
		sl:      fmt.Sprintf("%s / %s", num(fast.steady), num(fast.whole)), slv: fast.steady, spv: math.NaN(),
		met: met(fast.steady <= 1 && fast.whole <= 1),
	})
	b.results.detail("Blocked waiter (holder in another process, TTL/lease %s; spannerlock poll interval default %s; spindle waiter in lock.Lock): "+
		"spannerlock %s in the first 5 s, %s over the rest; with poll 250 ms %s, then %s; spindle %s in the first 5 s, %s over the rest.",
		b.steadyTTL, "1s", sl.firstMethods, sl.restMethods, fast.firstMethods, fast.restMethods, sp.firstMethods, sp.restMethods)
	return nil
}

type waitRate struct {
	whole, steady             float64
	firstMethods, restMethods string
}

// waiterRate measures a waiter of lib; poll is spannerlock's poll interval
// (0: the default).
func (b *bench) waiterRate(lib string, poll time.Duration) (waitRate, error) {
	var r waitRate
	db, err := b.newDB(lib)
	if err != nil {
		return r, err
	}
	table, hold, wait := slTable, "acquire", "acquire"
	if lib == "spindle" {
		table, hold, wait = spTable, "run", "lock"
	}
	h, err := b.startChild(lib+"-holder", childOpts{lib: lib, db: db, table: table, ttl: b.steadyTTL})
	if err != nil {
		return r, err
	}
	defer h.stop()
	if err := h.send("%s contended", hold); err != nil {
		return r, err
	}
	if _, err := h.next("acquired", time.Minute); err != nil {
		return r, err
	}
	w, err := b.startChild(lib+"-waiter", childOpts{lib: lib, db: db, table: table, ttl: b.steadyTTL, poll: poll})
	if err != nil {
		return r, err
	}
	defer w.stop()
	s0, err := w.stats(false)
	if err != nil {
		return r, err
	}
	if err := w.send("%s contended", wait); err != nil {
		return r, err
	}
	time.Sleep(5 * time.Second)
	s5, err := w.stats(false)
	if err != nil {
		return r, err
	}
	time.Sleep(b.waitFor - 5*time.Second)
	s1, err := w.stats(false)
	if err != nil {
		return r, err
	}
	// The waiter must still be waiting, or the figures mean nothing.
	for len(w.events) > 0 {
		if e := <-w.events; e.Ev == "acquired" || e.Ev == "error" {
			return r, fmt.Errorf("%s waiter stopped waiting: %+v", lib, e)
		}
	}
	first, rest := s5.RPC.sub(s0.RPC), s1.RPC.sub(s5.RPC)
	r.whole = float64(s1.RPC.sub(s0.RPC).total()) / nanosToDur(s1.Wall-s0.Wall).Seconds()
	r.steady = float64(rest.total()) / nanosToDur(s1.Wall-s5.Wall).Seconds()
	r.firstMethods = fmt.Sprintf("%d RPCs (%s; aborted %d)", first.total(), first.methods(), first.aborts())
	r.restMethods = fmt.Sprintf("%d RPCs in %.1f s (%s; aborted %d)", rest.total(), nanosToDur(s1.Wall-s5.Wall).Seconds(), rest.methods(), rest.aborts())
	return r, nil
}
