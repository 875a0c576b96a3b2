package lease_test

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"cloud.google.com/go/spanner"

	"github.com/spannerlock/terraform-provider-spannerlock/internal/emulator"
	"github.com/spannerlock/terraform-provider-spannerlock/lease"
)

// These tests pin the line's rule that only the first live waiters take a
// free name, each in its own transaction: a release clears what it lets
// go and never writes a row naming another session.

// result is what a blocking acquisition run in the background returned.
type result struct {
	l   *lease.Lease
	err error
}

// acquireInBackground runs acquire and delivers its outcome.
func acquireInBackground(acquire func() (*lease.Lease, error)) <-chan result {
	out := make(chan result, 1)
	go func() {
		l, err := acquire()
		out <- result{l, err}
	}()
	return out
}

// await returns what a background acquisition returned, failing the test
// if it does not return within limit.
func await(t *testing.T, what string, ch <-chan result, limit time.Duration) result {
	t.Helper()
	select {
	case r := <-ch:
		return r
	case <-time.After(limit):
		t.Fatalf("%s did not return within %s", what, limit)
		return result{}
	}
}

// A release whose commit did not reach Spanner is finished by the Client in
// the background. When the Client has meanwhile taken the name again, and
// a rival waits in line, that background release must not give the name
// to the rival while the Client's new lease is live (issue 25, item 1).
func TestABackgroundReleaseNeverGivesAwayALeaseTheClientHoldsAgain(t *testing.T) {
	for _, mode := range []string{"shared", "exclusive"} {
		t.Run(mode, func(t *testing.T) {
			eachDialect(t, func(t *testing.T) {
				ctx := emulator.Context(t)
				db := newDatabase(t)
				ttl := 3 * time.Second
				f := &faults{model: newLockModel()}
				a := newClientWith(t, spannerClient(t, db, f.options()...), lease.WithTTL(ttl), lease.WithHolderID("a"))
				reader := newClient(t, db, lease.WithTTL(ttl), lease.WithHolderID("reader"))
				w := newClient(t, db, lease.WithTTL(ttl), lease.WithHolderID("w"), lease.WithPollInterval(50*time.Millisecond))
				observer := newClient(t, db)
				// The anchor keeps a's session renewed while a holds nothing else.
				mustAcquire(t, ctx, a, "anchor")

				// a's first shared lease takes slot 1 (the reader has 0), so a's
				// next shared lease takes slot 0 and leaves slot 1 to the
				// background release.
				r, err := reader.AcquireShared(ctx, "x")
				fatalIf(t, err, "the reader's AcquireShared")
				a1, err := a.AcquireShared(ctx, "x")
				fatalIf(t, err, "a's first AcquireShared")
				fatalIf(t, r.Release(ctx), "the reader's Release")

				// Every release transaction of a fails unsent until healed:
				// the Release itself and the background retries.
				plan := map[int]fault{}
				for i := range 10000 {
					plan[i] = notSent
				}
				f.arm(func(r rpc) bool { return r.tag == "spannerlock-release" }, plan)
				rctx, rcancel := context.WithTimeout(ctx, 5*time.Second)
				err = a1.Release(rctx)
				rcancel()
				if err == nil {
					trace, _ := f.disarm()
					t.Fatalf("a Release whose commit never reached Spanner returned nil: %v", trace)
				}

				acquire := a.Acquire
				if mode == "shared" {
					acquire = a.AcquireShared
				}
				actx, acancel := context.WithTimeout(ctx, 10*time.Second)
				a2, err := acquire(actx, "x")
				acancel()
				fatalIf(t, err, "a takes x again (%s)", mode)

				wctx, wcancel := context.WithTimeout(ctx, 30*time.Second)
				defer wcancel()
				waited := acquireInBackground(func() (*lease.Lease, error) { return w.Acquire(wctx, "x") })
				inLine(t, ctx, observer, "x", "w")

				// Heal, and wait until a background release has committed.
				cleared := make(chan struct{}, 1)
				f.setReply(func(r rpc) {
					if r.tag == "spannerlock-release" && strings.HasSuffix(r.method, "/Commit") {
						select {
						case cleared <- struct{}{}:
						default:
						}
					}
				})
				f.disarm()
				select {
				case <-cleared:
				case <-time.After(4 * ttl):
					t.Fatal("no background release committed within four TTLs of the network healing")
				}

				if err := a2.Context().Err(); err != nil {
					t.Fatalf("a's new lease ended after the background release: %v", context.Cause(a2.Context()))
				}
				h, err := observer.Holder(ctx, "x")
				fatalIf(t, err, "Holder(x)")
				if h.HolderID != "a" {
					t.Fatalf("x is held by %q (%s) while a's new lease (token %d) is live", h.HolderID, h.Kind, a2.Token())
				}
				select {
				case got := <-waited:
					t.Fatalf("w acquired x (err %v) while a's new lease is live", got.err)
				default:
				}
				fatalIf(t, a2.Release(ctx), "a's second Release")
				got := await(t, "w's Acquire", waited, 20*time.Second)
				fatalIf(t, got.err, "w's Acquire after a let go")
				if got.l.Token() <= a2.Token() {
					t.Fatalf("w's token %d is not above a's %d", got.l.Token(), a2.Token())
				}
			})
		})
	}
}

// waiterRows counts the rows of name's line in the waiters table, live or
// not.
func waiterRows(t *testing.T, ctx context.Context, sc *spanner.Client, name string) int64 {
	t.Helper()
	var n int64
	stmt := testStatement(t, "SELECT COUNT(*) FROM "+table+"_waiters WHERE name = @name",
		"SELECT COUNT(*) FROM "+table+"_waiters WHERE name = $1", []string{"name"}, map[string]any{"name": name})
	err := sc.Single().Query(ctx, stmt).Do(func(r *spanner.Row) error { return r.Column(0, &n) })
	fatalIf(t, err, "counting the waiters of %q", name)
	return n
}

// A Client that holds a semaphore's only permit never gets a second one,
// however often it tries (issue 25, item 2: a bounded set of its own grant
// IDs once decided this; nothing in memory does now).
func TestAClientHoldingTheOnlyPermitNeverGetsASecond(t *testing.T) {
	eachDialect(t, func(t *testing.T) {
		ctx := emulator.Context(t)
		db := newDatabase(t)
		a := newClient(t, db, lease.WithHolderID("a"))
		fatalIf(t, a.SetPermits(ctx, "pool", 1), "SetPermits")
		held, err := a.TryAcquirePermit(ctx, "pool")
		fatalIf(t, err, "the first TryAcquirePermit")
		for i := range 50 {
			tctx, cancel := context.WithTimeout(ctx, 10*time.Second)
			l, err := a.TryAcquirePermit(tctx, "pool")
			cancel()
			if err == nil {
				t.Fatalf("try %d: a second permit of a 1-permit semaphore (token %d; held: token %d)", i, l.Token(), held.Token())
			}
			if !errors.Is(err, lease.ErrNotAcquired) {
				t.Fatalf("try %d: err = %v, want ErrNotAcquired", i, err)
			}
		}
		if err := held.Context().Err(); err != nil {
			t.Fatalf("the held permit ended: %v", context.Cause(held.Context()))
		}
	})
}

// Two callers of one Client wait for a semaphore's permits, which another
// Client frees one at a time: each caller is served in turn, and once both
// are served nothing of theirs is left in line (issue 25, item 3: the
// caller that polled first once took up the other's grant, leaving its own
// entry in line, a phantom that a later release handed a permit nobody
// took up).
func TestTwoCallersOfOneClientWaitingForPermitsLeaveNothingBehind(t *testing.T) {
	eachDialect(t, func(t *testing.T) {
		ctx := emulator.Context(t)
		db := newDatabase(t)
		h := newClient(t, db, lease.WithHolderID("h"))
		a := newClient(t, db, lease.WithHolderID("a"), lease.WithPollInterval(50*time.Millisecond))
		other := newClient(t, db, lease.WithHolderID("other"))
		fatalIf(t, h.SetPermits(ctx, "pool", 2), "SetPermits")
		for round := range 8 {
			var held []*lease.Lease
			for range 2 {
				l, err := h.TryAcquirePermit(ctx, "pool")
				fatalIf(t, err, "round %d: h's TryAcquirePermit", round)
				held = append(held, l)
			}
			wctx, cancel := context.WithTimeout(ctx, 30*time.Second)
			first := acquireInBackground(func() (*lease.Lease, error) { return a.AcquirePermit(wctx, "pool") })
			inLine(t, ctx, other, "pool", "a")
			second := acquireInBackground(func() (*lease.Lease, error) { return a.AcquirePermit(wctx, "pool") })
			inLine(t, ctx, other, "pool", "a", "a")
			var got []*lease.Lease
			for i, l := range held {
				fatalIf(t, l.Release(ctx), "round %d: h's Release %d", round, i)
				var r result
				select {
				case r = <-first:
					first = nil
				case r = <-second:
					second = nil
				case <-time.After(20 * time.Second):
					t.Fatalf("round %d: no caller got the permit h released (%d)", round, i)
				}
				fatalIf(t, r.err, "round %d: a caller of a", round)
				got = append(got, r.l)
			}
			cancel()
			line, err := lineOf(ctx, other, "pool")
			fatalIf(t, err, "Waiters")
			if len(line) != 0 {
				t.Fatalf("round %d: the line holds %v after both callers were served", round, line)
			}
			for _, l := range got {
				fatalIf(t, l.Release(ctx), "round %d: a's Release", round)
			}
			l, err := other.TryAcquirePermit(ctx, "pool")
			fatalIf(t, err, "round %d: a newcomer's TryAcquirePermit of a free permit", round)
			fatalIf(t, l.Release(ctx), "round %d: the newcomer's Release", round)
		}
	})
}

// AcquireAll waiting for a held name never keeps the holder of that name
// from taking another of its names that is free: that would deadlock both
// (issue 25, item 4).
func TestAnAcquireAllInLineDoesNotBlockAHolderOfOneOfItsNames(t *testing.T) {
	eachDialect(t, func(t *testing.T) {
		ctx := emulator.Context(t)
		db := newDatabase(t)
		g := newClient(t, db, lease.WithHolderID("g"), lease.WithPollInterval(50*time.Millisecond))
		p := newClient(t, db, lease.WithHolderID("p"))
		observer := newClient(t, db)
		pa := mustAcquire(t, ctx, p, "a")
		gctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		defer cancel()
		type setResult struct {
			set *lease.LeaseSet
			err error
		}
		waited := make(chan setResult, 1)
		go func() {
			set, err := g.AcquireAll(gctx, "a", "b")
			waited <- setResult{set, err}
		}()
		inLine(t, ctx, observer, "a", "g")
		inLine(t, ctx, observer, "b", "g")
		tctx, tcancel := context.WithTimeout(ctx, 10*time.Second)
		pb, err := p.TryAcquire(tctx, "b")
		tcancel()
		fatalIf(t, err, "the holder of a takes the free b while an AcquireAll(a, b) waits")
		fatalIf(t, pb.Release(ctx), "Release(b)")
		fatalIf(t, pa.Release(ctx), "Release(a)")
		select {
		case got := <-waited:
			fatalIf(t, got.err, "AcquireAll(a, b) once both are free")
			fatalIf(t, got.set.Release(ctx), "the set's Release")
		case <-time.After(20 * time.Second):
			t.Fatal("AcquireAll(a, b) did not return within 20s of both names being free")
		}
	})
}

// A semaphore release by a Client keeps that Client's own waiter in line:
// it came before a rival's, and is served first (issue 25, item 5).
func TestASemaphoreReleaseServesItsOwnClientsEarlierWaiterFirst(t *testing.T) {
	eachDialect(t, func(t *testing.T) {
		ctx := emulator.Context(t)
		db := newDatabase(t)
		a := newClient(t, db, lease.WithHolderID("a"), lease.WithPollInterval(50*time.Millisecond))
		b := newClient(t, db, lease.WithHolderID("b"), lease.WithPollInterval(50*time.Millisecond))
		observer := newClient(t, db)
		fatalIf(t, a.SetPermits(ctx, "pool", 1), "SetPermits")
		held, err := a.TryAcquirePermit(ctx, "pool")
		fatalIf(t, err, "a's TryAcquirePermit")
		wctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		defer cancel()
		second := acquireInBackground(func() (*lease.Lease, error) { return a.AcquirePermit(wctx, "pool") })
		inLine(t, ctx, observer, "pool", "a")
		rival := acquireInBackground(func() (*lease.Lease, error) { return b.AcquirePermit(wctx, "pool") })
		inLine(t, ctx, observer, "pool", "a", "b")
		fatalIf(t, held.Release(ctx), "a's Release")
		got := await(t, "a's second caller, first in line", second, 20*time.Second)
		fatalIf(t, got.err, "a's second caller")
		inLine(t, ctx, observer, "pool", "b")
		fatalIf(t, got.l.Release(ctx), "a's second Release")
		got = await(t, "b", rival, 20*time.Second)
		fatalIf(t, got.err, "b, served after a")
		fatalIf(t, got.l.Release(ctx), "b's Release")
	})
}

// A waiter that died in a worker-ID pool's line is taken out by the next
// transaction that writes the line (issue 25, item 8).
func TestADeadWaiterLeavesAWorkerPoolsLine(t *testing.T) {
	eachDialect(t, func(t *testing.T) {
		ctx := emulator.Context(t)
		db := newDatabase(t)
		ttl := 2 * time.Second
		h := newClient(t, db, lease.WithTTL(ttl), lease.WithHolderID("h"))
		f := &faults{}
		doomed := newClientWith(t, spannerClient(t, db, f.options()...), lease.WithTTL(ttl), lease.WithHolderID("doomed"))
		next := newClient(t, db, lease.WithTTL(ttl), lease.WithHolderID("next"), lease.WithPollInterval(50*time.Millisecond))
		observer := newClient(t, db)
		id, err := h.AcquireWorkerID(ctx, "ids", 1)
		fatalIf(t, err, "h's AcquireWorkerID")
		dctx, dcancel := context.WithCancel(ctx)
		gave := make(chan error, 1)
		go func() {
			_, err := doomed.AcquireWorkerID(dctx, "ids", 1)
			gave <- err
		}()
		inLine(t, ctx, observer, "ids", "doomed")
		// The doomed waiter is cut off: its leave and renewals never land,
		// and its session expires in Spanner.
		f.partition(true)
		dcancel()
		select {
		case err := <-gave:
			if err == nil {
				t.Fatal("the doomed waiter, cut off from Spanner, was given a worker ID")
			}
		case <-time.After(20 * time.Second):
			t.Fatal("the doomed waiter did not give up within 20s of its context ending")
		}
		inLine(t, ctx, observer, "ids", "doomed")
		fatalIf(t, id.Release(ctx), "h's Release")
		// Waiters lists live waiters only: the table itself is read below.
		nctx, ncancel := context.WithTimeout(ctx, 6*ttl)
		defer ncancel()
		taken, err := next.AcquireWorkerID(nctx, "ids", 1)
		fatalIf(t, err, "the next AcquireWorkerID, once the doomed waiter is dead")
		if n := waiterRows(t, ctx, emulator.Client(t, db), "ids"); n != 0 {
			t.Fatalf("the pool's line holds %d entries after the ID was taken again", n)
		}
		fatalIf(t, taken.Release(ctx), "the next holder's Release")
	})
}

// RunOnce counts real runs only: a replica waiting in line for a slot
// whose failures already reached its bound gives up without a run, and
// the slot's count stays at the one run there was (issue 25, item 9).
func TestRunOnceCountsOnlyRealRuns(t *testing.T) {
	eachDialect(t, func(t *testing.T) {
		ctx := emulator.Context(t)
		db := newDatabase(t)
		r1 := newClient(t, db, lease.WithHolderID("r1"))
		r2 := newClient(t, db, lease.WithHolderID("r2"), lease.WithPollInterval(50*time.Millisecond))
		observer := newClient(t, db)
		slot := time.Date(2026, 12, 1, 3, 0, 0, 0, time.UTC)
		name := lease.JobSlotName("report", slot)
		running, fail := make(chan struct{}), make(chan struct{})
		first := make(chan error, 1)
		go func() {
			_, err := r1.RunOnce(ctx, "report", slot, func(ctx context.Context) error {
				close(running)
				<-fail
				return errors.New("the job failed")
			})
			first <- err
		}()
		<-running
		ran := 0
		rctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		defer cancel()
		second := make(chan error, 1)
		go func() {
			_, err := r2.RunOnce(rctx, "report", slot, func(ctx context.Context) error {
				ran++
				return nil
			}, lease.WithMaxFailures(1))
			second <- err
		}()
		inLine(t, ctx, observer, name, "r2")
		close(fail)
		if err := <-first; err == nil {
			t.Fatal("the failing run reported success")
		}
		select {
		case err := <-second:
			if !errors.Is(err, lease.ErrTooManyFailures) {
				t.Fatalf("the waiting replica: err = %v, want ErrTooManyFailures (one failure, bound 1)", err)
			}
		case <-time.After(20 * time.Second):
			t.Fatal("the waiting replica did not return within 20s of the failure")
		}
		if ran != 0 {
			t.Fatalf("the waiting replica ran the job %d times past its bound", ran)
		}
		jobs, err := observer.Jobs(ctx)
		fatalIf(t, err, "Jobs")
		for _, j := range jobs {
			if j.Job == "report" && j.Slot.Equal(slot) && j.Runs != 1 {
				t.Fatalf("Jobs counts %d runs of a slot that ran once", j.Runs)
			}
		}
	})
}

// A waiter that died in a RunOnce slot's line while the slot ran is taken
// out by the next RunOnce of the slot, which finds it finished: done, or
// failed as often as WithMaxFailures allows. Nothing takes such a slot
// again, so no other transaction writes its line, and the entry would stay
// as long as the slot's row (the randomized test found it after
// quiescence).
func TestADeadWaiterLeavesAFinishedRunOnceSlotsLine(t *testing.T) {
	for _, tc := range []struct {
		name string
		// jobErr is what the run returns; opts are the waiters' options.
		jobErr error
		opts   []lease.RunOnceOption
		// late are the options of the late calls, one call each; each
		// must return (false, wantErr) and leave the line empty.
		late    [][]lease.RunOnceOption
		wantErr error
	}{
		{name: "done", late: [][]lease.RunOnceOption{nil}},
		{name: "failed out", jobErr: errors.New("the job failed"), opts: []lease.RunOnceOption{lease.WithMaxFailures(1)},
			// The first late call takes the dead entry out; the second,
			// which does not wait, finds the line empty.
			late:    [][]lease.RunOnceOption{{lease.WithMaxFailures(1)}, {lease.WithMaxFailures(1), lease.WithoutWaiting()}},
			wantErr: lease.ErrTooManyFailures},
	} {
		t.Run(strings.ReplaceAll(tc.name, " ", "_"), func(t *testing.T) {
			eachDialect(t, func(t *testing.T) {
				ctx := emulator.Context(t)
				db := newDatabase(t)
				ttl := 2 * time.Second
				slot := time.Date(2026, 12, 2, 3, 0, 0, 0, time.UTC)
				name := lease.JobSlotName("report", slot)
				runner := newClient(t, db, lease.WithTTL(ttl), lease.WithHolderID("runner"))
				f := &faults{}
				// The doomed waiter's entry must still be live when the
				// run lets go, just after the doomed Client is cut off:
				// its TTL bounds how long that may take on a loaded machine.
				doomedTTL := 10 * time.Second
				doomed := newClientWith(t, spannerClient(t, db, f.options()...), lease.WithTTL(doomedTTL), lease.WithHolderID("doomed"),
					lease.WithPollInterval(50*time.Millisecond))
				late := newClient(t, db, lease.WithTTL(ttl), lease.WithHolderID("late"))
				observer := newClient(t, db)
				sc := emulator.Client(t, db)
				running, finish := make(chan struct{}), make(chan struct{})
				ran := make(chan error, 1)
				go func() {
					_, err := runner.RunOnce(ctx, "report", slot, func(context.Context) error {
						close(running)
						<-finish
						return tc.jobErr
					}, tc.opts...)
					ran <- err
				}()
				<-running
				dctx, dcancel := context.WithCancel(ctx)
				defer dcancel()
				gave := make(chan error, 1)
				go func() {
					_, err := doomed.RunOnce(dctx, "report", slot, func(context.Context) error { return nil }, tc.opts...)
					gave <- err
				}()
				inLine(t, ctx, observer, name, "doomed")
				// The doomed waiter is cut off: its leave and renewals
				// never land, and its session expires in Spanner. The run
				// finishes meanwhile, while the entry is still live: its
				// let-go leaves it in line.
				f.partition(true)
				close(finish)
				if err := <-ran; (err == nil) != (tc.jobErr == nil) {
					t.Fatalf("the runner's RunOnce: %v, want the job's error %v", err, tc.jobErr)
				}
				if n := waiterRows(t, ctx, sc, name); n != 1 {
					t.Fatalf("the slot's line holds %d entries once the run finished, want the doomed one", n)
				}
				dcancel()
				select {
				case err := <-gave:
					if err == nil {
						t.Fatal("the doomed waiter, cut off from Spanner, reported success")
					}
				case <-time.After(2 * doomedTTL):
					t.Fatal("the doomed waiter did not give up within two TTLs of its context ending")
				}
				inLine(t, ctx, observer, name) // the doomed session expired: no live waiter
				if n := waiterRows(t, ctx, sc, name); n != 1 {
					t.Fatalf("the slot's line holds %d entries before the late RunOnce, want the doomed one", n)
				}
				for _, opts := range tc.late {
					didRun, err := late.RunOnce(ctx, "report", slot, func(context.Context) error {
						t.Error("the late replica ran a finished slot")
						return nil
					}, opts...)
					if didRun || !errors.Is(err, tc.wantErr) { // errors.Is(err, nil) is err == nil
						t.Fatalf("the late RunOnce = %t, %v; want false, %v", didRun, err, tc.wantErr)
					}
					if n := waiterRows(t, ctx, sc, name); n != 0 {
						t.Fatalf("the slot's line holds %d entries after a RunOnce found the slot finished", n)
					}
				}
				ws, err := observer.Waiters(ctx)
				fatalIf(t, err, "Waiters")
				if i := slices.IndexFunc(ws, func(w lease.Waiter) bool { return w.Name == name }); i >= 0 {
					t.Fatalf("Waiters lists %+v for a finished slot", ws[i])
				}
			})
		})
	}
}
