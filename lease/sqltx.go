package lease

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
)

// GuardSQL is Guard for a database/sql transaction on Spanner's driver
// (github.com/googleapis/go-sql-spanner), for applications and ORMs that
// write through database/sql: it reads the lease's row inside tx, so tx
// cannot commit if another holder acquires the lease after the read, and it
// asks Spanner, outside tx, whether the lease's session is live. Run tx
// under l.Context() and roll it back when GuardSQL returns an error, which
// matches ErrLeaseLost when the lease is no longer held:
//
//	tx, err := db.BeginTx(l.Context(), nil)
//	...
//	defer tx.Rollback()
//	if err := l.GuardSQL(ctx, tx); err != nil {
//		return err
//	}
//	// tx's writes, then tx.Commit()
//
// tx must be a read-write transaction (the default) on the database of the
// lease's Client, at the default isolation level, serializable: at
// repeatable read a read takes no lock, and nothing would stop a rival's
// acquisition from committing first. GuardSQL asks the driver at which
// level tx runs (SHOW VARIABLE ISOLATION_LEVEL, a statement the driver
// answers itself) and returns an error matching ErrNotSerializable, without
// reading, for repeatable read, whether it came from sql.TxOptions, the
// DSN's isolation_level or SET TRANSACTION; a default set in the
// spanner.ClientConfig of a connector's Configurator is beyond what the
// driver reports, so do not set one there. The driver retries an aborted
// transaction by replaying its statements, GuardSQL's read among them, and
// refuses to commit the retry if the row it read has changed
// (spannerdriver.ErrAbortedDueToConcurrentModification), so a retry never
// commits a write the lease no longer covers. With
// spannerdriver.RunTransaction, call GuardSQL inside the function, as
// Guard is called inside spanner.Client.ReadWriteTransaction's.
//
// GuardSQL uses nothing of the driver but database/sql. It is tested with
// go-sql-spanner v1.22.0, on cloud.google.com/go/spanner v1.87.0 (v1.22.0
// and v1.23.0 require that client; v1.24.0 and later require v1.88.0 or
// later, which the emulator these tests run on cannot serve, and are not
// tested).
func (l *Lease) GuardSQL(ctx context.Context, tx *sql.Tx) error {
	if cause := context.Cause(l.ctx); cause != nil {
		return fmt.Errorf("lease: GuardSQL: %w", cause)
	}
	err := l.serializableSQL(ctx, tx)
	if err == nil {
		err = l.guard(ctx, func() (bool, error) { return l.namedSQL(ctx, tx) })
	}
	// A statement under l.Context() (or a context derived from it) fails
	// with a bare context.Canceled once the lease ends: the lease is the
	// cause, and the error says so.
	if cause := context.Cause(l.ctx); err != nil && cause != nil && !errors.Is(err, cause) {
		return fmt.Errorf("lease: GuardSQL: %w: %w", cause, err)
	}
	return err
}

// serializableSQL refuses a database/sql transaction that the driver says
// runs at another level than serializable (its default is the database's,
// serializable).
func (l *Lease) serializableSQL(ctx context.Context, tx *sql.Tx) error {
	show := "SHOW VARIABLE ISOLATION_LEVEL"
	if l.c.st.sql.pg() {
		show = "SHOW isolation_level"
	}
	var level string
	if err := tx.QueryRowContext(ctx, show).Scan(&level); err != nil {
		return fmt.Errorf("lease: GuardSQL: asking the driver for tx's isolation level: %w", err)
	}
	switch level {
	case sql.LevelDefault.String(), sql.LevelSerializable.String():
		return nil
	}
	return fmt.Errorf("%w: tx runs at %s, where reading %q's row does not stop a rival's acquisition from committing first", ErrNotSerializable, strings.ToLower(level), l.name)
}

// namedSQL is named for a database/sql transaction: the same row, the same
// columns, read with the driver's own statement.
func (l *Lease) namedSQL(ctx context.Context, tx *sql.Tx) (bool, error) {
	q := l.c.st.sql
	params := map[string]any{"name": l.name}
	query := "SELECT token, session_id FROM " + q.QuoteTable(q.table) + " WHERE name = @name"
	if l.slot != lockSlot {
		params["slot"] = l.slot
		query = "SELECT token, session_id FROM " + q.QuotePermitsTable(q.table) + " WHERE name = @name AND slot = @slot"
	}
	st := q.statement(query)
	var args []any
	if st.order == nil {
		// GoogleSQL: parameters by name.
		for name, v := range params {
			args = append(args, sql.Named(name, v))
		}
	} else {
		// PostgreSQL: numbered in order of appearance.
		for _, name := range st.order {
			args = append(args, params[name])
		}
	}
	var (
		token     int64
		sessionID sql.NullString
	)
	err := tx.QueryRowContext(ctx, st.sql, args...).Scan(&token, &sessionID)
	if errors.Is(err, sql.ErrNoRows) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	return token == l.token && sessionID.String == l.sess.id, nil
}
