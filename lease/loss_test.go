package lease_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"cloud.google.com/go/spanner"

	"github.com/spannerlock/terraform-provider-spannerlock/internal/emulator"
	"github.com/spannerlock/terraform-provider-spannerlock/lease"
)

func TestContextCancelledWhenARenewalFindsTheLeaseTaken(t *testing.T) {
	eachDialect(t, func(t *testing.T) {
		ctx := emulator.Context(t)
		db := newDatabase(t)
		a := newClient(t, db, lease.WithTTL(3*time.Second))
		l := mustAcquire(t, ctx, a, "job")
		stealLease(t, ctx, db, "job")
		// The next renewal (within TTL/3) must notice.
		waitDone(t, l.Context(), "context of a stolen lease")
		if err := context.Cause(l.Context()); !errors.Is(err, lease.ErrLeaseLost) {
			t.Fatalf("cause = %v, want ErrLeaseLost", err)
		}
	})
}

// The holder must learn of the loss before any rival could acquire: when
// renewals stop reaching Spanner, the context ends while Spanner still
// reports the lease as live. The comparison is on Spanner's clock, through
// strong reads begun after the context ended (spannerClock): the local
// clock is not Spanner's, and a read of the holder made after the context
// ended may be served late on a loaded machine, when the lease has
// expired as it should.
func TestContextCancelledAtTheLocalDeadlineBeforeExpiry(t *testing.T) {
	eachDialect(t, func(t *testing.T) {
		ctx := emulator.Context(t)
		db := newDatabase(t)
		holderSC := emulator.Client(t, db)
		a := newClientWith(t, holderSC, lease.WithTTL(2*time.Second))
		reader := newClient(t, db)
		readerSC := emulator.Client(t, db)
		l := mustAcquire(t, ctx, a, "job")
		endedAt := make(chan time.Time, 1)
		go func() {
			<-l.Context().Done()
			endedAt <- time.Now()
		}()
		holderSC.Close() // renewals now fail: an outage as seen by the holder
		// Closed, the holder's spanner.Client renews no more: the row's
		// expiry is final (a renewal it sent before the close that
		// commits after this read would only make the check stricter).
		h, err := reader.Holder(ctx, "job")
		fatalIf(t, err, "Holder while the lease is live")
		if h.Token != l.Token() {
			t.Fatalf("holder token %d, want %d", h.Token, l.Token())
		}

		waitDone(t, l.Context(), "context of an unrenewable lease")
		if err := context.Cause(l.Context()); !errors.Is(err, lease.ErrLeaseLost) {
			t.Fatalf("cause = %v, want ErrLeaseLost", err)
		}
		ended := <-endedAt
		// Spanner's time when the context ended is at most ended plus
		// D(ended) <= s-b for a strong read begun at b >= ended that read
		// at s; the quickest of a few reads bounds it most tightly.
		var clock spannerClock
		for range 10 {
			rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
			began := time.Now()
			ro := readerSC.Single()
			_, err := ro.Query(rctx, spanner.Statement{SQL: "SELECT 1"}).Next()
			returned := time.Now()
			if ts, terr := ro.Timestamp(); err == nil && terr == nil {
				clock.sample(began, returned, ts)
			}
			ro.Close()
			cancel()
		}
		ahead, ok := clock.upper(ended)
		if !ok {
			t.Fatal("no strong read succeeded after the context ended")
		}
		if atEnd := ended.Add(ahead); !atEnd.Before(h.ExpiresAt) {
			t.Fatalf("the context ended at Spanner time %v or earlier, but the lease expired at %v: the loss signal must come before Spanner lets a rival in", atEnd, h.ExpiresAt)
		}
	})
}

// Two renewals that fail, even by hanging until their timeout, must not
// end the lease (the renewal interval is at most TTL/3).
func TestTransientRenewalErrorsAreRetried(t *testing.T) {
	eachDialect(t, func(t *testing.T) {
		ctx := emulator.Context(t)
		db := newDatabase(t)
		f := &faults{}
		sc := spannerClient(t, db, f.options()...)
		ttl := 3 * time.Second
		a := newClientWith(t, sc, lease.WithTTL(ttl))
		l := mustAcquire(t, ctx, a, "job")
		// The next two renewals hang until they time out, their commits
		// blackholed.
		f.arm(func(r rpc) bool { return renewals(r) && strings.HasSuffix(r.method, "/Commit") }, map[int]fault{0: delayed, 1: delayed})
		select {
		case <-l.Context().Done():
			t.Fatalf("lease lost after transient renewal errors: %v", context.Cause(l.Context()))
		case <-time.After(2 * ttl):
		}
		if _, hits := f.disarm(); hits != 2 {
			t.Fatalf("%d of 2 injected faults hit: renewals did not run", hits)
		}
	})
}

const (
	holderProcessEnv = "LEASE_TEST_HOLDER_DB"
	holderTTLEnv     = "LEASE_TEST_HOLDER_TTL"
	holderRunOnceEnv = "LEASE_TEST_HOLDER_RUNONCE_SLOT"
)

// runHolderProcess is a separate process that acquires a lease, reports its
// token on stdout and then renews it until it is killed.
func runHolderProcess() {
	ctx := context.Background()
	ttl, err := time.ParseDuration(os.Getenv(holderTTLEnv))
	if err != nil {
		fmt.Println("error:", err)
		os.Exit(2)
	}
	sc, err := spanner.NewClient(ctx, os.Getenv(holderProcessEnv))
	if err != nil {
		fmt.Println("error:", err)
		os.Exit(2)
	}
	c, err := lease.NewClient(sc, table, lease.WithTTL(ttl), lease.WithHolderID("doomed"))
	if err != nil {
		fmt.Println("error:", err)
		os.Exit(2)
	}
	if slot := os.Getenv(holderRunOnceEnv); slot != "" {
		// A replica that crashes in the middle of the job.
		at, _ := time.Parse(time.RFC3339, slot)
		_, err := c.RunOnce(ctx, "report", at, func(context.Context) error {
			fmt.Println("running")
			select {}
		})
		fmt.Println("error:", err)
		os.Exit(2)
	}
	l, err := c.TryAcquire(ctx, "job")
	if err != nil {
		fmt.Println("error:", err)
		os.Exit(2)
	}
	fmt.Println("token", l.Token())
	select {}
}

// startHolderProcess runs runHolderProcess in a child process with extra
// environment, returns it with the first line it prints, and kills it at the
// end of the test.
func startHolderProcess(t *testing.T, db string, ttl time.Duration, env ...string) (*exec.Cmd, string) {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), emulator.Shared(t).Env()...)
	cmd.Env = append(cmd.Env, holderProcessEnv+"="+db, holderTTLEnv+"="+ttl.String())
	cmd.Env = append(cmd.Env, env...)
	out, err := cmd.StdoutPipe()
	fatalIf(t, err, "pipe")
	fatalIf(t, cmd.Start(), "start holder process")
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	line, err := bufio.NewReader(out).ReadString('\n')
	fatalIf(t, err, "read the holder process's first line")
	return cmd, strings.TrimSpace(line)
}

func TestTakeoverAfterTheHolderCrashes(t *testing.T) {
	eachDialect(t, func(t *testing.T) {
		ctx := emulator.Context(t)
		db := newDatabase(t)
		ttl := 2 * time.Second
		cmd, line := startHolderProcess(t, db, ttl)
		if !strings.HasPrefix(line, "token ") {
			t.Fatalf("holder process said %q", line)
		}
		token, err := strconv.ParseInt(strings.TrimPrefix(line, "token "), 10, 64)
		fatalIf(t, err, "parse token")

		// Wait for a renewal, so the takeover below depends on renewals stopping.
		rival := newClient(t, db, lease.WithTTL(ttl))
		for {
			h, err := rival.Holder(ctx, "job")
			fatalIf(t, err, "Holder while the holder process runs")
			if h.RenewedAt.After(h.AcquiredAt) {
				break
			}
			time.Sleep(50 * time.Millisecond)
		}
		if _, err := rival.TryAcquire(ctx, "job"); !errors.Is(err, lease.ErrNotAcquired) {
			t.Fatalf("TryAcquire while the holder process renews: err = %v, want ErrNotAcquired", err)
		}
		fatalIf(t, cmd.Process.Signal(syscall.SIGKILL), "kill holder")
		killed := time.Now()

		acquireCtx, cancel := context.WithTimeout(ctx, 3*ttl)
		defer cancel()
		l, err := rival.Acquire(acquireCtx, "job")
		fatalIf(t, err, "Acquire after the holder was killed")
		if took := time.Since(killed); took > ttl*3/2 {
			t.Fatalf("takeover took %s after the kill, want at most 1.5×TTL = %s", took, ttl*3/2)
		}
		if l.Token() != token+1 {
			t.Fatalf("takeover token = %d, want %d", l.Token(), token+1)
		}
	})
}
