package lease_test

import (
	"context"
	"testing"
	"time"

	"cloud.google.com/go/spanner/apiv1/spannerpb"
	"google.golang.org/protobuf/types/known/structpb"
)

// Self-tests of the lock model (lockmodel_test.go): the enumeration and the
// lock-wait tests trust it to hold back whatever Spanner would, so each
// rule it claims is checked here on RPCs built by hand, without the
// emulator. Each test fails if the model drops its rule.

// modelTxnOf begins a read-write transaction in m whose first statement
// reads the locks rows of names, as a transaction tagged tag would on
// Spanner session session, and returns what the model knows of it.
func modelTxnOf(t *testing.T, m *lockModel, ctx context.Context, tag, session string, names ...string) pending {
	t.Helper()
	p := m.before(ctx, readLocks(session, nil, names...), tag, nil)
	if p.refuse != nil {
		t.Fatalf("%s: its first read was refused: %v", tag, p.refuse)
	}
	m.after(p, "/google.spanner.v1.Spanner/ExecuteStreamingSql", true, []byte(tag))
	// Transactions begun in the same nanosecond would tie in age.
	time.Sleep(time.Millisecond)
	return p
}

// readLocks is a query of the locks rows of names: in the transaction
// with ID id, or beginning one when id is nil.
func readLocks(session string, id []byte, names ...string) *spannerpb.ExecuteSqlRequest {
	vals := make([]*structpb.Value, len(names))
	for i, n := range names {
		vals[i] = structpb.NewStringValue(n)
	}
	sel := &spannerpb.TransactionSelector{Selector: &spannerpb.TransactionSelector_Id{Id: id}}
	if id == nil {
		sel = &spannerpb.TransactionSelector{Selector: &spannerpb.TransactionSelector_Begin{Begin: &spannerpb.TransactionOptions{
			Mode: &spannerpb.TransactionOptions_ReadWrite_{ReadWrite: &spannerpb.TransactionOptions_ReadWrite{}}}}}
	}
	return &spannerpb.ExecuteSqlRequest{
		Session:     session,
		Transaction: sel,
		Sql:         "SELECT t.name FROM UNNEST(@names) AS k JOIN locks AS t ON t.name = k",
		Params:      &structpb.Struct{Fields: map[string]*structpb.Value{"names": structpb.NewListValue(&structpb.ListValue{Values: vals})}},
	}
}

// commitLocks is the Commit of transaction id writing the locks rows of names.
func commitLocks(session string, id []byte, names ...string) *spannerpb.CommitRequest {
	var ms []*spannerpb.Mutation
	for _, n := range names {
		ms = append(ms, &spannerpb.Mutation{Operation: &spannerpb.Mutation_Update{Update: &spannerpb.Mutation_Write{
			Table: "locks", Columns: []string{"name"},
			Values: []*structpb.ListValue{{Values: []*structpb.Value{structpb.NewStringValue(n)}}},
		}}})
	}
	return &spannerpb.CommitRequest{Session: session, Transaction: &spannerpb.CommitRequest_TransactionId{TransactionId: id}, Mutations: ms}
}

// sent is what before returned for an RPC sent in the background, and when.
type sent struct {
	p  pending
	at time.Time
}

// send runs before for req in the background.
func send(m *lockModel, ctx context.Context, req any, tag string) <-chan sent {
	out := make(chan sent, 1)
	go func() {
		p := m.before(ctx, req, tag, nil)
		out <- sent{p, time.Now()}
	}()
	return out
}

// stillHeld checks that an RPC sent in the background is still held back
// after a while: 200ms, long enough for a model that let it through to
// have done so, however loaded the machine (before returns at once then).
func stillHeld(t *testing.T, what string, c <-chan sent) {
	t.Helper()
	select {
	case s := <-c:
		t.Fatalf("%s was not held back (refusal: %v)", what, s.p.refuse)
	case <-time.After(200 * time.Millisecond):
	}
}

// released waits for an RPC sent in the background to be let through.
func released(t *testing.T, what string, c <-chan sent) sent {
	t.Helper()
	select {
	case s := <-c:
		if s.p.refuse != nil {
			t.Fatalf("%s was refused: %v", what, s.p.refuse)
		}
		return s
	case <-time.After(20 * time.Second):
		t.Fatalf("%s is still held back", what)
	}
	return sent{}
}

// A transaction that read a row holds a shared lock on it until it ends: a
// younger writer's Commit waits for it, and goes on when it ends.
func TestLockModelAWriterWaitsForAReadersSharedLock(t *testing.T) {
	m := newLockModel()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	reader := modelTxnOf(t, m, ctx, "reader", "s1", "x")
	modelTxnOf(t, m, ctx, "writer", "s2", "y")

	commit := send(m, ctx, commitLocks("s2", []byte("writer"), "x"), "writer")
	stillHeld(t, "a Commit writing a row an older transaction read", commit)
	m.after(reader, "/google.spanner.v1.Spanner/Rollback", true, nil)
	released(t, "the Commit once the reader rolled back", commit)
	ws := m.waitsBy("writer")
	if len(ws) != 1 || ws[0].holder != "reader" || ws[0].exclusive || ws[0].timedOut {
		t.Fatalf("waits recorded: %v, want one wait for the reader's shared lock", ws)
	}
}

// A transaction cut off from Spanner after a read keeps its shared lock
// until Spanner aborts it as idle, not until its client's deadline: a
// writer waits for the idle abort.
func TestLockModelAStuckTransactionHoldsItsLocksUntilTheIdleAbort(t *testing.T) {
	if newLockModel().idleAbort != spannerIdleAbort || spannerIdleAbort < 10*time.Second {
		t.Fatalf("the model's idle abort is %s, Spanner's about 10s", newLockModel().idleAbort)
	}
	m := newLockModel()
	m.idleAbort = 1500 * time.Millisecond // a stand-in, to keep time
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	// The stuck transaction's client gives up after 100ms.
	sctx, scancel := context.WithTimeout(ctx, 100*time.Millisecond)
	defer scancel()
	stuckAt := time.Now() // no later than its last request
	stuck := modelTxnOf(t, m, sctx, "stuck", "s1", "x")
	m.stick(stuck, nil)
	modelTxnOf(t, m, ctx, "writer", "s2", "y")

	commit := send(m, ctx, commitLocks("s2", []byte("writer"), "x"), "writer")
	s := released(t, "a Commit writing a row a stuck transaction read", commit)
	// Timers never fire early: a model that freed the lock at the stuck
	// client's deadline lets the Commit through ~1.4s sooner.
	if held := s.at.Sub(stuckAt); held < m.idleAbort {
		t.Fatalf("the stuck transaction's lock was freed after %s, before the idle abort (%s)", held, m.idleAbort)
	}
	if ws := m.waitsBy("writer"); len(ws) == 0 || ws[len(ws)-1].timedOut {
		t.Fatalf("waits recorded: %v, want the writer to wait for the stuck transaction and go on", ws)
	}
	if until := m.lockedUntil(modelRow{table: "locks", key: "x"}); until.Before(stuckAt.Add(m.idleAbort)) {
		t.Fatalf("lockedUntil(x) = %v, want the idle abort", until)
	}
}

// A transaction whose client gave up at its deadline without its end
// reaching Spanner (no rollback) keeps its locks until the idle abort too.
func TestLockModelAnAbandonedTransactionHoldsItsLocksUntilTheIdleAbort(t *testing.T) {
	m := newLockModel()
	m.idleAbort = 1500 * time.Millisecond
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	actx, acancel := context.WithTimeout(ctx, 100*time.Millisecond)
	defer acancel()
	lastAt := time.Now() // no later than its last request
	modelTxnOf(t, m, actx, "abandoned", "s1", "x")
	modelTxnOf(t, m, ctx, "writer", "s2", "y")

	s := released(t, "a Commit writing a row an abandoned transaction read",
		send(m, ctx, commitLocks("s2", []byte("writer"), "x"), "writer"))
	if held := s.at.Sub(lastAt); held < m.idleAbort {
		t.Fatalf("the abandoned transaction's lock was freed after %s, before the idle abort (%s)", held, m.idleAbort)
	}
}

// A Commit holds exclusive locks on the rows it writes: a read of one of
// them waits until the Commit ends, even while the Commit itself still
// waits for an older reader's shared lock on another row; and an older
// reader wounds a Commit still waiting for its locks.
func TestLockModelAReadWaitsForACommitsExclusiveLock(t *testing.T) {
	t.Run("applying", func(t *testing.T) {
		m := newLockModel()
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		modelTxnOf(t, m, ctx, "writer", "s1", "y")
		commit := released(t, "an uncontended Commit", send(m, ctx, commitLocks("s1", []byte("writer"), "x"), "writer"))
		// The Commit is on its way to Spanner: a younger read of x waits.
		read := send(m, ctx, readLocks("s2", nil, "x"), "reader")
		stillHeld(t, "a read of a row a Commit in flight writes", read)
		m.after(commit.p, "/google.spanner.v1.Spanner/Commit", true, nil)
		released(t, "the read once the Commit was answered", read)
		if ws := m.waitsBy("reader"); len(ws) != 1 || !ws[0].exclusive || ws[0].holder != "writer" {
			t.Fatalf("waits recorded: %v, want one wait for the writer's exclusive lock", ws)
		}
	})
	t.Run("waiting for its locks", func(t *testing.T) {
		m := newLockModel()
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		older := modelTxnOf(t, m, ctx, "older", "s1", "y")
		modelTxnOf(t, m, ctx, "writer", "s2", "z")
		commit := send(m, ctx, commitLocks("s2", []byte("writer"), "x", "y"), "writer")
		stillHeld(t, "a Commit writing a row an older transaction read", commit)
		// A younger transaction's read of x waits behind the Commit.
		read := send(m, ctx, readLocks("s3", nil, "x"), "younger")
		stillHeld(t, "a read of a row a waiting Commit writes", read)
		m.after(older, "/google.spanner.v1.Spanner/Rollback", true, nil)
		c := released(t, "the Commit once the older reader rolled back", commit)
		stillHeld(t, "a read of a row a Commit in flight writes", read)
		m.after(c.p, "/google.spanner.v1.Spanner/Commit", true, nil)
		released(t, "the read once the Commit was answered", read)
	})
	t.Run("wounded by an older reader", func(t *testing.T) {
		m := newLockModel()
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		modelTxnOf(t, m, ctx, "older", "s1", "y")
		modelTxnOf(t, m, ctx, "writer", "s2", "z")
		commit := send(m, ctx, commitLocks("s2", []byte("writer"), "x", "y"), "writer")
		stillHeld(t, "a Commit writing a row an older transaction read", commit)
		// The older transaction reads x next: it goes first.
		read := send(m, ctx, readLocks("s1", []byte("older"), "x"), "older")
		released(t, "the older transaction's read of a row a waiting Commit writes", read)
		select {
		case s := <-commit:
			if s.p.refuse == nil {
				t.Fatal("the wounded Commit was let through")
			}
		case <-time.After(20 * time.Second):
			t.Fatal("the wounded Commit is still held back")
		}
	})
}

// The line is part of what an acquisition reads: a transaction that read a
// name's waiters holds a shared lock on them, which a Commit adding a
// waiter to that line waits for.
func TestLockModelCoversTheWaitersTable(t *testing.T) {
	m := newLockModel()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	req := readLocks("s1", nil, "x")
	req.Sql = "SELECT w.name FROM UNNEST(@names) AS k JOIN locks_waiters AS w ON w.name = k"
	reader := m.before(ctx, req, "reader", nil)
	m.after(reader, "/google.spanner.v1.Spanner/ExecuteStreamingSql", true, []byte("reader"))
	time.Sleep(time.Millisecond)
	modelTxnOf(t, m, ctx, "joiner", "s2", "y")
	join := commitLocks("s2", []byte("joiner"))
	join.Mutations = []*spannerpb.Mutation{{Operation: &spannerpb.Mutation_Insert{Insert: &spannerpb.Mutation_Write{
		Table: "locks_waiters", Columns: []string{"name", "enqueued_at", "session_id"},
		Values: []*structpb.ListValue{{Values: []*structpb.Value{structpb.NewStringValue("x"),
			structpb.NewStringValue("2026-12-02T05:00:00Z"), structpb.NewStringValue("0123456789abcdef0123456789abcdef")}}},
	}}}}
	commit := send(m, ctx, join, "joiner")
	stillHeld(t, "a Commit joining a line another transaction read", commit)
	m.after(reader, "/google.spanner.v1.Spanner/Rollback", true, nil)
	released(t, "the Commit once the reader rolled back", commit)
}
