package provider

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/spannerlock/terraform-provider-spannerlock/lease"
)

// leaseRegistry is what a provider process holds for its ephemeral leases,
// from the Open that acquires each to the Close that releases it. Terraform
// opens and closes an ephemeral resource in the same provider process, and
// hands Close only the private data Open left, so a lease is found again by
// an ID kept there.
//
// It is also how the process lets go when Terraform stops: an interrupt
// (StopProvider, or SIGINT reaching the provider) ends every wait and
// refuses every later acquisition; the end of the run stops acquiring, lets
// the acquisitions in flight leave their lines, and releases what is still
// held once nothing of the run that it guards runs any more (see
// lifetime). Its zero value is ready to use.
type leaseRegistry struct {
	mu sync.Mutex
	// byID are the leases held, by the ID Open left in private data.
	byID map[string]*openLease
	// names are the leases held or being acquired, so that two
	// spannerlock_lease of one run never wait for each other.
	names map[leaseKey]bool
	// waits ends when Terraform is interrupted; every wait for a lease
	// runs under it. Its cause says why.
	waits    context.Context
	endWaits context.CancelCauseFunc
	// closed is set once the run has ended: nothing is acquired any more.
	closed bool
	// acquiring counts the acquisitions in flight, from reserve to its
	// done; settled is closed (and replaced) each time it drops to 0.
	acquiring int
	settled   chan struct{}
}

type openLease struct {
	key    leaseKey
	client *lease.Client
	lease  *lease.Lease
}

// leaseKey names a lease across the tables of every database. Spanner keeps
// table names unique regardless of letter case, in both dialects, so two
// spellings of a table name one table or none.
type leaseKey struct {
	db, table, name string
}

func newLeaseKey(db, table, name string) leaseKey {
	return leaseKey{db: db, table: strings.ToLower(table), name: name}
}

// errInterrupted is the cause of the end of waits when Terraform is
// interrupted (Ctrl-C) and asks the provider to stop.
var errInterrupted = errors.New("terraform was interrupted")

// errShutdown is the cause of the end of waits when the provider process
// is ending.
var errShutdown = errors.New("the provider is shutting down")

// releaseTimeout bounds releasing everything at the end of the process:
// Terraform gives a provider 2 seconds to exit before it kills it, and a
// lease whose release does not get through expires after its TTL anyway.
const releaseTimeout = 1500 * time.Millisecond

func (r *leaseRegistry) initLocked() {
	if r.waits == nil {
		r.byID = map[string]*openLease{}
		r.names = map[leaseKey]bool{}
		r.waits, r.endWaits = context.WithCancelCause(context.Background())
	}
}

// reserve claims key for an acquisition in this process, and fails at once
// if another spannerlock_lease of this run holds it or is acquiring it:
// leases are not re-entrant, so it would wait for the whole run. done gives
// the claim up unless the lease was put.
func (r *leaseRegistry) reserve(key leaseKey) (done func(), err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.initLocked()
	if r.names[key] {
		return nil, errSameRun
	}
	r.names[key] = true
	r.acquiring++
	return func() {
		r.mu.Lock()
		defer r.mu.Unlock()
		if !r.heldLocked(key) {
			delete(r.names, key)
		}
		if r.acquiring--; r.acquiring == 0 && r.settled != nil {
			close(r.settled)
			r.settled = nil
		}
	}, nil
}

// settle waits up to timeout until no acquisition is in flight: each has
// returned, so a wait that stop ended has left its line (the lease package
// commits the leave before Acquire returns, and Open closes the Client,
// which expires its session, before it gives up its reservation). A process
// that exited before would leave a waiter nobody answers for, which the
// lease is handed to when its holder releases it, and which keeps it from
// everyone until its session expires, a TTL later.
func (r *leaseRegistry) settle(timeout time.Duration) {
	r.mu.Lock()
	if r.acquiring == 0 {
		r.mu.Unlock()
		return
	}
	if r.settled == nil {
		r.settled = make(chan struct{})
	}
	settled := r.settled
	r.mu.Unlock()
	select {
	case <-settled:
	case <-time.After(timeout):
	}
}

// errSameRun reports a second spannerlock_lease of one Terraform run on a
// lease the first holds.
var errSameRun = errors.New("held by this Terraform run")

func (r *leaseRegistry) heldLocked(key leaseKey) bool {
	for _, o := range r.byID {
		if o.key == key {
			return true
		}
	}
	return false
}

// waitContext returns a context for waiting for a lease: it ends with ctx,
// or when Terraform is interrupted, with the reason as its cause. It fails
// at once if Terraform was interrupted already.
func (r *leaseRegistry) waitContext(ctx context.Context) (context.Context, context.CancelFunc, error) {
	r.mu.Lock()
	r.initLocked()
	waits := r.waits
	r.mu.Unlock()
	if err := context.Cause(waits); err != nil {
		return nil, nil, err
	}
	wctx, cancel := context.WithCancelCause(ctx)
	stop := context.AfterFunc(waits, func() { cancel(context.Cause(waits)) })
	return wctx, func() {
		stop()
		cancel(context.Canceled)
	}, nil
}

// interrupted returns why waits ended, or nil.
func (r *leaseRegistry) interrupted() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.initLocked()
	return context.Cause(r.waits)
}

// interrupt ends every wait for a lease, and refuses later acquisitions,
// with cause. Leases already held stay held until Terraform closes them or
// the process ends: what runs under them may still be running.
func (r *leaseRegistry) interrupt(cause error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.initLocked()
	r.endWaits(cause)
}

// put records a held lease and returns its ID. After stop it refuses
// (ok == false): the caller must release the lease itself.
func (r *leaseRegistry) put(key leaseKey, lc *lease.Client, l *lease.Lease) (id string, ok bool) {
	b := make([]byte, 8)
	_, _ = rand.Read(b) // never fails on supported platforms
	id = hex.EncodeToString(b)
	r.mu.Lock()
	defer r.mu.Unlock()
	r.initLocked()
	if r.closed {
		return "", false
	}
	r.byID[id] = &openLease{key: key, client: lc, lease: l}
	return id, true
}

// take removes and returns the lease with id, or nil when it is not held
// here (any more).
func (r *leaseRegistry) take(id string) *openLease {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.initLocked()
	o := r.byID[id]
	if o != nil {
		delete(r.byID, id)
		delete(r.names, o.key)
	}
	return o
}

// stop ends the run for the registry: it ends every wait, with cause, and
// refuses every later acquisition. The leases held stay held, and renewed:
// what they guard may still be running (see lifetime).
func (r *leaseRegistry) stop(cause error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.initLocked()
	r.closed = true
	r.endWaits(cause)
}

// holding reports whether a lease is held: one that Terraform opened and did
// not close.
func (r *leaseRegistry) holding() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.byID) > 0
}

// releaseAll lets go of everything at once: stop, settle, and releaseHeld.
func (r *leaseRegistry) releaseAll(cause error) {
	r.stop(cause)
	r.settle(settleTimeout)
	r.releaseHeld()
}

// settleTimeout bounds how long the end of the run waits for acquisitions
// in flight to leave their lines: a leave is one short transaction, and
// Terraform gives a provider 2 seconds to exit before it kills it.
const settleTimeout = 1500 * time.Millisecond

// releaseHeld releases every lease still held, all at once, within
// releaseTimeout. Terraform does not close ephemeral resources when a run
// fails or is interrupted; this is how their leases end with the run rather
// than a TTL later.
func (r *leaseRegistry) releaseHeld() {
	r.mu.Lock()
	r.initLocked()
	held := make([]*openLease, 0, len(r.byID))
	for id, o := range r.byID {
		held = append(held, o)
		delete(r.byID, id)
		delete(r.names, o.key)
	}
	r.mu.Unlock()

	ctx, cancel := context.WithTimeout(context.Background(), releaseTimeout)
	defer cancel()
	var wg sync.WaitGroup
	for _, o := range held {
		wg.Add(1)
		go func() {
			defer wg.Done()
			// Release is bounded by ctx; Close (which releases whatever is
			// left) by the TTL, at most 5 seconds, so it runs alongside.
			_ = o.lease.Release(ctx)
			_ = o.client.Close()
		}()
	}
	done := make(chan struct{})
	go func() {
		wg.Wait()
		close(done)
	}()
	select {
	case <-done:
	case <-ctx.Done():
	}
}

// sameRun explains errSameRun.
func sameRun(db, table, name string) string {
	return fmt.Sprintf("Lease %q in table %s of %s is already held, or being acquired, by another spannerlock_lease "+
		"of this Terraform run (with this provider configuration). Leases are not re-entrant, so this one would wait "+
		"for the other until the run ends and then fail. Give each spannerlock_lease its own name, or use one "+
		"spannerlock_lease and refer to its token wherever it is needed.", name, table, db)
}
