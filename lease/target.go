package lease

import (
	"context"
	"errors"
	"fmt"
	"time"

	"cloud.google.com/go/spanner"
)

// target is what an acquisition takes: one lock or several (AcquireAll),
// exclusively or shared, or a slot of a semaphore or worker pool. Only the
// rows differ; sessions, lines, unknown outcomes, waiting, registration and
// release are shared (acquire.go, wait.go, release.go).
type target interface {
	// names are the names the target takes: one, or an AcquireAll's.
	names() []string
	// take runs inside the acquiring transaction: it reads the names' lines
	// and returns the writes that take the target, or puts the attempt in
	// line (errQueued), or a *busy error when the target is taken. It never
	// reads a session row in the transaction: attempt.resolve reads them
	// outside.
	take(ctx context.Context, tx *spanner.ReadWriteTransaction, a *attempt) ([]grant, []*spanner.Mutation, error)
	// read reads the row a grant wrote, to learn an unknown outcome.
	read(ctx context.Context, c *Client, g grant) (row, error)
	// look judges lines read outside a transaction for a waiter whose place
	// is place: whether it may take the target now, or what blocks it
	// (matching ErrNotAcquired) and how long until the first expiry that
	// may free it. A target no release can free (a semaphore undeclared
	// meanwhile) is free: the attempt then says why it fails.
	look(c *Client, lines map[string]*line, place *queueKey) (free bool, expiresIn time.Duration, blocked error)
	// lock reports whether this is a lock, which a Client holds at most once.
	lock() bool
	// kind is spannerlock.kind: lock, permit or worker_id.
	kind() string
}

// grant is what an acquiring transaction took for one name.
type grant struct {
	name  string
	slot  int64 // lockSlot for an exclusive lock
	token int64
	// id is the grant ID written in the row (leaseKey.grant).
	id string
	// acquiredAt is the commit timestamp.
	acquiredAt time.Time
	// notBefore is, for a worker ID, when its previous holder stopped using it.
	notBefore time.Time
}

// busy ends an acquiring transaction that found its target taken. It
// matches ErrNotAcquired.
type busy struct {
	err error
	// expiresIn is how long until the first lease that blocks it expires.
	expiresIn time.Duration
}

func (b *busy) Error() string { return b.err.Error() }
func (b *busy) Unwrap() error { return b.err }

// errCompleted ends an acquisition of a RunOnce slot that succeeded (it
// commits the deletes of the slot's dead waiters take returns with it, as
// an ErrTooManyFailures does);
// errReaped commits one that only unlinked expired permits (there were
// more than one commit may take), so the next attempt can grant; errQueued
// commits one that found the target taken and put the attempt in line.
var (
	errCompleted = errors.New("completed")
	errReaped    = errors.New("reaped expired permits")
	errQueued    = errors.New("waiting in line")
)

// errWaitersAhead says a name is free but others wait for it first.
func errWaitersAhead(name string) error {
	return fmt.Errorf("%w: %q is free, but others wait in line for it", ErrNotAcquired, name)
}

// lockTarget is one lock or several taken together (AcquireAll), exclusively
// or shared, or a RunOnce slot (untilCompleted).
type lockTarget struct {
	lockNames      []string
	shared         bool
	untilCompleted bool
	// maxFailures, for a RunOnce slot, refuses to run it again once that
	// many runs failed; 0 for no bound.
	maxFailures int64
}

func (t lockTarget) names() []string { return t.lockNames }
func (t lockTarget) lock() bool      { return true }
func (t lockTarget) kind() string    { return kindLock }

func (t lockTarget) take(ctx context.Context, tx *spanner.ReadWriteTransaction, a *attempt) ([]grant, []*spanner.Mutation, error) {
	c := a.c
	// A RunOnce slot counts its runs.
	var attempts spanner.NullInt64
	if t.untilCompleted {
		attempts = spanner.NullInt64{Int64: 1, Valid: true}
	}
	if name := t.lockNames[0]; len(t.lockNames) == 1 && !t.shared && a.place == nil && !c.knows(name) {
		// A name this Client has not seen is usually new: inserting it first
		// is then the whole acquisition (one statement; the schema's default
		// picks the token). An existing row is left alone and read below.
		token, inserted, err := c.st.insertFirstRow(ctx, tx, name, a.grant, c.cfg.holderID, a.s.id, c.cfg.ttl, a.cfg.payload, attempts)
		if err != nil || inserted {
			return []grant{{name: name, slot: lockSlot, token: token, id: a.grant}}, a.sessionWrites(), err
		}
	}
	lines, err := readLines(ctx, tx, c.st.sql, t.lockNames, false)
	if err != nil {
		return nil, nil, err
	}
	if err := a.resolve(ctx, lines, judgeHolders, false); err != nil {
		return nil, nil, err
	}
	var blocked error
	var expiresIn time.Duration
	for _, name := range t.lockNames {
		l := lines[name]
		switch err := t.blocker(c, l, a.place); {
		case (errors.Is(err, errCompleted) || errors.Is(err, ErrTooManyFailures)) && a.place == nil:
			// No release writes the line of a slot done, or failed out, again
			// (nothing takes it any more): the callers that find it so take
			// its dead waiters out, or they stay as long as the row. (A
			// caller in line leaves it by leaveLine, which takes them out
			// too.) The attempt commits the deletes.
			return nil, l.leavers(c.keeper, nil), err
		case errors.Is(err, errCompleted), errors.Is(err, ErrWrongKind), errors.Is(err, ErrTooManyFailures):
			return nil, nil, err
		case err != nil && blocked == nil:
			blocked, expiresIn = err, l.soonest(t.shared)
		}
	}
	var writes []*spanner.Mutation
	if blocked != nil {
		if !a.blocking || a.place != nil {
			return nil, nil, &busy{err: blocked, expiresIn: expiresIn}
		}
		// Join the line of every name, each needing its row to exist.
		for _, name := range t.lockNames {
			if !lines[name].row.found {
				if _, err := c.st.insertFreeRow(ctx, tx, name); err != nil {
					return nil, nil, err
				}
			}
		}
		enq, err := c.st.enqueue(t.lockNames, a.s.id, c.cfg.holderID, t.shared, a.cfg.payload)
		if err != nil {
			return nil, nil, err
		}
		for _, name := range t.lockNames {
			enq = append(enq, lines[name].leavers(c.keeper, nil)...)
		}
		return nil, append(a.sessionWrites(), enq...), errQueued
	}
	grants := make([]grant, 0, len(t.lockNames))
	for _, name := range t.lockNames {
		l := lines[name]
		g, w, err := t.grantOne(ctx, tx, a, l, attempts)
		if err != nil {
			return nil, nil, err
		}
		grants, writes = append(grants, g), append(writes, w...)
		writes = append(writes, l.leavers(c.keeper, a.leaving(name))...)
	}
	return grants, append(a.sessionWrites(), writes...), nil
}

// blocker says why name's line keeps t from taking it now: a live holder
// (a *HeldError), readers when t is a writer, or live waiters ahead; nil
// when it may. It also refuses a name of the wrong kind, a RunOnce slot
// done, or one that failed too often.
func (t lockTarget) blocker(c *Client, l *line, place *queueKey) error {
	r := &l.row
	switch {
	case r.kind.Valid:
		return fmt.Errorf("%w: %q is %s, not a lock: choose another name", ErrWrongKind, l.name, describeKind(r.kind))
	case t.untilCompleted && r.completed:
		return errCompleted
	case r.live:
		return &HeldError{Holder: r.holder()}
	}
	if !t.shared {
		for _, p := range l.permits {
			if p.live {
				return &HeldError{Holder: p.holder()}
			}
		}
	}
	if l.ahead(c.keeper, t.shared, place) {
		return errWaitersAhead(l.name)
	}
	if t.untilCompleted && t.maxFailures > 0 && r.attempts.Int64 >= t.maxFailures {
		// Not live and not completed: every earlier run failed or crashed.
		return fmt.Errorf("%w: %q failed %s", ErrTooManyFailures, l.name, counted(r.attempts.Int64, "time"))
	}
	return nil
}

// soonest is how long until the first holder that blocks a taker of l
// expires.
func (l *line) soonest(shared bool) time.Duration {
	if l.row.live {
		return l.row.remaining()
	}
	var first time.Duration
	for _, p := range l.permits {
		if p.live && !shared && (first == 0 || p.remaining() < first) {
			first = p.remaining()
		}
	}
	return first
}

// grantOne writes t's holding of one free name: the lock row for a writer,
// a permit row of the name for a reader (the lock row keeps the name's last
// token).
func (t lockTarget) grantOne(ctx context.Context, tx *spanner.ReadWriteTransaction, a *attempt, l *line, attempts spanner.NullInt64) (grant, []*spanner.Mutation, error) {
	c := a.c
	r := &l.row
	if t.untilCompleted {
		attempts.Int64 = r.attempts.Int64 + 1
	}
	if !r.found && !t.shared {
		// Deleted by cleanup since this Client saw it, or a new name of an
		// AcquireAll: a first row.
		token, inserted, err := c.st.insertFirstRow(ctx, tx, l.name, a.grant, c.cfg.holderID, a.s.id, c.cfg.ttl, a.cfg.payload, attempts)
		if err == nil && !inserted {
			err = fmt.Errorf("lease: %q: a first row was neither found nor inserted", l.name)
		}
		return grant{name: l.name, slot: lockSlot, token: token, id: a.grant}, nil, err
	}
	if !t.shared {
		token := r.token.Int64 + 1
		return grant{name: l.name, slot: lockSlot, token: token, id: a.grant},
			[]*spanner.Mutation{c.st.lockGrant(l.name, token, a.grant, c.cfg.holderID, a.s.id, c.cfg.ttl, a.cfg.payload, attempts)}, nil
	}
	var writes []*spanner.Mutation
	token := r.token.Int64 + 1
	if !r.found {
		first, err := c.st.insertFreeRow(ctx, tx, l.name)
		if err != nil {
			return grant{}, nil, err
		}
		token = first
	} else {
		writes = append(writes, spanner.Update(c.st.sql.table, []string{"name", "token"}, []any{l.name, token}))
	}
	g := grant{name: l.name, slot: l.freeSlot(), token: token, id: a.grant}
	return g, append(writes, c.st.permitRow(l.name, g.slot, token, g.id, c.cfg.holderID, a.s.id, c.cfg.ttl, a.cfg.payload, time.Time{})), nil
}

// freeSlot is the lowest slot of l's permit rows that no live holding uses.
func (l *line) freeSlot() int64 {
	taken := map[int64]bool{}
	for _, p := range l.permits {
		if p.live {
			taken[p.slot] = true
		}
	}
	var slot int64
	for taken[slot] {
		slot++
	}
	return slot
}

func (t lockTarget) read(ctx context.Context, c *Client, g grant) (row, error) {
	return readKeyRow(ctx, c.st.db.Single(), c.st.sql, g.name, g.slot)
}

func (t lockTarget) look(c *Client, lines map[string]*line, place *queueKey) (bool, time.Duration, error) {
	for _, name := range t.lockNames {
		l := lines[name]
		c.noteSessions(l)
		if err := t.blocker(c, l, place); err != nil {
			if errors.Is(err, errCompleted) || errors.Is(err, ErrTooManyFailures) || errors.Is(err, ErrWrongKind) {
				return true, 0, nil // not a wait: the attempt says so
			}
			return false, l.soonest(t.shared), err
		}
	}
	return true, 0, nil
}

// leaving is the attempt's place in name's line, which the transaction
// that takes its turn takes out.
func (a *attempt) leaving(name string) []leave {
	if a.place == nil {
		return nil
	}
	return []leave{{name: name, place: a.place}}
}

// slotTarget is one permit of a semaphore, or one ID of a worker pool.
type slotTarget struct {
	pool    string
	workers bool
	// max bounds a worker pool's IDs to [0, max).
	max int64
}

func (t slotTarget) names() []string { return []string{t.pool} }
func (t slotTarget) lock() bool      { return false }

func (t slotTarget) kind() string {
	if t.workers {
		return kindWorkerID
	}
	return kindPermit
}

func (t slotTarget) take(ctx context.Context, tx *spanner.ReadWriteTransaction, a *attempt) ([]grant, []*spanner.Mutation, error) {
	c := a.c
	lines, err := readLines(ctx, tx, c.st.sql, []string{t.pool}, false)
	if err != nil {
		return nil, nil, err
	}
	l := lines[t.pool]
	if t.workers && !l.row.found {
		// A pool is created by its first member; the schema's default seeds
		// its tokens as it does a lock's.
		next, err := c.st.createParent(ctx, tx, t.pool, kindWorkers, spanner.NullInt64{})
		if err != nil {
			return nil, nil, err
		}
		l.row.found, l.row.kind, l.row.token = true, spanner.NullString{StringVal: kindWorkers, Valid: true}, next
	}
	p, err := t.planWithSessions(ctx, a, l)
	if err != nil {
		return nil, nil, err
	}
	writes := make([]*spanner.Mutation, 0, len(p.reap)+3)
	for _, r := range p.reap {
		writes = append(writes, c.st.permitUnlink(t.pool, r))
	}
	waiting := l.ahead(c.keeper, false, a.place)
	switch {
	case p.full && p.reapOnly:
		return nil, writes, errReaped
	case p.full || waiting:
		blocked := allPermitsHeld(p.inUse, t.pool)
		if !p.full {
			blocked = errWaitersAhead(t.pool)
		}
		if !a.blocking || a.place != nil {
			return nil, nil, &busy{err: blocked, expiresIn: l.state().soonest().remaining()}
		}
		enq, err := c.st.enqueue([]string{t.pool}, a.s.id, c.cfg.holderID, false, a.cfg.payload)
		if err != nil {
			return nil, nil, err
		}
		writes = append(writes, l.leavers(c.keeper, nil)...)
		return nil, append(append(writes, a.sessionWrites()...), enq...), errQueued
	}
	s := l.state()
	g := grant{name: t.pool, slot: p.slot, token: s.next.Int64, id: a.grant, notBefore: s.slot(p.slot).notBefore()}
	highWater := c.cfg.markFrom(a.sent)
	if g.notBefore.After(highWater) {
		highWater = g.notBefore
	}
	writes = append(writes, a.sessionWrites()...)
	writes = append(writes, l.leavers(c.keeper, a.leaving(t.pool))...)
	writes = append(writes, c.st.permitGrant(t.pool, g.slot, g.token, g.id, c.cfg.holderID, a.s.id, c.cfg.ttl, a.cfg.payload, highWater)...)
	return []grant{g}, writes, nil
}

// planWithSessions plans a grant, learning whether the permits' holders
// and the waiters are live only when the plan depends on it: a semaphore
// with no waiters and room even if every permit whose session is unknown
// were live needs no read. A worker pool always reads them: it takes the
// lowest free ID, and the new holder waits past its previous holder's mark.
func (t slotTarget) planWithSessions(ctx context.Context, a *attempt, l *line) (slotPlan, error) {
	if !t.workers && len(l.waiters) == 0 {
		unknown := a.assumeLive(l.permits)
		p, err := t.plan(l.state(), maxReap)
		if err != nil || !p.full || !unknown {
			return p, err
		}
	}
	if err := a.resolve(ctx, map[string]*line{l.name: l}, judgePermits, t.workers); err != nil {
		return slotPlan{}, err
	}
	return t.plan(l.state(), maxReap)
}

// maxReap bounds the expired permits one grant unlinks, so that a grant's
// commit stays far below Spanner's 80,000 mutations whatever the number of
// dead holders (4 per permit).
var maxReap = 1000

// slotPlan is what a grant does to a pool: the slot it takes and the
// expired permits it unlinks; or, when full, nothing (busy), or only the
// unlinking (reapOnly) when that makes room the bound left unclaimed.
type slotPlan struct {
	slot     int64
	reap     []row
	full     bool
	reapOnly bool
	inUse    int
}

// plan decides a grant from what the transaction read, unlinking at most
// reapLimit expired permits. A semaphore counts an expired permit it does
// not unlink as held: its holder's guarded writes conflict only with
// transactions that write its row. A worker pool needs no unlinking: the
// only row that matters to a worker ID's holder is its own, which the grant
// of that ID writes.
func (t slotTarget) plan(s semaphoreState, reapLimit int) (slotPlan, error) {
	capacity, err := t.capacity(s)
	if err != nil {
		return slotPlan{}, err
	}
	taken := map[int64]bool{}
	var p slotPlan
	unreaped := 0
	for _, r := range s.slots {
		switch {
		case t.workers && r.slot >= t.max:
		case r.live:
			taken[r.slot] = true
		case r.sessionID.Valid && !t.workers && len(p.reap) < reapLimit:
			p.reap = append(p.reap, r)
		case r.sessionID.Valid && !t.workers:
			taken[r.slot] = true
			unreaped++
		}
	}
	p.inUse = len(taken) - unreaped
	if int64(len(taken)) >= capacity {
		p.full = true
		p.reapOnly = unreaped > 0 && int64(p.inUse) < capacity
		if !p.reapOnly {
			p.reap = nil
		}
		return p, nil
	}
	for taken[p.slot] {
		p.slot++
	}
	// The granted slot's own row is overwritten by the grant.
	for i, r := range p.reap {
		if r.slot == p.slot {
			p.reap = append(p.reap[:i:i], p.reap[i+1:]...)
			break
		}
	}
	return p, nil
}

// capacity is how many permits of the pool may be live at once.
func (t slotTarget) capacity(s semaphoreState) (int64, error) {
	switch {
	case t.workers && s.kind.StringVal != kindWorkers:
		return 0, fmt.Errorf("%w: %q is %s, not a worker-ID pool: choose another name", ErrWrongKind, t.pool, describeKind(s.kind))
	case t.workers:
		return t.max, nil
	}
	if err := s.declared(); err != nil {
		return 0, err
	}
	return s.permits.Int64, nil
}

func (t slotTarget) read(ctx context.Context, c *Client, g grant) (row, error) {
	return readPermitRow(ctx, c.st.db.Single(), c.st.sql, t.pool, g.slot)
}

func (t slotTarget) look(c *Client, lines map[string]*line, place *queueKey) (bool, time.Duration, error) {
	l := lines[t.pool]
	c.noteSessions(l)
	if t.workers && !l.row.found {
		return true, 0, nil
	}
	st := l.state()
	p, err := t.plan(st, maxReap)
	switch {
	case err != nil:
		// Undeclared, or its name taken by another kind, since the waiter
		// queued: no release will change that. The attempt, which reads
		// the parent row in its transaction, returns the error.
		return true, 0, nil //nolint:nilerr // the attempt reports it, from what it reads in its transaction
	case p.full && !p.reapOnly:
		return false, st.soonest().remaining(), allPermitsHeld(p.inUse, t.pool)
	case l.ahead(c.keeper, false, place):
		return false, st.soonest().remaining(), errWaitersAhead(t.pool)
	}
	return true, 0, nil
}

// noteSessions remembers the sessions that a read outside transactions
// found expired, so acquisitions need not read them again.
func (c *Client) noteSessions(l *line) {
	for _, r := range append([]row{l.row}, l.permits...) {
		if r.sessionID.Valid && !r.live {
			c.keeper.dead.add(r.sessionID.StringVal)
		}
	}
	for _, w := range l.waiters {
		if !w.live {
			c.keeper.dead.add(w.key.session)
		}
	}
}

// allPermitsHeld is the ErrNotAcquired of a semaphore whose n permits are
// all held: "the only permit" of a semaphore of one, not "all 1 permits".
func allPermitsHeld(n int, pool string) error {
	if n == 1 {
		return fmt.Errorf("%w: the only permit of %q is held", ErrNotAcquired, pool)
	}
	return fmt.Errorf("%w: all %d permits of %q are held", ErrNotAcquired, n, pool)
}

// counted is "1 time" or "N times": n and word, made plural unless n is 1.
func counted[N ~int | ~int64](n N, word string) string {
	if n == 1 {
		return "1 " + word
	}
	return fmt.Sprintf("%d %ss", n, word)
}
