package lease

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"cloud.google.com/go/spanner"
	"google.golang.org/grpc/codes"
)

// TryAcquire acquires the named lease if no one holds it and no one waits
// in line for it, in one read-write transaction. When a live holder has it,
// including this Client (leases are not re-entrant), or live waiters are in
// line, the error matches ErrNotAcquired; when another Client holds it, the
// error is a *HeldError naming the holder. When Spanner could not answer,
// the error is Spanner's and does not match ErrNotAcquired. A returned
// lease is live: if its session ended while it was acquired, TryAcquire
// tries again with a new one.
func (c *Client) TryAcquire(ctx context.Context, name string, opts ...AcquireOption) (*Lease, error) {
	if err := validateName("lease name", name); err != nil {
		return nil, fmt.Errorf("lease: TryAcquire: %w", err)
	}
	return c.acquireOne(ctx, "TryAcquire", lockTarget{lockNames: []string{name}}, opts, true)
}

// Acquire blocks until it holds the named lease or ctx ends. Waiters are
// served first come, first served, across processes: when the lease is
// held, or others wait for it, Acquire joins the line (a row in Spanner
// that lives as long as its Client's session); when the lease is free,
// the first live waiter in line takes it, in its own transaction. While it
// waits it reads its line after 25ms, then at doubling intervals up to the
// poll interval, and sooner when the holder's lease is due to expire; a
// Release in this process wakes it at once.
//
// When ctx ends first, Acquire leaves the line and returns a *WaitError
// wrapping ctx.Err() and what the last look at Spanner found: if the lease
// was held, the error also matches ErrNotAcquired (a *HeldError names the
// holder); if Spanner could not be reached, it wraps that error instead,
// and does not match ErrNotAcquired.
func (c *Client) Acquire(ctx context.Context, name string, opts ...AcquireOption) (*Lease, error) {
	if err := validateName("lease name", name); err != nil {
		return nil, fmt.Errorf("lease: Acquire: %w", err)
	}
	return c.acquireOne(ctx, "Acquire", lockTarget{lockNames: []string{name}}, opts, false)
}

// AcquireShared blocks until it holds the named lease shared (a reader):
// many readers hold a name at once, and no writer (Acquire) while they do.
// As with Acquire, a Client holds a name once, shared or not: a second
// acquisition of it by the same Client waits for the first lease to end.
// Readers and writers wait in one line in the order they came, so a writer
// is not starved by readers that keep coming. A shared lease has its own
// token, larger than every earlier holding of the name, and Guard checks
// it as for any lease. Errors are Acquire's.
func (c *Client) AcquireShared(ctx context.Context, name string, opts ...AcquireOption) (*Lease, error) {
	if err := validateName("lease name", name); err != nil {
		return nil, fmt.Errorf("lease: AcquireShared: %w", err)
	}
	return c.acquireOne(ctx, "AcquireShared", lockTarget{lockNames: []string{name}, shared: true}, opts, false)
}

// TryAcquireShared holds the named lease shared if no writer holds it and
// no writer waits in line for it; otherwise the error matches
// ErrNotAcquired.
func (c *Client) TryAcquireShared(ctx context.Context, name string, opts ...AcquireOption) (*Lease, error) {
	if err := validateName("lease name", name); err != nil {
		return nil, fmt.Errorf("lease: TryAcquireShared: %w", err)
	}
	return c.acquireOne(ctx, "TryAcquireShared", lockTarget{lockNames: []string{name}, shared: true}, opts, true)
}

// acquireOne is acquire for a target of one name.
func (c *Client) acquireOne(ctx context.Context, op string, t target, opts []AcquireOption, try bool) (*Lease, error) {
	leases, err := c.acquire(ctx, op, t, newAcquireConfig(opts), try)
	if err != nil {
		return nil, err
	}
	return leases[0], nil
}

// acquire takes t, once when try is set, else waiting in line until it
// holds t or ctx ends. op names the public call, for its span; the call
// counts once in the metrics, when it ends.
func (c *Client) acquire(ctx context.Context, op string, t target, cfg acquireConfig, try bool) ([]*Lease, error) {
	began := time.Now()
	sctx, span := c.tel.start(ctx, op, attrName.String(strings.Join(t.names(), ",")), attrKind.String(t.kind()))
	leases, err := c.acquireOrWait(sctx, t, cfg, try)
	result := c.tel.acquired(ctx, t.kind(), try, began, err)
	if len(leases) == 1 {
		span.SetAttributes(attrToken.Int64(leases[0].token))
		if leases[0].slot != lockSlot {
			span.SetAttributes(attrSlot.Int64(leases[0].slot))
		}
	}
	if result == resultError {
		end(span, result, err)
	} else {
		end(span, result, nil)
	}
	return leases, err
}

// acquireOrWait takes t, holding this Client's claim on its names
// throughout: a Client waits in a line once per name.
func (c *Client) acquireOrWait(ctx context.Context, t target, cfg acquireConfig, try bool) ([]*Lease, error) {
	w := waiter{c: c, name: strings.Join(t.names(), ",")}
	if err := c.prepare(ctx, &w, try); err != nil {
		return nil, err
	}
	for {
		wait, err := c.reserve(t)
		switch {
		case err != nil:
			return nil, err
		case wait == nil:
		case try:
			return nil, fmt.Errorf("%w: %q is held or being acquired by this Client", ErrNotAcquired, w.name)
		default:
			if err := w.sleep(ctx, wait, 0); err != nil {
				return nil, err
			}
			continue
		}
		leases, err := c.inLine(ctx, &w, t, cfg, try)
		if len(leases) == 0 {
			c.unreserve(t)
		}
		return leases, err
	}
}

// prepare reads the database's dialect, once per Client. A blocking
// acquisition retries an outage there as it does any other, until its
// context ends: a Spanner slow to answer the first call of a process is no
// reason to fail a caller that is willing to wait.
func (c *Client) prepare(ctx context.Context, w *waiter, try bool) error {
	for {
		err := c.st.prepare(ctx)
		switch {
		case err == nil:
			return nil
		case try:
			return err
		case ctx.Err() != nil:
			return w.gaveUp(ctx)
		case !transient(err):
			return err
		}
		w.saw(err)
		c.log.Warn("reading the database dialect failed; retrying", "name", w.name, "err", err)
		if err := w.sleep(ctx, nil, 0); err != nil {
			return err
		}
	}
}

// inLine acquires t for a caller that holds its names' claim: an attempt,
// and for a blocking call, a place in line and the wait for its turn, when
// it attempts again.
func (c *Client) inLine(ctx context.Context, w *waiter, t target, cfg acquireConfig, try bool) ([]*Lease, error) {
	var place *queueKey
	var placed *session
	// unplace forgets the caller's place (the transaction that took its
	// turn took the entry out, or the entry is gone).
	unplace := func() {
		if place != nil {
			c.waiting(t, *place, false)
			place, placed = nil, nil
		}
	}
	defer unplace()
	leave := func() {
		if place != nil {
			p, s := *place, placed
			unplace()
			c.leaveLine(ctx, t, s, p)
		}
	}
	for {
		if place != nil && placed.isEnded() {
			// A place held by an ended session is gone with it.
			leave()
		}
		leases, at, s, err := c.acquireOnce(ctx, t, cfg, place, !try)
		var b *busy
		switch {
		case err == nil:
			return leases, nil
		case errors.Is(err, errQueued):
			unplace() // of a session that ended meanwhile
			place, placed = &queueKey{at: at, session: s.id}, s
			c.waiting(t, *place, true)
			err = nil
		case errors.Is(err, ErrClosed), errors.Is(err, errCompleted), errors.Is(err, ErrTooManyFailures):
			leave()
			return nil, err
		case ctx.Err() != nil:
			if errors.As(err, &b) {
				w.saw(err) // Spanner answered before ctx ended
			}
			leave()
			return nil, w.gaveUp(ctx)
		case errors.Is(err, errReaped):
			continue
		case try:
			return nil, err
		case errors.As(err, &b):
			// In line, and not yet its turn after all; or (not in line) the
			// attempt could not queue: it sleeps and tries again.
			w.saw(err)
			err = nil
			if place == nil {
				err = w.sleep(ctx, nil, b.expiresIn)
			}
		case transient(err), errors.As(err, new(errSessionGone)), errors.Is(err, ErrLeaseLost):
			// An outage, or sessions ending as fast as they start (a
			// loaded machine): the next try starts a new one.
			w.saw(err)
			c.log.Warn("acquire failed; retrying", "name", w.name, "err", err)
			err = w.sleep(ctx, nil, 0)
		}
		if err != nil {
			leave()
			return nil, err
		}
		if place == nil {
			continue
		}
		switch err := w.untilTurn(ctx, t, *place); {
		case errors.Is(err, errPlaceGone):
			unplace()
		case err != nil:
			leave()
			return nil, err
		}
	}
}

// bornLostRetries bounds how often one acquisition starts again because its
// session ended while the transaction ran.
const bornLostRetries = 2

// acquireOnce runs the acquiring transaction once, and again (with a new
// session) when the session it used turned out to be gone or ended while it
// ran, so that it never returns a lease that is already lost. When the
// attempt put itself in line, the error matches errQueued and at and s are
// its place's commit timestamp and session.
func (c *Client) acquireOnce(ctx context.Context, t target, cfg acquireConfig, place *queueKey, blocking bool) ([]*Lease, time.Time, *session, error) {
	for tries := 0; ; tries++ {
		s, r, err := c.keeper.join(ctx)
		if err != nil {
			return nil, time.Time{}, nil, err
		}
		if place != nil && place.session != s.id {
			place = nil // the place belonged to an ended session
		}
		gs, at, err := c.attempt(ctx, s, r, t, cfg, place, blocking, randomHex(16))
		var gone errSessionGone
		if errors.As(err, &gone) && tries < bornLostRetries {
			continue
		}
		if err != nil {
			return nil, at, s, err
		}
		leases, err := c.registerAll(t, s, gs, cfg)
		if err == nil {
			err = c.untilBornShare(ctx, s, leases)
		}
		if errors.Is(err, ErrLeaseLost) && tries < bornLostRetries {
			continue
		}
		return leases, at, s, err
	}
}

// bornShare is the part of its TTL that an acquisition leaves a lease, at
// least, before its local deadline: a lease is never handed out with less
// than a quarter of its TTL ahead of it. Renewals keep a session with leases
// above that (they run every TTL/3 and extend it to TTL minus the margin),
// so only an acquisition that took long (a loaded machine, a slow Spanner)
// waits, for the renewal that registering its lease started.
func (c *Client) bornShare() time.Duration { return c.cfg.ttl / 4 }

// untilBornShare returns once the session of leases, just registered, has
// bornShare ahead of it: at once, or when the renewal that register asked
// for is confirmed. If the session ends first, the leases are lost (the
// error matches ErrLeaseLost, and the caller may acquire again); if ctx
// ends first, they are given back and ctx's error returned.
func (c *Client) untilBornShare(ctx context.Context, s *session, leases []*Lease) error {
	for {
		extended := s.untilExtended()
		switch {
		case s.isEnded():
			for _, l := range leases {
				l.lose(s.endReason(), "its session ended before a renewal gave it a quarter of its TTL")
			}
			return context.Cause(leases[0].ctx)
		case s.remaining() >= c.bornShare():
			return nil
		}
		c.keeper.wake()
		select {
		case <-extended:
		case <-ctx.Done():
			for _, l := range leases {
				c.giveBack(l)
			}
			return ctx.Err()
		}
	}
}

// registerAll records the leases of grants to s; if s ended while they were
// acquired, they are born lost (registered first, they cannot have escaped
// endSession's losses) and the error matches ErrLeaseLost.
func (c *Client) registerAll(t target, s *session, gs []grant, cfg acquireConfig) ([]*Lease, error) {
	leases := make([]*Lease, 0, len(gs))
	for _, g := range gs {
		l := newLease(c, s, t.kind(), g, cfg.payload)
		if !c.register(t, l) {
			c.giveBack(l)
			for _, l := range leases {
				c.giveBack(l)
			}
			return nil, ErrClosed
		}
		leases = append(leases, l)
	}
	if s.isEnded() {
		for _, l := range leases {
			l.lose(s.endReason(), "its session ended while it was acquired")
		}
		return nil, context.Cause(leases[0].ctx)
	}
	return leases, nil
}

// attempt is one acquiring transaction of a target by a session.
type attempt struct {
	judge
	c    *Client
	s    *session
	role role
	cfg  acquireConfig
	// place is the attempt's place in line, if it has one; blocking puts
	// an attempt that finds the target taken in line.
	place    *queueKey
	blocking bool
	// sent is when the transaction's current try began: the session's
	// deadline counts from it.
	sent time.Time
	// grant is the grant ID of the attempt: one of its tries commits at
	// most, so all use it.
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

// attempt runs one acquiring transaction (retrying Spanner's aborts) and
// settles what its outcome means for the session: confirmed, certainly not
// written, ended (gone from Spanner, or committed too late to count), or
// unknown. An attempt that put itself in line returns errQueued and its
// commit timestamp, its place.
func (c *Client) attempt(ctx context.Context, s *session, r role, t target, cfg acquireConfig, place *queueKey, blocking bool, grantID string) ([]grant, time.Time, error) {
	var (
		a          *attempt
		gs         []grant
		committing bool
		reaped     bool
		queued     bool
		// ended is the error of a RunOnce slot done or failed out, whose
		// attempt commits only the deletes of the slot's dead waiters.
		ended error
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
		a = &attempt{judge: judge{k: c.keeper, s: s}, c: c, s: s, role: r, cfg: cfg, place: place, blocking: blocking,
			sent: time.Now(), grant: grantID}
		var (
			writes []*spanner.Mutation
			err    error
		)
		gs, writes, err = t.take(ctx, tx, a)
		reaped, queued, ended = errors.Is(err, errReaped), errors.Is(err, errQueued), nil
		if errors.Is(err, errCompleted) || errors.Is(err, ErrTooManyFailures) {
			ended = err
		}
		committing = err == nil || reaped || queued
		if reaped || queued || ended != nil && len(writes) > 0 {
			return writes, nil
		}
		return writes, err
	})
	if ended != nil {
		// The slot was seen done or failed out, which it stays (until
		// cleanup deletes its row); whether the deletes of its dead waiters
		// landed changes nothing for the caller: a later caller takes them
		// out. No session row was written.
		c.remember(t)
		return nil, time.Time{}, ended
	}
	switch {
	case err != nil && committing && r == create && spanner.ErrCode(err) == codes.AlreadyExists:
		err = errSessionGone{s} // the session's ID was already in Spanner
	case err != nil && committing && r == joinRefresh && isRowNotFound(err):
		err = errSessionGone{s}
	case err != nil && committing && !reaped && !queued:
		// The commit may have happened (DEADLINE_EXCEEDED or UNAVAILABLE on
		// Commit): read the rows rather than guess.
		if at, held := c.heldAfter(ctx, t, s, gs); held {
			c.log.Info("acquisition committed despite an error", "name", gs[0].name, "token", gs[0].token, "err", err)
			err, commitTs = nil, at
		} else {
			c.outcomeUnknown(s, r, gs, deadline)
			return nil, time.Time{}, c.st.explain(err)
		}
	case err != nil && committing && queued:
		// A place in line that may or may not have been taken: this Client
		// does not count on it, and the keeper takes this Client's entries
		// out of the line (a later place of the caller's with them: it
		// queues again), so an entry that landed holds up nobody.
		c.keeper.leaveLater(s, t.names())
		return nil, time.Time{}, c.st.explain(err)
	}
	var gone errSessionGone
	switch {
	case err == nil && reaped:
		// It wrote no session row: a creation is still to come.
		c.remember(t)
		return nil, time.Time{}, errReaped
	case err == nil && queued && !s.confirm(r, a.sent, commitTs):
		c.keeper.endSession(s, lossDeadline, "an acquisition committed after its session could have expired in Spanner")
		return nil, time.Time{}, errSessionGone{s}
	case err == nil && queued:
		c.remember(t)
		return nil, commitTs, errQueued
	case err == nil && !s.confirm(r, a.sent, commitTs):
		// Committed too late to count, or into a session that ended
		// meanwhile: its row may have expired in Spanner before the lease
		// was written. The lease is born lost; a new session follows.
		c.remember(t)
		c.keeper.endSession(s, lossDeadline, "an acquisition committed after its session could have expired in Spanner")
		return nil, time.Time{}, errSessionGone{s}
	case err == nil:
		for i := range gs {
			gs[i].acquiredAt = commitTs
		}
		c.remember(t)
		c.log.Debug("acquired", "name", gs[0].name, "slot", gs[0].slot, "token", gs[0].token)
		return gs, commitTs, nil
	case errors.As(err, &gone) && r == create:
		c.keeper.abandon(s, "its ID was already in Spanner")
		return nil, time.Time{}, err
	case errors.As(err, &gone):
		c.keeper.endSession(s, lossSessionGone, "an acquisition found its session gone from Spanner")
		return nil, time.Time{}, err
	}
	var b *busy
	if errors.As(err, &b) || errors.Is(err, errCompleted) {
		c.remember(t)
		return nil, time.Time{}, err
	}
	return nil, time.Time{}, c.st.explain(err)
}

// heldAfter reads whether an acquisition whose commit reported an error
// holds its grants after all, and when it committed. A strong read sees
// every commit that finished before it began; one still in flight is
// settled by outcomeUnknown.
func (c *Client) heldAfter(ctx context.Context, t target, s *session, gs []grant) (time.Time, bool) {
	if ctx.Err() != nil {
		// The caller gave up: it is not kept waiting for the read.
		return time.Time{}, false
	}
	rctx, cancel := context.WithTimeout(ctx, c.cfg.callTimeout())
	defer cancel()
	var at time.Time
	for _, g := range gs {
		r, err := t.read(rctx, c, g)
		if err != nil || !r.heldBy(s.id, g.token, g.id) {
			return time.Time{}, false
		}
		at = r.acquired.Time
	}
	return at, len(gs) > 0
}

// outcomeUnknown makes sure an acquisition that may yet commit holds nothing
// for longer than a TTL. A creator's session is abandoned (its row is
// written as expired, which also makes a late insert of it fail). A
// joiner's grants are left to the keeper, which clears each row that names
// its grant, until the transaction can no longer land (its deadline).
func (c *Client) outcomeUnknown(s *session, r role, gs []grant, deadline time.Time) {
	if r == create {
		c.keeper.abandon(s, "the acquisition that created it has an unknown outcome")
		return
	}
	for _, g := range gs {
		c.keeper.letGoLater(s, letGo{leaseKey: leaseKey{name: g.name, slot: g.slot, token: g.token, grant: g.id},
			until: deadline.Add(c.cfg.endTimeout())})
	}
}

// reserve claims a target's lock names for one acquisition by this Client;
// it returns a channel to wait on when one is already held or being
// acquired here. Slots need no claim: a Client may hold several permits of
// one semaphore.
func (c *Client) reserve(t target) (<-chan struct{}, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return nil, ErrClosed
	}
	if !t.lock() {
		return nil, nil
	}
	for _, name := range t.names() {
		if st := c.names[name]; st != nil && (st.acquiring || st.held != nil) {
			return st.changed, nil
		}
	}
	for _, name := range t.names() {
		c.state(name).acquiring = true
	}
	return nil, nil
}

// unreserve ends a claim that acquired nothing.
func (c *Client) unreserve(t target) {
	if !t.lock() {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, name := range t.names() {
		st := c.state(name)
		st.acquiring = false
		c.settle(name, st)
	}
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

// remember records that a target's lock rows exist.
func (c *Client) remember(t target) {
	if !t.lock() {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.known) >= maxKnownNames {
		clear(c.known)
	}
	for _, name := range t.names() {
		c.known[name] = struct{}{}
	}
}

// waiting records that a caller took place in t's lines (joined) or left
// it: the keeper renews the session of a Client in line and knows its
// callers' places, and the waiters instrument shows them.
func (c *Client) waiting(t target, place queueKey, joined bool) {
	c.keeper.waiting(t.names(), place, joined)
	delta := int64(1)
	if !joined {
		delta = -1
	}
	c.tel.waitingChanged(t.kind(), delta)
}
