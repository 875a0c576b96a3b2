package lease_test

import (
	"sync"
	"time"
)

// spannerClock relates Spanner's clock (commit and read timestamps) to
// this process's wall clock, which the checker's own times are on (when a
// call began and returned, when a lease's Context ended).
//
// The two are not one clock, even though the emulator runs on this
// machine. The emulator dispenses every timestamp from its Clock::Now,
// which returns the last timestamp dispensed plus the wall-clock time
// elapsed since, but at least a microsecond: each call made within a
// microsecond of the last puts it a microsecond further ahead of the
// machine's clock, and so does every step back of the machine's clock (it
// never goes back itself). Neither is ever given back, and one emulator
// serves a whole test process: a long run's timestamps run ahead of the
// local clock by an amount that only grows. A run of 974 seeds, checked
// against a fixed 50 ms bound, found commit timestamps further ahead than
// that in 802 of them, with nothing else wrong. Comparing a commit
// timestamp with a local time directly is off by that amount, and in the
// direction that hides a rival granted while the holder still held (the
// rival's commit looks later than it was) or, for a semaphore, takes a
// SetPermits to be in effect before a grant that committed ahead of it.
//
// So the checker compares only what it can bound. Let D(t) be Spanner's
// clock minus the local clock at local time t. D never decreases: Spanner's
// clock gains at least the wall-clock time elapsed, a step forward of the
// wall clock included. (Local times are read from the same wall clock; a
// step within one sampled read or call would make its own bounds wrong.) A strong read that
// began at local b, returned at local e and read at timestamp s was served
// (Clock::Now) at some local τ in [b, e], so s-e <= D(τ) <= s-b. Hence,
// for every t >= e, D(t) >= s-e (lower), and for every t <= b, D(t) <= s-b
// (upper). The test samples such reads throughout (readRegisters) and at
// the end. From them, for a grant whose call ran in [started, returned]
// and committed at Spanner time at, its commit's local time τ satisfies
// τ = at - D(τ) <= at - lower(started) (τ is after started) and
// τ >= at - upper(returned): localBefore and localAfter. Each is also
// bounded by the call itself, with no sample at all. A violation is
// reported only when these bounds make it certain; the bounds are as
// tight as the sampled reads are short.
type spannerClock struct {
	mu      sync.Mutex
	samples []clockSample
}

// clockSample is a strong read: it began at b and returned at e, local
// times, and read at Spanner's timestamp s.
type clockSample struct{ b, e, s time.Time }

func (c *spannerClock) sample(b, e, s time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.samples = append(c.samples, clockSample{b: b.Round(0), e: e.Round(0), s: s})
}

// lower is the largest bound below D(t) the samples give: from those that
// returned by t.
func (c *spannerClock) lower(t time.Time) (d time.Duration, ok bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, x := range c.samples {
		if !x.e.After(t) && (!ok || x.s.Sub(x.e) > d) {
			d, ok = x.s.Sub(x.e), true
		}
	}
	return d, ok
}

// upper is the smallest bound above D(t) the samples give: from those that
// began at t or later.
func (c *spannerClock) upper(t time.Time) (d time.Duration, ok bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, x := range c.samples {
		if !x.b.Before(t) && (!ok || x.s.Sub(x.b) < d) {
			d, ok = x.s.Sub(x.b), true
		}
	}
	return d, ok
}

// localBefore is a local time by which g's acquisition had committed.
func (c *spannerClock) localBefore(g *grant) time.Time {
	by := g.returned.Round(0)
	if lo, ok := c.lower(g.started); ok {
		if t := g.l.AcquiredAt().Add(-lo); t.Before(by) {
			by = t
		}
	}
	return by
}

// localAfter is a local time after which g's acquisition committed.
func (c *spannerClock) localAfter(g *grant) time.Time {
	after := g.started.Round(0)
	if hi, ok := c.upper(g.returned); ok {
		if t := g.l.AcquiredAt().Add(-hi); t.After(after) {
			after = t
		}
	}
	return after
}
