package chaos

import (
	"fmt"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/spannerlock/terraform-provider-spannerlock/internal/chaos/record"
	"github.com/spannerlock/terraform-provider-spannerlock/internal/emulator"
	"github.com/spannerlock/terraform-provider-spannerlock/lease"
)

// The fault suite's short run, part of make test; make chaos runs it for
// minutes. CHAOS_SEED replays a run's random choices.
func TestFaultSuite(t *testing.T) {
	res := runFaultSuite(t, lease.GoogleSQL, 50*time.Second)

	// The run proves something only if it did what it claims.
	counts := res.FaultCounts()
	for _, kind := range AllNemeses {
		if counts[kind] == 0 {
			t.Errorf("nemesis %s never fired", kind)
		}
	}
	st := res.Stats()
	if !pauseVerified(res) {
		t.Errorf("no pause after Guard was confirmed (held in Spanner when stopped, a rival wrote meanwhile)")
	}
	if len(st.AmbiguousCommits) == 0 {
		t.Error("no ambiguous commit was injected")
	}
	for _, kind := range []string{record.FaultRecoveryBlackhole, record.FaultRecoveryPause} {
		if st.RecoveriesStruck[kind] == 0 {
			t.Errorf("no compound fault struck a recovery (%s)", kind)
		}
	}
	if res.Config.FaultInjection && st.EmulatorAborts == 0 {
		t.Error("the emulator's fault injection aborted no commit")
	}
	if st.Committed < 100 {
		t.Errorf("only %d guarded writes committed: too little work to judge", st.Committed)
	}
	if err := startedTogether(res, res.Config.Workers); err != nil {
		t.Errorf("the start-together case: %v", err)
	}
	if sem := countWrites(res, true); sem < 20 {
		t.Errorf("only %d writes under semaphore permits", sem)
	}
}

// The same suite on a PostgreSQL-dialect database, short: make test's
// budget has room for 20 seconds more, enough for several nemeses and a few
// dozen guarded writes; `make chaos CHAOS_DIALECT=postgresql` runs it for
// minutes, with every nemesis.
func TestFaultSuiteOnPostgreSQL(t *testing.T) {
	res := runFaultSuite(t, lease.PostgreSQL, 20*time.Second)
	if st := res.Stats(); st.Committed < 30 {
		t.Errorf("only %d guarded writes committed: too little work to judge", st.Committed)
	}
	if len(res.Faults) < 4 {
		t.Errorf("only %d faults (the start included): too few to judge", len(res.Faults))
	}
	if sem := countWrites(res, true); sem < 5 {
		t.Errorf("only %d writes under semaphore permits", sem)
	}
}

// runFaultSuite runs the suite on a database of dialect d for duration and
// fails the test on any violation the checker reports.
func runFaultSuite(t *testing.T, d lease.Dialect, duration time.Duration) *Result {
	t.Helper()
	if testing.Short() {
		t.Skip("the fault suite takes a minute")
	}
	shared := emulator.Shared(t)
	ctx := emulator.Context(t)
	bin, err := BuildWorker(ctx, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	cfg := Config{
		Seed:           seed(t),
		Dialect:        d,
		Duration:       duration,
		Workers:        5,
		Locks:          2,
		Permits:        2,
		SemShare:       0.3,
		TTL:            time.Second,
		Ambiguous:      0.02,
		FaultInjection: true,
		WorkerBinary:   bin,
		Dir:            t.TempDir(),
	}
	if _, err := emulator.Binary(); err != nil {
		// An emulator someone else runs (SPANNER_EMULATOR_HOST): no second
		// one with fault injection can be started here.
		t.Logf("no emulator binary to start one with fault injection (%v): using %s without", err, shared.Host())
		cfg.Emulator, cfg.FaultInjection = shared, false
		cfg.Database = emulator.DatabaseIn(t, string(d), record.In(d).DDL()...)
	}
	res, err := Run(ctx, cfg)
	if res != nil && res.History.Counters != nil {
		t.Log("\n" + res.Report())
	}
	if err != nil {
		t.Fatalf("the run could not be carried out: %v", err)
	}
	for _, v := range res.Violations {
		t.Errorf("violation: %s", v)
	}
	return res
}

// The planted bug (Guard checks nothing) must make the suite fail, with the
// violation it causes: a paused holder's write accepted after a rival's.
// Only locks: a stale permit write shows only if the other permits are in
// use at that instant, which a run of this length does not ensure (make
// chaos-planted shows that case too).
func TestFaultSuiteCatchesThePlantedBug(t *testing.T) {
	if testing.Short() {
		t.Skip("the fault suite takes a minute")
	}
	shared := emulator.Shared(t)
	ctx := emulator.Context(t)
	bin, err := BuildWorker(ctx, t.TempDir(), "spannerlock_plantedbug")
	if err != nil {
		t.Fatal(err)
	}
	res, err := Run(ctx, Config{
		Seed:     seed(t),
		Duration: 15 * time.Second,
		Workers:  4,
		Locks:    1,
		Permits:  -1,
		TTL:      time.Second,
		// Only pauses right after Guard: each one a chance for the broken
		// fence to let a stale write through.
		Nemeses:      []string{NPausePoint},
		WorkerBinary: bin,
		Emulator:     shared,
		Database:     emulator.Database(t, record.In(lease.GoogleSQL).DDL()...),
		Dir:          t.TempDir(),
	})
	if res != nil && res.History.Counters != nil {
		t.Log("\n" + res.Report())
	}
	if err != nil {
		t.Fatalf("the run could not be carried out: %v", err)
	}
	if res.Build != "spannerlock_plantedbug" {
		t.Fatalf("workers report build %q, want spannerlock_plantedbug", res.Build)
	}
	if !pauseVerified(res) {
		t.Fatal("no pause after Guard was confirmed (held in Spanner when stopped, a rival wrote meanwhile): the run could not show the bug")
	}
	if res.OK() {
		t.Fatal("the checker passed a run whose Guard accepts every write")
	}
	stale := false
	for _, v := range res.Violations {
		stale = stale || v.Kind == VStaleWrite
	}
	if !stale {
		t.Errorf("violations %v include no %s", res.Violations, VStaleWrite)
	}
}

func seed(t *testing.T) uint64 {
	if s := os.Getenv("CHAOS_SEED"); s != "" {
		n, err := strconv.ParseUint(s, 10, 64)
		if err != nil {
			t.Fatalf("CHAOS_SEED=%q: %v", s, err)
		}
		return n
	}
	n := uint64(time.Now().UnixNano()%(1<<31)) + 1
	t.Logf("seed %d (set CHAOS_SEED=%d to replay its choices)", n, n)
	return n
}

func pauseVerified(res *Result) bool {
	for _, f := range res.Faults {
		if f.Kind == NPausePoint && f.Held && f.RivalWrote {
			return true
		}
	}
	return false
}

// startedTogether checks that the case happened: the n workers released at
// once each began by acquiring lock-0, a name no one had held (a worker
// killed before it acquired anything excepted). That each token went to
// one holder only, and in order, is the checker's to say: spindle gave two
// contenders the lock here.
func startedTogether(res *Result, n int) error {
	first := map[string]record.Event{}
	for _, e := range res.History.Events {
		if f, ok := first[e.Holder]; e.Ev == record.EvAcquired && (!ok || e.T.Before(f.T)) {
			first[e.Holder] = e
		}
	}
	onLock0 := 0
	for i := range n {
		h := fmt.Sprintf("w%d.0", i)
		f, ok := first[h]
		if ok && f.Name != "lock-0" {
			return fmt.Errorf("%s's first acquisition was %s, want lock-0", h, f.Name)
		}
		if ok {
			onLock0++
		}
	}
	if onLock0 < 2 {
		return fmt.Errorf("only %d of the %d workers acquired lock-0 first", onLock0, n)
	}
	return nil
}

func countWrites(res *Result, sem bool) int {
	n := 0
	for _, w := range res.History.Writes {
		if w.Sem == sem {
			n++
		}
	}
	return n
}
