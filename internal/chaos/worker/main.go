// Command worker is one contender of the fault suite (package
// internal/chaos): a real OS process that acquires locks and semaphore
// permits with package lease and, in each critical section, writes a fenced
// resource through Lease.Guard, appending what it did to a log.
//
// The resource relies on Guard alone: the worker never compares tokens
// itself, and runs its guarded transactions under a context of its own
// rather than the lease's, so that only Spanner's check stands between a
// stale holder and the data. A lock's increment is two transactions (read
// the counter, then write prev+1), so two holders in one critical section
// lose an update the checker sees.
//
// Protocol with the driver: it prints READY once connected and, with
// -barrier, waits for a line on stdin before starting, so that all workers
// start in the same instant; it prints "HOLD name token" and "FREE name
// token" as leases begin and end. Commands on stdin: "pause lock" or "pause
// sem" arms a pause point (the next guarded write of a fresh lock, or
// permit, stops the process with SIGSTOP right after Guard, printing
// "STOPPING name token op" first); "ambiguous" makes the next successful
// Commit report DEADLINE_EXCEEDED (an ambiguous commit).
package main

import (
	"bufio"
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"cloud.google.com/go/spanner"
	"cloud.google.com/go/spanner/apiv1/spannerpb"
	"google.golang.org/api/option"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/spannerlock/terraform-provider-spannerlock/internal/chaos/record"
	"github.com/spannerlock/terraform-provider-spannerlock/lease"
)

type config struct {
	database  string
	host      string
	holder    string
	locks     int
	semaphore string
	semShare  float64
	first     string
	ttl       time.Duration
	until     time.Time
	seed      uint64
	logPath   string
	ambiguous float64
	barrier   bool
}

func main() {
	var cfg config
	var until int64
	flag.StringVar(&cfg.database, "database", "", "database path projects/P/instances/I/databases/D")
	flag.StringVar(&cfg.host, "host", "", "emulator (or proxy) host:port")
	flag.StringVar(&cfg.holder, "holder", "", "holder ID")
	flag.IntVar(&cfg.locks, "locks", 2, "number of locks, named lock-0 ... lock-(n-1)")
	flag.StringVar(&cfg.semaphore, "semaphore", "", "semaphore name (declared by the driver); empty for none")
	flag.Float64Var(&cfg.semShare, "sem-share", 0.3, "fraction of critical sections on the semaphore")
	flag.StringVar(&cfg.first, "first", "", "lock every worker contends for first (the start-together case)")
	flag.DurationVar(&cfg.ttl, "ttl", time.Second, "lease TTL")
	flag.Int64Var(&until, "until", 0, "stop starting critical sections at this Unix time in nanoseconds")
	flag.Uint64Var(&cfg.seed, "seed", 1, "random seed")
	flag.StringVar(&cfg.logPath, "log", "", "event log (JSON lines)")
	flag.Float64Var(&cfg.ambiguous, "ambiguous", 0, "probability that a successful Commit is reported as DEADLINE_EXCEEDED")
	flag.BoolVar(&cfg.barrier, "barrier", false, "after READY, wait for a line \"go <until>\" on stdin before starting")
	flag.Parse()
	cfg.until = time.Unix(0, until)
	if err := run(cfg); err != nil {
		fmt.Fprintln(os.Stderr, "worker:", err)
		os.Exit(1)
	}
}

type worker struct {
	cfg config
	log *record.Log
	db  *spanner.Client
	c   *lease.Client

	rngMu sync.Mutex
	rng   *rand.Rand

	outMu sync.Mutex
	ops   int

	// armedLock and armedSem are set by "pause lock" and "pause sem":
	// pause at the next guarded write of that kind.
	armedLock, armedSem atomic.Bool
	// ambiguousNext is set by "ambiguous": fail the next successful Commit.
	ambiguousNext atomic.Bool
	// then is the second fault of a compound nemesis, set with
	// ambiguousNext ("ambiguous blackhole", "ambiguous pause"): it strikes
	// the recovery from the ambiguous commit.
	then atomic.Value // string
	// blackholeUntil holds every RPC, unsent, until then (unix nanos).
	blackholeUntil atomic.Int64
}

func run(cfg config) error {
	for k, v := range map[string]string{
		"GOOGLE_CLOUD_SPANNER_MULTIPLEXED_SESSIONS":       "false",
		"GOOGLE_CLOUD_SPANNER_DISABLE_LOG_CLIENT_OPTIONS": "true",
	} {
		if err := os.Setenv(k, v); err != nil {
			return err
		}
	}
	l, err := record.OpenLog(cfg.logPath, cfg.holder)
	if err != nil {
		return err
	}
	defer func() { _ = l.Close() }()
	w := &worker{cfg: cfg, log: l, rng: rand.New(rand.NewPCG(cfg.seed, cfg.seed^0x9e3779b97f4a7c15))}
	l.Append(record.Event{Ev: record.EvStart, Detail: build})

	ctx := context.Background()
	pool := spanner.DefaultSessionPoolConfig
	pool.MinOpened = 1
	w.db, err = spanner.NewClientWithConfig(ctx, cfg.database, spanner.ClientConfig{SessionPoolConfig: pool, DisableNativeMetrics: true},
		option.WithEndpoint("passthrough:///"+cfg.host),
		option.WithoutAuthentication(),
		option.WithGRPCDialOption(grpc.WithTransportCredentials(insecure.NewCredentials())),
		option.WithGRPCDialOption(grpc.WithChainUnaryInterceptor(w.intercept)),
		option.WithGRPCDialOption(grpc.WithChainStreamInterceptor(w.interceptStream)),
	)
	if err != nil {
		return err
	}
	defer w.db.Close()
	w.c, err = lease.NewClient(w.db, record.Table, lease.WithTTL(cfg.ttl), lease.WithHolderID(cfg.holder),
		lease.WithPollInterval(cfg.ttl/4), lease.WithLogger(slog.New(slog.NewTextHandler(os.Stderr, nil))))
	if err != nil {
		return err
	}
	// Open a session before the barrier, so that the start is a race of
	// acquisitions rather than of connections.
	wctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	_, err = w.db.Single().ReadRow(wctx, record.CountersTable, spanner.Key{"warm-up"}, []string{"value"})
	cancel()
	if err != nil && spanner.ErrCode(err) != codes.NotFound {
		return fmt.Errorf("warm-up read: %w", err)
	}
	w.say("READY")
	stdin := bufio.NewReader(os.Stdin)
	if cfg.barrier {
		// The release line is "go <end of run in Unix nanoseconds>".
		line, err := stdin.ReadString('\n')
		if err != nil {
			return fmt.Errorf("waiting at the start barrier: %w", err)
		}
		var until int64
		if _, err := fmt.Sscanf(line, "go %d", &until); err != nil {
			return fmt.Errorf("start barrier: %q: %w", line, err)
		}
		w.cfg.until = time.Unix(0, until)
	}
	go w.commands(stdin)

	first := cfg.first
	for time.Now().Before(w.cfg.until) {
		name, sem := first, false
		first = ""
		if name == "" {
			if cfg.semaphore != "" && w.float() < cfg.semShare {
				name, sem = cfg.semaphore, true
			} else {
				name = fmt.Sprintf("lock-%d", w.intn(cfg.locks))
			}
		}
		w.criticalSection(ctx, name, sem)
	}
	cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- w.c.Close() }()
	select {
	case err = <-done:
	case <-cctx.Done():
		err = cctx.Err()
	}
	l.Append(record.Event{Ev: record.EvExit, Err: errString(err)})
	return nil
}

// criticalSection acquires name (a permit of it when sem), makes one to
// three guarded writes with pauses between them, some longer than the TTL,
// and releases.
func (w *worker) criticalSection(ctx context.Context, name string, sem bool) {
	actx, cancel := context.WithDeadline(ctx, w.cfg.until)
	var (
		l   *lease.Lease
		err error
	)
	if sem {
		l, err = w.c.AcquirePermit(actx, name)
	} else {
		l, err = w.c.Acquire(actx, name)
	}
	cancel()
	if err != nil {
		w.log.Append(record.Event{Ev: record.EvAcquireFailed, Name: name, Sem: sem, Err: err.Error()})
		time.Sleep(w.cfg.ttl / 10)
		return
	}
	w.log.Append(record.Event{Ev: record.EvAcquired, Name: name, Sem: sem, Token: l.Token(), Commit: l.AcquiredAt()})
	w.say("HOLD %s %d", name, l.Token())
	stop := context.AfterFunc(l.Context(), func() {
		cause := context.Cause(l.Context())
		w.log.Append(record.Event{Ev: record.EvEnded, Name: name, Sem: sem, Token: l.Token(), Outcome: endOutcome(cause), Detail: cause.Error()})
		w.say("FREE %s %d", name, l.Token())
	})
	defer stop()

	writes := 1 + w.intn(3)
	for i := range writes {
		if i > 0 && time.Now().After(w.cfg.until) {
			break
		}
		if i > 0 {
			// Mostly short work, sometimes longer than the TTL: the lease
			// must survive on renewals.
			d := time.Duration(w.float() * float64(w.cfg.ttl/3))
			if w.float() < 0.1 {
				d = w.cfg.ttl + d
			}
			time.Sleep(d)
		}
		if w.write(l, name, sem) == record.Rejected && l.Context().Err() != nil {
			break
		}
	}
	rctx, cancel := context.WithTimeout(ctx, 2*w.cfg.ttl)
	err = l.Release(rctx)
	cancel()
	outcome := record.Released
	switch {
	case errors.Is(err, lease.ErrLeaseLost):
		outcome = record.ReleaseLost
	case err != nil:
		outcome = record.ReleaseError
	}
	w.log.Append(record.Event{Ev: record.EvReleased, Name: name, Sem: sem, Token: l.Token(), Outcome: outcome, Err: errString(err)})
}

// write makes one guarded increment of name's counter and logs its outcome.
func (w *worker) write(l *lease.Lease, name string, sem bool) string {
	w.outMu.Lock()
	w.ops++
	op := fmt.Sprintf("%s/%d", w.cfg.holder, w.ops)
	w.outMu.Unlock()
	w.log.Append(record.Event{Ev: record.EvWrite, Name: name, Sem: sem, Token: l.Token(), Op: op})

	// Half the writes run under the lease's Context, as the package
	// documentation advises; half under a context of their own, so that
	// Guard's check in Spanner is all that fences them. A write that may
	// stop at the pause point is always of the second kind: the lease's
	// Context would end on waking and cancel the commit, hiding a fence
	// that lets the stale write through.
	base := context.Background()
	if !w.armed(sem).Load() && w.float() < 0.5 {
		base = l.Context()
	}
	ctx, cancel := context.WithTimeout(base, 3*w.cfg.ttl)
	defer cancel()

	var prev int64
	if !sem {
		// A lock's increment reads in one transaction and writes in the
		// next: correct only under mutual exclusion.
		_, err := w.db.ReadWriteTransactionWithOptions(ctx, func(ctx context.Context, tx *spanner.ReadWriteTransaction) error {
			if err := guard(ctx, l, tx); err != nil {
				return err
			}
			var err error
			prev, err = readCounter(ctx, tx, name)
			return err
		}, spanner.TransactionOptions{TransactionTag: "chaos-read"})
		if err != nil {
			e := record.Event{Ev: record.EvWriteDone, Name: name, Token: l.Token(), Op: op, Outcome: record.Rejected, Err: err.Error()}
			if errors.Is(err, lease.ErrLeaseLost) {
				e.Detail = record.RejectedByGuard
			}
			w.log.Append(e)
			return record.Rejected
		}
	}

	var fnErr error
	resp, err := w.db.ReadWriteTransactionWithOptions(ctx, func(ctx context.Context, tx *spanner.ReadWriteTransaction) error {
		fnErr = func() error {
			if err := guard(ctx, l, tx); err != nil {
				return err
			}
			w.pausePoint(l, name, op, sem)
			if sem {
				var err error
				if prev, err = readCounter(ctx, tx, name); err != nil {
					return err
				}
			}
			return tx.BufferWrite([]*spanner.Mutation{
				spanner.InsertOrUpdate(record.CountersTable, []string{"name", "value"}, []any{name, prev + 1}),
				spanner.Insert(record.WritesTable, record.WritesColumns,
					[]any{op, spanner.CommitTimestamp, name, sem, l.Token(), w.cfg.holder, prev, prev + 1}),
			})
		}()
		return fnErr
	}, spanner.TransactionOptions{TransactionTag: "chaos-write"})
	e := record.Event{Ev: record.EvWriteDone, Name: name, Sem: sem, Token: l.Token(), Op: op, Err: errString(err)}
	switch {
	case err == nil:
		e.Outcome, e.Commit, e.Prev, e.Value = record.Committed, resp.CommitTs, prev, prev+1
	case fnErr != nil:
		e.Outcome = record.Rejected
		if errors.Is(fnErr, lease.ErrLeaseLost) {
			e.Detail = record.RejectedByGuard
		}
	default:
		e.Outcome = record.Unknown
	}
	w.log.Append(e)
	return e.Outcome
}

// pausePoint stops this process, when the driver armed it, inside a
// guarded transaction right after Guard passed: the classic pause between
// a check and the write it allows. Only a fresh lease qualifies, so the
// driver can confirm that the worker held it when it stopped.
func (w *worker) pausePoint(l *lease.Lease, name, op string, sem bool) {
	armed := w.armed(sem)
	if !armed.Load() || time.Until(l.Deadline()) < w.cfg.ttl/2 || !armed.CompareAndSwap(true, false) {
		return
	}
	w.log.Append(record.Event{Ev: record.EvFault, Fault: record.FaultPausePoint, Name: name, Token: l.Token(), Op: op})
	w.say("STOPPING %s %d %s", name, l.Token(), op)
	_ = syscall.Kill(os.Getpid(), syscall.SIGSTOP)
}

func (w *worker) armed(sem bool) *atomic.Bool {
	if sem {
		return &w.armedSem
	}
	return &w.armedLock
}

// commands follows the driver's commands on stdin until it closes.
func (w *worker) commands(r *bufio.Reader) {
	for {
		line, err := r.ReadString('\n')
		switch strings.TrimSpace(line) {
		case "pause lock":
			w.armedLock.Store(true)
		case "pause sem":
			w.armedSem.Store(true)
		case "ambiguous":
			w.ambiguousNext.Store(true)
		case "ambiguous blackhole":
			w.then.Store("blackhole")
			w.ambiguousNext.Store(true)
		case "ambiguous pause":
			w.then.Store("pause")
			w.ambiguousNext.Store(true)
		}
		if err != nil {
			return
		}
	}
}

func readCounter(ctx context.Context, tx *spanner.ReadWriteTransaction, name string) (int64, error) {
	r, err := tx.ReadRow(ctx, record.CountersTable, spanner.Key{name}, []string{"value"})
	if spanner.ErrCode(err) == codes.NotFound {
		return 0, nil
	}
	if err != nil {
		return 0, err
	}
	var v int64
	return v, r.Column(0, &v)
}

// intercept injects ambiguous commits (a Commit that succeeded, reported as
// DEADLINE_EXCEEDED, which the client does not retry) and logs the aborts
// the emulator's fault injection causes.
func (w *worker) intercept(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoke grpc.UnaryInvoker, opts ...grpc.CallOption) error {
	if err := w.blackholed(ctx); err != nil {
		return err
	}
	if !strings.HasSuffix(method, "/Commit") {
		return invoke(ctx, method, req, reply, cc, opts...)
	}
	err := invoke(ctx, method, req, reply, cc, opts...)
	var tag string
	if r, ok := req.(*spannerpb.CommitRequest); ok {
		tag = r.GetRequestOptions().GetTransactionTag()
	}
	if err != nil {
		if status.Code(err) == codes.Aborted && injectedAbort(err) {
			w.log.Append(record.Event{Ev: record.EvFault, Fault: record.FaultEmulatorAbort, Detail: tag})
		}
		return err
	}
	forced := w.ambiguousNext.Swap(false)
	if forced || w.float() < w.cfg.ambiguous {
		w.log.Append(record.Event{Ev: record.EvFault, Fault: record.FaultAmbiguousCommit, Detail: tag})
		if forced {
			w.strikeRecovery(tag)
		}
		return status.Error(codes.DeadlineExceeded, "chaos: the commit was applied but its reply was lost")
	}
	return nil
}

// strikeRecovery applies the second fault of a compound nemesis, if one is
// set, just as the client starts to recover from an ambiguous commit: the
// read that would settle it, and every retry, are blackholed for TTL/4 to
// 5·TTL/4; or the process stops itself for longer than the TTL before it can
// recover at all.
func (w *worker) strikeRecovery(tag string) {
	then, _ := w.then.Swap("").(string)
	switch then {
	case "blackhole":
		d := w.cfg.ttl/4 + time.Duration(w.float()*float64(w.cfg.ttl))
		w.blackholeUntil.Store(time.Now().Add(d).UnixNano())
		w.log.Append(record.Event{Ev: record.EvFault, Fault: record.FaultRecoveryBlackhole, Detail: tag + " " + d.String()})
	case "pause":
		w.log.Append(record.Event{Ev: record.EvFault, Fault: record.FaultRecoveryPause, Detail: tag})
		w.say("STOPPING - 0 recovery-of-%s", tag)
		_ = syscall.Kill(os.Getpid(), syscall.SIGSTOP)
	}
}

// blackholed holds an RPC while a recovery blackhole lasts, and fails it
// unsent if its deadline comes first.
func (w *worker) blackholed(ctx context.Context) error {
	until := time.Unix(0, w.blackholeUntil.Load())
	d := time.Until(until)
	if d <= 0 {
		return nil
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return status.Error(codes.DeadlineExceeded, "chaos: blackholed during recovery")
	}
}

func (w *worker) interceptStream(ctx context.Context, desc *grpc.StreamDesc, cc *grpc.ClientConn, method string, streamer grpc.Streamer, opts ...grpc.CallOption) (grpc.ClientStream, error) {
	if err := w.blackholed(ctx); err != nil {
		return nil, err
	}
	return streamer(ctx, desc, cc, method, opts...)
}

// injectedAbort tells the emulator's injected aborts ("Transaction: N was
// aborted in the emulator to mimic production behavior ...") from those of
// contention ("... another transaction getting priority"). The text is only
// counted for the report, never asserted on.
func injectedAbort(err error) bool {
	return strings.Contains(status.Convert(err).Message(), "to mimic production behavior")
}

func (w *worker) say(format string, args ...any) {
	w.outMu.Lock()
	defer w.outMu.Unlock()
	fmt.Printf(format+"\n", args...)
}

func (w *worker) float() float64 {
	w.rngMu.Lock()
	defer w.rngMu.Unlock()
	return w.rng.Float64()
}

func (w *worker) intn(n int) int {
	w.rngMu.Lock()
	defer w.rngMu.Unlock()
	return w.rng.IntN(n)
}

// endOutcome classifies why a lease's Context ended.
func endOutcome(cause error) string {
	switch {
	case errors.Is(cause, lease.ErrLeaseLost):
		return record.EndedLost
	case errors.Is(cause, lease.ErrReleased):
		return record.EndedReleased
	}
	return record.EndedClosed
}

func errString(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}
