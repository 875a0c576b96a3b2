package lease

import (
	"context"
	"encoding/json"
	"time"

	"cloud.google.com/go/spanner"
)

// A name's line: its row (a lock, or a semaphore's or worker pool's
// parent), its permit rows (a lock's shared holders, a pool's permits), and
// the waiters in the order they began waiting. Grants go to the first live
// waiter: an acquisition that finds live waiters ahead of it waits behind
// them (or, for TryAcquire, gives up), and a release hands the name to the
// first live waiter in the releasing transaction, so the name is never free
// for a newcomer while someone waits. A waiter lives as long as its session.

// queueKey is a waiter's place: the commit timestamp of its entry, then its
// session (two entries never share both).
type queueKey struct {
	at      time.Time
	session string
}

// is reports whether k and o are one place.
func (k queueKey) is(o queueKey) bool { return k.at.Equal(o.at) && k.session == o.session }

// before reports whether k is ahead of o in a line.
func (k queueKey) before(o queueKey) bool {
	if !k.at.Equal(o.at) {
		return k.at.Before(o.at)
	}
	return k.session < o.session
}

// waiterRow is one entry of a line.
type waiterRow struct {
	name    string
	key     queueKey
	holder  spanner.NullString
	shared  bool
	payload []byte
	// group lists every name of an AcquireAll; nil for one name.
	group []string
	live  bool
}

// Modes of a waiter (the waiters table's mode column); NULL is a writer.
const modeShared = "shared"

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

// enqueue is the write that puts a waiter for names in line: one entry per
// name, all stamped with the commit timestamp.
func (st *store) enqueue(names []string, session, holderID string, shared bool, payload []byte) ([]*spanner.Mutation, error) {
	var group spanner.NullString
	if len(names) > 1 {
		b, err := json.Marshal(names)
		if err != nil {
			return nil, err
		}
		group = spanner.NullString{StringVal: string(b), Valid: true}
	}
	var mode spanner.NullString
	if shared {
		mode = spanner.NullString{StringVal: modeShared, Valid: true}
	}
	ms := make([]*spanner.Mutation, 0, len(names))
	for _, n := range names {
		ms = append(ms, spanner.Insert(st.sql.waiters,
			[]string{"name", "enqueued_at", "session_id", "holder_id", "mode", "names", "payload"},
			[]any{n, spanner.CommitTimestamp, session, holderID, mode, group, payload}))
	}
	return ms, nil
}

// dequeue is the write that takes a waiter's entry out of a line.
func (st *store) dequeue(name string, k queueKey) *spanner.Mutation {
	return spanner.Delete(st.sql.waiters, spanner.Key{name, k.at, k.session})
}

// ahead reports whether a live waiter that blocks req is ahead of it in l:
// any live writer, and for a writer also any live reader, that is not this
// Client's own entry and is before req's place (anywhere, when req is not in
// line yet).
func (l *line) ahead(own func(session string) bool, shared bool, place *queueKey) bool {
	for _, w := range l.waiters {
		switch {
		case !w.live || own(w.key.session):
		case place != nil && !w.key.before(*place):
			return false
		case !shared || !w.shared || w.group != nil:
			return true
		}
	}
	return false
}

// handoff is what a release hands on: the first live waiters of l that may
// hold the name now, and the dead entries ahead of them, which it removes.
// For a lock (lock set), a writer is handed the name alone and only once
// nobody holds it (readersHold says readers still do), and readers are
// handed it together, in a run; for a semaphore or pool each waiter takes
// one of room permits. An AcquireAll takes its names itself, so the line
// waits for it.
func (l *line) handoff(lock bool, room int64, readersHold bool) (grant, drop []waiterRow) {
	for _, w := range l.waiters {
		switch {
		case !w.live:
			if len(grant) == 0 {
				drop = append(drop, w)
			}
		case w.group != nil:
			return grant, drop
		case lock && w.shared:
			grant = append(grant, w)
		case lock:
			if len(grant) == 0 && !readersHold && room > 0 {
				grant = append(grant, w)
			}
			return grant, drop
		case room <= 0:
			return grant, drop
		default:
			grant = append(grant, w)
			room--
		}
	}
	return grant, drop
}
