package lease

import (
	"context"
	"slices"
	"time"

	"cloud.google.com/go/spanner"
)

// release is the let-go transaction (reads the lines of the names it
// touches: their rows, permit rows and waiters; writes the rows it clears
// and hands on, and the waiters it removes). It clears the rows of gos
// that still name s with their keys; takes this Client's entries out of the
// lines of leaving, clearing any grant a release handed s there that this
// Client never took up; writes the sessions in expire as expired; and hands
// each name it freed to the first live waiters of its line, in the same
// commit, so the name is never free for a newcomer while someone waits. It
// returns the let-goes it found held, which it cleared.
func (k *keeper) release(ctx context.Context, ln lane, tag string, s *session, gos []letGo, leaving, expire []string) (map[leaseKey]bool, error) {
	var names []string
	for _, g := range gos {
		names = append(names, g.name)
	}
	names = sortedNames(append(names, leaving...))
	if len(leaving) > 0 {
		k.leaving.Lock()
		defer func() {
			k.mu.Lock()
			k.leaves++
			k.mu.Unlock()
			k.leaving.Unlock()
		}()
	}
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
		freed := map[string]bool{}
		for _, g := range gos {
			if r := lines[g.name].holding(g.slot); r != nil && r.names(s.id, g.leaseKey) {
				owned[g.leaseKey] = true
				writes = append(writes, g.clear(k.st.sql))
				r.sessionID = spanner.NullString{}
				if g.slot != lockSlot && !g.mark.IsZero() {
					r.highWater = nullTime(g.mark)
				}
				if !g.complete {
					freed[g.name] = true
				}
			}
		}
		for _, name := range leaving {
			l := lines[name]
			held := k.heldKeys(name)
			for _, r := range append([]*row{&l.row}, ptrs(l.permits)...) {
				key := leaseKey{name: name, slot: r.slot, token: r.token.Int64, grant: r.grant.StringVal}
				if r.sessionID.StringVal == s.id && !held[key] && !k.claimed(key.grant) {
					// Handed to this Client, which gave up before it saw.
					writes = append(writes, letGo{leaseKey: key}.clear(k.st.sql))
					r.sessionID, freed[name] = spanner.NullString{}, true
				}
			}
			l.waiters = slices.DeleteFunc(l.waiters, func(w waiterRow) bool {
				if k.owns(w.key.session) {
					writes = append(writes, k.st.dequeue(name, w.key))
					return true
				}
				return false
			})
		}
		handoffs, err := k.handOn(ctx, s, lines, freed)
		if err != nil {
			return nil, err
		}
		writes = append(writes, handoffs...)
		for _, id := range expire {
			writes = append(writes, k.st.sql.sessionTombstone(id, k.cfg.holderID))
		}
		return writes, nil
	})
	return owned, err
}

func ptrs(rows []row) []*row {
	out := make([]*row, len(rows))
	for i := range rows {
		out[i] = &rows[i]
	}
	return out
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

// handOn returns the writes that hand each freed name to the first live
// waiters of its line. It reads the sessions of those waiters and of the
// name's other holders outside the transaction, and only for names with
// waiters.
func (k *keeper) handOn(ctx context.Context, s *session, lines map[string]*line, freed map[string]bool) ([]*spanner.Mutation, error) {
	var writes []*spanner.Mutation
	j := judge{k: k, self: s.id}
	for name := range freed {
		l := lines[name]
		if len(l.waiters) == 0 {
			continue
		}
		lock := !l.row.kind.Valid
		if !lock && l.row.kind.StringVal != kindSemaphore {
			continue
		}
		if err := j.resolve(ctx, map[string]*line{name: l}, lock, false); err != nil {
			return nil, err
		}
		switch {
		case lock:
			writes = append(writes, k.handOnLock(l)...)
		case l.row.kind.StringVal == kindSemaphore:
			writes = append(writes, k.handOnPool(l)...)
		}
		// A worker pool's waiters take an ID themselves: each asks for its
		// own range of IDs, which the line does not record.
	}
	return writes, nil
}

// handOnLock hands a lock to its first live writer, once nobody holds it,
// or to its first live readers.
func (k *keeper) handOnLock(l *line) []*spanner.Mutation {
	if l.row.live {
		return nil // another writer holds it (not this release's)
	}
	readersHold := slices.ContainsFunc(l.permits, func(p row) bool { return p.live })
	grant, drop := l.handoff(true, 1, readersHold)
	var writes []*spanner.Mutation
	token := l.row.token.Int64
	attempts := l.row.attempts
	if attempts.Valid {
		attempts.Int64++ // a RunOnce slot counts its runs
	}
	readers := false
	for _, w := range grant {
		token++
		if !w.shared {
			writes = append(writes, k.st.lockGrant(l.name, token, randomHex(16), w.holder.StringVal, w.key.session, 0, w.payload, attempts))
			continue
		}
		readers = true
		slot := l.freeSlot()
		l.permits = append(l.permits, row{slot: slot, live: true})
		writes = append(writes, k.st.permitRow(l.name, slot, token, randomHex(16), w.holder.StringVal, w.key.session, 0, w.payload, time.Time{}))
	}
	if readers {
		writes = append(writes, spanner.Update(k.st.sql.table, []string{"name", "token"}, []any{l.name, token}))
	}
	for _, w := range append(grant, drop...) {
		writes = append(writes, k.st.dequeue(l.name, w.key))
	}
	return writes
}

// handOnPool hands a semaphore's free permits to its first live waiters,
// one each.
func (k *keeper) handOnPool(l *line) []*spanner.Mutation {
	st := l.state()
	capacity, err := slotTarget{pool: l.name}.capacity(st)
	if err != nil {
		return nil // undeclared meanwhile: waiters find out themselves
	}
	taken := map[int64]bool{}
	for _, p := range l.permits {
		// An expired permit not unlinked counts as held: its holder's
		// guarded writes conflict only with a transaction that writes it.
		if p.live || p.sessionID.Valid {
			taken[p.slot] = true
		}
	}
	grant, drop := l.handoff(false, capacity-int64(len(taken)), false)
	var writes []*spanner.Mutation
	next := st.next.Int64
	for _, w := range grant {
		var slot int64
		for taken[slot] {
			slot++
		}
		taken[slot] = true
		notBefore := st.slot(slot).notBefore()
		writes = append(writes, k.st.permitRow(l.name, slot, next, randomHex(16), w.holder.StringVal, w.key.session, 0, w.payload, notBefore))
		next++
	}
	if len(grant) > 0 {
		writes = append(writes, spanner.Update(k.st.sql.table, []string{"name", "token"}, []any{l.name, next}))
	}
	for _, w := range append(grant, drop...) {
		writes = append(writes, k.st.dequeue(l.name, w.key))
	}
	return writes
}
