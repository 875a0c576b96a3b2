package lease_test

import (
	"context"
	"fmt"
	"math"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"

	"github.com/spannerlock/terraform-provider-spannerlock/lease"
)

// grantKind is what a grant holds: a lock exclusively or shared, a permit
// of a semaphore, or a worker ID of a pool.
type grantKind int

const (
	exclusive grantKind = iota
	shared
	permit
	workerID
)

func (k grantKind) String() string {
	return [...]string{"exclusive", "shared", "permit", "worker ID"}[k]
}

// grant is one lease a caller was given.
type grant struct {
	name string // the lock's, semaphore's or pool's name: its tokens' scope
	key  string // what it excludes others from: the name, or pool#ID
	kind grantKind
	l    *lease.Lease
	// client is the lease.Client that granted it; started and returned
	// bound, on this process's clock, the call that asked for it: its
	// commit (AcquiredAt, on Spanner's clock) happened in between.
	client            *lease.Client
	caller            string
	started, returned time.Time
	// uses are the times a worker ID was used (WorkerID.Use).
	uses []time.Time
}

func (g *grant) String() string {
	return fmt.Sprintf("%s %s token %d of %s at %s", g.kind, g.key, g.l.Token(), g.caller, g.l.AcquiredAt().Format(time.StampMicro))
}

// endOf is when g's holder knew its lease ended, as the enumeration's
// rival check judges it: the Context's end or the local deadline, whichever
// came first; live is set while the Context is not done.
func endOf(l *lease.Lease) (ended time.Time, live bool) {
	if l.Context().Err() == nil {
		return time.Time{}, true
	}
	ended = lease.EndedAt(l)
	if d := l.Deadline(); !d.IsZero() && (ended.IsZero() || d.Before(ended)) {
		ended = d // the holder knows at its deadline (WorkerID.Use checks it)
	}
	return ended, false
}

type interval struct {
	name       string
	start, end time.Time // end is zero while the call runs
}

type setPermitsOp struct {
	n          int64
	start, end time.Time
	ok         bool
}

// regInput is an operation on a register: a read, or a guarded write of a
// token.
type regInput struct {
	name  string
	write bool
	token int64
}

// randChecker records what the callers of one run were granted and did,
// and checks it.
type randChecker struct {
	t     *testing.T
	epoch time.Time

	mu         sync.Mutex
	grants     []*grant
	forces     []*interval
	setPermits []*setPermitsOp
	closedAt   map[*lease.Client]time.Time
	// slotDoneAt is when a RunOnce of a slot first reported success;
	// slotRuns are when its job started, by slot name.
	slotDoneAt map[string]time.Time
	slotRuns   map[string][]time.Time
	regHistory []porcupine.Operation
	inFlight   map[string]string
	reported   map[string]bool
	clock      spannerClock
}

func newRandChecker(t *testing.T) *randChecker {
	return &randChecker{t: t, epoch: time.Now(), closedAt: map[*lease.Client]time.Time{},
		slotDoneAt: map[string]time.Time{}, slotRuns: map[string][]time.Time{}, inFlight: map[string]string{}, reported: map[string]bool{}}
}

// now is a timestamp for porcupine, on the monotonic clock.
func (ck *randChecker) now() int64 { return int64(time.Since(ck.epoch)) }

// errorf reports a violation once.
func (ck *randChecker) errorf(format string, args ...any) {
	msg := fmt.Sprintf(format, args...)
	if ck.reported[msg] {
		return
	}
	ck.reported[msg] = true
	ck.t.Error(msg)
}

func (ck *randChecker) grantCount() int {
	ck.mu.Lock()
	defer ck.mu.Unlock()
	return len(ck.grants)
}

func (ck *randChecker) registerOps() int {
	ck.mu.Lock()
	defer ck.mu.Unlock()
	return len(ck.regHistory)
}

func (ck *randChecker) begin(caller, what string) {
	ck.mu.Lock()
	defer ck.mu.Unlock()
	ck.inFlight[caller] = what
}

// boundCall checks that a call returned within randBound of its context's
// deadline.
func (ck *randChecker) boundCall(caller, what string, deadline, returned time.Time) {
	ck.mu.Lock()
	defer ck.mu.Unlock()
	delete(ck.inFlight, caller)
	if late := returned.Sub(deadline); late > randBound {
		ck.errorf("%s: %s returned %s after its context's deadline", caller, what, late)
	}
}

func (ck *randChecker) startForce(name string) *interval {
	ck.mu.Lock()
	defer ck.mu.Unlock()
	fr := &interval{name: name, start: time.Now()}
	ck.forces = append(ck.forces, fr)
	return fr
}

// endForce records the end of a ForceRelease call: its commit, if it
// committed, was before.
func (ck *randChecker) endForce(fr *interval) {
	ck.mu.Lock()
	defer ck.mu.Unlock()
	fr.end = time.Now()
}

func (ck *randChecker) startSetPermits(n int64) *setPermitsOp {
	ck.mu.Lock()
	defer ck.mu.Unlock()
	op := &setPermitsOp{n: n, start: time.Now()}
	ck.setPermits = append(ck.setPermits, op)
	return op
}

func (ck *randChecker) endSetPermits(op *setPermitsOp, ok bool) {
	ck.mu.Lock()
	defer ck.mu.Unlock()
	op.end, op.ok = time.Now(), ok
}

// limitAt is the largest limit the semaphore may have had when g
// committed: that of the last SetPermits certain to have committed before
// (it returned before g's call began, or before the local time that g's
// commit timestamp certainly follows), or of any made after it that may
// have committed before g (begun before g's commit certainly was). A
// SetPermits that failed may have committed unknown to it, until its
// transaction could no longer land; they are made one at a time.
func (ck *randChecker) limitAt(g *grant) int64 {
	after, before := ck.clock.localAfter(g), ck.clock.localBefore(g)
	last := -1
	for i, op := range ck.setPermits {
		if op.ok && !op.end.IsZero() && op.end.Before(after) {
			last = i
		}
	}
	limit := int64(0)
	for i, op := range ck.setPermits {
		mayBeIn := op.start.Before(before) && (op.ok || op.end.IsZero() || before.Before(op.end.Add(maxBound)))
		if i == last || (i > last && mayBeIn) {
			limit = max(limit, op.n)
		}
	}
	return limit
}

// closed records that a Client's Close returned, and checks that none of
// its leases is live.
func (ck *randChecker) closed(c *lease.Client, at time.Time) {
	ck.mu.Lock()
	defer ck.mu.Unlock()
	if _, ok := ck.closedAt[c]; !ok {
		ck.closedAt[c] = at
	}
	for _, g := range ck.grants {
		if g.client == c && g.l.Context().Err() == nil {
			ck.errorf("%s is live after its Client's Close returned", g)
		}
	}
}

func (ck *randChecker) ranSlot(slot string, at time.Time) {
	ck.mu.Lock()
	defer ck.mu.Unlock()
	ck.slotRuns[slot] = append(ck.slotRuns[slot], at)
	if done, ok := ck.slotDoneAt[slot]; ok && at.After(done) {
		ck.errorf("RunOnce of %s ran at %s, after a RunOnce reported it done at %s", slot, at.Format(time.StampMicro), done.Format(time.StampMicro))
	}
}

func (ck *randChecker) slotDone(slot string, at time.Time) {
	ck.mu.Lock()
	defer ck.mu.Unlock()
	if _, ok := ck.slotDoneAt[slot]; !ok {
		ck.slotDoneAt[slot] = at
	}
}

func (ck *randChecker) used(g *grant, at time.Time) {
	ck.mu.Lock()
	defer ck.mu.Unlock()
	g.uses = append(g.uses, at)
	ck.checkUsesLocked(g)
}

func (ck *randChecker) registerOp(op porcupine.Operation) {
	ck.mu.Lock()
	defer ck.mu.Unlock()
	ck.regHistory = append(ck.regHistory, op)
}

// record adds a grant and checks it against every grant recorded so far.
func (ck *randChecker) record(g *grant) {
	ck.mu.Lock()
	defer ck.mu.Unlock()
	if at, ok := ck.closedAt[g.client]; ok && g.started.After(at) && g.l.Context().Err() == nil {
		ck.errorf("%s was granted live by a Client closed at %s, to a call made after", g, at.Format(time.StampMicro))
	}
	ck.grants = append(ck.grants, g)
	for _, o := range ck.grants[:len(ck.grants)-1] {
		ck.checkPairLocked(o, g)
	}
	if g.kind == permit {
		ck.checkPermitsLocked(g.name)
	}
}

// final checks every pair again, now that more leases have ended.
func (ck *randChecker) final() {
	ck.mu.Lock()
	defer ck.mu.Unlock()
	for i, g := range ck.grants {
		for _, o := range ck.grants[:i] {
			ck.checkPairLocked(o, g)
		}
		ck.checkUsesLocked(g)
	}
	ck.checkPermitsLocked(randSem)
	ck.checkRegistersLocked()
	ck.checkCommitTimesLocked()
}

// checkCommitTimesLocked checks that every grant's AcquiredAt is a commit
// timestamp of the call that returned it: on Spanner's clock, after the
// call began and before it returned, as far as spannerClock can tell.
func (ck *randChecker) checkCommitTimesLocked() {
	for _, g := range ck.grants {
		at := g.l.AcquiredAt()
		if lo, ok := ck.clock.lower(g.started); ok && at.Before(g.started.Add(lo)) {
			ck.errorf("%s: its commit timestamp is before its call began (%s, Spanner's clock at least %s ahead)", g, g.started.Format(time.StampMicro), lo)
		}
		if hi, ok := ck.clock.upper(g.returned); ok && at.After(g.returned.Add(hi)) {
			ck.errorf("%s: its commit timestamp is after its call returned (%s, Spanner's clock at most %s ahead)", g, g.returned.Format(time.StampMicro), hi)
		}
	}
}

// forcedBetween reports whether a ForceRelease of name may have committed
// after the earlier grant's commit and before the later one's: it began
// before the later call returned and had not returned before the earlier
// call began (every time here is on this process's clock).
func (ck *randChecker) forcedBetween(name string, earlier, later *grant) bool {
	for _, fr := range ck.forces {
		if fr.name == name && fr.start.Before(later.returned) && (fr.end.IsZero() || fr.end.After(earlier.started)) {
			return true
		}
	}
	return false
}

// checkPairLocked checks two grants of one scope, in either order.
func (ck *randChecker) checkPairLocked(a, b *grant) {
	if a.name != b.name {
		return
	}
	o, l := a, b
	if l.l.AcquiredAt().Before(o.l.AcquiredAt()) {
		o, l = l, o
	}
	oAt, lAt := o.l.AcquiredAt(), l.l.AcquiredAt()
	if oAt.Equal(lAt) {
		if o.l.Token() == l.l.Token() {
			ck.errorf("%s and %s: one token for two grants", o, l)
		}
	} else if l.l.Token() <= o.l.Token() {
		ck.errorf("%s is not above the earlier %s", l, o)
	}
	if o.key != l.key || o.kind == permit || (o.kind == shared && l.kind == shared) {
		return
	}
	if o.kind != workerID && ck.forcedBetween(o.name, o, l) {
		return
	}
	// o's end is on this process's clock, l's commit on Spanner's: l
	// committed by ck.clock.localBefore(l), and o's holder still held
	// it then if it ended no earlier.
	ended, live := endOf(o.l)
	if by := ck.clock.localBefore(l); live || ended.IsZero() || !ended.Before(by) {
		ck.errorf("%s was granted while %s was live (ended %s, granted by %s, cause %v)", l, o, ended.Format(time.StampMicro), by.Format(time.StampMicro), context.Cause(o.l.Context()))
	}
}

// checkUsesLocked checks that a worker ID's holders use it at later times
// than its earlier holders did.
func (ck *randChecker) checkUsesLocked(g *grant) {
	if g.kind != workerID || len(g.uses) == 0 {
		return
	}
	for _, o := range ck.grants {
		if o == g || o.key != g.key || len(o.uses) == 0 {
			continue
		}
		first, later := o, g
		if later.l.AcquiredAt().Before(first.l.AcquiredAt()) {
			first, later = later, first
		}
		if last := slices.MaxFunc(first.uses, time.Time.Compare); !slices.MinFunc(later.uses, time.Time.Compare).After(last) {
			ck.errorf("%s used its ID at %s, not after %s last used it at %s", later, slices.MinFunc(later.uses, time.Time.Compare).Format(time.StampMicro), first, last.Format(time.StampMicro))
		}
	}
}

// checkPermitsLocked checks that no permit of the semaphore was granted
// while as many as its limit were live.
func (ck *randChecker) checkPermitsLocked(sem string) {
	for _, g := range ck.grants {
		if g.kind != permit || g.name != sem {
			continue
		}
		at := g.l.AcquiredAt()
		by := ck.clock.localBefore(g) // g committed by then, on this process's clock
		live := []*grant{g}
		for _, o := range ck.grants {
			if o == g || o.kind != permit || o.name != sem || !o.l.AcquiredAt().Before(at) {
				continue
			}
			if ended, isLive := endOf(o.l); isLive || !ended.Before(by) {
				live = append(live, o)
			}
		}
		if limit := ck.limitAt(g); int64(len(live)) > limit {
			ck.errorf("%s made %d permits live, limit %d: %v", g, len(live), limit, live)
		}
	}
}

// checkRegistersLocked checks with porcupine that the guarded writes and
// the reads of each register are linearizable.
func (ck *randChecker) checkRegistersLocked() {
	model := porcupine.Model{
		Partition: func(history []porcupine.Operation) [][]porcupine.Operation {
			by := map[string][]porcupine.Operation{}
			for _, op := range history {
				n := op.Input.(regInput).name //nolint:forcetypeassert // every operation's input is a regInput
				by[n] = append(by[n], op)
			}
			var parts [][]porcupine.Operation
			for _, name := range slices.Sorted(mapKeysOf(by)) {
				parts = append(parts, by[name])
			}
			return parts
		},
		Init: func() any { return int64(0) },
		Step: func(state, input, output any) (bool, any) {
			in := input.(regInput) //nolint:forcetypeassert // every operation's input is a regInput
			if in.write {
				return true, in.token
			}
			return output.(int64) == state.(int64), state //nolint:forcetypeassert // the register's state and reads are int64
		},
		DescribeOperation: func(input, output any) string {
			in := input.(regInput) //nolint:forcetypeassert // every operation's input is a regInput
			if in.write {
				return fmt.Sprintf("write(%s, %d)", in.name, in.token)
			}
			return fmt.Sprintf("read(%s) = %d", in.name, output)
		},
	}
	history := slices.Clone(ck.regHistory)
	for i := range history {
		if history[i].Return == math.MaxInt64 {
			history[i].Return = ck.now() + int64(time.Hour)
		}
	}
	switch res := porcupine.CheckOperationsTimeout(model, history, 20*time.Second); res {
	case porcupine.Ok:
	case porcupine.Unknown:
		ck.t.Logf("porcupine: no verdict within 20s on %d register operations", len(history))
	default:
		ck.errorf("the guarded writes and reads of the registers are not linearizable (%s): %v", res, history)
	}
}

func mapKeysOf[V any](m map[string]V) func(func(string) bool) {
	return func(yield func(string) bool) {
		for k := range m {
			if !yield(k) {
				return
			}
		}
	}
}
