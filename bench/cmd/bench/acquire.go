package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log"
	"log/slog"
	"math"
	"strings"
	"time"

	spindle "github.com/flowerinthenight/spindle/v2"
	"github.com/flowerinthenight/spindle/v2/lock"

	"github.com/spannerlock/terraform-provider-spannerlock/lease"
)

// renewTag is the transaction tag of spannerlock's renewals; acquisition
// and release figures leave out RPCs carrying it, in case a renewal tick of
// the measuring Client falls inside the measurement.
const renewTag = "spannerlock-renew"

func withoutRenewals(s rpcStats) float64 {
	n := s.total()
	for k, v := range s.Tags {
		if strings.HasSuffix(k, " "+renewTag) {
			n -= v
		}
	}
	return float64(n)
}

// acquisitions measures RPCs per uncontended acquisition and per release,
// in this process, for both libraries, and for spannerlock on both dialects.
func (b *bench) acquisitions() error {
	if err := b.spannerlockAcquisitions(); err != nil {
		return err
	}
	return b.spindleAcquisitions()
}

// sample is one measured call: its RPCs (renewals left out), their methods,
// how many were aborted, and how long the call took.
type sample struct {
	rpcs    float64
	methods string
	aborts  int64
	latency time.Duration
}

// measure runs f and samples what counter saw meanwhile.
func measure(counter *rpcCounter, f func() error) (sample, error) {
	before := counter.snapshot()
	t := time.Now()
	err := f()
	lat := time.Since(t)
	d := counter.snapshot().sub(before)
	return sample{rpcs: withoutRenewals(d), methods: d.methods(), aborts: d.aborts(), latency: lat}, err
}

// samples sums up a series of samples.
type samples struct {
	rpcs, latency []float64
	aborts        int64
	methods       map[string]int
}

func summarize(ss []sample) samples {
	out := samples{methods: map[string]int{}}
	for _, s := range ss {
		out.rpcs = append(out.rpcs, s.rpcs)
		out.latency = append(out.latency, s.latency.Seconds())
		out.aborts += s.aborts
		out.methods[s.methods]++
	}
	return out
}

// acquisitionCounts are spannerlock's acquisitions and releases on one
// database.
type acquisitionCounts struct {
	// first is the first acquisition of the process on the database.
	first sample
	// fresh: names never used; released: names this Client released;
	// firstContact: names another Client released, by a Client that has
	// not seen them; dead: names whose holder process was SIGKILLed.
	fresh, released, releases, firstContact samples
	dead                                    []float64
}

func (a acquisitionCounts) aborts() int64 {
	return a.fresh.aborts + a.released.aborts + a.releases.aborts + a.firstContact.aborts
}

func (b *bench) spannerlockAcquisitions() error {
	g, err := b.measureAcquisitions(lease.GoogleSQL)
	if err != nil {
		return err
	}
	b.results.row(resultRow{
		measure: "RPCs per uncontended acquisition (name never used)", target: "≤ 2",
		sl: num(mean(g.fresh.rpcs)), slv: mean(g.fresh.rpcs), met: met(maxOf(g.fresh.rpcs) <= 2), spv: math.NaN(),
	})
	b.results.row(resultRow{
		measure: "RPCs per acquisition of a released name", target: "≤ 2",
		sl: num(mean(g.released.rpcs)), slv: mean(g.released.rpcs), met: met(maxOf(g.released.rpcs) <= 2), sp: "no release", spv: math.NaN(),
	})
	b.results.row(resultRow{
		measure: "RPCs per acquisition of an existing free name, first by this Client", target: "≤ 2",
		sl: num(mean(g.firstContact.rpcs)) + " (once per name per Client)", slv: mean(g.firstContact.rpcs), met: met(maxOf(g.firstContact.rpcs) <= 2), spv: math.NaN(),
	})
	b.results.row(resultRow{
		measure: "RPCs per acquisition after the holder died (lease expired)", target: "≤ 2",
		sl: num(mean(g.dead)), slv: mean(g.dead), met: met(maxOf(g.dead) <= 2), spv: math.NaN(),
	})
	b.results.row(resultRow{
		measure: "RPCs per release", target: "—",
		sl: num(mean(g.releases.rpcs)), slv: mean(g.releases.rpcs), sp: "no release (Unlock only stops the loop; the row lives until it expires)", spv: math.NaN(),
	})
	b.results.row(resultRow{
		measure: "uncontended acquisition latency (median)", target: "—",
		sl: ms(median(g.fresh.latency)), slv: median(g.fresh.latency), spv: math.NaN(),
	})
	b.describeAcquisitions("spannerlock acquisitions", g)

	p, err := b.measureAcquisitions(lease.PostgreSQL)
	if err != nil {
		b.results.note("spannerlock acquisitions on a PostgreSQL-dialect database: %v", err)
		return nil
	}
	b.describeAcquisitions("spannerlock acquisitions on a PostgreSQL-dialect database", p)
	b.results.compareCounts("RPCs per uncontended acquisition (name never used)", g.fresh.rpcs, p.fresh.rpcs)
	b.results.compareCounts("RPCs per acquisition of a released name", g.released.rpcs, p.released.rpcs)
	b.results.compareCounts("RPCs per acquisition of an existing free name, first by this Client", g.firstContact.rpcs, p.firstContact.rpcs)
	b.results.compareCounts("RPCs per acquisition after the holder died (lease expired)", g.dead, p.dead)
	b.results.compareCounts("RPCs per release", g.releases.rpcs, p.releases.rpcs)
	b.results.compareCounts("RPCs of a process's first acquisition on a database (reads the dialect, inserts the Client's session row)",
		[]float64{g.first.rpcs}, []float64{p.first.rpcs})
	return nil
}

func (b *bench) describeAcquisitions(what string, a acquisitionCounts) {
	b.results.detail("%s (%d each, TTL %s): new name %s RPCs (methods: %s; max %s); released name %s (%s); after the holder died %s (%v); "+
		"release %s (%s); a second Client's first acquisition of each released name %s (%s); the process's first acquisition on the database, "+
		"which also reads its dialect (once per process and database) and inserts the Client's session row in the same commit: %s RPCs (%s). Aborted RPCs: %d. "+
		"Latency of TryAcquire on a new name: median %s, max %s; of Release: median %s.",
		what, b.nAcq, b.steadyTTL, num(mean(a.fresh.rpcs)), keys(a.fresh.methods), num(maxOf(a.fresh.rpcs)), num(mean(a.released.rpcs)), keys(a.released.methods),
		num(mean(a.dead)), list(a.dead, num), num(mean(a.releases.rpcs)), keys(a.releases.methods), num(mean(a.firstContact.rpcs)), keys(a.firstContact.methods),
		num(a.first.rpcs), a.first.methods, a.aborts(), ms(median(a.fresh.latency)), ms(maxOf(a.fresh.latency)), ms(median(a.releases.latency)))
}

// measureAcquisitions measures spannerlock's acquisitions and releases on a
// new database of dialect d.
func (b *bench) measureAcquisitions(d lease.Dialect) (acquisitionCounts, error) {
	var out acquisitionCounts
	db, err := b.newDBIn("spannerlock", d)
	if err != nil {
		return out, err
	}
	sc, counter, err := b.newSpanner(db)
	if err != nil {
		return out, err
	}
	defer sc.Close()
	c, err := lease.NewClient(sc, slTable, lease.WithTTL(b.steadyTTL), lease.WithLogger(quietLogger()))
	if err != nil {
		return out, err
	}
	defer func() { _ = c.Close() }()
	ctx := b.ctx

	// The process's first acquisition on the database also reads its
	// dialect, and the Client's first creates its session row, in the same
	// commit.
	var firstLease *lease.Lease
	if out.first, err = measure(counter, func() (err error) {
		firstLease, err = c.TryAcquire(ctx, "first")
		return err
	}); err != nil {
		return out, err
	}
	if err := firstLease.Release(ctx); err != nil {
		return out, err
	}
	var fresh, released, releases []sample
	held := make([]*lease.Lease, b.nAcq)
	for i := range b.nAcq {
		s, err := measure(counter, func() (err error) {
			held[i], err = c.TryAcquire(ctx, fmt.Sprintf("acq-%03d", i))
			return err
		})
		if err != nil {
			return out, err
		}
		fresh = append(fresh, s)
	}
	for i := range b.nAcq {
		s, err := measure(counter, func() error { return held[i].Release(ctx) })
		if err != nil {
			return out, err
		}
		releases = append(releases, s)
	}
	// acquireReleased acquires and releases again each name released above.
	acquireReleased := func(by *lease.Client) ([]sample, error) {
		var out []sample
		for i := range b.nAcq {
			var l *lease.Lease
			s, err := measure(counter, func() (err error) {
				l, err = by.TryAcquire(ctx, fmt.Sprintf("acq-%03d", i))
				return err
			})
			if err != nil {
				return nil, err
			}
			out = append(out, s)
			if err := l.Release(ctx); err != nil {
				return nil, err
			}
		}
		return out, nil
	}
	if released, err = acquireReleased(c); err != nil {
		return out, err
	}

	// A name whose holder died: a child acquires it and is SIGKILLed; we
	// acquire once its TTL has passed.
	if out.dead, err = b.spannerlockAfterDeath(db, c, counter); err != nil {
		return out, err
	}

	// A Client that has never seen a name starts by inserting it, which is
	// the whole acquisition when the name is new; when the name exists (a
	// restarted process taking a lock others released) it costs one
	// statement more, once per name per Client. A second Client on the same
	// spanner.Client acquires the names the first released.
	newcomer, err := lease.NewClient(sc, slTable, lease.WithTTL(b.steadyTTL), lease.WithLogger(quietLogger()))
	if err != nil {
		return out, err
	}
	defer func() { _ = newcomer.Close() }()
	firstContact, err := acquireReleased(newcomer)
	if err != nil {
		return out, err
	}
	out.fresh, out.released, out.releases, out.firstContact = summarize(fresh), summarize(released), summarize(releases), summarize(firstContact)
	return out, nil
}

func keys(m map[string]int) string {
	var parts []string
	for k, n := range m {
		parts = append(parts, fmt.Sprintf("%s ×%d", k, n))
	}
	return strings.Join(parts, "; ")
}

// spannerlockAfterDeath returns the RPCs of acquisitions of names whose
// holder process was SIGKILLed, by a Client that found the name held first,
// as a waiter does.
func (b *bench) spannerlockAfterDeath(db string, c *lease.Client, counter *rpcCounter) ([]float64, error) {
	const ttl = time.Second
	var out []float64
	for i := range 3 {
		name := fmt.Sprintf("dead-%d", i)
		h, err := b.startChild("sl-dying", childOpts{lib: "spannerlock", db: db, table: slTable, ttl: ttl})
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
		if _, err := c.TryAcquire(b.ctx, name); !errors.Is(err, lease.ErrNotAcquired) {
			h.kill()
			return nil, fmt.Errorf("TryAcquire of %s held by a child: %v, want ErrNotAcquired", name, err)
		}
		h.kill()
		<-h.done
		time.Sleep(ttl + 200*time.Millisecond)
		before := counter.snapshot()
		l, err := c.TryAcquire(b.ctx, name)
		d := counter.snapshot().sub(before)
		if err != nil {
			return nil, err
		}
		out = append(out, withoutRenewals(d))
		_ = l.Release(b.ctx)
	}
	return out, nil
}

func (b *bench) spindleAcquisitions() error {
	db, err := b.newDB("spindle")
	if err != nil {
		return err
	}
	sc, counter, err := b.newSpanner(db)
	if err != nil {
		return err
	}
	defer sc.Close()
	other, _, err := b.newSpanner(db)
	if err != nil {
		return err
	}
	defer other.Close()

	// One round of spindle's loop: Run starts it at once; Iterations turns 1
	// when it ends. got tells whether that round took the lock.
	firstRound := func(name string, dur time.Duration, useCounted bool) (rpcs float64, methods string, aborts int64, lat time.Duration, got bool, stop func(), err error) {
		gotCh := make(chan struct{}, 1)
		logger := log.New(&hookWriter{w: io.Discard, onGot: func() { gotCh <- struct{}{} }}, "", 0)
		client := other
		if useCounted {
			client = sc
		}
		l := spindle.New(client, spTable, name, spindle.WithDuration(dur.Milliseconds()), spindle.WithLogger(logger))
		ctx, cancel := context.WithCancel(b.ctx)
		before := counter.snapshot()
		t := time.Now()
		if err := l.Run(ctx); err != nil {
			cancel()
			return 0, "", 0, 0, false, nil, err
		}
		deadline := time.Now().Add(time.Minute)
		for l.Iterations() < 1 {
			if time.Now().After(deadline) {
				cancel()
				return 0, "", 0, 0, false, nil, errors.New("spindle: no round within a minute")
			}
			time.Sleep(time.Millisecond)
		}
		lat = time.Since(t)
		d := counter.snapshot().sub(before)
		select {
		case <-gotCh:
			got = true
		default:
		}
		return float64(d.total()), d.methods(), d.aborts(), lat, got, cancel, nil
	}

	var fresh, lat []float64
	methods := map[string]int{}
	var aborts int64
	for i := range b.nAcq {
		r, m, a, l, got, stop, err := firstRound(fmt.Sprintf("acq-%03d", i), b.steadyTTL, true)
		if err != nil {
			return err
		}
		stop()
		if !got {
			return fmt.Errorf("spindle: first round on a new name did not take the lock")
		}
		fresh, lat = append(fresh, r), append(lat, l.Seconds())
		methods[m]++
		aborts += a
	}

	// Takeover of a lock whose holder stopped (spindle cannot release): A
	// takes it and stops before any heartbeat; once A's lease (1 s, the
	// minimum) plus spindle's 1 s allowance has passed, B's first round takes it.
	var takeover []float64
	takeMethods := map[string]int{}
	for i := range 3 {
		name := fmt.Sprintf("dead-%d", i)
		_, _, _, _, got, stopA, err := firstRound(name, time.Second, false)
		if err != nil {
			return err
		}
		stopA()
		if !got {
			return fmt.Errorf("spindle: holder A did not take %s", name)
		}
		time.Sleep(2500 * time.Millisecond)
		r, m, a, _, got, stopB, err := firstRound(name, time.Second, true)
		if err != nil {
			return err
		}
		stopB()
		if !got {
			return fmt.Errorf("spindle: B's first round did not take the expired %s", name)
		}
		takeover = append(takeover, r)
		takeMethods[m]++
		aborts += a
	}

	// lock.Lock on a free lock: it returns only after its loop's second
	// round, one lease duration after the first.
	lk := lock.NewSpindleLock(&lock.SpindleLockOptions{Client: sc, Table: spTable, Name: "lockapi", Duration: b.steadyTTL.Milliseconds(),
		Logger: log.New(io.Discard, "", 0)})
	before := counter.snapshot()
	t := time.Now()
	if err := lk.Lock(b.ctx); err != nil {
		return err
	}
	lockLat := time.Since(t)
	lockRPCs := counter.snapshot().sub(before)
	_ = lk.Unlock()

	b.results.patch("RPCs per uncontended acquisition (name never used)", num(mean(fresh)), mean(fresh))
	b.results.patch("RPCs per acquisition after the holder died (lease expired)", num(mean(takeover)), mean(takeover))
	b.results.patch("uncontended acquisition latency (median)",
		fmt.Sprintf("%s (first round of Run); lock.Lock() returns after %.1f s", ms(median(lat)), lockLat.Seconds()), median(lat))
	b.results.detail("spindle acquisitions (%d, lease %s): the first round of Run on a new name costs %s RPCs (methods: %s); "+
		"taking over a lock whose holder stopped costs %s RPCs (%s; lease 1 s, the minimum); aborted RPCs %d. "+
		"lock.Lock() on a free lock returned after %s (its second round) having spent %d RPCs (%s), polling HasLock every 500 ms meanwhile.",
		b.nAcq, b.steadyTTL, num(mean(fresh)), keys(methods), list(takeover, num), keys(takeMethods), aborts,
		lockLat.Round(10*time.Millisecond), lockRPCs.total(), lockRPCs.methods())
	return nil
}

// patch sets the spindle figure of the row with the given measure.
func (r *results) patch(measure, sp string, spv float64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for i := range r.rows {
		if r.rows[i].measure == measure {
			r.rows[i].sp, r.rows[i].spv = sp, spv
		}
	}
}

// quietLogger drops the lease package's logs (renewal retries after
// emulator aborts would otherwise flood the output).
func quietLogger() *slog.Logger {
	return slog.New(slog.NewTextHandler(io.Discard, nil))
}
