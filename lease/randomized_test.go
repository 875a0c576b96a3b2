package lease_test

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"cloud.google.com/go/spanner"
	"github.com/anishathalye/porcupine"
	"google.golang.org/grpc/codes"

	"github.com/spannerlock/terraform-provider-spannerlock/lease"
)

// The randomized test runs, per seed, several Clients (each a process: its
// own spanner.Client, most behind the fault injector, armed with random
// plans), several callers each making random operations for a few seconds,
// and an operator changing a semaphore's limit. A checker (randomChecker)
// records every grant and asserts, whenever one is recorded and again at the
// end, what the enumeration asserts of a single operation:
//
//   - no two conflicting leases of a name (or worker ID) overlap: a grant's
//     AcquiredAt (Spanner's commit) is after the end of every conflicting
//     earlier lease as its holder knew it, unless a ForceRelease of the name
//     ran in between;
//   - tokens of a name grow in grant order; worker IDs used by a holder
//     are used at later times than by the ID's previous holders;
//   - a semaphore never grants beyond its limit;
//   - guarded writes of a register keyed by name never go back in token,
//     and the writes and reads of the registers are linearizable (porcupine);
//   - no call returns later than randBound after its context's deadline;
//   - a RunOnce slot that reported success never runs again;
//   - after Close, none of the Client's leases is live;
//   - every grant's AcquiredAt is a commit timestamp of its own call;
//   - after quiescence, once every name was taken and let go again, no
//     row is live and no waiter is in any line.
//
// Times on Spanner's clock (commit timestamps) are compared with times on
// this process's clock only through the bounds spannerClock measures.
//
// By default (go test, make test) seeds 1, 2, 3, ... run, randWorkers at
// a time, until randBudget has passed; the last ones then finish, each
// within the bounds below, so the test ends within about 3 minutes. Every
// seed is logged with the line that replays it. The environment runs
// more or other seeds:
//
//	SPANNERLOCK_RANDOM_SEED=<n>       seed n only
//	SPANNERLOCK_RANDOM_SEEDS=<k>      k seeds, whatever the time
//	SPANNERLOCK_RANDOM_FIRST=<n>      start at seed n (default 1)
//	SPANNERLOCK_RANDOM_BUDGET=<dur>   start seeds for dur (default 60s)
//	SPANNERLOCK_RANDOM_WORKERS=<w>    seeds run at once (default 3)
//
// A seed fixes every random choice (operations, timeouts, fault plans); the
// interleaving is the machine's, so a replay reruns the same operations
// under the same faults, not the same schedule.

const (
	// randBudget is how long the default run starts new seeds: a seed
	// takes 10-40 s on a loaded 2-core machine, and its own bounds (the
	// callers' watchdog, quiescence, porcupine) end it within about 2 min.
	randBudget  = 60 * time.Second
	randWorkers = 3
	// randDuration is how long the callers make operations.
	randDuration = 4 * time.Second
	// randBound is how long after its context's deadline a call may return:
	// a transaction rolled back under its own second, a worker ID given
	// back under the call timeout, on a loaded machine.
	randBound = 2*enumTTL + time.Second
)

// guardedTag tags the test's guarded writes.
const guardedTag = "random-guarded-write"

var (
	randLocks = []string{"x", "y", "z"}
	randSem   = "sem"
	randPool  = "ids"
	randJob   = "job"
)

// randPlan is which seeds a run makes: from first on, count of them, or
// (count 0) as many as start within budget; workers at a time.
type randPlan struct {
	first, count uint64
	budget       time.Duration
	workers      int
}

func randSeeds(t *testing.T) randPlan {
	p := randPlan{first: 1, budget: randBudget, workers: randWorkers}
	env := func(name string, parse func(string) error) {
		if s := os.Getenv(name); s != "" {
			fatalIf(t, parse(s), "%s=%s", name, s)
		}
	}
	env("SPANNERLOCK_RANDOM_FIRST", func(s string) (err error) { p.first, err = strconv.ParseUint(s, 10, 64); return })
	env("SPANNERLOCK_RANDOM_SEEDS", func(s string) (err error) { p.count, err = strconv.ParseUint(s, 10, 64); return })
	env("SPANNERLOCK_RANDOM_BUDGET", func(s string) (err error) { p.budget, err = time.ParseDuration(s); return })
	env("SPANNERLOCK_RANDOM_WORKERS", func(s string) (err error) { p.workers, err = strconv.Atoi(s); return })
	env("SPANNERLOCK_RANDOM_SEED", func(s string) (err error) { p.first, err = strconv.ParseUint(s, 10, 64); p.count = 1; return })
	p.workers = max(p.workers, 1)
	return p
}

func TestRandomizedOperationsUnderFaults(t *testing.T) {
	if testing.Short() {
		t.Skip("the randomized test takes minutes")
	}
	t.Parallel()
	plan := randSeeds(t)
	start := time.Now()
	var (
		mu   sync.Mutex
		next = plan.first
		ran  []uint64
	)
	// take returns the next seed to run, or false once the plan is done.
	take := func() (uint64, bool) {
		mu.Lock()
		defer mu.Unlock()
		if plan.count > 0 && next >= plan.first+plan.count || plan.count == 0 && time.Since(start) >= plan.budget {
			return 0, false
		}
		next++
		ran = append(ran, next-1)
		return next - 1, true
	}
	var wg sync.WaitGroup
	for range plan.workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				seed, ok := take()
				if !ok {
					return
				}
				d := testDialects[seed%uint64(len(testDialects))]
				t.Run(fmt.Sprintf("seed=%d", seed), func(t *testing.T) {
					t.Run(string(d), func(t *testing.T) {
						timedTests <- struct{}{}
						defer func() { <-timedTests }()
						t.Logf("seed %d, %s (replay: SPANNERLOCK_RANDOM_SEED=%d)", seed, d, seed)
						runRandomized(t, seed)
					})
				})
			}
		}()
	}
	wg.Wait()
	slices.Sort(ran)
	t.Logf("%d seeds in %s: %v", len(ran), time.Since(start).Round(time.Second), ran)
}

func registerDDL(t *testing.T) string {
	return inDialect(t,
		`CREATE TABLE registers (name STRING(MAX) NOT NULL, token INT64 NOT NULL) PRIMARY KEY (name)`,
		`CREATE TABLE registers (name varchar NOT NULL, token bigint NOT NULL, PRIMARY KEY (name))`)
}

// randProcess is one process: a spanner.Client, maybe behind faults, and
// its current lease.Client, replaced after a Close.
type randProcess struct {
	id  int
	sc  *spanner.Client
	f   *faults // nil when unfaulted
	mu  sync.Mutex
	c   *lease.Client
	gen int
}

func (p *randProcess) client() *lease.Client {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.c
}

type randRun struct {
	t     *testing.T
	ctx   context.Context
	db    string
	model *lockModel
	admin *spanner.Client
	ck    *randChecker
	procs []*randProcess
	slots []time.Time
}

func (r *randRun) newLeaseClient(p *randProcess) *lease.Client {
	p.gen++
	return newClientWith(r.t, p.sc, lease.WithTTL(enumTTL), lease.WithHolderID(fmt.Sprintf("p%d.%d", p.id, p.gen)),
		lease.WithPollInterval(100*time.Millisecond))
}

func runRandomized(t *testing.T, seed uint64) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	rng := rand.New(rand.NewPCG(seed, 0x5eed))
	model := newLockModel()
	db := newDatabase(t, registerDDL(t))
	r := &randRun{t: t, ctx: ctx, db: db, model: model, ck: newRandChecker(t)}
	r.admin = spannerClient(t, db, (&faults{model: model}).options()...)
	admin := newClientWith(t, r.admin, lease.WithTTL(enumTTL), lease.WithHolderID("admin"))
	r.slots = []time.Time{runOnceSlot, runOnceSlot.Add(time.Hour)}

	procs := 2 + rng.IntN(2)
	faulted := 0
	for i := range procs {
		p := &randProcess{id: i}
		if rng.IntN(3) > 0 || (i == procs-1 && faulted == 0) {
			p.f = &faults{model: model}
			faulted++
			p.sc = spannerClient(t, db, p.f.options()...)
		} else {
			p.sc = spannerClient(t, db, (&faults{model: model}).options()...)
		}
		p.c = r.newLeaseClient(p)
		r.procs = append(r.procs, p)
	}
	callers := 2 + rng.IntN(2)
	faultRate := 0.02 + 0.04*rng.Float64()
	t.Logf("%d processes (%d faulted, fault rate %.3f), %d callers each", procs, faulted, faultRate, callers)

	// The semaphore is declared before the run (the sweep takes a permit).
	for n := 1 + rng.Int64N(3); !r.setPermits(admin, n); {
		fatalIf(t, r.ctx.Err(), "declaring the semaphore")
	}
	runEnd := time.Now().Add(randDuration)
	var wg sync.WaitGroup
	for _, p := range r.procs {
		if p.f != nil {
			wg.Add(1)
			go func(rng *rand.Rand) { defer wg.Done(); r.armFaults(p, rng, faultRate, runEnd) }(rand.New(rand.NewPCG(seed, rng.Uint64())))
		}
		for j := range callers {
			wg.Add(1)
			name := fmt.Sprintf("p%d/c%d", p.id, j)
			go func(rng *rand.Rand) { defer wg.Done(); r.caller(name, p, rng, runEnd) }(rand.New(rand.NewPCG(seed, rng.Uint64())))
		}
	}
	wg.Add(1)
	go func(rng *rand.Rand) {
		defer wg.Done()
		for time.Now().Before(runEnd) {
			time.Sleep(time.Duration(300+rng.IntN(900)) * time.Millisecond)
			r.setPermits(admin, 1+rng.Int64N(3))
		}
	}(rand.New(rand.NewPCG(seed, rng.Uint64())))
	wg.Add(1)
	go func() { defer wg.Done(); r.readRegisters(runEnd) }()

	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(randDuration + 6*randBound + lease.MaxCallTimeout):
		r.ck.mu.Lock()
		stuck := slices.Collect(mapValues(r.ck.inFlight))
		r.ck.mu.Unlock()
		t.Fatalf("callers still running long after the run ended: %v", stuck)
	}
	r.quiesce(admin)
	r.sampleClock() // for the bounds on the last grants' commits
	r.ck.final()
	for _, p := range r.procs {
		if p.f != nil {
			// The test's own guarded transactions are rolled back by the
			// Spanner client, under its own 30 s bound.
			if u := slices.DeleteFunc(p.f.unboundedRPCs(), func(s string) bool { return strings.Contains(s, guardedTag) }); len(u) > 0 {
				t.Errorf("process %d: RPCs without a deadline within %s: %v", p.id, maxBound, u)
			}
		}
	}
	for _, w := range model.waitsBy("spannerlock-renew") {
		t.Errorf("a renewal waited for a lock: %s", w)
	}
	now := time.Now()
	lo, _ := r.ck.clock.lower(now)
	t.Logf("%d grants, %d register operations; Spanner's clock at least %s ahead of the local one at the end", r.ck.grantCount(), r.ck.registerOps(), lo)
}

func mapValues[K comparable, V any](m map[K]V) func(func(V) bool) {
	return func(yield func(V) bool) {
		for _, v := range m {
			if !yield(v) {
				return
			}
		}
	}
}

// faultable selects the RPCs the random plans fault: all but the Rollbacks
// of the test's own guarded writes, which the Spanner client sends under
// its own 30 s bound, not the caller's, and which would hold up the test.
func faultable(r rpc) bool {
	return !strings.HasSuffix(r.method, "/Rollback") || strings.HasPrefix(r.tag, "spannerlock-")
}

// armFaults arms the process's injector with a random plan over its next
// RPCs (renewals included) now and then, until the run ends; then it
// disarms it.
func (r *randRun) armFaults(p *randProcess, rng *rand.Rand, rate float64, runEnd time.Time) {
	defer p.f.disarm()
	for time.Now().Before(runEnd) {
		plan := map[int]fault{}
		for i := range 40 {
			if rng.Float64() < rate {
				plan[i] = allFaults[rng.IntN(len(allFaults))]
			}
		}
		p.f.arm(faultable, plan)
		r.t.Logf("p%d: faults armed: %s", p.id, caseSpec{plan: plan})
		time.Sleep(time.Duration(500+rng.IntN(1000)) * time.Millisecond)
	}
}

func (r *randRun) setPermits(admin *lease.Client, n int64) bool {
	ctx, cancel := context.WithTimeout(r.ctx, 3*enumTTL)
	defer cancel()
	op := r.ck.startSetPermits(n)
	err := admin.SetPermits(ctx, randSem, n)
	r.ck.endSetPermits(op, err == nil)
	r.t.Logf("admin: SetPermits(%d): %v", n, err)
	return err == nil
}

// readRegisters reads every register now and then, for the linearizability
// check.
func (r *randRun) readRegisters(runEnd time.Time) {
	for time.Now().Before(runEnd) {
		for _, name := range randLocks {
			ctx, cancel := context.WithTimeout(r.ctx, time.Second)
			call, began := r.ck.now(), time.Now()
			ro := r.admin.Single()
			row, err := ro.ReadRow(ctx, "registers", spanner.Key{name}, []string{"token"})
			returned := time.Now()
			var token int64
			switch {
			case spanner.ErrCode(err) == codes.NotFound:
				err = nil
			case err == nil:
				err = row.Column(0, &token)
			}
			cancel()
			if ts, terr := ro.Timestamp(); err == nil && terr == nil {
				r.ck.clock.sample(began, returned, ts)
			}
			if err == nil {
				r.ck.registerOp(porcupine.Operation{ClientId: 0, Input: regInput{name: name}, Output: token, Call: call, Return: r.ck.now()})
			}
		}
		time.Sleep(150 * time.Millisecond)
	}
}

// sampleClock makes a strong read, for the checker's bounds on Spanner's
// clock (spannerClock).
func (r *randRun) sampleClock() {
	ctx, cancel := context.WithTimeout(r.ctx, time.Second)
	defer cancel()
	began := time.Now()
	ro := r.admin.Single()
	defer ro.Close()
	_, err := ro.ReadRow(ctx, "registers", spanner.Key{randLocks[0]}, []string{"token"})
	returned := time.Now()
	if err != nil && spanner.ErrCode(err) != codes.NotFound {
		return
	}
	if ts, err := ro.Timestamp(); err == nil {
		r.ck.clock.sample(began, returned, ts)
	}
}

// caller makes random operations with p's current Client until the run ends.
func (r *randRun) caller(name string, p *randProcess, rng *rand.Rand, runEnd time.Time) {
	for time.Now().Before(runEnd) {
		c := p.client()
		timeout := time.Duration(100+rng.IntN(2900)) * time.Millisecond
		ctx, cancel := context.WithTimeout(r.ctx, timeout)
		deadline, _ := ctx.Deadline()
		lock := randLocks[rng.IntN(len(randLocks))]
		var (
			what   string
			leases []*lease.Lease
			kinds  []grantKind
			set    *lease.LeaseSet
			wid    *lease.WorkerID
			err    error
			// jobEnd is when a RunOnce's fn, the test's own code, returned:
			// RunOnce cannot return before it.
			jobEnd time.Time
		)
		started := time.Now()
		op := rng.IntN(100)
		r.ck.begin(name, fmt.Sprintf("operation %d on %s since %s", op, lock, started.Format(time.StampMicro)))
		switch {
		case op < 15:
			what = "Acquire(" + lock + ")"
			var l *lease.Lease
			if l, err = c.Acquire(ctx, lock); err == nil {
				leases, kinds = []*lease.Lease{l}, []grantKind{exclusive}
			}
		case op < 25:
			what = "TryAcquire(" + lock + ")"
			var l *lease.Lease
			if l, err = c.TryAcquire(ctx, lock); err == nil {
				leases, kinds = []*lease.Lease{l}, []grantKind{exclusive}
			}
		case op < 37:
			what = "AcquireShared(" + lock + ")"
			var l *lease.Lease
			if l, err = c.AcquireShared(ctx, lock); err == nil {
				leases, kinds = []*lease.Lease{l}, []grantKind{shared}
			}
		case op < 45:
			other := randLocks[(slices.Index(randLocks, lock)+1+rng.IntN(len(randLocks)-1))%len(randLocks)]
			what = "AcquireAll(" + lock + "," + other + ")"
			if set, err = c.AcquireAll(ctx, lock, other); err == nil {
				leases = set.Leases()
				kinds = []grantKind{exclusive, exclusive}
			}
		case op < 57:
			what = "AcquirePermit"
			var l *lease.Lease
			if l, err = c.AcquirePermit(ctx, randSem); err == nil {
				leases, kinds = []*lease.Lease{l}, []grantKind{permit}
			}
		case op < 65:
			what = "TryAcquirePermit"
			var l *lease.Lease
			if l, err = c.TryAcquirePermit(ctx, randSem); err == nil {
				leases, kinds = []*lease.Lease{l}, []grantKind{permit}
			}
		case op < 75:
			slot := r.slots[rng.IntN(len(r.slots))]
			what = "RunOnce(" + slot.Format(time.TimeOnly) + ")"
			var ran bool
			fail := rng.IntN(3) == 0
			hold := time.Duration(rng.IntN(300)) * time.Millisecond
			ran, err = c.RunOnce(ctx, randJob, slot, func(jctx context.Context) error {
				defer func() { jobEnd = time.Now() }()
				l, _ := lease.LeaseFromContext(jctx)
				r.ck.ranSlot(l.Name(), time.Now())
				r.ck.record(&grant{name: l.Name(), key: l.Name(), kind: exclusive, l: l, client: c, caller: name, started: started, returned: time.Now()})
				r.guardedWrite(p, name, l)
				sleepCtx(jctx, hold)
				if fail {
					return errors.New("the job failed")
				}
				return nil
			})
			if ran && err == nil {
				r.ck.slotDone(lease.JobSlotName(randJob, slot), time.Now())
			}
			what += fmt.Sprintf(" ran=%v", ran)
		case op < 85:
			what = "AcquireWorkerID"
			if wid, err = c.AcquireWorkerID(ctx, randPool, 2); err == nil {
				leases, kinds = []*lease.Lease{wid.Lease()}, []grantKind{workerID}
			}
		case op < 90:
			what = "ForceRelease(" + lock + ")"
			fr := r.ck.startForce(lock)
			var h lease.Holder
			h, err = c.ForceRelease(ctx, lock)
			r.ck.endForce(fr)
			if err == nil {
				what += fmt.Sprintf(" of %s token %d", h.HolderID, h.Token)
			}
		case op < 93:
			what = "Close"
			p.mu.Lock()
			old := p.c
			p.c = r.newLeaseClient(p)
			p.mu.Unlock()
			err = old.Close()
			r.ck.closed(old, time.Now())
		default:
			what = "idle"
			sleepCtx(ctx, timeout/4)
		}
		returned := time.Now()
		if jobEnd.After(deadline) {
			// Recording the job's outcome is bounded from fn's return.
			what += fmt.Sprintf(" (its job returned %s after the deadline)", jobEnd.Sub(deadline).Round(time.Millisecond))
			deadline = jobEnd
		}
		r.ck.boundCall(name, what, deadline, returned)
		desc := fmt.Sprintf("%s %s (%s timeout, %s): ", name, what, timeout, returned.Sub(started).Round(time.Millisecond))
		if err != nil {
			r.t.Logf("%s%v", desc, err)
		}
		var gs []*grant
		for i, l := range leases {
			g := &grant{name: l.Name(), key: l.Name(), kind: kinds[i], l: l, client: c, caller: name, started: started, returned: returned}
			if wid != nil {
				g.key = fmt.Sprintf("%s#%d", l.Name(), wid.ID())
			}
			r.ck.record(g)
			gs = append(gs, g)
			r.t.Logf("%s%s token %d at %s", desc, g.key, l.Token(), l.AcquiredAt().Format(time.StampMicro))
		}
		cancel()
		r.hold(p, name, rng, gs, set, wid)
	}
}

// hold uses what the caller was granted for a while, then releases it, or
// now and then leaves it to its Client's Close.
func (r *randRun) hold(p *randProcess, caller string, rng *rand.Rand, gs []*grant, set *lease.LeaseSet, wid *lease.WorkerID) {
	if len(gs) == 0 {
		return
	}
	end := time.Now().Add(time.Duration(rng.IntN(500)) * time.Millisecond)
	for time.Now().Before(end) {
		for _, g := range gs {
			switch {
			case g.kind == exclusive:
				r.guardedWrite(p, caller, g.l)
			case wid != nil:
				_ = wid.Use(func(int) error { r.ck.used(g, time.Now()); return nil })
			}
		}
		time.Sleep(time.Duration(20+rng.IntN(100)) * time.Millisecond)
	}
	if rng.IntN(15) == 0 {
		r.t.Logf("%s leaves %s token %d to its Client", caller, gs[0].key, gs[0].l.Token())
		return
	}
	ctx, cancel := context.WithTimeout(r.ctx, 2*enumTTL)
	defer cancel()
	deadline, _ := ctx.Deadline()
	var err error
	if set != nil {
		err = set.Release(ctx)
	} else {
		err = gs[0].l.Release(ctx)
	}
	r.ck.boundCall(caller, "Release", deadline, time.Now())
	if err != nil {
		r.t.Logf("%s Release of %s token %d: %v", caller, gs[0].key, gs[0].l.Token(), err)
	}
}

// guardedWrite writes l's token into the register of its name, in a
// transaction fenced by Guard; the register must never go back.
func (r *randRun) guardedWrite(p *randProcess, caller string, l *lease.Lease) {
	ctx, cancel := context.WithTimeout(l.Context(), time.Second)
	defer cancel()
	var (
		prev      int64
		committed bool // the last attempt's function returned nil
	)
	call := r.ck.now()
	_, err := p.sc.ReadWriteTransactionWithOptions(ctx, func(ctx context.Context, txn *spanner.ReadWriteTransaction) error {
		committed = false
		if err := l.Guard(ctx, txn); err != nil {
			return err
		}
		prev = 0
		row, err := txn.ReadRow(ctx, "registers", spanner.Key{l.Name()}, []string{"token"})
		switch {
		case spanner.ErrCode(err) == codes.NotFound:
		case err != nil:
			return err
		default:
			if err := row.Column(0, &prev); err != nil {
				return err
			}
		}
		if err := txn.BufferWrite([]*spanner.Mutation{spanner.InsertOrUpdate("registers", []string{"name", "token"}, []any{l.Name(), l.Token()})}); err != nil {
			return err
		}
		committed = true
		return nil
	}, spanner.TransactionOptions{TransactionTag: guardedTag})
	op := porcupine.Operation{ClientId: 1, Input: regInput{name: l.Name(), write: true, token: l.Token()}, Call: call, Return: r.ck.now()}
	if took := time.Duration(op.Return - op.Call); took > randBound {
		// The Spanner client rolls a failed transaction back under its own
		// 30 s bound, not the context's.
		r.t.Logf("%s: a guarded write of %q token %d took %s: %v", caller, l.Name(), l.Token(), took.Round(time.Millisecond), err)
	}
	switch {
	case err == nil:
		if prev > l.Token() {
			r.t.Errorf("%s: a guarded write of %q with token %d committed over token %d", caller, l.Name(), l.Token(), prev)
		}
		r.ck.registerOp(op)
	case committed:
		// The commit's outcome is unknown: it may take effect at any time.
		op.Return = math.MaxInt64
		r.ck.registerOp(op)
	}
}

func sleepCtx(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
	case <-ctx.Done():
	}
}

// quiesce closes every Client, then takes every name, permit and worker ID
// with a fresh Client (which also takes out dead waiters' entries), lets go,
// and checks that no row is live and no line has an entry.
func (r *randRun) quiesce(admin *lease.Client) {
	t := r.t
	var closedAt time.Time
	for _, p := range r.procs {
		c := p.client()
		if err := c.Close(); err != nil {
			t.Logf("p%d: Close: %v", p.id, err)
		}
		closedAt = time.Now()
		r.ck.closed(c, closedAt)
	}
	// The sweeper's TTL is longer than the callers': on a loaded machine a
	// short lease (enumTTL) is now and then lost before it is used (no renewal
	// confirmed in time), which is no violation; such a loss is retried.
	sweeper := newClientWith(t, r.admin, lease.WithTTL(3*enumTTL), lease.WithHolderID("sweeper"), lease.WithPollInterval(100*time.Millisecond))
	ctx, cancel := context.WithTimeout(r.ctx, 15*enumTTL+lease.MaxCallTimeout)
	defer cancel()
	retryLost := func(what string, call func() error) {
		for {
			err := call()
			if err == nil {
				return
			}
			if !errors.Is(err, lease.ErrLeaseLost) || ctx.Err() != nil {
				t.Fatalf("sweeper %s: %v", what, err)
			}
			t.Logf("sweeper %s: %v (retried)", what, err)
		}
	}
	// Each is let go at once; one lost on a loaded machine is let go too.
	// A release that does not reach Spanner leaves the row live for at
	// most the sweeper's TTL (checked below).
	letGo := func(g *grant) {
		r.ck.record(g)
		if err := g.l.Release(ctx); err != nil && !errors.Is(err, lease.ErrLeaseLost) {
			t.Logf("sweeper Release of %s: %v", g.key, err)
		}
	}
	for _, name := range randLocks {
		retryLost("Acquire("+name+")", func() error {
			started := time.Now()
			l, err := sweeper.Acquire(ctx, name)
			if err == nil {
				letGo(&grant{name: name, key: name, kind: exclusive, l: l, client: sweeper, caller: "sweeper", started: started, returned: time.Now()})
			}
			return err
		})
	}
	for _, slot := range r.slots {
		retryLost("RunOnce("+slot.Format(time.TimeOnly)+")", func() error {
			started := time.Now()
			_, err := sweeper.RunOnce(ctx, randJob, slot, func(jctx context.Context) error {
				l, _ := lease.LeaseFromContext(jctx)
				r.ck.ranSlot(l.Name(), time.Now())
				r.ck.record(&grant{name: l.Name(), key: l.Name(), kind: exclusive, l: l, client: sweeper, caller: "sweeper", started: started, returned: time.Now()})
				return nil
			})
			return err
		})
	}
	retryLost("AcquirePermit", func() error {
		started := time.Now()
		l, err := sweeper.AcquirePermit(ctx, randSem)
		if err == nil {
			letGo(&grant{name: randSem, key: randSem, kind: permit, l: l, client: sweeper, caller: "sweeper", started: started, returned: time.Now()})
		}
		return err
	})
	// Both IDs, so that both lines are written: the first is held while
	// the second is taken.
	var ids []*grant
	for range 2 {
		retryLost("AcquireWorkerID", func() error {
			started := time.Now()
			w, err := sweeper.AcquireWorkerID(ctx, randPool, 2)
			if err != nil {
				return err
			}
			g := &grant{name: randPool, key: fmt.Sprintf("%s#%d", randPool, w.ID()), kind: workerID, l: w.Lease(), client: sweeper, caller: "sweeper",
				started: started, returned: time.Now()}
			if err := w.Use(func(int) error { r.ck.used(g, time.Now()); return nil }); err != nil && !errors.Is(err, lease.ErrLeaseLost) {
				t.Fatalf("sweeper Use of %s: %v", g.key, err)
			}
			r.ck.record(g)
			ids = append(ids, g)
			return nil
		})
	}
	for _, g := range ids {
		if err := g.l.Release(ctx); err != nil && !errors.Is(err, lease.ErrLeaseLost) {
			t.Logf("sweeper Release of %s: %v", g.key, err)
		}
	}
	if err := sweeper.Close(); err != nil {
		t.Logf("sweeper Close: %v", err) // its leases expire within its TTL
	}
	swept := time.Now()
	t.Logf("swept %s after the last Close", swept.Sub(closedAt).Round(time.Millisecond))

	// The reads that check the sweep have their own time: a slow sweep on
	// a loaded machine is no violation. Every Client is closed: a row may
	// stay live only while a lease whose release did not reach Spanner
	// has time left, at most a TTL after its Client closed; the sweeper's
	// (3 enumTTL) is the longest, and it closed last.
	ctx, cancel = context.WithTimeout(r.ctx, 3*enumTTL+2*lease.MaxCallTimeout)
	defer cancel()
	// A read that fails is read again: these check the tables, not the
	// reads (once in 300 seeds, under a load of 50 on 2 cores, Holders'
	// second query found its read-only transaction gone from the emulator:
	// "Transaction not found").
	read := func(what string, f func() error) {
		for {
			err := f()
			if err == nil {
				return
			}
			fatalIf(t, ctx.Err(), "%s: %v", what, err)
			t.Logf("%s: %v (read again)", what, err)
			time.Sleep(100 * time.Millisecond)
		}
	}
	for {
		var holders []lease.Holder
		read("Holders", func() (err error) { holders, err = admin.Holders(ctx); return err })
		if len(holders) == 0 {
			break
		}
		if time.Since(swept) > 3*enumTTL {
			t.Errorf("live rows after quiescence, more than the sweeper's TTL after it closed: %+v", holders)
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	var ws []lease.Waiter
	read("Waiters", func() (err error) { ws, err = admin.Waiters(ctx); return err })
	if len(ws) > 0 {
		t.Errorf("live waiters after quiescence: %+v", ws)
	}
	var rows []string
	read("reading the waiters table", func() error {
		rows = nil
		return r.admin.Single().Query(ctx, spanner.Statement{SQL: "SELECT name, session_id, holder_id FROM " + table + "_waiters"}).Do(func(row *spanner.Row) error {
			var name, session string
			var holder spanner.NullString
			if err := row.Columns(&name, &session, &holder); err != nil {
				return err
			}
			rows = append(rows, fmt.Sprintf("%s (session %s of %s)", name, session, holder.StringVal))
			return nil
		})
	})
	if len(rows) > 0 {
		t.Errorf("rows left in %s_waiters after quiescence: %v", table, rows)
	}
}
