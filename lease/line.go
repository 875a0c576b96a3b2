package lease

import (
	"context"
	"encoding/json"
	"slices"
	"time"

	"cloud.google.com/go/spanner"
)

// A name's line: its row (a lock, or a semaphore's or worker pool's
// parent), its permit rows (a lock's shared holders, a pool's permits), and
// the waiters in the order they began waiting. Only the first live waiters
// may take a free name: an acquisition that finds live waiters ahead of it
// waits behind them (or, for TryAcquire, gives up). A release only clears
// what it lets go; the waiter at the head takes the name in its own
// transaction, which also takes its entry out, so every row that names a
// session was written by that session's Client, in a transaction whose
// outcome it tracks. A waiter lives as long as its session; every
// transaction that writes a line takes its dead waiters out.

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
// any live writer, and for a writer also any live reader, that is before
// req's place (anywhere, when req is not in line yet). An entry of this
// Client that no caller of it waits in blocks nobody, nor does an
// AcquireAll's: it takes its names when all are free at once, and so
// cannot make a holder of one of them wait for another (see doc.go).
func (l *line) ahead(k *keeper, shared bool, place *queueKey) bool {
	for _, w := range l.waiters {
		switch {
		case place != nil && !w.key.before(*place):
			return false
		case !w.live || w.group != nil || k.unheld(l.name, w):
		case !shared || !w.shared:
			return true
		}
	}
	return false
}

// leave is an entry of this Client's to take out of a name's line: the
// place of a caller that gives up or takes its turn, or, with place nil,
// every entry of this Client's there that no caller waits in (an enqueue
// whose outcome was never learnt, or a leave that failed).
type leave struct {
	name  string
	place *queueKey
}

// sweeps are the leaves that take out of names' lines the entries of this
// Client that no caller waits in.
func sweeps(names []string) []leave {
	out := make([]leave, len(names))
	for i, n := range names {
		out[i] = leave{name: n}
	}
	return out
}

// leavers returns the deletes of the waiters that a transaction writing l
// takes out: the entries of leaves, and every dead waiter, so that no line,
// a worker pool's neither, keeps dead entries. Its waiters' liveness must
// have been resolved.
func (l *line) leavers(k *keeper, leaves []leave) []*spanner.Mutation {
	var out []*spanner.Mutation
	for _, w := range l.waiters {
		leaving := slices.ContainsFunc(leaves, func(lv leave) bool {
			return lv.name == l.name && (lv.place == nil && k.unheld(l.name, w) || lv.place != nil && lv.place.is(w.key))
		})
		if leaving || !w.live {
			out = append(out, k.st.dequeue(l.name, w.key))
		}
	}
	return out
}

// leavers returns the deletes of the waiters that a transaction of session
// s writing lines takes out (line.leavers), reading, outside the
// transaction, the sessions of their waiters not known to this Client.
func (k *keeper) leavers(ctx context.Context, s *session, lines map[string]*line, leaves []leave) ([]*spanner.Mutation, error) {
	waiting := map[string]*line{}
	for name, l := range lines {
		if len(l.waiters) > 0 {
			waiting[name] = l
		}
	}
	if len(waiting) == 0 {
		return nil, nil
	}
	if err := (judge{k: k, s: s}).resolve(ctx, waiting, judgeWaiters, false); err != nil {
		return nil, err
	}
	var out []*spanner.Mutation
	for _, l := range waiting {
		out = append(out, l.leavers(k, leaves)...)
	}
	return out, nil
}

// judge decides, for one of this Client's sessions (s), whether the
// sessions that rows and waiters name are live: from what the Client knows
// (its own sessions, others seen expired) or by reading them outside
// transactions.
type judge struct {
	k *keeper
	s *session
}

// knownDead reports whether a row's session is known to hold nothing: one
// of this Client's ended sessions, or another's that Spanner was seen to
// have expired. A row of s is a lease of this Client, live, unless it is
// one let go whose release has not reached Spanner yet, or an acquisition
// whose outcome was never learnt (a let-go of the keeper's either way):
// nothing uses it. A worker ID let go stays live until the keeper clears
// it, which records its holder's mark for the next one to wait past.
func (j judge) knownDead(r *row) (dead, known bool) {
	id := r.sessionID.StringVal
	switch {
	case !r.sessionID.Valid:
		return true, true
	case id == j.s.id:
		letGo := j.s.hasLetGo(leaseKey{name: r.name, slot: r.slot, token: r.token.Int64, grant: r.grant.StringVal})
		return letGo && r.parentKind.StringVal != kindWorkers, true
	case j.k.owns(id), j.k.dead.has(id):
		return true, true
	}
	return false, false
}

// assumeLive marks every row live whose session is not known to be dead,
// and reports whether any was unknown.
func (j judge) assumeLive(rows []row) (unknown bool) {
	for i := range rows {
		dead, known := j.knownDead(&rows[i])
		rows[i].live = !dead
		unknown = unknown || !known
	}
	return unknown
}

// Which rows of a line resolve judges besides its waiters.
type judged int

const (
	judgeWaiters judged = iota // none
	judgePermits               // the permit rows
	judgeHolders               // the lock row and the permit rows
)

// resolve learns whether the sessions named in lines read in a
// transaction are live (the waiters, and the holders of the rows which
// says), by one strong read outside it for those not known (and, with
// needMarks, for every other holder's session, for its worker-ID mark):
// reading them inside would hold a lock on each session's row until the
// transaction ended, and make its renewals wait. This Client's entries are
// live while their session is.
func (j judge) resolve(ctx context.Context, lines map[string]*line, which judged, needMarks bool) error {
	rowsOf := func(l *line) []*row {
		var rows []*row
		if which == judgeHolders {
			rows = append(rows, &l.row)
		}
		if which != judgeWaiters {
			for i := range l.permits {
				rows = append(rows, &l.permits[i])
			}
		}
		return rows
	}
	var ids []string
	ask := func(id string) {
		if !slices.Contains(ids, id) {
			ids = append(ids, id)
		}
	}
	for _, l := range lines {
		for _, r := range rowsOf(l) {
			if _, known := j.knownDead(r); r.sessionID.Valid && r.sessionID.StringVal != j.s.id && (!known || needMarks) {
				ask(r.sessionID.StringVal) // unknown, or for its mark
			}
		}
		for _, w := range l.waiters {
			if id := w.key.session; !j.k.owns(id) && !j.k.dead.has(id) {
				ask(id)
			}
		}
	}
	var views map[string]sessionView
	if len(ids) > 0 {
		rctx, cancel := outsideTransaction(ctx)
		defer cancel()
		var err error
		if views, err = readSessions(rctx, j.k.st.db, j.k.st.sql, ids); err != nil {
			return err
		}
	}
	for _, l := range lines {
		for _, r := range rowsOf(l) {
			dead, known := j.knownDead(r)
			v, read := views[r.sessionID.StringVal]
			switch {
			case read:
				r.withSession(v) // a session with no row is not live
				if known && dead {
					r.live = false
				}
			default:
				r.live = known && !dead
			}
			if r.sessionID.Valid && !r.live && r.sessionID.StringVal != j.s.id {
				j.k.dead.add(r.sessionID.StringVal)
			}
		}
		for i := range l.waiters {
			w := &l.waiters[i]
			if live, own := j.k.ownLive(w.key.session); own {
				w.live = live
				continue
			}
			v, read := views[w.key.session]
			w.live = read && v.live
			if !w.live {
				j.k.dead.add(w.key.session)
			}
		}
	}
	return nil
}
