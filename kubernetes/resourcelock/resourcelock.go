// Package resourcelock is a client-go resourcelock.Interface on a
// spannerlock lock table, so that client-go's leader election and
// controller-runtime's manager elect one leader across Kubernetes clusters
// (a controller run in three regions for availability) instead of one per
// cluster, with the electors they already use:
//
//	lock, err := resourcelock.New(db, "locks", "my-controller", podName+"_"+uuid,
//		resourcelock.WithElectorTimings(15*time.Second, 10*time.Second, 2*time.Second))
//	leaderelection.RunOrDie(ctx, leaderelection.LeaderElectionConfig{
//		Lock:            lock,
//		LeaseDuration:   15 * time.Second,
//		RenewDeadline:   10 * time.Second,
//		RetryPeriod:     2 * time.Second,
//		ReleaseOnCancel: true,
//		Callbacks:       ...,
//	})
//
// The record is a spannerlock lease, so Spanner, not the electors' clocks,
// decides who leads:
//
//   - Get reports the lease's live holder as Spanner sees it (its session
//     renewed within its TTL), and a Kubernetes NotFound error when no one
//     holds it, whether the name was never used, was released, or its
//     holder's session expired; the elector then calls Create. The record's
//     raw bytes carry the commit timestamp of the holder's last renewal, so
//     they change on every renewal and a live leader never looks stale. A
//     record that names this lock's identity but not its lease (another
//     process with the same identity) is an error, not a record: the
//     elector would take it for its own.
//   - Create acquires the lease unless another holder has it on Spanner,
//     failing with AlreadyExists when it is held.
//   - Update renews the lease this lock holds: it succeeds only once
//     Spanner has confirmed a renewal begun during the call, and only if
//     that renewal leaves the lease live, by its local deadline, for the
//     elector's RenewDeadline plus RetryPeriod from now, the longest the
//     elector goes on leading on the strength of one successful Update.
//     Update never acquires: it fails with Conflict when this lock does not
//     hold the lease. Once a lease the elector was told it holds is lost
//     (an operator's ForceRelease, an outage longer than the lease), Create
//     and Update fail until the elector has stepped down (it records
//     "stopped leading", or releases), so it stops leading and runs its
//     callbacks; its next election acquires the lease anew with a new
//     token and calls OnStartedLeading again.
//   - Update with an empty holder identity (ReleaseOnCancel) releases the
//     lease, so another elector takes over at its next retry rather than
//     after the lease duration. Without ReleaseOnCancel, an elector that
//     stepped down while its lease was still live (its context ended, or
//     renewals too slow for its budget) leaves the lease held, and renewed,
//     until its next election, Close, or the end of the process: use
//     ReleaseOnCancel, or Close the lock, when the process goes on without
//     leading.
//   - The lease's TTL is the elector's LeaseDuration, so a leader that dies
//     is replaced within the lease duration plus a retry period.
//     LeaderTransitions is the lease's fencing token minus one.
//
// # The bound
//
// The elector's context (the one OnStartedLeading gets) ends before any
// rival can acquire the lease, at every timing New accepts: New requires
// RenewDeadline + RetryPeriod < 0.9 × TTL, besides client-go's own rules.
// After a successful Update at time t the elector leads until at most t +
// RetryPeriod + RenewDeadline (its next renewal round starts RetryPeriod
// after t and gives up RenewDeadline later), and Update succeeds only if
// that is no later than the lease's local deadline, which is the start of
// the last renewal Spanner confirmed plus 0.9 × TTL, TTL/10 before Spanner
// can free the lease. With ReleaseOnCancel, the elector's release reads
// and writes the lease before its context ends; while it leads, the lock
// bounds both by the lease's local deadline, so the release too is over
// before a rival can acquire. The headroom, 0.9 × TTL − RenewDeadline −
// RetryPeriod (1.5 s at client-go's defaults 15 s / 10 s / 2 s, 0.4 s at
// 6 s / 4 s / 1 s), is how long a renewal in Update may take: a slower one
// fails that Update, and the elector retries. The lease package's own
// assumptions apply: the holder's clock and timers stay within TTL/10 of
// Spanner's over a TTL.
//
// Lease returns the lease while this lock holds it and its local deadline
// has not passed: its Token is the fencing token, which grows with every
// change of leader, its Context ends before a rival can take over, at the
// latest when the elector's does and at once when an operator's
// ForceRelease is seen, and its Guard and GuardSQL fence Spanner writes.
// Identities must be unique among the electors and across restarts, as
// client-go requires: the pod name plus a UUID made at start-up.
//
// Check refuses an elector configuration the lock does not support:
// Coordinated leader election, or timings other than the lock's. Observers
// learn of a vacancy only through the next leader: Get reports a free
// lease as NotFound, not as a record with no holder, so client-go's
// OnNewLeader is not called with "" after a release.
package resourcelock

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"time"

	"cloud.google.com/go/spanner"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/tools/leaderelection"
	rl "k8s.io/client-go/tools/leaderelection/resourcelock"

	"github.com/spannerlock/terraform-provider-spannerlock/lease"
)

// resource names the record in Kubernetes errors.
var resource = schema.GroupResource{Group: "spannerlock.io", Resource: "leases"}

// The timings client-go's and controller-runtime's electors default to.
const (
	DefaultLeaseDuration = 15 * time.Second
	DefaultRenewDeadline = 10 * time.Second
	DefaultRetryPeriod   = 2 * time.Second
)

// jitterFactor is client-go's leaderelection.JitterFactor, which its
// validation uses.
const jitterFactor = 1.2

// Option configures New.
type Option func(*Lock)

// WithElectorTimings gives the lock the elector's LeaseDuration,
// RenewDeadline and RetryPeriod (default: client-go's 15 s, 10 s and 2 s),
// which must be the ones the elector is configured with (for
// controller-runtime, the manager's Options). The lease's TTL is
// leaseDuration unless WithLeaseOptions sets one, and New checks the
// timings against it (see the package documentation); Create and Update
// refuse a record whose lease duration is not leaseDuration.
func WithElectorTimings(leaseDuration, renewDeadline, retryPeriod time.Duration) Option {
	return func(l *Lock) {
		l.leaseDuration, l.renewDeadline, l.retryPeriod = leaseDuration, renewDeadline, retryPeriod
	}
}

// WithLeaseOptions passes options to the lock's lease.Client
// (WithLogger, WithMeterProvider, ...); a WithTTL here overrides the
// elector's LeaseDuration as the lease's TTL, within the bound New checks.
// WithHolderID is the lock's identity and cannot be changed.
func WithLeaseOptions(opts ...lease.Option) Option {
	return func(l *Lock) { l.leaseOpts = append(l.leaseOpts, opts...) }
}

// WithEventRecorder records the elector's events (became leader, stopped
// leading) with r, about a coordination.k8s.io Lease object named after the
// lock in namespace, as client-go's own locks do.
func WithEventRecorder(r rl.EventRecorder, namespace string) Option {
	return func(l *Lock) { l.events, l.namespace = r, namespace }
}

// Lock is a resourcelock.Interface on one lease of a spannerlock lock
// table. It is safe for concurrent use; no method holds its mutex across a
// call to Spanner.
type Lock struct {
	db                    *spanner.Client
	table, name, identity string
	leaseOpts             []lease.Option
	events                rl.EventRecorder
	namespace             string

	leaseDuration, renewDeadline, retryPeriod time.Duration
	client                                    *lease.Client

	mu sync.Mutex
	// held is the lease this lock acquired and has not let go: live, or
	// lost while the elector may still count on it (granted).
	held *lease.Lease
	// granted is set while the elector may be leading on held: a Create or
	// Update succeeded, and the elector has not stepped down since.
	// grantedAt is the last such success.
	granted   bool
	grantedAt time.Time
	acquiring bool // a Create is in flight
	closed    bool
}

var _ rl.Interface = (*Lock)(nil)

// New returns a lock on the lease name in table (a spannerlock lock table
// in db's database, of either dialect), for the elector whose identity is
// identity. It makes no call to Spanner. It fails when the elector's
// timings (WithElectorTimings) break client-go's rules or cannot keep the
// elector's context within the lease: RenewDeadline + RetryPeriod must be
// less than 0.9 × the lease's TTL.
func New(db *spanner.Client, table, name, identity string, opts ...Option) (*Lock, error) {
	if db == nil {
		return nil, errors.New("resourcelock: New: db is nil")
	}
	if identity == "" {
		return nil, errors.New("resourcelock: New: identity is empty; give each elector a unique one (pod name plus a UUID)")
	}
	if name == "" {
		return nil, errors.New("resourcelock: New: name is empty")
	}
	l := &Lock{db: db, table: table, name: name, identity: identity,
		leaseDuration: DefaultLeaseDuration, renewDeadline: DefaultRenewDeadline, retryPeriod: DefaultRetryPeriod}
	for _, o := range opts {
		o(l)
	}
	if err := checkTimings(l.leaseDuration, l.renewDeadline, l.retryPeriod); err != nil {
		return nil, fmt.Errorf("resourcelock: New: %w", err)
	}
	leaseOpts := []lease.Option{lease.WithTTL(l.leaseDuration)}
	leaseOpts = append(leaseOpts, l.leaseOpts...)
	leaseOpts = append(leaseOpts, lease.WithHolderID(identity))
	c, err := lease.NewClient(db, table, leaseOpts...)
	if err != nil {
		return nil, fmt.Errorf("resourcelock: New: %w", err)
	}
	if ttl := c.TTL(); l.renewDeadline+l.retryPeriod >= localLife(ttl) {
		_ = c.Close()
		return nil, fmt.Errorf("resourcelock: New: RenewDeadline %v plus RetryPeriod %v must be less than 90%% of the lease's TTL %v (%v): "+
			"the elector leads for up to their sum after its last successful renewal, and must stop before the lease's local deadline, "+
			"TTL/10 before Spanner frees the lease; shorten them or lengthen LeaseDuration", l.renewDeadline, l.retryPeriod, ttl, localLife(ttl))
	}
	l.client = c
	return l, nil
}

// checkTimings applies client-go's own rules (NewLeaderElector's), so that
// a lock never accepts timings its elector refuses.
func checkTimings(leaseDuration, renewDeadline, retryPeriod time.Duration) error {
	switch {
	case leaseDuration < time.Second:
		return fmt.Errorf("LeaseDuration %v must be at least 1s (records count whole seconds)", leaseDuration)
	case renewDeadline <= 0 || retryPeriod <= 0:
		return fmt.Errorf("RenewDeadline %v and RetryPeriod %v must be greater than zero", renewDeadline, retryPeriod)
	case leaseDuration <= renewDeadline:
		return fmt.Errorf("LeaseDuration %v must be greater than RenewDeadline %v", leaseDuration, renewDeadline)
	case renewDeadline <= time.Duration(jitterFactor*float64(retryPeriod)):
		return fmt.Errorf("RenewDeadline %v must be greater than RetryPeriod %v times %v", renewDeadline, retryPeriod, jitterFactor)
	}
	return nil
}

// localLife is how long after the start of a confirmed renewal a lease of
// TTL ttl stays live locally: TTL minus the lease package's safety margin.
func localLife(ttl time.Duration) time.Duration { return ttl - ttl/10 }

// budget is the longest the elector leads on the strength of one
// successful Create or Update: its next renewal round starts a retry
// period later and gives up a renew deadline after that.
func (l *Lock) budget() time.Duration { return l.renewDeadline + l.retryPeriod }

// Check reports whether cfg is an elector configuration this lock keeps
// its bound for: cfg.Lock is l, cfg's timings are the lock's
// (WithElectorTimings), and cfg is not Coordinated, which this lock does
// not support (a coordinated elector only renews a lease that Kubernetes'
// coordinated leader election gave it, and would never acquire). Call it
// before leaderelection.NewLeaderElector or RunOrDie; controller-runtime's
// manager builds its config itself, so give the lock the manager's
// timings.
func (l *Lock) Check(cfg leaderelection.LeaderElectionConfig) error {
	switch {
	case cfg.Lock != rl.Interface(l):
		return fmt.Errorf("resourcelock: %s: the config's Lock is not this lock", l.Describe())
	case cfg.Coordinated:
		return fmt.Errorf("resourcelock: %s: Coordinated leader election is not supported: the elector would never acquire the lease", l.Describe())
	case cfg.LeaseDuration != l.leaseDuration || cfg.RenewDeadline != l.renewDeadline || cfg.RetryPeriod != l.retryPeriod:
		return fmt.Errorf("resourcelock: %s: the elector's timings %v/%v/%v are not the lock's %v/%v/%v: give New WithElectorTimings with the elector's",
			l.Describe(), cfg.LeaseDuration, cfg.RenewDeadline, cfg.RetryPeriod, l.leaseDuration, l.renewDeadline, l.retryPeriod)
	}
	return nil
}

// record is the raw record: what Get returns, with the fencing token.
type record struct {
	rl.LeaderElectionRecord
	Token int64 `json:"token"`
}

// Get returns the lease's live holder as a record, or a Kubernetes NotFound
// error when no one holds it. While the elector may be leading on this
// lock's lease, the read is bounded by the lease's local deadline: the
// elector's release reads before its context ends.
func (l *Lock) Get(ctx context.Context) (*rl.LeaderElectionRecord, []byte, error) {
	l.mu.Lock()
	l.settleLocked()
	held, granted := l.held, l.granted
	l.mu.Unlock()
	if granted {
		var cancel context.CancelFunc
		ctx, cancel = context.WithDeadline(ctx, held.Deadline())
		defer cancel()
	}
	h, err := l.client.Holder(ctx, l.name)
	if errors.Is(err, lease.ErrNoHolder) {
		return nil, nil, apierrors.NewNotFound(resource, l.name)
	}
	if err != nil {
		return nil, nil, fmt.Errorf("resourcelock: reading %s: %w", l.Describe(), err)
	}
	if h.HolderID == l.identity && (held == nil || held.Token() != h.Token || held.Context().Err() != nil) {
		// The elector would take it for its own and call itself leader.
		return nil, nil, fmt.Errorf("resourcelock: %s is held under this lock's identity %q with token %d, but not by this lock: "+
			"another process has the same identity (give each elector a unique one, such as the pod name plus a UUID made at start-up), "+
			"or this lock lost the lease", l.Describe(), l.identity, h.Token)
	}
	renewed := h.RenewedAt
	if renewed.Before(h.AcquiredAt) {
		renewed = h.AcquiredAt
	}
	r := record{
		LeaderElectionRecord: rl.LeaderElectionRecord{
			HolderIdentity:       h.HolderID,
			LeaseDurationSeconds: int(h.ExpiresAt.Sub(h.RenewedAt).Round(time.Second) / time.Second),
			AcquireTime:          metav1.NewTime(h.AcquiredAt),
			RenewTime:            metav1.NewTime(renewed),
			LeaderTransitions:    int(h.Token - 1),
		},
		Token: h.Token,
	}
	raw, err := json.Marshal(r)
	if err != nil {
		return nil, nil, fmt.Errorf("resourcelock: encoding the record of %s: %w", l.Describe(), err)
	}
	return &r.LeaderElectionRecord, raw, nil
}

// Create acquires the lease for this lock's identity, failing with
// AlreadyExists when another holder has it. While this lock holds the
// lease, Create renews it as Update does; once a lease the elector was
// told it holds is lost, Create fails until the elector has stepped down.
func (l *Lock) Create(ctx context.Context, ler rl.LeaderElectionRecord) error {
	if err := l.check(ler); err != nil {
		return err
	}
	l.mu.Lock()
	l.settleLocked()
	switch {
	case l.closed:
		l.mu.Unlock()
		return fmt.Errorf("resourcelock: %s: %w", l.Describe(), lease.ErrClosed)
	case l.held != nil:
		l.mu.Unlock()
		return l.renew(ctx)
	case l.acquiring:
		l.mu.Unlock()
		return apierrors.NewAlreadyExists(resource, l.name)
	}
	l.acquiring = true
	l.mu.Unlock()

	held, err := l.client.TryAcquire(ctx, l.name)
	l.mu.Lock()
	l.acquiring = false
	if err == nil && l.closed {
		l.mu.Unlock()
		_ = held.Release(context.WithoutCancel(ctx))
		return fmt.Errorf("resourcelock: %s: %w", l.Describe(), lease.ErrClosed)
	}
	if err == nil {
		l.held, l.granted = held, false
	}
	l.mu.Unlock()
	if errors.Is(err, lease.ErrNotAcquired) {
		return apierrors.NewAlreadyExists(resource, l.name)
	}
	if err != nil {
		return fmt.Errorf("resourcelock: acquiring %s: %w", l.Describe(), err)
	}
	// An acquisition may leave the lease less than the elector's budget
	// (its session had idled): then it is renewed before the elector is
	// told it leads.
	if l.grant(ctx, held) {
		return nil
	}
	return l.renew(ctx)
}

// Update renews the lease this lock holds, or releases it when ler's
// holder identity is empty. It succeeds only once Spanner has confirmed a
// renewal begun during the call that leaves the lease RenewDeadline plus
// RetryPeriod before its local deadline. It never acquires: it fails with
// Conflict when this lock does not hold the lease, and with an error
// matching lease.ErrLeaseLost when the lease was lost.
func (l *Lock) Update(ctx context.Context, ler rl.LeaderElectionRecord) error {
	if ler.HolderIdentity == "" {
		return l.release(ctx)
	}
	if err := l.check(ler); err != nil {
		return err
	}
	return l.renew(ctx)
}

// check refuses records this lock cannot write.
func (l *Lock) check(ler rl.LeaderElectionRecord) error {
	if ler.HolderIdentity != l.identity {
		return fmt.Errorf("resourcelock: %s can only write its own identity %q, not %q", l.Describe(), l.identity, ler.HolderIdentity)
	}
	if want := int(l.leaseDuration / time.Second); ler.LeaseDurationSeconds != want {
		return fmt.Errorf("resourcelock: %s: the elector's LeaseDuration is %ds but the lock's is %v: "+
			"give New WithElectorTimings with the elector's LeaseDuration, RenewDeadline and RetryPeriod", l.Describe(), ler.LeaseDurationSeconds, l.leaseDuration)
	}
	return nil
}

// renew confirms the held lease with Spanner for the elector.
func (l *Lock) renew(ctx context.Context) error {
	l.mu.Lock()
	l.settleLocked()
	held, closed := l.held, l.closed
	l.mu.Unlock()
	switch {
	case closed:
		return fmt.Errorf("resourcelock: %s: %w", l.Describe(), lease.ErrClosed)
	case held == nil:
		return apierrors.NewConflict(resource, l.name, errors.New("this lock does not hold the lease; only Create acquires it"))
	case held.Context().Err() != nil:
		return fmt.Errorf("resourcelock: %s: %w (the elector must step down before this lock acquires again)", l.Describe(), context.Cause(held.Context()))
	}
	// A renewal that completes later than this cannot leave the budget:
	// it began after now, and the lease lives localLife after its start.
	rctx, cancel := context.WithTimeout(ctx, localLife(l.client.TTL())-l.budget())
	defer cancel()
	if err := held.Renew(rctx); err != nil {
		if held.Context().Err() != nil {
			return fmt.Errorf("resourcelock: %s: %w (the elector must step down before this lock acquires again)", l.Describe(), context.Cause(held.Context()))
		}
		return fmt.Errorf("resourcelock: renewing %s: no renewal confirmed in time: %w", l.Describe(), err)
	}
	if !l.grant(ctx, held) {
		return fmt.Errorf("resourcelock: renewing %s: the renewal was confirmed too late to leave the elector %v", l.Describe(), l.budget())
	}
	return nil
}

// grant tells the elector it leads on held, if held is still this lock's,
// ctx (the elector's renewal round) is live, and the lease's local
// deadline leaves the elector its budget.
func (l *Lock) grant(ctx context.Context, held *lease.Lease) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	now := time.Now()
	if l.held != held || l.closed || ctx.Err() != nil || held.Context().Err() != nil || now.Add(l.budget()).After(held.Deadline()) {
		return false
	}
	l.granted, l.grantedAt = true, now
	return true
}

// settleLocked forgets a lost lease once the elector cannot be leading on
// it: it was never told it leads, it stepped down since, or (for an
// elector that records no events) its renewal rounds must have ended.
func (l *Lock) settleLocked() {
	if l.held == nil || l.held.Context().Err() == nil {
		return
	}
	if l.granted && time.Since(l.grantedAt) < l.leaseDuration+l.renewDeadline {
		return
	}
	l.held, l.granted = nil, false
}

func (l *Lock) release(ctx context.Context) error {
	l.mu.Lock()
	held, granted := l.held, l.granted
	l.held, l.granted = nil, false
	l.mu.Unlock()
	if held == nil || held.Context().Err() != nil {
		return nil // lost: nothing to release
	}
	// The release goes on in the background however long Spanner takes
	// (the lease's Context ends at once, and the lease is free by its
	// expiry at the latest); while the elector leads, whose context ends
	// only after this returns, Update waits for it only until the lease's
	// local deadline.
	done := make(chan error, 1)
	go func() {
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), l.client.TTL())
		defer cancel()
		done <- held.Release(rctx)
	}()
	var bound <-chan time.Time
	if granted {
		t := time.NewTimer(time.Until(held.Deadline()))
		defer t.Stop()
		bound = t.C
	}
	select {
	case err := <-done:
		if err != nil && !errors.Is(err, lease.ErrLeaseLost) {
			return fmt.Errorf("resourcelock: releasing %s: %w", l.Describe(), err)
		}
		return nil
	case <-ctx.Done():
		return fmt.Errorf("resourcelock: releasing %s: %w (the release goes on in the background)", l.Describe(), ctx.Err())
	case <-bound:
		return fmt.Errorf("resourcelock: releasing %s: not confirmed by the lease's local deadline (the release goes on in the background)", l.Describe())
	}
}

// Lease returns the lease while this lock holds it and its local deadline
// has not passed, else nil: its Token is the fencing token, its Context
// ends when leadership is lost (before a rival can take over), and its
// Guard fences Spanner writes. It never waits for Spanner.
func (l *Lock) Lease() *lease.Lease {
	l.mu.Lock()
	held := l.held
	l.mu.Unlock()
	if held == nil || held.Context().Err() != nil || !time.Now().Before(held.Deadline()) {
		return nil
	}
	return held
}

// Close releases the lease if held and ends the lock's session in Spanner;
// the lock cannot acquire again. It does not close db.
func (l *Lock) Close() error {
	l.mu.Lock()
	l.closed = true
	l.held, l.granted = nil, false
	l.mu.Unlock()
	return l.client.Close()
}

// RecordEvent records an elector's event with the recorder given to
// WithEventRecorder, if any. The elector records "stopped leading" when its
// renewals end: after that, a lost lease no longer holds up Create.
func (l *Lock) RecordEvent(s string) {
	if s == "stopped leading" {
		l.mu.Lock()
		l.granted = false
		l.settleLocked()
		l.mu.Unlock()
	}
	if l.events == nil {
		return
	}
	subject := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: l.name, Namespace: l.namespace}}
	subject.Kind = "Lease"
	l.events.Eventf(subject, corev1.EventTypeNormal, "LeaderElection", "%v %v", l.identity, s)
}

// Identity is the elector's identity, the lease's holder ID while it leads.
func (l *Lock) Identity() string { return l.identity }

// Describe names the lease as table/name.
func (l *Lock) Describe() string { return l.table + "/" + l.name }
