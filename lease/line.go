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

// leaseKey identifies one acquisition: a lock (slot lockSlot) or a slot of a
// semaphore or worker pool, with its token.
type leaseKey struct {
	name  string
	slot  int64
	token int64
	// grant is the acquisition's grant ID, written in its row: unique to
	// it, where a token may be given again after an acquisition that never
	// landed.
	grant string
}

// letGo is a lease whose owner let go: its row is cleared if it still names
// the lease's session and token. A RunOnce completion also records the slot
// as done.
type letGo struct {
	leaseKey
	complete bool
	// mark is, for a worker ID, when its holder stopped using it (by this
	// process's wall clock), recorded for the next holder to wait past;
	// zero keeps the row's mark.
	mark time.Time
	// until is when a transaction whose outcome is unknown (an acquisition
	// that may still land and name the session) can no longer commit; the
	// keeper looks at the row until then. Zero for a release.
	until time.Time
}

// clear is the write that lets g go; the let-go transaction made sure the
// row still names g's session and token.
func (g letGo) clear(sql statements) *spanner.Mutation {
	if g.slot == lockSlot {
		// The row keeps its token, so the next acquisition continues the sequence.
		cols, vals := []string{"name", "session_id"}, []any{g.name, nil}
		if g.complete {
			cols, vals = append(cols, "completed_at"), append(vals, spanner.CommitTimestamp)
		}
		return spanner.Update(sql.table, cols, vals)
	}
	cols, vals := []string{"name", "slot", "session_id"}, []any{g.name, g.slot, nil}
	if !g.mark.IsZero() {
		cols, vals = append(cols, "high_water"), append(vals, g.mark)
	}
	return spanner.Update(sql.permits, cols, vals)
}

// release is the let-go transaction (reads the lines of the names it
// touches: their rows, permit rows and waiters; writes the rows it clears
// and the waiters it takes out). It clears the rows of gos that still name
// s with their keys; takes out of the lines the entries of leaves, and
// every dead waiter of the lines it reads (line.go); and writes the
// sessions in expire as expired. It never writes a row naming another
// session: a freed name is taken by the first live waiters of its line,
// each in a transaction of its own. It returns the let-goes it found held,
// which it cleared.
func (k *keeper) release(ctx context.Context, ln lane, tag string, s *session, gos []letGo, leaves []leave, expire []string) (map[leaseKey]bool, error) {
	var names []string
	for _, g := range gos {
		names = append(names, g.name)
	}
	for _, lv := range leaves {
		names = append(names, lv.name)
	}
	names = sortedNames(names)
	var owned map[leaseKey]bool
	_, err := k.st.transact(ctx, ln, tag, func(ctx context.Context, tx *spanner.ReadWriteTransaction) ([]*spanner.Mutation, error) {
		owned = map[leaseKey]bool{}
		var writes []*spanner.Mutation
		lines := map[string]*line{}
		if len(names) > 0 {
			var err error
			if lines, err = readLines(ctx, tx, k.st.sql, names, false); err != nil {
				return nil, err
			}
		}
		for _, g := range gos {
			if r := lines[g.name].holding(g.slot); r != nil && r.names(s.id, g.leaseKey) {
				owned[g.leaseKey] = true
				writes = append(writes, g.clear(k.st.sql))
			}
		}
		out, err := k.leavers(ctx, s, lines, leaves)
		if err != nil {
			return nil, err
		}
		writes = append(writes, out...)
		for _, id := range expire {
			writes = append(writes, k.st.sql.sessionTombstone(id, k.cfg.holderID))
		}
		return writes, nil
	})
	return owned, err
}

// holding returns the row of slot in l: the lock row for lockSlot, else
// the permit row; nil when l is nil or there is none.
func (l *line) holding(slot int64) *row {
	if l == nil {
		return nil
	}
	if slot == lockSlot {
		return &l.row
	}
	for i := range l.permits {
		if l.permits[i].slot == slot {
			return &l.permits[i]
		}
	}
	return nil
}

// names reports whether r still names the lease with key k of session.
func (r *row) names(session string, k leaseKey) bool {
	return r.sessionID.StringVal == session && r.token.Int64 == k.token && r.grant.StringVal == k.grant
}

// clearLoop clears let-goes and leaves at once, and again at every interval
// while some may still land, retrying a failure with backoff. It runs apart
// from the renewals, so that neither waits for the other: a clear may wait
// for a lock (a transaction that read the row), for as long as any call of
// the Client may, while a renewal must commit within its interval; and a
// renewal that times out must not use up the clears' turns. Each row a
// let-go leaves live is free once a clear commits, so under a Spanner that
// answers slowly the clears, not the renewals, get the longer deadline.
func (k *keeper) clearLoop() {
	k.repeat(k.clearKick, func(int) error {
		k.mu.Lock()
		s := k.sess
		k.mu.Unlock()
		err := k.clearLetGos(s)
		if err != nil && k.background.Err() == nil {
			k.log.Warn("clearing leases let go failed; retrying", "err", err)
		}
		return err
	})
}

// clearLater starts the clearing loop unless it runs or the keeper is
// closed (Close clears what is left itself), and wakes it.
func (k *keeper) clearLater() {
	k.mu.Lock()
	if !k.clearing && !k.closed {
		k.clearing = true
		k.loop.Add(1)
		go k.clearLoop()
	}
	k.mu.Unlock()
	k.wakeClear()
}

// clearLetGos clears, in transactions of their own, the rows of leases let
// go whose release did not reach Spanner. A let-go is dropped once a clear
// committed after the moment no earlier transaction can still land
// (until): by then its row is cleared, or never named the lease.
func (k *keeper) clearLetGos(s *session) error {
	for {
		gos := s.pendingLetGos(maxSyncBatch)
		leaves := s.takeLeaves(maxSyncBatch)
		if len(gos) == 0 && len(leaves) == 0 {
			return nil
		}
		ctx, cancel := context.WithTimeout(k.background, k.cfg.callTimeout())
		began := time.Now()
		owned, err := k.release(ctx, keeperLane, "spannerlock-release", s, gos, sweeps(leaves), nil)
		cancel()
		if err != nil {
			s.addLeaves(leaves)
			return k.st.explain(err)
		}
		waiting := false
		for _, g := range gos {
			if _, ok := owned[g.leaseKey]; ok {
				k.log.Debug("released in the background", "name", g.name, "slot", g.slot, "token", g.token)
				announceRelease(k.st.signalKey(g.name))
			}
			if began.After(g.until) {
				s.dropLetGo(g)
			} else {
				waiting = true
			}
		}
		if waiting || len(gos) == 0 {
			// Some may still land: look again after the next interval.
			return nil
		}
	}
}

// leaveLater leaves to the keeper the removal from names' lines of s's
// entries that no caller waits in, waking it.
func (k *keeper) leaveLater(s *session, names []string) {
	if !s.addLeaves(names) {
		return
	}
	k.clearLater()
}

// letGoLater leaves g to the keeper, waking it.
func (k *keeper) letGoLater(s *session, g letGo) {
	if !s.addLetGo(g) {
		return // the session ended: its rows expire with it
	}
	k.clearLater()
}
