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
	// take runs inside the acquiring transaction: it reads what it needs,
	// checks the session through a.useSession, and buffers its writes. It
	// returns a *busy error when the target is taken.
	take(ctx context.Context, tx *spanner.ReadWriteTransaction, a *attempt) (grant, error)
	// read reads the row a grant wrote, to learn an unknown outcome.
	read(ctx context.Context, q querier, c *Client, g grant) (row, error)
	// poll reads whether an acquisition could succeed now (self is the
	// reader's session), or how long until the first expiry that may free it.
	poll(ctx context.Context, q querier, c *Client, self string) (free bool, expiresIn time.Duration, err error)
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
	// acquiredAt is the commit timestamp.
	acquiredAt time.Time
	// notBefore is, for a worker ID, when its previous holder stopped using it.
	notBefore time.Time
}

// busy rolls back an acquiring transaction that found its target taken. It
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

// errCompleted rolls back an acquisition of a RunOnce slot that succeeded,
// and errReaped commits one that only unlinked expired permits (there were
// more than one commit may take), so the next attempt can grant.
var (
	errCompleted = errors.New("completed")
	errReaped    = errors.New("reaped expired permits")
)

// lockTarget is a lock, or a RunOnce slot (untilCompleted).
type lockTarget struct {
	lockName       string
	untilCompleted bool
}

func (t lockTarget) name() string { return t.lockName }
func (t lockTarget) lock() bool   { return true }
func (t lockTarget) kind() string { return kindLock }

func (t lockTarget) take(ctx context.Context, tx *spanner.ReadWriteTransaction, a *attempt) (grant, error) {
	c, name := a.c, t.lockName
	if !c.knows(name) {
		// A name this Client has not seen is usually new: inserting it first
		// is then the whole acquisition (one statement; the schema's default
		// picks the token, and a joiner's session is checked in it). An
		// existing row is left alone and read below.
		token, inserted, err := a.insertFirstRow(ctx, tx, name)
		if err != nil || inserted {
			return grant{slot: lockSlot, token: token}, err
		}
	}
	r, err := readRow(ctx, tx, c.sql, name, a.s.id)
	switch {
	case err != nil:
		return grant{}, err
	case r.kind.Valid:
		return grant{}, fmt.Errorf("lease: %q is %s, not a lock: choose another name", name, describeKind(r.kind))
	case t.untilCompleted && r.completed:
		return grant{}, errCompleted
	// A live row of this Client's session that the Client let us acquire is
	// an orphan: a lease let go whose release has not reached Spanner yet,
	// or an acquisition whose outcome was never learnt. Nothing uses it, so
	// this acquisition supersedes it with a larger token.
	case r.live && r.sessionID.StringVal != a.s.id:
		return grant{}, &busy{err: &HeldError{Holder: r.holder()}, expiresIn: r.remaining()}
	}
	if err := a.useSession(tx, r.self); err != nil {
		return grant{}, err
	}
	if !r.found {
		// Deleted by cleanup since this Client saw it: a first row again.
		token, inserted, err := a.insertFirstRow(ctx, tx, name)
		if err == nil && !inserted {
			err = fmt.Errorf("lease: %q: a first row was neither found nor inserted", name)
		}
		return grant{slot: lockSlot, token: token}, err
	}
	token := r.token.Int64 + 1
	return grant{slot: lockSlot, token: token}, tx.BufferWrite([]*spanner.Mutation{spanner.Update(c.sql.table,
		[]string{"name", "token", "holder_id", "session_id", "ttl_ms", "acquired_at", "renewed_at", "payload"},
		[]any{name, token, c.cfg.holderID, a.s.id, c.cfg.ttl.Milliseconds(), spanner.CommitTimestamp, spanner.CommitTimestamp, a.cfg.payload},
	)})
}

// insertFirstRow inserts the first row of name unless one exists, and
// reports whether it did, with the token the schema gave it. A joiner's row
// names its session only if Spanner has the session live; otherwise the
// transaction is rolled back with errSessionGone.
func (a *attempt) insertFirstRow(ctx context.Context, tx *spanner.ReadWriteTransaction, name string) (token int64, inserted bool, err error) {
	c := a.c
	var named spanner.NullString
	err = tx.Query(ctx, c.sql.insert.bind(map[string]any{
		"name": name, "holder": c.cfg.holderID, "session": a.s.id, "creating": a.role == create,
		"ttl": c.cfg.ttl.Milliseconds(), "payload": a.cfg.payload,
	})).Do(func(r *spanner.Row) error {
		inserted = true
		return r.Columns(&token, &named)
	})
	if err != nil || !inserted {
		return token, inserted, err
	}
	self := spanner.NullBool{} // a creator's row does not exist yet
	if a.role != create {
		self = spanner.NullBool{Bool: named.Valid, Valid: true}
	}
	return token, true, a.useSession(tx, self)
}

func (t lockTarget) read(ctx context.Context, q querier, c *Client, _ grant) (row, error) {
	return readRow(ctx, q, c.sql, t.lockName, "")
}

func (t lockTarget) poll(ctx context.Context, q querier, c *Client, self string) (bool, time.Duration, error) {
	r, err := readRow(ctx, q, c.sql, t.lockName, "")
	free := !r.live || r.sessionID.StringVal == self || (t.untilCompleted && r.completed)
	return free, r.remaining(), err
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

func (t slotTarget) take(ctx context.Context, tx *spanner.ReadWriteTransaction, a *attempt) (grant, error) {
	c := a.c
	s, err := readSemaphore(ctx, tx, c.sql, t.pool, a.s.id)
	if err != nil {
		return grant{}, err
	}
	if t.workers && !s.found {
		// A pool is created by its first member; the schema's default seeds
		// its tokens as it does a lock's.
		err := tx.Query(ctx, c.sql.insertParent.bind(map[string]any{
			"name": t.pool, "kind": kindWorkers, "permits": spanner.NullInt64{},
		})).Do(func(r *spanner.Row) error { return r.Column(0, &s.next) })
		if err != nil {
			return grant{}, err
		}
		s.found, s.kind = true, spanner.NullString{StringVal: kindWorkers, Valid: true}
	}
	p, err := t.plan(s, maxReap)
	if err != nil {
		return grant{}, err
	}
	writes := make([]*spanner.Mutation, 0, len(p.reap)+2)
	// Unlinking an expired permit writes its row, so a stale holder's
	// guarded write still in flight (Guard reads that row) conflicts with
	// this transaction: Spanner orders it first or aborts it. Its high-water
	// mark moves onto the row as the session link goes.
	for _, r := range p.reap {
		writes = append(writes, spanner.Update(c.sql.permits,
			[]string{"name", "slot", "session_id", "high_water"}, []any{t.pool, r.slot, nil, nullTime(r.notBefore())}))
	}
	if p.full {
		if p.reapOnly {
			if err := tx.BufferWrite(writes); err != nil {
				return grant{}, err
			}
			return grant{}, errReaped
		}
		return grant{}, &busy{err: fmt.Errorf("%w: all %d permits of %q are held", ErrNotAcquired, p.inUse, t.pool), expiresIn: s.soonest().remaining()}
	}
	if err := a.useSession(tx, s.self); err != nil {
		return grant{}, err
	}
	g := grant{slot: p.slot, token: s.next.Int64, notBefore: s.slot(p.slot).notBefore()}
	highWater := c.markFrom(a.sent)
	if g.notBefore.After(highWater) {
		highWater = g.notBefore
	}
	writes = append(writes,
		spanner.Update(c.sql.table, []string{"name", "token"}, []any{t.pool, g.token + 1}),
		spanner.InsertOrUpdate(c.sql.permits,
			[]string{"name", "slot", "token", "holder_id", "session_id", "ttl_ms", "acquired_at", "renewed_at", "payload", "high_water"},
			[]any{t.pool, g.slot, g.token, c.cfg.holderID, a.s.id, c.cfg.ttl.Milliseconds(), spanner.CommitTimestamp, spanner.CommitTimestamp, a.cfg.payload, highWater}))
	return g, tx.BufferWrite(writes)
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
		return slotPlan{}, fmt.Errorf("lease: %q is %s, not a worker-ID pool: choose another name", t.pool, describeKind(s.kind))
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

func (t slotTarget) read(ctx context.Context, q querier, c *Client, g grant) (row, error) {
	return readPermitRow(ctx, q, c.sql, t.pool, g.slot)
}

func (t slotTarget) poll(ctx context.Context, q querier, c *Client, _ string) (bool, time.Duration, error) {
	s, err := readSemaphore(ctx, q, c.sql, t.pool, "")
	if err != nil {
		return false, 0, err
	}
	if t.workers && !s.found {
		return true, 0, nil
	}
	p, err := t.plan(s, maxReap)
	if err != nil {
		return false, 0, err
	}
	return !p.full || p.reapOnly, s.soonest().remaining(), nil
}

// nullTime is a TIMESTAMP parameter that is NULL for the zero time.
func nullTime(t time.Time) spanner.NullTime {
	return spanner.NullTime{Time: t, Valid: !t.IsZero()}
}
