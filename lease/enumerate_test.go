package lease_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"cloud.google.com/go/spanner"

	"github.com/spannerlock/terraform-provider-spannerlock/internal/emulator"
	"github.com/spannerlock/terraform-provider-spannerlock/lease"
)

// The enumeration tries every RPC boundary of every operation: for each
// operation it first runs it cleanly to learn the RPCs it makes, then, for
// each of those RPCs, runs it again with each fault injected there, alone
// and followed by each fault on the next RPC (the read that resolves an
// unknown outcome, or the retry). The faults are a network's (not sent,
// reply lost, delayed past the deadline) and a stalled transaction's (holds
// its locks until its deadline). Every Client of a case shares one model of
// Spanner's locks (lockmodel_test.go), which the emulator does not have.
// After every case it checks what users rely on:
//
//   - no renewal waited for another transaction's lock;
//   - every lease the Client holds has a local deadline;
//   - every RPC had a bound;
//   - a rival never holds a name (or slot) while an old holder's Context is
//     live, and its token is larger than every old one;
//   - no lease is held longer than a TTL after its owner let go (released,
//     closed, or never learnt it was acquired);
//   - a semaphore never has more live permits than its limit;
//   - a RunOnce slot that reported success never runs again.
//
// Each case has its own database: the emulator aborts concurrent
// transactions of one database, which would shift the RPC sequence.

// enumTTL is short so that expiries come quickly, yet long enough that a
// renewal, which has half its interval (TTL/6, 500 ms), and an
// acquisition commit within their bounds on a loaded 2-core machine (both
// dialects at once, two cases each, beside other work). At 2 s, under the
// load of a CI run, renewals timed out (333 ms) so often that the checks
// of what a Client can still do after a fault failed.
const enumTTL = 3 * time.Second

// enumIdleAbort stands in for spannerIdleAbort in the enumeration.
const enumIdleAbort = 2 * enumTTL

// harness is one case: a database, the Client under test (its RPCs go
// through f) and what the operation left it holding.
type harness struct {
	t   *testing.T
	ctx context.Context
	db  string
	f   *faults
	c   *lease.Client
	// model is the case's model of Spanner's locks, shared by every
	// spanner Client of the case.
	model *lockModel

	mu sync.Mutex
	// held are the leases the Client under test acquired, ended or not;
	// old are leases of other Clients on the names under test; kept are
	// leases of other Clients that the case leaves alone.
	held, old, kept []*lease.Lease
	// locks and pool are the names the case acquires; pool is a semaphore
	// of one permit, or a worker pool of one ID (workers).
	locks   []string
	pool    string
	workers bool
	// ranOnce is set when a RunOnce reported success.
	ranOnce bool
	// stepDown ends a Campaign's leadership and waits for Campaign.
	stepDown func() error
	// waited, if set, returns what a rival waiting in line got.
	waited chan error
	// forced is the worker ID a force release ends.
	forced int64
	note   string
}

const runOnceJob = "report"

var runOnceSlot = time.Date(2026, 11, 23, 3, 0, 0, 0, time.UTC)

func (h *harness) hold(l *lease.Lease) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.held = append(h.held, l)
}

// last returns the lease the case acquired last.
func (h *harness) last() *lease.Lease {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.held[len(h.held)-1]
}

func (h *harness) noted(format string, args ...any) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.note += fmt.Sprintf(format, args...) + "; "
}

// newRival returns a Client on another spanner.Client, polling fast; its
// transactions take part in the lock model.
func (h *harness) newRival(id string) *lease.Client {
	return newClientWith(h.t, h.modelled(), lease.WithTTL(enumTTL), lease.WithHolderID(id),
		lease.WithPollInterval(50*time.Millisecond))
}

// modelled returns a spanner.Client of its own whose transactions take part
// in the case's lock model, without faults.
func (h *harness) modelled() *spanner.Client {
	return spannerClient(h.t, h.db, (&faults{model: h.model}).options()...)
}

// scenario is one operation of the Client under test.
type scenario struct {
	name string
	// setup prepares the case; faults are not armed yet.
	setup func(h *harness)
	// op is the operation; every RPC it makes is counted.
	op func(h *harness)
	// renewal cases count only renewal RPCs, and op waits for renewals.
	// A lease may be lost when both planned faults blackhole renewals on a
	// loaded machine: that is the local deadline doing its job.
	renewal bool
	// counts, if set, chooses the RPCs the case counts and faults instead:
	// the line cases leave out the polls of a waiter, whose number depends
	// on timing.
	counts func(rpc) bool
}

// transactionRPCs counts the RPCs of the Client's acquiring, releasing and
// leaving transactions.
func transactionRPCs(r rpc) bool {
	switch r.tag {
	case "spannerlock-acquire", "spannerlock-release", "spannerlock-leave":
		return true
	}
	return false
}

// waitInLine waits until Spanner lists holder in name's line, or 2 TTLs.
func waitInLine(h *harness, observer *lease.Client, name, holder string) {
	deadline := time.Now().Add(2 * enumTTL)
	for time.Now().Before(deadline) {
		if line, err := lineOf(h.ctx, observer, name); err == nil && slices.Contains(line, holder) {
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// acquireX is the operation of the acquisition cases.
func acquireX(h *harness) {
	l, err := h.c.TryAcquire(context.Background(), "x")
	if err != nil {
		h.noted("TryAcquire(x): %v", err)
		return
	}
	h.hold(l)
}

// mustHold acquires name for the case's setup, waiting out what a loaded
// machine does to it.
func mustHold(h *harness, name string) *lease.Lease {
	l, err := h.c.Acquire(h.ctx, name)
	fatalIf(h.t, err, "setup: Acquire(%s)", name)
	h.hold(l)
	return l
}

// anchored gives the Client under test a lease it keeps, so its session
// stays renewed and leases it lets go cannot simply expire with it.
func anchored(h *harness) { mustHold(h, "anchor") }

// waitRenewals lets renewals run until they have made the RPCs of one
// renewal (a query and a commit) after the last planned fault.
func waitRenewals(h *harness) {
	waitFor(h.t, "renewal RPCs", 5*enumTTL, func() bool { return h.f.counted() >= h.f.lastPlanned()+3 || h.lostAll() })
}

// lostAll reports whether no lease of the case is held any more, so that
// no renewal will follow.
func (h *harness) lostAll() bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, l := range h.held {
		if l.Context().Err() == nil {
			return false
		}
	}
	return true
}

var scenarios = []scenario{
	{name: "first acquisition", setup: func(h *harness) { h.locks = []string{"x"} },
		op: acquireX},
	{name: "later acquisition of a new name", setup: func(h *harness) { h.locks = []string{"x"}; anchored(h) },
		op: acquireX},
	{name: "later acquisition of a known name", setup: func(h *harness) {
		h.locks = []string{"x"}
		anchored(h)
		l := mustHold(h, "x")
		fatalIf(h.t, l.Release(h.ctx), "setup: Release")
	}, op: acquireX},
	{name: "acquisition of an expired name", setup: func(h *harness) {
		h.locks = []string{"x"}
		anchored(h)
		dead := &faults{model: h.model}
		d := newClientWith(h.t, spannerClient(h.t, h.db, dead.options()...), lease.WithTTL(enumTTL), lease.WithHolderID("dead"))
		l, err := d.Acquire(h.ctx, "x")
		fatalIf(h.t, err, "setup: the dead holder's Acquire")
		h.old = append(h.old, l)
		dead.partition(true)
		waitFor(h.t, "the dead holder's lease to expire", 5*enumTTL, func() bool {
			_, err := h.c.Holder(h.ctx, "x")
			return errors.Is(err, lease.ErrNoHolder)
		})
	}, op: acquireX},
	{name: "TryAcquire of a name another Client holds", setup: func(h *harness) {
		anchored(h)
		holder := h.newRival("holder")
		l, err := holder.Acquire(h.ctx, "x")
		fatalIf(h.t, err, "setup: the holder's Acquire")
		h.kept = append(h.kept, l)
	}, op: func(h *harness) {
		if l, err := h.c.TryAcquire(context.Background(), "x"); err == nil {
			h.hold(l)
			h.t.Errorf("TryAcquire of a name another Client holds succeeded with token %d", l.Token())
		}
	}},
	{name: "Acquire in line, takes the name a release freed", counts: transactionRPCs, setup: func(h *harness) {
		h.locks = []string{"x"}
		anchored(h)
		l, err := h.newRival("holder").Acquire(h.ctx, "x")
		fatalIf(h.t, err, "setup: the holder's Acquire")
		h.old = append(h.old, l)
	}, op: func(h *harness) {
		released := make(chan struct{})
		go func() {
			defer close(released)
			waitInLine(h, newClientWith(h.t, h.modelled()), "x", "under-test")
			_ = h.old[0].Release(h.ctx)
		}()
		ctx, cancel := context.WithTimeout(context.Background(), 4*enumTTL)
		defer cancel()
		l, err := h.c.Acquire(ctx, "x")
		<-released
		if err != nil {
			h.noted("Acquire(x): %v", err)
			return
		}
		h.hold(l)
	}},
	{name: "Acquire gives up in line", counts: transactionRPCs, setup: func(h *harness) {
		anchored(h)
		l, err := h.newRival("holder").Acquire(h.ctx, "x")
		fatalIf(h.t, err, "setup: the holder's Acquire")
		h.kept = append(h.kept, l)
	}, op: func(h *harness) {
		ctx, cancel := context.WithTimeout(context.Background(), enumTTL)
		defer cancel()
		if l, err := h.c.Acquire(ctx, "x"); err == nil {
			h.hold(l)
			h.t.Errorf("Acquire of a name another Client holds succeeded with token %d", l.Token())
		}
	}},
	{name: "release with a waiter in line", counts: transactionRPCs, setup: func(h *harness) {
		h.locks = []string{"x"}
		anchored(h)
		mustHold(h, "x")
		waiter := h.newRival("waiter")
		h.waited = make(chan error, 1)
		go func() {
			l, err := waiter.Acquire(h.ctx, "x")
			if err == nil {
				h.mu.Lock()
				h.old = append(h.old, l)
				h.mu.Unlock()
				err = l.Release(h.ctx)
			}
			h.waited <- err
		}()
		waitInLine(h, newClientWith(h.t, h.modelled()), "x", "waiter")
	}, op: func(h *harness) {
		if err := h.last().Release(context.Background()); err != nil {
			h.noted("Release: %v", err)
		}
	}},
	{name: "AcquirePermit in line, takes the permit a release freed", counts: transactionRPCs, setup: func(h *harness) {
		declarePool(h)
		anchored(h)
		l, err := h.newRival("holder").AcquirePermit(h.ctx, h.pool)
		fatalIf(h.t, err, "setup: the holder's AcquirePermit")
		h.old = append(h.old, l)
	}, op: func(h *harness) {
		released := make(chan struct{})
		go func() {
			defer close(released)
			waitInLine(h, newClientWith(h.t, h.modelled()), h.pool, "under-test")
			_ = h.old[0].Release(h.ctx)
		}()
		ctx, cancel := context.WithTimeout(context.Background(), 4*enumTTL)
		defer cancel()
		l, err := h.c.AcquirePermit(ctx, h.pool)
		<-released
		if err != nil {
			h.noted("AcquirePermit: %v", err)
			return
		}
		h.hold(l)
	}},
	{name: "TryAcquire passes a dead waiter", setup: func(h *harness) {
		h.locks = []string{"x"}
		anchored(h)
		holder := h.newRival("holder")
		l, err := holder.Acquire(h.ctx, "x")
		fatalIf(h.t, err, "setup: the holder's Acquire")
		h.old = append(h.old, l)
		// A waiter joins x's line, then its Client is cut off for good:
		// its session expires with its place in line.
		dead := &faults{model: h.model}
		d := newClientWith(h.t, spannerClient(h.t, h.db, dead.options()...), lease.WithTTL(enumTTL), lease.WithHolderID("dead"))
		dctx, cancel := context.WithTimeout(h.ctx, 10*enumTTL)
		h.t.Cleanup(cancel)
		go func() { _, _ = d.Acquire(dctx, "x") }()
		observer := newClientWith(h.t, h.modelled())
		waitInLine(h, observer, "x", "dead")
		dead.partition(true)
		fatalIf(h.t, l.Release(h.ctx), "setup: the holder's Release")
		waitFor(h.t, "the dead waiter's session to expire", 5*enumTTL, func() bool {
			line, err := lineOf(h.ctx, observer, "x")
			return err == nil && !slices.Contains(line, "dead")
		})
	}, op: acquireX},
	{name: "ForceReleasePermit of a worker ID", setup: func(h *harness) {
		anchored(h)
		w, err := h.newRival("holder").AcquireWorkerID(h.ctx, "ids", 1)
		fatalIf(h.t, err, "setup: the holder's AcquireWorkerID")
		// The holder learns of the force release at its next renewal;
		// checkRenewalsNeverWaited checks that renewal.
		h.kept = append(h.kept, w.Lease())
		h.forced = int64(w.ID())
	}, op: func(h *harness) {
		if _, err := h.c.ForceReleasePermit(context.Background(), "ids", h.forced); err != nil {
			h.noted("ForceReleasePermit: %v", err)
		}
	}},
	{name: "renewal of 1 lease", renewal: true, setup: func(h *harness) { h.locks = []string{"x"}; mustHold(h, "x") },
		op: waitRenewals},
	{name: "renewal of many leases", renewal: true, setup: func(h *harness) {
		for i := range 8 {
			h.locks = append(h.locks, fmt.Sprintf("x%d", i))
			mustHold(h, h.locks[i])
		}
	}, op: waitRenewals},
	{name: "release", setup: func(h *harness) { h.locks = []string{"x"}; anchored(h); mustHold(h, "x") },
		op: func(h *harness) {
			if err := h.last().Release(context.Background()); err != nil {
				h.noted("Release: %v", err)
			}
		}},
	{name: "permit grant", setup: func(h *harness) { declarePool(h); anchored(h) },
		op: func(h *harness) {
			l, err := h.c.TryAcquirePermit(context.Background(), h.pool)
			if err != nil {
				h.noted("TryAcquirePermit: %v", err)
				return
			}
			h.hold(l)
		}},
	{name: "permit release", setup: func(h *harness) {
		declarePool(h)
		anchored(h)
		l, err := h.c.AcquirePermit(h.ctx, h.pool)
		fatalIf(h.t, err, "setup: AcquirePermit")
		h.hold(l)
	}, op: func(h *harness) {
		if err := h.last().Release(context.Background()); err != nil {
			h.noted("Release: %v", err)
		}
	}},
	{name: "RunOnce run and completion", setup: func(h *harness) {
		h.locks = []string{runOnceJob + "@" + runOnceSlot.Format(time.RFC3339Nano)}
		anchored(h)
	}, op: func(h *harness) {
		ran, err := h.c.RunOnce(context.Background(), runOnceJob, runOnceSlot, func(ctx context.Context) error {
			if l, ok := lease.LeaseFromContext(ctx); ok {
				h.hold(l)
			}
			return nil
		})
		h.mu.Lock()
		h.ranOnce = ran && err == nil
		h.mu.Unlock()
		h.noted("RunOnce: ran=%v err=%v", ran, err)
	}},
	{name: "worker ID acquisition", setup: func(h *harness) { h.pool, h.workers = "ids", true; anchored(h) },
		op: func(h *harness) {
			ctx, cancel := context.WithTimeout(context.Background(), 3*enumTTL)
			defer cancel()
			w, err := h.c.AcquireWorkerID(ctx, h.pool, 1)
			if err != nil {
				h.noted("AcquireWorkerID: %v", err)
				return
			}
			h.hold(w.Lease())
		}},
	{name: "worker ID release", setup: func(h *harness) {
		h.pool, h.workers = "ids", true
		anchored(h)
		w, err := h.c.AcquireWorkerID(h.ctx, h.pool, 1)
		fatalIf(h.t, err, "setup: AcquireWorkerID")
		h.hold(w.Lease())
	}, op: func(h *harness) {
		if err := h.last().Release(context.Background()); err != nil {
			h.noted("Release: %v", err)
		}
	}},
	{name: "Campaign step-down", setup: func(h *harness) {
		h.locks = []string{"leader"}
		anchored(h)
		ctx, stop := context.WithCancel(context.Background())
		leading := make(chan *lease.Lease, 1)
		done := make(chan error, 1)
		go func() {
			done <- h.c.Campaign(ctx, "leader", lease.LeaderCallbacks{OnStartedLeading: func(ctx context.Context, l *lease.Lease) {
				leading <- l
				<-ctx.Done()
			}})
		}()
		select {
		case l := <-leading:
			h.hold(l)
		case err := <-done:
			h.t.Fatalf("setup: Campaign returned %v before leading", err)
		case <-h.ctx.Done():
			h.t.Fatal("setup: never led")
		}
		h.stepDown = func() error { stop(); return <-done }
	}, op: func(h *harness) {
		if err := h.stepDown(); err != nil {
			h.noted("Campaign: %v", err)
		}
	}},
	{name: "Close", setup: func(h *harness) {
		h.locks = []string{"x"}
		declarePool(h)
		anchored(h)
		mustHold(h, "x")
		l, err := h.c.AcquirePermit(h.ctx, h.pool)
		fatalIf(h.t, err, "setup: AcquirePermit")
		h.hold(l)
	}, op: func(h *harness) {
		if err := h.c.Close(); err != nil {
			h.noted("Close: %v", err)
		}
	}},
}

func declarePool(h *harness) {
	h.pool = "sem"
	admin := newClientWith(h.t, h.modelled())
	fatalIf(h.t, admin.SetPermits(h.ctx, h.pool, 1), "setup: SetPermits")
}

// caseSpec is one faulted run of a scenario.
type caseSpec struct {
	sc   scenario
	plan map[int]fault
}

func (c caseSpec) String() string {
	var parts []string
	for _, k := range slices.Sorted(mapKeys(c.plan)) {
		parts = append(parts, fmt.Sprintf("rpc%d=%s", k, c.plan[k]))
	}
	return strings.Join(parts, ",")
}

func mapKeys(m map[int]fault) func(func(int) bool) {
	return func(yield func(int) bool) {
		for k := range m {
			if !yield(k) {
				return
			}
		}
	}
}

// TestEveryRPCBoundaryUnderFaults is the enumeration described above.
func TestEveryRPCBoundaryUnderFaults(t *testing.T) {
	if testing.Short() {
		t.Skip("the fault enumeration takes minutes")
	}
	var cases atomic.Int64
	for _, d := range testDialects {
		t.Run(string(d), func(t *testing.T) {
			t.Parallel()
			enumerate(t, &cases)
		})
	}
	t.Cleanup(func() { t.Logf("%d faulted cases", cases.Load()) })
}

func enumerate(t *testing.T, cases *atomic.Int64) {
	for _, sc := range scenarios {
		t.Run(sc.name, func(t *testing.T) {
			t.Parallel()
			clean := runCase(t, caseSpec{sc: sc, plan: map[int]fault{}})
			if len(clean) == 0 {
				t.Fatal("the operation made no RPC")
			}
			t.Logf("clean run: %s", strings.Join(clean, " "))
			// Each fault alone first; then each followed by each fault on
			// the next RPC, where the case alone made one: where it made
			// none, the double case is the single one again.
			var mu sync.Mutex
			next := map[string]bool{}
			t.Run("single", func(t *testing.T) {
				for k := range clean {
					for _, first := range allFaults {
						spec := caseSpec{sc: sc, plan: map[int]fault{k: first}}
						cases.Add(1)
						t.Run(spec.String(), func(t *testing.T) {
							t.Parallel()
							made := runCase(t, spec)
							mu.Lock()
							next[spec.String()] = len(made) > k+1
							mu.Unlock()
						})
					}
				}
			})
			t.Run("double", func(t *testing.T) {
				for k := range clean {
					for _, first := range allFaults {
						if !next[caseSpec{plan: map[int]fault{k: first}}.String()] {
							continue
						}
						for _, second := range allFaults {
							spec := caseSpec{sc: sc, plan: map[int]fault{k: first, k + 1: second}}
							cases.Add(1)
							t.Run(spec.String(), func(t *testing.T) {
								t.Parallel()
								runCase(t, spec)
							})
						}
					}
				}
			})
		})
	}
}

// runCase runs one case and checks the invariants; it returns the RPCs the
// operation made.
func runCase(t *testing.T, spec caseSpec) []string {
	ctx := emulator.Context(t)
	model := newLockModel()
	// A stuck transaction keeps its locks until Spanner aborts it as idle
	// (about 10 s); the enumeration stands in 2 TTLs, still longer than
	// any of the package's deadlines (a TTL at most), to keep time.
	model.idleAbort = enumIdleAbort
	h := &harness{t: t, ctx: ctx, db: newDatabase(t), f: &faults{model: model}, model: model}
	h.c = newClientWith(t, spannerClient(t, h.db, h.f.options()...), lease.WithTTL(enumTTL), lease.WithHolderID("under-test"))
	spec.sc.setup(h)

	counts := notRenewals
	switch {
	case spec.sc.counts != nil:
		counts = spec.sc.counts
	case spec.sc.renewal:
		counts = renewals
	}
	h.f.arm(counts, spec.plan)
	spec.sc.op(h)
	trace, hits := h.f.disarm()
	opEnd := time.Now()
	t.Logf("RPCs: %s; %s", strings.Join(trace, " "), h.note)
	if hits != len(spec.plan) {
		// The operation made fewer RPCs this time (a fault ended it early):
		// the case is the one with fewer faults, which runs on its own.
		t.Logf("%d of %d planned faults hit", hits, len(spec.plan))
	}
	if u := h.f.unboundedRPCs(); len(u) > 0 {
		t.Errorf("RPCs without a deadline within %s: %v", maxBound, u)
	}
	if spec.sc.name != "Close" {
		checkUsable(h)
	}
	checkDeadlines(h)
	checkLetGo(h, opEnd)
	checkLeftTheLine(h, opEnd)
	checkWaiterServed(h)
	checkRivals(h)
	checkRenewalsNeverWaited(h)
	return trace
}

// checkRenewalsNeverWaited: no renewal, of any Client of the case, waited
// for a lock that another transaction held, whatever the faults did to that
// transaction. On Spanner such a wait can last until the other
// transaction's deadline, longer than the renewal's, and lose every lease
// of the Client with Spanner reachable throughout.
//
// One wait is documented (doc.go): a force release of a worker ID reads its
// holder's session row in its transaction, and the holder's renewal, which
// writes that row, waits for it.
func checkRenewalsNeverWaited(h *harness) {
	for _, w := range h.model.waitsBy("spannerlock-renew") {
		if w.holder == "spannerlock-force-release" && w.row.table == "locks_sessions" && !w.exclusive {
			continue
		}
		h.t.Errorf("a renewal waited for a lock: %s", w)
	}
}

// checkLeftTheLine: once the operation returned, the Client under test
// waits in no line: a waiter that gave up, or whose place's outcome it never
// learnt, is out of the line within a TTL even though its Client lives on.
func checkLeftTheLine(h *harness, opEnd time.Time) {
	observer := newClientWith(h.t, h.modelled())
	for {
		ws, err := observer.Waiters(h.ctx)
		fatalIf(h.t, err, "Waiters")
		i := slices.IndexFunc(ws, func(w lease.Waiter) bool { return w.HolderID == "under-test" })
		if i < 0 {
			return
		}
		// A transaction that read the line and was left holding its lock
		// until Spanner aborted it as idle holds the leave up until then
		// (the documented exception, as in checkLetGo).
		from := opEnd
		if locked := h.model.lockedUntil(modelRow{table: "locks_waiters", key: ws[i].Name}); locked.After(from) {
			from = locked
		}
		if bound := from.Add(enumTTL + enumTTL/3); time.Now().After(bound) {
			h.t.Errorf("the Client under test is still in line %s after the operation returned: %+v", time.Since(opEnd), ws)
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// checkWaiterServed: a rival in line when the Client under test released
// the name gets it, at the latest when the released lease would have
// expired.
func checkWaiterServed(h *harness) {
	if h.waited == nil {
		return
	}
	select {
	case err := <-h.waited:
		if err != nil {
			h.t.Errorf("the waiter in line: %v", err)
		}
	case <-time.After(3 * enumTTL):
		h.t.Errorf("the waiter in line did not get the name within %s of the release", 3*enumTTL)
	}
}

// checkUsable: whatever the faults did, the Client can acquire a new name
// afterwards (retrying outages while it lasts), within 3 TTLs of the
// moment the last transaction a fault cut off lost its locks: until then a
// statement of the Client may wait for them, as on Spanner, and a
// renewal that waits past its deadline costs the Client its session, which
// the acquisition then starts again.
func checkUsable(h *harness) {
	started := time.Now()
	bound := func() time.Time {
		from := started
		if freed := h.model.locksFreedAt(); freed.After(from) {
			from = freed
		}
		return from.Add(3 * enumTTL)
	}
	var err error
	for time.Now().Before(bound()) {
		ctx, cancel := context.WithDeadline(h.ctx, bound())
		var l *lease.Lease
		l, err = h.c.TryAcquire(ctx, "usable")
		cancel()
		if err == nil {
			h.hold(l)
			h.mu.Lock()
			h.locks = append(h.locks, "usable")
			h.mu.Unlock()
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
	h.t.Errorf("the Client cannot acquire a new name after the operation: %v", err)
}

// checkDeadlines: every lease the Client holds has a local deadline no
// further than a TTL away.
func checkDeadlines(h *harness) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, l := range h.held {
		if l.Context().Err() != nil {
			continue
		}
		if d := l.Deadline(); d.IsZero() || time.Until(d) > enumTTL {
			h.t.Errorf("lease %q token %d is held with local deadline %v (%s away)", l.Name(), l.Token(), d, time.Until(d))
		}
	}
}

// checkLetGo: a live row of the Client under test that it does not hold is
// something its owner let go or lost, and must not be renewed: it is free
// no later than a TTL after the lease ended (or, for an acquisition whose
// outcome the Client never learnt, after the operation), plus one renewal
// that may have been in flight; or, when a transaction that read the row
// was left holding its lock until its deadline (the documented exception),
// a TTL and one renewal after that. What counts is whether a rival could take
// it: a row the Client clears in time is free, however far its session's
// renewals pushed the expiry it would have had. So the row must not be
// seen live by a read sent after that bound; a slow machine only polls
// slower, and a read that began after the bound can see only what Spanner
// held after it. The package promises this only while Spanner answers the
// Client's clears within their deadlines: a clear that Spanner itself did
// not answer in time (a loaded machine, no fault of the case) moves the
// bound to when it ran out, since the row is free only once a
// clear commits.
func checkLetGo(h *harness, opEnd time.Time) {
	const slack = 100 * time.Millisecond
	observer := newClientWith(h.t, h.modelled())
	for {
		sent := time.Now()
		holders, err := observer.Holders(h.ctx)
		fatalIf(h.t, err, "Holders")
		orphans := 0
		for _, hd := range holders {
			if hd.HolderID != "under-test" {
				continue
			}
			held, ended := h.holds(hd)
			if held {
				continue
			}
			orphans++
			from := opEnd
			if ended.After(from) {
				from = ended
			}
			if locked := h.model.lockedUntil(rowOf(hd)); locked.After(from) {
				from = locked
			}
			if slow := h.f.lastClearTimeout(); slow.After(from) {
				from = slow
			}
			if bound := from.Add(enumTTL + enumTTL/3 + slack); sent.After(bound) {
				h.t.Errorf("%q token %d is live %s after its owner stopped holding it, until %s (at most a TTL and one renewal allowed)",
					hd.Name, hd.Token, sent.Sub(from), hd.ExpiresAt.Format(time.StampMicro))
				return
			}
		}
		if orphans == 0 {
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// clearTag tags the Client's releases, its background clears included.
const clearTag = "spannerlock-release"

// rowOf is the row of the lock model that holds hd's lease.
func rowOf(hd lease.Holder) modelRow {
	if hd.Kind == "lock" {
		return modelRow{table: "locks", key: hd.Name}
	}
	return modelRow{table: "locks_permits", key: fmt.Sprintf("%s/%d", hd.Name, hd.Slot)}
}

// holds reports whether a live row is a lease the Client still holds, and
// if it held it once, when it stopped.
func (h *harness) holds(hd lease.Holder) (held bool, ended time.Time) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, l := range h.held {
		if l.Name() == hd.Name && l.Token() == hd.Token {
			if l.Context().Err() == nil {
				return true, time.Time{}
			}
			return false, lease.EndedAt(l)
		}
	}
	return false, time.Time{}
}

// checkRivals cuts the Client under test off from Spanner, then has a rival
// take every name and slot of the case, and checks that each old holder's
// Context had ended before the rival's acquisition committed, that tokens
// grew, that the semaphore stayed within its limit, and that a RunOnce
// slot done stays done.
func checkRivals(h *harness) {
	h.f.partition(true)
	rival := h.newRival("rival")
	h.mu.Lock()
	old := append(slices.Clone(h.held), h.old...)
	h.mu.Unlock()
	// A rival needs the old session to expire (a TTL) and then its own
	// acquisitions, retried while an emulator shared by the whole
	// enumeration is slow to answer; what this checks is that no rival
	// acquires too early, so the bound is generous: 15 TTLs (30 s), where 6
	// ran out on a loaded machine with nothing wrong.
	ctx, cancel := context.WithTimeout(h.ctx, 15*enumTTL)
	defer cancel()
	taken := func(name string, l *lease.Lease) {
		for _, o := range old {
			if o.Name() != name {
				continue
			}
			ended := lease.EndedAt(o)
			if d := o.Deadline(); !d.IsZero() && (ended.IsZero() || d.Before(ended)) {
				ended = d // the holder knows at its deadline (WorkerID.Use checks it)
			}
			if o.Context().Err() == nil || ended.IsZero() || !ended.Before(l.AcquiredAt()) {
				h.t.Errorf("rival acquired %q (token %d) at %s while the old holder's lease (token %d) was live (ended %v, cause %v)",
					name, l.Token(), l.AcquiredAt().Format(time.StampMicro), o.Token(), ended.Format(time.StampMicro), context.Cause(o.Context()))
			}
			if l.Token() <= o.Token() {
				h.t.Errorf("rival token %d for %q is not above the old token %d", l.Token(), name, o.Token())
			}
		}
	}
	for _, name := range h.locks {
		if strings.HasPrefix(name, runOnceJob+"@") {
			checkRunOnce(h, rival, ctx, taken)
			continue
		}
		l, err := rival.Acquire(ctx, name)
		fatalIf(h.t, err, "rival Acquire(%s)", name)
		taken(name, l)
	}
	switch {
	case h.pool == "":
	case h.workers:
		w, err := rival.AcquireWorkerID(ctx, h.pool, 1)
		fatalIf(h.t, err, "rival AcquireWorkerID")
		taken(h.pool, w.Lease())
	default:
		l, err := rival.AcquirePermit(ctx, h.pool)
		fatalIf(h.t, err, "rival AcquirePermit")
		taken(h.pool, l)
		s, err := rival.Semaphore(ctx, h.pool)
		fatalIf(h.t, err, "Semaphore")
		if int64(s.InUse()) > s.Permits {
			h.t.Errorf("%d permits live, limit %d", s.InUse(), s.Permits)
		}
	}
}

func checkRunOnce(h *harness, rival *lease.Client, ctx context.Context, taken func(string, *lease.Lease)) {
	ran, err := rival.RunOnce(ctx, runOnceJob, runOnceSlot, func(ctx context.Context) error {
		l, _ := lease.LeaseFromContext(ctx)
		taken(l.Name(), l)
		return nil
	})
	fatalIf(h.t, err, "rival RunOnce")
	h.mu.Lock()
	done := h.ranOnce
	h.mu.Unlock()
	if done && ran {
		h.t.Error("a RunOnce slot that reported success ran again")
	}
}
