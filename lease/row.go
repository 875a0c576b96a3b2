package lease

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"time"

	"cloud.google.com/go/spanner"
)

// row is a lock or permit row, with its holder's session and Spanner's
// verdict on it when read outside a transaction (inside one, the session is
// read separately: see sessionView).
type row struct {
	name      string
	slot      int64 // lockSlot for a lock
	found     bool
	rowName   spanner.NullString // NULL when the row does not exist
	token     spanner.NullInt64
	holderID  spanner.NullString
	sessionID spanner.NullString
	acquired  spanner.NullTime
	renewed   spanner.NullTime // of the holder's session
	expires   spanner.NullTime // of the holder's session
	live      bool
	payload   []byte
	// now is CURRENT_TIMESTAMP() when the row was read: Spanner's clock, for
	// measuring how long until expires without consulting a local clock.
	now time.Time

	grant spanner.NullString // the grant ID of the acquisition that wrote it
	kind  spanner.NullString // locks only
	// permitsLimit is a semaphore's capacity (its parent row's permits).
	permitsLimit spanner.NullInt64
	completed    bool              // locks only: a RunOnce slot that succeeded
	attempts     spanner.NullInt64 // locks only: runs of a RunOnce slot
	// highWater and sessionHighWater are the worker-ID marks of the permit
	// row (set at acquisition and release) and of its holder's session (set
	// at every renewal).
	highWater, sessionHighWater spanner.NullTime // permits only
	// parentKind is a permit's semaphore's or pool's kind.
	parentKind spanner.NullString // permits only
}

// lockSlot is the slot of a lock: locks have none.
const lockSlot = -1

func (r row) holder() Holder {
	kind, slot := kindLock, r.slot
	switch {
	case r.slot == lockSlot:
		slot = 0
	case r.parentKind.StringVal == kindWorkers:
		kind = kindWorkerID
	case r.parentKind.Valid:
		kind = kindPermit
	default:
		kind = kindShared // a permit row of a lock: a reader
	}
	return Holder{
		Name:       r.name,
		Kind:       kind,
		Slot:       slot,
		HolderID:   r.holderID.StringVal,
		Token:      r.token.Int64,
		AcquiredAt: r.acquired.Time,
		RenewedAt:  r.renewed.Time,
		ExpiresAt:  r.expires.Time,
		Payload:    r.payload,
	}
}

// remaining is how long the row stays live by Spanner's clock.
func (r row) remaining() time.Duration {
	if !r.live || r.now.IsZero() {
		return 0
	}
	return r.expires.Time.Sub(r.now)
}

// heldBy reports whether the row is live and held by the session with
// token and grant.
func (r row) heldBy(session string, token int64, grant string) bool {
	return r.live && r.sessionID.StringVal == session && r.token.Int64 == token && r.grant.StringVal == grant
}

// completedWith reports whether a RunOnce slot was recorded as done under
// token. A completed slot is never acquired again, so its token is the
// completer's.
func (r row) completedWith(token int64) bool { return r.completed && r.token.Int64 == token }

// notBefore is when a worker ID's previous holder stopped using it: its
// release, or, if it never released, its session's last mark.
func (r row) notBefore() time.Time {
	t := r.highWater.Time
	if r.sessionID.Valid && r.sessionHighWater.Valid && r.sessionHighWater.Time.After(t) {
		t = r.sessionHighWater.Time
	}
	return t
}

// withSession completes a row read inside a transaction with what a read
// outside it said of the holder's session.
func (r *row) withSession(s sessionView) {
	r.live = r.sessionID.Valid && s.live
	r.renewed, r.expires, r.now = s.renewed, s.expires, s.now
	r.sessionHighWater = s.highWater
}

func (r *row) commonFields() []any {
	return []any{&r.rowName, &r.token, &r.holderID, &r.sessionID, &r.acquired, &r.renewed, &r.expires, &r.live, &r.payload, &r.now, &r.grant}
}

func (r *row) lockFields() []any {
	r.slot = lockSlot
	return append(r.commonFields(), &r.kind, &r.completed, &r.attempts)
}

func (r *row) permitFields() []any {
	return append(r.commonFields(), &r.slot, &r.highWater, &r.sessionHighWater, &r.parentKind)
}

// scan reads a row's columns and derives whether it exists.
func (r *row) scan(sr *spanner.Row, fields ...any) error {
	if err := sr.Columns(fields...); err != nil {
		return err
	}
	r.found = r.rowName.Valid
	if r.found {
		r.name = r.rowName.StringVal
	}
	return nil
}

// querier is what both transactions and single reads offer.
type querier interface {
	Query(ctx context.Context, statement spanner.Statement) *spanner.RowIterator
}

// readRow is the one read of a lock row outside transactions. A missing row
// is a free lease with found == false.
func readRow(ctx context.Context, q querier, sql statements, name string) (row, error) {
	r := row{name: name}
	err := q.Query(ctx, sql.selectRow.bind(map[string]any{"name": name})).Do(func(sr *spanner.Row) error {
		return r.scan(sr, r.lockFields()...)
	})
	return r, err
}

// readKeyRow reads, outside transactions, the lock or permit row that a
// lease of name in slot (lockSlot for a lock) lives in.
func readKeyRow(ctx context.Context, q querier, sql statements, name string, slot int64) (row, error) {
	if slot == lockSlot {
		return readRow(ctx, q, sql, name)
	}
	return readPermitRow(ctx, q, sql, name, slot)
}

// readPermitRow is the one read of a permit row outside transactions.
func readPermitRow(ctx context.Context, q querier, sql statements, name string, slot int64) (row, error) {
	r := row{name: name}
	var readSlot spanner.NullInt64
	err := q.Query(ctx, sql.selectPermit.bind(map[string]any{"name": name, "slot": slot})).Do(func(sr *spanner.Row) error {
		return r.scan(sr, append(r.commonFields(), &readSlot, &r.highWater, &r.sessionHighWater, &r.parentKind)...)
	})
	r.slot = slot
	return r, err
}

// semaphoreState is a semaphore's or worker pool's parent row and permits.
type semaphoreState struct {
	name    string
	found   bool
	kind    spanner.NullString
	permits spanner.NullInt64
	// next is the token the next permit gets.
	next  spanner.NullInt64
	slots []row
}

func (s semaphoreState) declared() error {
	switch {
	case s.found && s.kind.StringVal == kindSemaphore && s.permits.Valid:
		return nil
	case s.found && s.kind.StringVal != kindSemaphore:
		// A lock's row, held or not, or a worker pool's: the table's names
		// are shared.
		return fmt.Errorf("%w: %q is %s, not a semaphore: choose another name", ErrWrongKind, s.name, describeKind(s.kind))
	}
	return fmt.Errorf("%w: %q is not declared; declare it with the spannerlock_semaphore Terraform resource or Client.SetPermits", ErrUnknownSemaphore, s.name)
}

// live returns the live permits.
func (s semaphoreState) live() []row {
	var live []row
	for _, r := range s.slots {
		if r.live {
			live = append(live, r)
		}
	}
	return live
}

// slot returns the row of slot n, or a zero row.
func (s semaphoreState) slot(n int64) row {
	for _, r := range s.slots {
		if r.slot == n {
			return r
		}
	}
	return row{}
}

// soonest returns the live permit that expires first.
func (s semaphoreState) soonest() row {
	var first row
	for _, r := range s.live() {
		if !first.live || r.remaining() < first.remaining() {
			first = r
		}
	}
	return first
}

// readSemaphore reads a semaphore or worker pool outside transactions, with
// the sessions of its permits' holders.
func readSemaphore(ctx context.Context, q querier, sql statements, name string) (semaphoreState, error) {
	s := semaphoreState{name: name}
	err := q.Query(ctx, sql.selectSemaphore.bind(map[string]any{"name": name})).Do(func(sr *spanner.Row) error {
		var (
			slot spanner.NullInt64
			p    = row{name: name, found: true}
		)
		err := sr.Columns(&s.found, &s.kind, &s.permits, &s.next,
			&slot, &p.token, &p.holderID, &p.sessionID, &p.acquired, &p.renewed, &p.expires, &p.live,
			&p.payload, &p.highWater, &p.sessionHighWater, &p.now, &p.grant)
		if err != nil || !slot.Valid {
			return err // no permit: the parent row alone
		}
		p.slot, p.parentKind = slot.Int64, s.kind
		s.slots = append(s.slots, p)
		return nil
	})
	return s, err
}

// sessionView is what Spanner said of one session at a moment: whether it
// was live by Spanner's clock, and its worker-ID mark.
type sessionView struct {
	live      bool
	renewed   spanner.NullTime
	expires   spanner.NullTime
	highWater spanner.NullTime
	now       time.Time
}

// readSessions reads the given sessions outside any transaction, with a
// strong read that takes no lock. A session with no row is not live.
func readSessions(ctx context.Context, db *spanner.Client, sql statements, ids []string) (map[string]sessionView, error) {
	return querySessions(ctx, db.Single(), sql, ids)
}

// querySessions is readSessions in q: a single-use read, or (for the one
// transaction that must, forceReleasePermit of a worker ID) a read-write
// transaction, which locks the rows it reads.
func querySessions(ctx context.Context, q querier, sql statements, ids []string) (map[string]sessionView, error) {
	out := make(map[string]sessionView, len(ids))
	err := q.Query(ctx, sql.sessionViews.bind(map[string]any{"ids": ids})).Do(func(sr *spanner.Row) error {
		var (
			id string
			s  sessionView
		)
		if err := sr.Columns(&id, &s.live, &s.renewed, &s.expires, &s.highWater, &s.now); err != nil {
			return err
		}
		out[id] = s
		return nil
	})
	return out, err
}

// notASemaphore says that a name belongs to a lock or a worker pool.
func notASemaphore(name string, kind spanner.NullString) error {
	return fmt.Errorf("%w: %q is %s, not a semaphore: choose another name", ErrWrongKind, name, describeKind(kind))
}

func describeKind(kind spanner.NullString) string {
	switch kind.StringVal {
	case kindSemaphore:
		return "a semaphore"
	case kindWorkers:
		return "a worker-ID pool"
	}
	return "a lock"
}

// line is what decides who may hold one name.
type line struct {
	name    string
	row     row // found == false when the name has no row yet
	permits []row
	waiters []waiterRow
}

// state is the line of a semaphore or pool, for slotTarget.plan.
func (l *line) state() semaphoreState {
	return semaphoreState{name: l.name, found: l.row.found, kind: l.row.kind, permits: l.row.permitsLimit,
		next: l.row.token, slots: l.permits}
}

// readLines reads the lines of names, in a transaction (no session is
// read: the rows' live fields are left for attempt.holdersLive) or, with
// q a single-use read and outside set, with Spanner's verdict on every
// session.
func readLines(ctx context.Context, q querier, sql statements, names []string, outside bool) (map[string]*line, error) {
	lines := make(map[string]*line, len(names))
	for _, n := range names {
		lines[n] = &line{name: n, row: row{name: n, slot: lockSlot}}
	}
	stmt := sql.lineInTx
	if outside {
		stmt = sql.lineOutside
	}
	err := q.Query(ctx, stmt.bind(map[string]any{"names": names})).Do(func(sr *spanner.Row) error {
		var (
			part, name           string
			slot, token, permits spanner.NullInt64
			grant, holder, sess  spanner.NullString
			acquired             spanner.NullTime
			payload              []byte
			kind, mode, group    spanner.NullString
			completed            bool
			attempts             spanner.NullInt64
			highWater, enqueued  spanner.NullTime
			live                 bool
			renewed, expires     spanner.NullTime
			sessionHighWater     spanner.NullTime
			now                  time.Time
		)
		cols := []any{&part, &name, &slot, &token, &grant, &holder, &sess, &acquired, &payload, &kind, &permits,
			&completed, &attempts, &highWater, &enqueued, &mode, &group}
		if outside {
			cols = append(cols, &live, &renewed, &expires, &sessionHighWater, &now)
		}
		if err := sr.Columns(cols...); err != nil {
			return err
		}
		l := lines[name]
		if l == nil {
			return nil
		}
		r := row{name: name, found: true, rowName: spanner.NullString{StringVal: name, Valid: true}, token: token,
			grant: grant, holderID: holder, sessionID: sess, acquired: acquired, payload: payload,
			live: live, renewed: renewed, expires: expires, sessionHighWater: sessionHighWater, now: now}
		switch part {
		case "row":
			r.slot, r.kind, r.permitsLimit, r.completed, r.attempts = lockSlot, kind, permits, completed, attempts
			l.row = r
		case "permit":
			r.slot, r.highWater, r.parentKind = slot.Int64, highWater, l.row.kind
			l.permits = append(l.permits, r)
		case "waiter":
			w := waiterRow{name: name, key: queueKey{at: enqueued.Time, session: sess.StringVal}, holder: holder,
				shared: mode.StringVal == modeShared, payload: payload, live: live}
			if group.Valid {
				if err := json.Unmarshal([]byte(group.StringVal), &w.group); err != nil {
					return err
				}
			}
			l.waiters = append(l.waiters, w)
		}
		return nil
	})
	// Permit rows were read before their parent kind was known when the
	// parts came in another order.
	for _, l := range lines {
		for i := range l.permits {
			l.permits[i].parentKind = l.row.kind
		}
	}
	return lines, err
}

// sortedNames returns names without duplicates, in order: an AcquireAll
// takes the same set however it is spelled.
func sortedNames(names []string) []string {
	out := slices.Clone(names)
	slices.Sort(out)
	return slices.Compact(out)
}
