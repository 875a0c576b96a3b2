package lease

import (
	"context"
	"errors"
	"fmt"
	"time"

	"cloud.google.com/go/spanner"
)

// target is what an acquisition takes: a lock, or a slot of a semaphore or
// worker pool. Only the rows differ; sessions, unknown outcomes, waiting,
// registration and release are shared (acquire.go, release.go).
type target interface {
	// take runs inside the acquiring transaction: it reads what it needs
	// and returns the writes that take the target, or a *busy error when
	// the target is taken. It never reads a session row in the
	// transaction: attempt.holdersLive reads them outside.
	take(ctx context.Context, tx *spanner.ReadWriteTransaction, a *attempt) (grant, []*spanner.Mutation, error)
	// read reads the row a grant wrote, to learn an unknown outcome.
	read(ctx context.Context, c *Client, g grant) (row, error)
	// poll reads, outside any transaction, whether an acquisition could
	// succeed now, or who blocks it (an error matching ErrNotAcquired) and
	// how long until the first expiry that may free it.
	poll(ctx context.Context, c *Client) (blocked error, expiresIn time.Duration, err error)
	// name is the lock, semaphore or pool name.
	name() string
	// lock reports whether this is a lock, which a Client holds at most once.
	lock() bool
	// kind is spannerlock.kind: lock, permit or worker_id.
	kind() string
}

// grant is what an acquiring transaction took.
type grant struct {
	slot  int64 // lockSlot for a lock
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
	// local is set when this Client holds the name: closed when that changes.
	local <-chan struct{}
}

func (b *busy) Error() string { return b.err.Error() }
func (b *busy) Unwrap() error { return b.err }

// errCompleted ends an acquisition of a RunOnce slot that succeeded, and
// errReaped commits one that only unlinked expired permits (there were
// more than one commit may take), so the next attempt can grant.
var (
	errCompleted = errors.New("completed")
	errReaped    = errors.New("reaped expired permits")
)

// lockTarget is a lock, or a RunOnce slot (untilCompleted).
type lockTarget struct {
	lockName       string
	untilCompleted bool
	// maxFailures, for a RunOnce slot, refuses to run it again once that
	// many runs failed; 0 for no bound.
	maxFailures int64
}

func (t lockTarget) name() string { return t.lockName }
func (t lockTarget) lock() bool   { return true }
func (t lockTarget) kind() string { return kindLock }

func (t lockTarget) take(ctx context.Context, tx *spanner.ReadWriteTransaction, a *attempt) (grant, []*spanner.Mutation, error) {
	c, name := a.c, t.lockName
	// A RunOnce slot counts its runs.
	var attempts spanner.NullInt64
	if t.untilCompleted {
		attempts = spanner.NullInt64{Int64: 1, Valid: true}
	}
	if !c.knows(name) {
		// A name this Client has not seen is usually new: inserting it first
		// is then the whole acquisition (one statement; the schema's default
		// picks the token). An existing row is left alone and read below.
		token, inserted, err := c.st.insertFirstRow(ctx, tx, name, a.grant, c.cfg.holderID, a.s.id, c.cfg.ttl, a.cfg.payload, attempts)
		if err != nil || inserted {
			return grant{slot: lockSlot, token: token, id: a.grant}, a.sessionWrites(), err
		}
	}
	r, err := readLockInTx(ctx, tx, c.st.sql, name)
	switch {
	case err != nil:
		return grant{}, nil, err
	case r.kind.Valid:
		return grant{}, nil, fmt.Errorf("%w: %q is %s, not a lock: choose another name", ErrWrongKind, name, describeKind(r.kind))
	case t.untilCompleted && r.completed:
		return grant{}, nil, errCompleted
	}
	if err := a.holdersLive(ctx, []*row{&r}, false); err != nil {
		return grant{}, nil, err
	}
	switch {
	case r.live:
		return grant{}, nil, &busy{err: &HeldError{Holder: r.holder()}, expiresIn: r.remaining()}
	case t.untilCompleted && t.maxFailures > 0 && r.attempts.Int64 >= t.maxFailures:
		// Not live and not completed: every earlier run failed or crashed.
		return grant{}, nil, fmt.Errorf("%w: %q failed %d times", ErrTooManyFailures, name, r.attempts.Int64)
	case !r.found:
		// Deleted by cleanup since this Client saw it: a first row again.
		token, inserted, err := c.st.insertFirstRow(ctx, tx, name, a.grant, c.cfg.holderID, a.s.id, c.cfg.ttl, a.cfg.payload, attempts)
		if err == nil && !inserted {
			err = fmt.Errorf("lease: %q: a first row was neither found nor inserted", name)
		}
		return grant{slot: lockSlot, token: token, id: a.grant}, a.sessionWrites(), err
	}
	if t.untilCompleted {
		attempts.Int64 = r.attempts.Int64 + 1
	}
	token := r.token.Int64 + 1
	writes := append(a.sessionWrites(), c.st.lockGrant(name, token, a.grant, c.cfg.holderID, a.s.id, c.cfg.ttl, a.cfg.payload, attempts))
	return grant{slot: lockSlot, token: token, id: a.grant}, writes, nil
}

func (t lockTarget) read(ctx context.Context, c *Client, _ grant) (row, error) {
	return readRow(ctx, c.st.db.Single(), c.st.sql, t.lockName)
}

func (t lockTarget) poll(ctx context.Context, c *Client) (error, time.Duration, error) {
	r, err := readRow(ctx, c.st.db.Single(), c.st.sql, t.lockName)
	if err != nil {
		return nil, 0, err
	}
	c.noteSessions(r)
	if !r.live || c.keeper.owns(r.sessionID.StringVal) || (t.untilCompleted && r.completed) {
		return nil, 0, nil
	}
	return &HeldError{Holder: r.holder()}, r.remaining(), nil
}

// slotTarget is one permit of a semaphore, or one ID of a worker pool.
type slotTarget struct {
	pool    string
	workers bool
	// max bounds a worker pool's IDs to [0, max).
	max int64
}

func (t slotTarget) name() string { return t.pool }
func (t slotTarget) lock() bool   { return false }

func (t slotTarget) kind() string {
	if t.workers {
		return kindWorkerID
	}
	return kindPermit
}

func (t slotTarget) take(ctx context.Context, tx *spanner.ReadWriteTransaction, a *attempt) (grant, []*spanner.Mutation, error) {
	c := a.c
	s, err := readPoolInTx(ctx, tx, c.st.sql, t.pool)
	if err != nil {
		return grant{}, nil, err
	}
	if t.workers && !s.found {
		// A pool is created by its first member; the schema's default seeds
		// its tokens as it does a lock's.
		if s.next, err = c.st.createParent(ctx, tx, t.pool, kindWorkers, spanner.NullInt64{}); err != nil {
			return grant{}, nil, err
		}
		s.found, s.kind = true, spanner.NullString{StringVal: kindWorkers, Valid: true}
	}
	p, err := t.planWithSessions(ctx, a, &s)
	if err != nil {
		return grant{}, nil, err
	}
	writes := make([]*spanner.Mutation, 0, len(p.reap)+3)
	for _, r := range p.reap {
		writes = append(writes, c.st.permitUnlink(t.pool, r))
	}
	if p.full {
		if p.reapOnly {
			return grant{}, writes, errReaped
		}
		return grant{}, nil, &busy{err: fmt.Errorf("%w: all %d permits of %q are held", ErrNotAcquired, p.inUse, t.pool), expiresIn: s.soonest().remaining()}
	}
	g := grant{slot: p.slot, token: s.next.Int64, id: a.grant, notBefore: s.slot(p.slot).notBefore()}
	highWater := c.cfg.markFrom(a.sent)
	if g.notBefore.After(highWater) {
		highWater = g.notBefore
	}
	writes = append(writes, a.sessionWrites()...)
	writes = append(writes, c.st.permitGrant(t.pool, g.slot, g.token, g.id, c.cfg.holderID, a.s.id, c.cfg.ttl, a.cfg.payload, highWater)...)
	return g, writes, nil
}

// planWithSessions plans a grant, learning whether the permits' holders are
// live only when the plan depends on it: a semaphore with room even if
// every permit whose session is unknown were live needs no read. A worker
// pool always reads them: it takes the lowest free ID, and the new holder
// waits past its previous holder's mark.
func (t slotTarget) planWithSessions(ctx context.Context, a *attempt, s *semaphoreState) (slotPlan, error) {
	rows := make([]*row, 0, len(s.slots))
	for i := range s.slots {
		rows = append(rows, &s.slots[i])
	}
	if !t.workers {
		unknown := a.assumeLive(rows)
		p, err := t.plan(*s, maxReap)
		if err != nil || !p.full || !unknown {
			return p, err
		}
	}
	if err := a.holdersLive(ctx, rows, t.workers); err != nil {
		return slotPlan{}, err
	}
	return t.plan(*s, maxReap)
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
	var capacity int64
	switch {
	case t.workers && s.kind.StringVal != kindWorkers:
		return slotPlan{}, fmt.Errorf("%w: %q is %s, not a worker-ID pool: choose another name", ErrWrongKind, t.pool, describeKind(s.kind))
	case t.workers:
		capacity = t.max
	default:
		if err := s.declared(); err != nil {
			return slotPlan{}, err
		}
		capacity = s.permits.Int64
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

func (t slotTarget) read(ctx context.Context, c *Client, g grant) (row, error) {
	return readPermitRow(ctx, c.st.db.Single(), c.st.sql, t.pool, g.slot)
}

func (t slotTarget) poll(ctx context.Context, c *Client) (error, time.Duration, error) {
	s, err := readSemaphore(ctx, c.st.db.Single(), c.st.sql, t.pool)
	if err != nil {
		return nil, 0, err
	}
	for _, r := range s.slots {
		c.noteSessions(r)
	}
	if t.workers && !s.found {
		return nil, 0, nil
	}
	p, err := t.plan(s, maxReap)
	if err != nil {
		return nil, 0, err
	}
	if !p.full || p.reapOnly {
		return nil, 0, nil
	}
	return fmt.Errorf("%w: all %d permits of %q are held", ErrNotAcquired, p.inUse, t.pool), s.soonest().remaining(), nil
}

// noteSessions remembers a session that a read outside transactions found
// expired, so acquisitions need not read it again.
func (c *Client) noteSessions(r row) {
	if r.sessionID.Valid && !r.live {
		c.keeper.dead.add(r.sessionID.StringVal)
	}
}
