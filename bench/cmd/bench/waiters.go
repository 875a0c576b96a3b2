package main

import (
	"fmt"
	"math"
	"time"

	"github.com/spannerlock/terraform-provider-spannerlock/lease"
)

// waiters measures the RPCs per second of a process blocked acquiring a
// lease that another process holds, over the whole wait and after its
// first 5 s (steady state).
func (b *bench) waiters() error {
	sl, err := b.waiterRate("spannerlock", lease.GoogleSQL, 0)
	if err != nil {
		return err
	}
	fast, err := b.waiterRate("spannerlock", lease.GoogleSQL, 250*time.Millisecond)
	if err != nil {
		return err
	}
	sp, err := b.waiterRate("spindle", lease.GoogleSQL, 0)
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

	pg, err := b.waiterRate("spannerlock", lease.PostgreSQL, 0)
	if err != nil {
		b.results.note("spannerlock waiter on a PostgreSQL-dialect database: %v", err)
		return nil
	}
	b.results.detail("Blocked waiter on a PostgreSQL-dialect database (as above, poll interval 1s): %s in the first 5 s, %s over the rest.",
		pg.firstMethods, pg.restMethods)
	b.results.dialectRow(dialectRow{
		measure:   fmt.Sprintf("RPC/s of a blocked waiter, steady state (s 5–%d of the wait; RPCs in the window)", int(b.waitFor.Seconds())),
		googleSQL: fmt.Sprintf("%s (%d)", num(sl.steady), sl.rest.total()), postgreSQL: fmt.Sprintf("%s (%d)", num(pg.steady), pg.rest.total()),
		same: onePerPoll(sl, pg),
	})
	b.results.dialectRow(dialectRow{
		measure:   fmt.Sprintf("RPC/s of a blocked waiter, whole first %s of the wait", b.waitFor),
		googleSQL: num(sl.whole), postgreSQL: num(pg.whole), same: "—",
	})
	return nil
}

// onePerPoll says whether both steady-state waiters made one read per poll
// besides their sessions' renewals. A poll is one single-use read
// (ExecuteStreamingSql) and the waiter polls every 1 to 1.25 poll intervals
// (the interval, jittered upwards by up to a quarter); a waiter in line
// also renews its session, which keeps its place, with one transaction of
// a read and a Commit. So the reads that are not a renewal's are between
// window/1.25 and window polls, give or take the one a window boundary
// cuts; two reads per poll, or another method, would fall outside.
func onePerPoll(ws ...waitRate) string {
	for _, w := range ws {
		polls := w.restWall.Seconds() / lease.DefaultPollInterval.Seconds()
		reads, commits := w.rest.Calls["ExecuteStreamingSql"], w.rest.Calls["Commit"]
		n := float64(reads - commits)
		if n < polls/1.25-1 || n > polls+1 || w.rest.total() != reads+commits {
			return fmt.Sprintf("**no**: %d RPCs (%s) in %.1f s is not one read per poll and the renewals", w.rest.total(), w.rest.methods(), w.restWall.Seconds())
		}
	}
	return "yes: one read per poll and the session's renewals on both (the counts differ only by the poll interval's jitter)"
}

type waitRate struct {
	whole, steady             float64
	firstMethods, restMethods string
	// rest is what the waiter sent in its steady state, over restWall.
	rest     rpcStats
	restWall time.Duration
}

// waiterRate measures a waiter of lib on a database of dialect d; poll is
// spannerlock's poll interval (0: the default).
func (b *bench) waiterRate(lib string, d lease.Dialect, poll time.Duration) (waitRate, error) {
	var r waitRate
	db, err := b.newDBIn(lib, d)
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
	r.rest, r.restWall = rest, nanosToDur(s1.Wall-s5.Wall)
	r.whole = float64(s1.RPC.sub(s0.RPC).total()) / nanosToDur(s1.Wall-s0.Wall).Seconds()
	r.steady = float64(rest.total()) / nanosToDur(s1.Wall-s5.Wall).Seconds()
	r.firstMethods = fmt.Sprintf("%d RPCs (%s; aborted %d)", first.total(), first.methods(), first.aborts())
	r.restMethods = fmt.Sprintf("%d RPCs in %.1f s (%s; aborted %d)", rest.total(), nanosToDur(s1.Wall-s5.Wall).Seconds(), rest.methods(), rest.aborts())
	return r, nil
}
