package emulator

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"strings"

	"cloud.google.com/go/spanner/admin/database/apiv1/databasepb"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// CreateDatabase gives each caller its own database so tests (and packages
// sharing an external emulator) never see each other's rows or schema. The
// DDL is applied as part of creation, which is one round trip instead of two.
// It returns the full path projects/P/instances/I/databases/D.
func (e *Emulator) CreateDatabase(ctx context.Context, ddl ...string) (string, error) {
	return e.createDatabase(ctx, databasepb.DatabaseDialect_GOOGLE_STANDARD_SQL, ddl)
}

// CreatePostgreSQLDatabase is CreateDatabase for a PostgreSQL-dialect
// database; ddl is in that dialect.
func (e *Emulator) CreatePostgreSQLDatabase(ctx context.Context, ddl ...string) (string, error) {
	return e.createDatabase(ctx, databasepb.DatabaseDialect_POSTGRESQL, ddl)
}

// CreateDatabaseIn is CreateDatabase or CreatePostgreSQLDatabase by
// dialect, spelled as Spanner's API spells it ("GOOGLE_STANDARD_SQL" or
// "POSTGRESQL"), for programs that run once per dialect; ddl is in that
// dialect.
func (e *Emulator) CreateDatabaseIn(ctx context.Context, dialect string, ddl ...string) (string, error) {
	d, ok := databasepb.DatabaseDialect_value[dialect]
	if !ok || databasepb.DatabaseDialect(d) == databasepb.DatabaseDialect_DATABASE_DIALECT_UNSPECIFIED {
		return "", fmt.Errorf("emulator: no dialect %q (want %s or %s)", dialect,
			databasepb.DatabaseDialect_GOOGLE_STANDARD_SQL, databasepb.DatabaseDialect_POSTGRESQL)
	}
	return e.createDatabase(ctx, databasepb.DatabaseDialect(d), ddl)
}

func (e *Emulator) createDatabase(ctx context.Context, dialect databasepb.DatabaseDialect, ddl []string) (string, error) {
	// A random name collides only by accident; retry the accident.
	for attempt := 0; ; attempt++ {
		id := "db-" + randomHex(6)
		// Each dialect quotes the name its own way.
		create := "CREATE DATABASE `" + id + "`"
		if dialect == databasepb.DatabaseDialect_POSTGRESQL {
			create = `CREATE DATABASE "` + id + `"`
		}
		op, err := e.dbAdmin.CreateDatabase(ctx, &databasepb.CreateDatabaseRequest{
			Parent:          e.instance,
			CreateStatement: create,
			ExtraStatements: ddl,
			DatabaseDialect: dialect,
		})
		if status.Code(err) == codes.AlreadyExists && attempt < 3 {
			continue
		}
		if err == nil {
			_, err = op.Wait(ctx)
		}
		if status.Code(err) == codes.ResourceExhausted {
			return "", fmt.Errorf("creating database %s on Spanner emulator %s: %w; the emulator allows 100 databases per instance: "+
				"drop databases when done (emulator.Database does at test cleanup) or restart the emulator", id, e.host, err)
		}
		if err != nil {
			return "", fmt.Errorf("creating database %s on Spanner emulator %s: %w; check the DDL and that the emulator is still running", id, e.host, err)
		}
		return e.instance + "/databases/" + id, nil
	}
}

// dropDatabase frees db's slot: the emulator, like Spanner, caps an instance
// at 100 databases, which a package of per-test databases would exceed.
func (e *Emulator) dropDatabase(ctx context.Context, db string) error {
	if err := e.checkDatabase(db); err != nil {
		return err
	}
	err := e.dbAdmin.DropDatabase(ctx, &databasepb.DropDatabaseRequest{Database: db})
	if err != nil && status.Code(err) != codes.NotFound {
		return fmt.Errorf("dropping %s on Spanner emulator %s: %w", db, e.host, err)
	}
	return nil
}

// UpdateDDL changes the schema of a database created by CreateDatabase, for
// tests of migrations; it returns once the change is applied.
func (e *Emulator) UpdateDDL(ctx context.Context, db string, ddl ...string) error {
	if err := e.checkDatabase(db); err != nil {
		return err
	}
	op, err := e.dbAdmin.UpdateDatabaseDdl(ctx, &databasepb.UpdateDatabaseDdlRequest{
		Database:   db,
		Statements: ddl,
	})
	if err == nil {
		err = op.Wait(ctx)
	}
	if err != nil {
		return fmt.Errorf("updating DDL of %s on Spanner emulator %s: %w; check the statements", db, e.host, err)
	}
	return nil
}

// checkDatabase catches a database path from another emulator or instance
// (typically a stale one) with a clearer message than the server's NotFound.
func (e *Emulator) checkDatabase(db string) error {
	prefix := e.instance + "/databases/"
	if !strings.HasPrefix(db, prefix) || len(db) == len(prefix) {
		return fmt.Errorf("database %q is not on this emulator's instance %s; use a path returned by CreateDatabase", db, e.instance)
	}
	return nil
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b) // never fails on supported platforms
	return hex.EncodeToString(b)
}
