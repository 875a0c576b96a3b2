package provider

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"cloud.google.com/go/spanner"
	database "cloud.google.com/go/spanner/admin/database/apiv1"
	"google.golang.org/api/option"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/spannerlock/terraform-provider-spannerlock/internal/emulator"
	"github.com/spannerlock/terraform-provider-spannerlock/internal/locktable"
)

// Through a proxy, a direct connection to the endpoint says nothing about
// whether the clients reach it, so it is not tried.
func TestReachSkipsProxiedEndpoints(t *testing.T) {
	closed := emulator.ClosedPort(t)
	c := newConnections("Spanner at "+closed, connectionSettings{endpoint: closed, timeout: time.Second}, nil)
	if err := c.reach(t.Context()); err == nil || !strings.Contains(err.Error(), "connection refused") {
		t.Fatalf("reach(%s) without a proxy = %v; want connection refused", closed, err)
	}
	proxyFor = func(*http.Request) (*url.URL, error) { return url.Parse("http://proxy.example:3128") }
	t.Cleanup(func() { proxyFor = http.ProxyFromEnvironment })
	if err := c.reach(t.Context()); err != nil {
		t.Fatalf("reach(%s) through a proxy = %v; want no attempt", closed, err)
	}
}

// The emulator refuses a schema change while a read-write transaction
// runs, as Spanner refuses one while another schema change runs; the
// provider retries exactly those refusals.
func TestConcurrentSchemaChangeIsRecognized(t *testing.T) {
	ctx := emulator.Context(t)
	e := emulator.Shared(t)
	db := emulator.Database(t, locktable.DDL("locks")...)
	sc := emulator.Client(t, db)
	c := newConnections("the Spanner emulator", connectionSettings{endpoint: e.Host(), timeout: time.Minute}, []option.ClientOption{
		option.WithEndpoint("passthrough:///" + e.Host()),
		option.WithoutAuthentication(),
		option.WithGRPCDialOption(grpc.WithTransportCredentials(insecure.NewCredentials())),
	})
	admin, err := c.Admin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = admin.Close() })

	// Sometimes the emulator lets the schema change through and aborts the
	// transaction instead (the client retries it); each try then creates a
	// table of its own, until the emulator refuses one.
	var refused error
	for try := 0; try < 20 && refused == nil; try++ {
		ddl := fmt.Sprintf("CREATE TABLE other_%d (id INT64) PRIMARY KEY (id)", try)
		if err := schemaChangeDuringTransaction(ctx, admin, sc, db, ddl); err != nil {
			refused = err
		}
	}
	if !concurrentSchemaChange(refused) {
		t.Fatalf("schema change during a read-write transaction: %v; want it recognized as a refusal to retry", refused)
	}
	if err := locktable.Apply(ctx, admin, db, []string{"CREATE TABLE other (id INT64) PRIMARY KEY (id)"}); err != nil {
		t.Fatalf("the same schema change once the transaction ended: %v", err)
	}
	if concurrentSchemaChange(context.DeadlineExceeded) {
		t.Fatal("a deadline is not a refusal to retry")
	}
}

// schemaChangeDuringTransaction applies ddl while a read-write transaction
// is open on db, and returns the schema change's error once the
// transaction has committed.
func schemaChangeDuringTransaction(ctx context.Context, admin *database.DatabaseAdminClient, sc *spanner.Client, db, ddl string) error {
	inTransaction, release := make(chan struct{}), make(chan struct{})
	var started sync.Once
	done := make(chan error, 1)
	go func() {
		_, err := sc.ReadWriteTransaction(ctx, func(ctx context.Context, tx *spanner.ReadWriteTransaction) error {
			_, err := tx.Update(ctx, spanner.Statement{SQL: "DELETE FROM locks WHERE name = 'absent'"})
			if err == nil {
				started.Do(func() { close(inTransaction) })
				<-release
			}
			return err
		})
		done <- err
	}()
	select {
	case <-inTransaction:
	case err := <-done:
		return fmt.Errorf("the transaction failed before the schema change: %w", err)
	}
	err := locktable.Apply(ctx, admin, db, []string{ddl})
	close(release)
	if txErr := <-done; txErr != nil {
		return fmt.Errorf("the transaction failed: %w", txErr)
	}
	return err
}
