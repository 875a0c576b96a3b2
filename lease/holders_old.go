package lease

import (
	"context"
	"fmt"

	"cloud.google.com/go/spanner"
	"google.golang.org/grpc/codes"

	"github.com/spannerlock/terraform-provider-spannerlock/internal/locktable"
)

// A table at an older schema version is one about to be migrated, or to be
// dropped without a migration, while applications of an older release may
// still hold leases in it: whoever checks it for live leases first must see
// theirs. Holders reads them as those applications judge them, with the
// expiry rule of sql.go applied to what that version has: from version 3 a
// lease lives while its row names a live session; before it there was no
// sessions table, and the lock row itself carried the holder's renewal and
// TTL, so the rule is applied to the row.

// olderVersion reports the schema version of the table when err, a failed
// read, comes from a table at a version before the latest that Holders can
// still read (1 and later); it reads the table's schema only then.
func (st *store) olderVersion(ctx context.Context, err error) (int, bool) {
	switch spanner.ErrCode(err) {
	case codes.InvalidArgument, codes.NotFound, codes.FailedPrecondition:
	default:
		return 0, false
	}
	ins, ierr := st.sql.Inspect(ctx, st.db, st.table)
	if ierr != nil || !ins.Exists || ins.Version < 1 || ins.Version >= locktable.Latest {
		return 0, false
	}
	return ins.Version, true
}

// holdersAt is Holders on a table at schema version version, before the
// latest: the same leases in the same order, read with the columns that
// version has.
func (st *store) holdersAt(ctx context.Context, version int) ([]Holder, error) {
	q := st.sql.dialect
	t := q.QuoteTable(st.table)
	var locks, permits string
	if version < 3 {
		// No sessions, no kinds, no permits: every row is a lock whose own
		// renewal and TTL say whether it lives.
		locks = fmt.Sprintf(`SELECT t.name, t.token, t.holder_id, t.acquired_at, t.renewed_at, %s AS expires_at, t.payload, %s AS kind
			FROM %s AS t WHERE %s ORDER BY t.name`, q.sessionExpires("t"), q.null("STRING"), t, q.leaseLive("t", "t"))
	} else {
		s := q.QuoteSessionsTable(st.table)
		locks = fmt.Sprintf(`SELECT t.name, t.token, t.holder_id, t.acquired_at, sess.renewed_at, %s AS expires_at, t.payload, t.kind
			FROM %s AS t JOIN %s AS sess ON sess.session_id = t.session_id
			WHERE %s ORDER BY t.name`, q.sessionExpires("sess"), t, s, q.sessionLive("sess"))
		permits = fmt.Sprintf(`SELECT p.name, p.token, p.holder_id, p.acquired_at, sess.renewed_at, %s AS expires_at, p.payload, p.slot, parent.kind
			FROM %s AS p JOIN %s AS parent ON parent.name = p.name JOIN %s AS sess ON sess.session_id = p.session_id
			WHERE %s ORDER BY p.name, p.slot`, q.sessionExpires("sess"), q.QuotePermitsTable(st.table), t, s, q.sessionLive("sess"))
	}
	var holders []Holder
	read := func(ctx context.Context, txn *spanner.ReadOnlyTransaction, sql string, slot bool) error {
		return txn.Query(ctx, q.statement(sql).bind(nil)).Do(func(sr *spanner.Row) error {
			r := row{slot: lockSlot, live: true}
			fields := []any{&r.rowName, &r.token, &r.holderID, &r.acquired, &r.renewed, &r.expires, &r.payload}
			if slot {
				fields = append(fields, &r.slot, &r.parentKind)
			} else {
				fields = append(fields, &r.kind)
			}
			if err := r.scan(sr, fields...); err != nil {
				return err
			}
			holders = append(holders, r.holder())
			return nil
		})
	}
	err := st.readAgain(ctx, func(ctx context.Context) error {
		holders = nil
		txn := st.db.ReadOnlyTransaction()
		defer txn.Close()
		err := read(ctx, txn, locks, false)
		if err == nil && permits != "" {
			err = read(ctx, txn, permits, true)
		}
		return err
	})
	if err != nil {
		return nil, st.explain(err)
	}
	return holders, nil
}
