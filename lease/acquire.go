package lease

import (
	"context"
	"errors"
	"fmt"
	"time"

	"cloud.google.com/go/spanner"
	"google.golang.org/grpc/codes"
)

// TryAcquire acquires the named lease if no one holds it, in one read-write
// transaction. When a live holder has it, including this Client (leases are
// not re-entrant), the error matches ErrNotAcquired; when another Client
// holds it, the error is a *HeldError naming the holder. When Spanner could
// not answer, the error is Spanner's and does not match ErrNotAcquired. A
// returned lease is live: if its session ended while it was acquired,
// TryAcquire tries again with a new one.
func (c *Client) TryAcquire(ctx context.Context, name string, opts ...AcquireOption) (*Lease, error) {
	if err := validateName("lease name", name); err != nil {
		return nil, fmt.Errorf("lease: TryAcquire: %w", err)
	}
	return c.acquire(ctx, "TryAcquire", lockTarget{lockName: name}, newAcquireConfig(opts), true)
}

// Acquire blocks until it holds the named lease or ctx ends. While another
// process holds the lease it reads the lease row after 25ms, then at
// doubling intervals up to the poll interval, and sooner when the holder's
// lease is due to expire; a Release in this process wakes it at once.
//
// When ctx ends first, the error wraps ctx.Err() and says what the last look
// at Spanner found: if the lease was held, the error also matches
// ErrNotAcquired (a *HeldError names the holder); if Spanner could not be
// reached, it wraps that error instead, and does not match ErrNotAcquired.
func (c *Client) Acquire(ctx context.Context, name string, opts ...AcquireOption) (*Lease, error) {
	if err := validateName("lease name", name); err != nil {
		return nil, fmt.Errorf("lease: Acquire: %w", err)
	}
	return c.acquire(ctx, "Acquire", lockTarget{lockName: name}, newAcquireConfig(opts), false)
}

// acquire takes t, once when try is set, else retrying and waiting until it
// holds t or ctx ends. op names the public call, for its span; the call
// counts once in the metrics, when it ends.
func (c *Client) acquire(ctx context.Context, op string, t target, cfg acquireConfig, try bool) (*Lease, error) {
	began := time.Now()
	sctx, span := c.tel.start(ctx, op, attrName.String(t.name()), attrKind.String(t.kind()))
	l, err := c.acquireOrWait(sctx, t, cfg, try)
	result := c.tel.acquired(ctx, t.kind(), try, began, err)
	if l != nil {
		span.SetAttributes(attrToken.Int64(l.token))
		if l.slot != lockSlot {
			span.SetAttributes(attrSlot.Int64(l.slot))
		}
	}
	if result == resultError {
		end(span, result, err)
	} else {
		end(span, result, nil)
	}
	return l, err
}

func (c *Client) acquireOrWait(ctx context.Context, t target, cfg acquireConfig, try bool) (*Lease, error) {
	w := waiter{c: c, name: t.name()}
	for {
		l, err := c.acquireOnce(ctx, t, cfg)
		if err == nil {
			return l, nil
		}
		var b *busy
		switch {
		case errors.Is(err, ErrClosed), errors.Is(err, errCompleted), errors.Is(err, ErrTooManyFailures):
			return nil, err
		case ctx.Err() != nil:
			if errors.As(err, &b) {
				w.saw(err) // Spanner answered before ctx ended
			}
			return nil, w.gaveUp(ctx)
		case errors.Is(err, errReaped):
			continue
		case try:
			return nil, err
		case errors.As(err, &b):
			w.saw(err)
			err = w.untilFree(ctx, t, b)
		case transient(err), errors.As(err, new(errSessionGone)), errors.Is(err, ErrLeaseLost):
			// An outage, or sessions ending as fast as they start (a
			// loaded machine): the next try starts a new one.
			w.saw(err)
			c.log.Warn("acquire failed; retrying", "name", t.name(), "err", err)
			err = w.sleep(ctx, nil, 0)
		}
		if err != nil {
			return nil, err
		}
	}
}

// bornLostRetries bounds how often one acquisition starts again because its
// session ended while the transaction ran.
const bornLostRetries = 2

// acquireOnce runs the acquiring transaction once, and again (with a new
// session) when the session it used turned out to be gone or ended while it
// ran, so that it never returns a lease that is already lost.
func (c *Client) acquireOnce(ctx context.Context, t target, cfg acquireConfig) (*Lease, error) {
	if err := c.st.prepare(ctx); err != nil {
		return nil, err
	}
	wait, err := c.reserve(t)
	if err != nil {
		return nil, err
	}
	if wait != nil {
		return nil, &busy{err: fmt.Errorf("%w: %q is held or being acquired by this Client", ErrNotAcquired, t.name()), local: wait}
	}
	for tries := 0; ; tries++ {
		s, r, err := c.keeper.join(ctx)
		if err != nil {
			c.unreserve(t)
			return nil, err
		}
		g, err := c.attempt(ctx, s, r, t, cfg)
		var gone errSessionGone
		if errors.As(err, &gone) && tries < bornLostRetries {
			continue
		}
		if err != nil {
			c.unreserve(t)
			return nil, err
		}
		l := newLease(c, s, t, g, cfg.payload)
		if !c.register(t, l) {
			c.giveBack(l)
			return nil, ErrClosed
		}
		if s.isEnded() {
			// The session ended while the transaction ran: registered
			// first, the lease cannot have escaped endSession's losses.
			l.lose(s.endReason(), "its session ended while it was acquired")
			if tries < bornLostRetries {
				if err := c.reserveAgain(t); err != nil {
					return nil, err
				}
				continue
			}
			return nil, context.Cause(l.ctx)
		}
		return l, nil
	}
}

// attempt is one acquiring transaction of a target by a session.
type attempt struct {
	c    *Client
	s    *session
	role role
	cfg  acquireConfig
	// sent is when the transaction's current try began: the session's
	// deadline counts from it.
	sent time.Time
	// grant is the grant ID of the current try.
	grant string
}

// sessionWrites are the writes of the session's row that the attempt's
// role makes: none, its creation, or its renewal. All blind.
func (a *attempt) sessionWrites() []*spanner.Mutation {
	if m := a.s.write(a.role, a.c.cfg.holderID, a.c.st.sql, a.sent); m != nil {
		return []*spanner.Mutation{m}
	}
	return nil
}

// knownDead reports whether a row's session is known to hold nothing: one
// of this Client's ended sessions, or another's that Spanner was seen to
// have expired. A row of this Client's current session that it let us
// acquire is an orphan too: a lease let go whose release has not reached
// Spanner yet, or an acquisition whose outcome was never learnt. A Client
// holds a lock once, so nothing uses it; for permits, the current session's
// rows may be held, and count as live.
func (a *attempt) knownDead(r *row, lock bool) (dead, known bool) {
	id := r.sessionID.StringVal
	switch {
	case !r.sessionID.Valid:
		return true, true
	case id == a.s.id:
		return lock, true
	case a.c.keeper.owns(id), a.c.keeper.dead.has(id):
		return true, true
	}
	return false, false
}

// assumeLive marks every row live whose session is not known to be dead,
// and reports whether any was unknown.
func (a *attempt) assumeLive(rows []*row) (unknown bool) {
	for _, r := range rows {
		dead, known := a.knownDead(r, false)
		r.live = !dead
		unknown = unknown || !known
	}
	return unknown
}

// holdersLive learns whether the sessions named by rows read in the
// transaction are live, by one strong read outside it for those not known
// (and, with needMarks, for every other session, for its worker-ID mark):
// reading them inside would hold a lock on each session's row until the
// transaction ended, and make its renewals wait.
func (a *attempt) holdersLive(ctx context.Context, rows []*row, needMarks bool) error {
	lock := len(rows) == 1 && rows[0].slot == lockSlot
	var ids []string
	for _, r := range rows {
		dead, known := a.knownDead(r, lock)
		r.live = known && !dead
		if r.sessionID.Valid && r.sessionID.StringVal != a.s.id && (!known || needMarks) {
			ids = append(ids, r.sessionID.StringVal)
		}
	}
	if len(ids) == 0 {
		return nil
	}
	rctx, cancel := outsideTransaction(ctx)
	defer cancel()
	states, err := readSessions(rctx, a.c.st.db, a.c.st.sql, ids)
	if err != nil {
		return err
	}
	for _, r := range rows {
		id := r.sessionID.StringVal
		if !r.sessionID.Valid || id == a.s.id {
			continue
		}
		dead, known := a.knownDead(r, lock)
		r.withSession(states[id]) // a session with no row is not live
		if known && dead {
			r.live = false
		}
		if !r.live {
			a.c.keeper.dead.add(id)
		}
	}
	return nil
}

// attempt runs one acquiring transaction (retrying Spanner's aborts) and
// settles what its outcome means for the session: confirmed, certainly not
// written, ended (gone from Spanner, or committed too late to count), or
// unknown.
func (c *Client) attempt(ctx context.Context, s *session, r role, t target, cfg acquireConfig) (grant, error) {
	var (
		a          *attempt
		g          grant
		committing bool
		reaped     bool
	)
	if r == create {
		// Whatever ends this attempt without confirming or abandoning the
		// session: it rolled back before committing, so nothing was written.
		defer s.notCreated()
	}
	actx, cancel := context.WithTimeout(ctx, c.cfg.callTimeout())
	defer cancel()
	deadline, _ := actx.Deadline()
	commitTs, err := c.st.transact(actx, callerLane, "spannerlock-acquire", func(ctx context.Context, tx *spanner.ReadWriteTransaction) ([]*spanner.Mutation, error) {
		a = &attempt{c: c, s: s, role: r, cfg: cfg, sent: time.Now(), grant: randomHex(16)}
		var (
			writes []*spanner.Mutation
			err    error
		)
		g, writes, err = t.take(ctx, tx, a)
		reaped = errors.Is(err, errReaped)
		committing = err == nil || reaped
		if reaped {
			return writes, nil
		}
		return writes, err
	})
	switch {
	case err != nil && committing && r == create && spanner.ErrCode(err) == codes.AlreadyExists:
		err = errSessionGone{s} // the session's ID was already in Spanner
	case err != nil && committing && r == joinRefresh && isRowNotFound(err):
		err = errSessionGone{s}
	case err != nil && committing && !reaped:
		// The commit may have happened (DEADLINE_EXCEEDED or UNAVAILABLE on
		// Commit): read the row rather than guess.
		if got, held := c.heldAfter(ctx, t, s, g); held {
			c.log.Info("acquisition committed despite an error", "name", t.name(), "token", g.token, "err", err)
			err, commitTs = nil, got.acquired.Time
		} else {
			c.outcomeUnknown(s, r, t, g, deadline)
			return grant{}, c.st.explain(err)
		}
	}
	var gone errSessionGone
	switch {
	case err == nil && reaped:
		c.remember(t)
		return grant{}, errReaped
	case err == nil && !s.confirm(r, a.sent, commitTs):
		// Committed too late to count, or into a session that ended
		// meanwhile: its row may have expired in Spanner before the lease
		// was written. The lease is born lost; a new session follows.
		c.remember(t)
		c.keeper.endSession(s, lossDeadline, "an acquisition committed after its session could have expired in Spanner")
		return grant{}, errSessionGone{s}
	case err == nil:
		g.acquiredAt = commitTs
		c.remember(t)
		c.log.Debug("acquired", "name", t.name(), "slot", g.slot, "token", g.token)
		return g, nil
	case errors.As(err, &gone) && r == create:
		c.keeper.abandon(s, "its ID was already in Spanner")
		return grant{}, err
	case errors.As(err, &gone):
		c.keeper.endSession(s, lossSessionGone, "an acquisition found its session gone from Spanner")
		return grant{}, err
	}
	var b *busy
	if errors.As(err, &b) || errors.Is(err, errCompleted) {
		c.remember(t)
		return grant{}, err
	}
	return grant{}, c.st.explain(err)
}

// heldAfter reads whether an acquisition whose commit reported an error
// holds its grant after all. A strong read sees every commit that finished
// before it began; one still in flight is settled by outcomeUnknown.
func (c *Client) heldAfter(ctx context.Context, t target, s *session, g grant) (row, bool) {
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), c.cfg.callTimeout())
	defer cancel()
	r, err := t.read(rctx, c, g)
	return r, err == nil && r.heldBy(s.id, g.token, g.id)
}

// outcomeUnknown makes sure an acquisition that may yet commit holds nothing
// for longer than a TTL. A creator's session is abandoned (its row is
// written as expired, which also makes a late insert of it fail). A
// joiner's grant is left to the keeper, which clears the row if it names
// the grant, until the transaction can no longer land (its deadline).
func (c *Client) outcomeUnknown(s *session, r role, t target, g grant, deadline time.Time) {
	if r == create {
		c.keeper.abandon(s, "the acquisition that created it has an unknown outcome")
		return
	}
	c.keeper.letGoLater(s, letGo{leaseKey: leaseKey{name: t.name(), slot: g.slot, token: g.token, grant: g.id},
		until: deadline.Add(c.cfg.endTimeout())})
}

// reserve claims a lock name for one acquisition by this Client; it returns
// a channel to wait on when the name is already held or being acquired here.
// Slots need no claim: a Client may hold several permits of one semaphore.
func (c *Client) reserve(t target) (<-chan struct{}, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return nil, ErrClosed
	}
	if !t.lock() {
		return nil, nil
	}
	st := c.state(t.name())
	if st.acquiring || st.held != nil {
		return st.changed, nil
	}
	st.acquiring = true
	return nil, nil
}

// reserveAgain claims a lock name again after its lease was born lost.
func (c *Client) reserveAgain(t target) error {
	wait, err := c.reserve(t)
	if err == nil && wait != nil {
		err = fmt.Errorf("%w: %q is held or being acquired by this Client", ErrNotAcquired, t.name())
	}
	return err
}

// unreserve ends a claim that acquired nothing.
func (c *Client) unreserve(t target) {
	if !t.lock() {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	st := c.state(t.name())
	st.acquiring = false
	c.settle(t.name(), st)
}

// register records a newly held lease so that it is renewed, ending the
// claim on its name; it reports false if the Client closed meanwhile.
func (c *Client) register(t target, l *Lease) bool {
	c.mu.Lock()
	if t.lock() {
		st := c.state(l.name)
		st.acquiring = false
		if !c.closed {
			st.held = l
		}
		c.settle(l.name, st)
	}
	closed := c.closed
	c.mu.Unlock()
	if closed || !c.keeper.register(l) {
		c.mu.Lock()
		if st := c.names[l.name]; t.lock() && st != nil && st.held == l {
			st.held = nil
			c.settle(l.name, st)
		}
		c.mu.Unlock()
		return false
	}
	l.registered()
	return true
}

// maxKnownNames bounds the memory of names a Client has seen exist; past
// it the Client forgets them all, at the cost of one statement each later.
const maxKnownNames = 10000

// knows reports whether name's row existed when this Client last looked.
func (c *Client) knows(name string) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	_, ok := c.known[name]
	return ok
}

// remember records that a lock's row exists.
func (c *Client) remember(t target) {
	if !t.lock() {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.known) >= maxKnownNames {
		clear(c.known)
	}
	c.known[t.name()] = struct{}{}
}
