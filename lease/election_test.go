package lease_test

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"cloud.google.com/go/spanner"

	"github.com/spannerlock/terraform-provider-spannerlock/internal/emulator"
	"github.com/spannerlock/terraform-provider-spannerlock/lease"
)

// campaigner records one candidate's transitions.
type campaigner struct {
	id      string
	cancel  context.CancelFunc
	done    chan error
	mu      sync.Mutex
	started int
	stopped int
	seen    []string // "holder:token" for each OnNewLeader
	leading chan *lease.Lease
}

func (c *campaigner) counts() (started, stopped int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.started, c.stopped
}

func TestCampaignElectsOneLeaderAndFailsOverOnStepDown(t *testing.T) {
	eachDialect(t, func(t *testing.T) {
		ctx := emulator.Context(t)
		db := newDatabase(t)

		var mu sync.Mutex
		leaders := 0 // candidates inside OnStartedLeading right now
		maxLeaders := 0
		var candidates []*campaigner
		for i := range 3 {
			cand := &campaigner{id: fmt.Sprintf("node-%d", i), done: make(chan error, 1), leading: make(chan *lease.Lease, 4)}
			c := newClient(t, db, lease.WithHolderID(cand.id), lease.WithTTL(10*time.Second), lease.WithPollInterval(100*time.Millisecond))
			cctx, cancel := context.WithCancel(ctx)
			cand.cancel = cancel
			go func() {
				cand.done <- c.Campaign(cctx, "leader", lease.LeaderCallbacks{
					OnStartedLeading: func(ctx context.Context, l *lease.Lease) {
						mu.Lock()
						leaders++
						maxLeaders = max(maxLeaders, leaders)
						mu.Unlock()
						cand.mu.Lock()
						cand.started++
						cand.mu.Unlock()
						cand.leading <- l
						<-ctx.Done()
						mu.Lock()
						leaders--
						mu.Unlock()
					},
					OnStoppedLeading: func() {
						cand.mu.Lock()
						cand.stopped++
						cand.mu.Unlock()
					},
					OnNewLeader: func(h lease.Holder) {
						cand.mu.Lock()
						cand.seen = append(cand.seen, fmt.Sprintf("%s:%d", h.HolderID, h.Token))
						cand.mu.Unlock()
					},
				})
			}()
			candidates = append(candidates, cand)
		}

		first, firstLease := nextLeader(t, candidates, nil)
		// The leader steps down; someone else must take over promptly (by
		// release, not expiry) with the next token.
		stepDown := time.Now()
		first.cancel()
		if err := <-first.done; err != nil {
			t.Fatalf("Campaign of the leader that stepped down returned %v", err)
		}
		second, secondLease := nextLeader(t, candidates, first)
		// Handed on by the release, not taken after expiry (a TTL, 10s):
		// half a TTL tells the two apart even on a loaded machine.
		if took := time.Since(stepDown); took > 5*time.Second {
			t.Fatalf("failover after step-down took %s; a released lease should pass on at once, not expire", took)
		}
		if secondLease.Token() != firstLease.Token()+1 {
			t.Fatalf("second leader's token = %d, want %d", secondLease.Token(), firstLease.Token()+1)
		}
		waitObserved(t, candidates, first, fmt.Sprintf("%s:%d", second.id, secondLease.Token()))
		for _, cand := range candidates {
			if cand != first {
				cand.cancel()
				if err := <-cand.done; err != nil {
					t.Fatalf("Campaign of %s returned %v", cand.id, err)
				}
			}
		}

		if maxLeaders != 1 {
			t.Fatalf("%d candidates were leading at once", maxLeaders)
		}
		if s, p := first.counts(); s != 1 || p != 1 {
			t.Fatalf("first leader: OnStartedLeading %d times, OnStoppedLeading %d times; want 1 and 1", s, p)
		}
		if s, p := second.counts(); s != 1 || p != 1 {
			t.Fatalf("second leader: OnStartedLeading %d times, OnStoppedLeading %d times; want 1 and 1", s, p)
		}
		// OnNewLeader reports changes only, in token order, and catches up with
		// the current leader; a term shorter than a poll may be coalesced away.
		for _, cand := range candidates {
			if cand == first {
				continue
			}
			cand.mu.Lock()
			seen := cand.seen
			cand.mu.Unlock()
			want := fmt.Sprintf("%s:%d", second.id, secondLease.Token())
			if len(seen) == 0 || seen[len(seen)-1] != want || len(seen) > 2 || (len(seen) == 2 && seen[0] == seen[1]) {
				t.Fatalf("%s saw leaders %v, want the changes ending with %s", cand.id, seen, want)
			}
		}
	})
}

// waitObserved waits until every candidate but skip has seen want lead.
func waitObserved(t *testing.T, candidates []*campaigner, skip *campaigner, want string) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for _, c := range candidates {
		for c != skip {
			c.mu.Lock()
			n := len(c.seen)
			caught := n > 0 && c.seen[n-1] == want
			c.mu.Unlock()
			if caught {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s never observed %s as leader", c.id, want)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
}

// nextLeader waits for a candidate other than prev to start leading.
func nextLeader(t *testing.T, candidates []*campaigner, prev *campaigner) (*campaigner, *lease.Lease) {
	t.Helper()
	deadline := time.After(10 * time.Second)
	for {
		for _, c := range candidates {
			if c == prev {
				continue
			}
			select {
			case l := <-c.leading:
				return c, l
			default:
			}
		}
		select {
		case <-deadline:
			t.Fatal("no candidate started leading")
		case <-time.After(10 * time.Millisecond):
		}
	}
}

func TestCampaignRejoinsAfterLoss(t *testing.T) {
	eachDialect(t, func(t *testing.T) {
		ctx := emulator.Context(t)
		db := newDatabase(t)
		c := newClient(t, db, lease.WithTTL(2*time.Second), lease.WithPollInterval(100*time.Millisecond))
		terms := make(chan *lease.Lease, 4)
		cctx, cancel := context.WithCancel(ctx)
		defer cancel()
		done := make(chan error, 1)
		go func() {
			done <- c.Campaign(cctx, "leader", lease.LeaderCallbacks{
				OnStartedLeading: func(ctx context.Context, l *lease.Lease) {
					terms <- l
					<-ctx.Done()
				},
			})
		}()
		first := <-terms
		// Another process takes the lease; the thief's lease lives a minute.
		stealLease(t, ctx, db, "leader")
		waitDone(t, first.Context(), "first term after the theft")

		// Expire the thief so the candidate can win again.
		expireLease(t, ctx, db, "leader")
		select {
		case second := <-terms:
			if second.Token() <= first.Token()+1 {
				t.Fatalf("second term token %d, want more than the thief's %d", second.Token(), first.Token()+1)
			}
		case <-time.After(5 * time.Second):
			t.Fatal("Campaign did not rejoin after losing the lease")
		}
		cancel()
		if err := <-done; err != nil {
			t.Fatalf("Campaign returned %v", err)
		}
	})
}

func TestObserveReportsHoldersAndVacancy(t *testing.T) {
	eachDialect(t, func(t *testing.T) {
		ctx := emulator.Context(t)
		db := newDatabase(t)
		watcher := newClient(t, db, lease.WithPollInterval(50*time.Millisecond))
		a := newClient(t, db, lease.WithHolderID("a"))
		b := newClient(t, db, lease.WithHolderID("b"))

		octx, cancel := context.WithCancel(ctx)
		defer cancel()
		ch, err := watcher.Observe(octx, "leader")
		fatalIf(t, err, "Observe")
		expect := func(holder string, token int64) {
			t.Helper()
			select {
			case h := <-ch:
				if h.HolderID != holder || h.Token != token {
					t.Fatalf("observed %q token %d, want %q token %d", h.HolderID, h.Token, holder, token)
				}
			case <-time.After(5 * time.Second):
				t.Fatalf("no observation of %q token %d", holder, token)
			}
		}
		expect("", 0)
		la := mustAcquire(t, ctx, a, "leader")
		expect("a", 1)
		fatalIf(t, la.Release(ctx), "release a")
		expect("", 0)
		mustAcquire(t, ctx, b, "leader")
		expect("b", 2)
		cancel()
		for range ch {
		}
	})
}

// expireLease makes the current holder's session, and so its lease, expired
// on Spanner's clock, as if it had stopped renewing a TTL ago.
func expireLease(t *testing.T, ctx context.Context, db, name string) {
	t.Helper()
	sc := emulator.Client(t, db)
	_, err := sc.ReadWriteTransaction(ctx, func(ctx context.Context, txn *spanner.ReadWriteTransaction) error {
		_, err := txn.Update(ctx, testStatement(t,
			"UPDATE locks_sessions SET ttl_ms = -86400000 WHERE session_id = (SELECT session_id FROM locks WHERE name = @name)",
			"UPDATE locks_sessions SET ttl_ms = -86400000 WHERE session_id = (SELECT session_id FROM locks WHERE name = $1)",
			[]string{"name"}, map[string]any{"name": name}))
		return err
	})
	fatalIf(t, err, "expire %s", name)
}

func TestALeaderThatStepsDownAndCampaignsAgainIsBehindTheOthers(t *testing.T) {
	eachDialect(t, func(t *testing.T) {
		ctx := emulator.Context(t)
		db := newDatabase(t)
		// Each candidate leads for a moment, steps down by releasing, and
		// stays in the election; the order of terms must go round.
		terms := make(chan string, 64)
		observer := newClient(t, db)
		othersInLine := func(ctx context.Context, self string) {
			for ctx.Err() == nil {
				ws, err := observer.Waiters(ctx)
				if err == nil && len(ws) == 2 && !slices.ContainsFunc(ws, func(w lease.Waiter) bool { return w.HolderID == self }) {
					return
				}
				time.Sleep(20 * time.Millisecond)
			}
		}
		for _, id := range []string{"a", "b", "c"} {
			c := newClient(t, db, lease.WithHolderID(id))
			cctx, cancel := context.WithCancel(ctx)
			done := make(chan struct{})
			t.Cleanup(func() { cancel(); <-done })
			go func() {
				defer close(done)
				_ = c.Campaign(cctx, "leader", lease.LeaderCallbacks{OnStartedLeading: func(ctx context.Context, l *lease.Lease) {
					terms <- id
					othersInLine(ctx, id)
					_ = l.Release(ctx)
				}})
			}()
		}
		var order []string
		for len(order) < 9 {
			select {
			case id := <-terms:
				order = append(order, id)
			case <-time.After(30 * time.Second):
				t.Fatalf("terms so far %v; none for 30s", order)
			}
		}
		// Each leader steps down with the other two in line: the terms go
		// round.
		for i := 0; i+3 <= len(order); i++ {
			seen := map[string]bool{}
			for _, id := range order[i : i+3] {
				seen[id] = true
			}
			if len(seen) != 3 {
				t.Fatalf("terms %v: a leader that stepped down led again before another candidate in line (at term %d)", order, i)
			}
		}
	})
}
