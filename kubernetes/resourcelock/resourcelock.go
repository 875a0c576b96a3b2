// Package resourcelock is a client-go resourcelock.Interface on a
// spannerlock lock table, so that client-go's leader election and
// controller-runtime's manager elect one leader across Kubernetes clusters
// (a controller run in three regions for availability) instead of one per
// cluster, with the electors they already use:
//
//	lock, err := resourcelock.New(db, "locks", "my-controller", podName+"_"+uuid)
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
//     they change on every renewal and a live leader never looks stale.
//   - Create and Update with this lock's identity acquire the lease unless
//     another holder has it on Spanner: they are a compare-and-set against
//     the row, whichever of them the elector calls (its fast path calls
//     Update without Get), and they fail, with AlreadyExists or Conflict,
//     when the lease is held. While this lock holds the lease, Update
//     succeeds without a round trip: the lease is renewed in the background
//     (every TTL/3, for all of a process's leases at once) and the lock
//     knows when that fails.
//   - Update with an empty holder identity (ReleaseOnCancel) releases the
//     lease, so another elector takes over at its next retry rather than
//     after the lease duration.
//   - The lease's TTL is the record's LeaseDurationSeconds (the elector's
//     LeaseDuration), so a leader that dies is replaced within the lease
//     duration plus a retry period. LeaderTransitions is the lease's fencing
//     token minus one.
//
// Lease returns the lease while this lock holds it: its Token is the
// fencing token, which grows with every change of leader, its Context ends
// before a rival can take over (earlier than the elector's own RenewDeadline
// would), and its Guard and GuardSQL fence Spanner writes. Identities must
// be unique among the electors, as client-go requires.
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
	rl "k8s.io/client-go/tools/leaderelection/resourcelock"

	"github.com/spannerlock/terraform-provider-spannerlock/lease"
)

// resource names the record in Kubernetes errors.
var resource = schema.GroupResource{Group: "spannerlock.io", Resource: "leases"}

// Option configures New.
type Option func(*Lock)

// WithLeaseOptions passes options to the lease.Client the lock creates at
// its first acquisition (WithLogger, WithMeterProvider, ...); a WithTTL
// here overrides the record's LeaseDurationSeconds. WithHolderID is the
// lock's identity and cannot be changed.
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
// table. It is safe for concurrent use.
type Lock struct {
	db                    *spanner.Client
	table, name, identity string
	leaseOpts             []lease.Option
	events                rl.EventRecorder
	namespace             string

	mu     sync.Mutex
	client *lease.Client // created at the first acquisition, with its TTL
	// readOnly reads for Get until client exists; it never acquires, so it
	// has no session to renew.
	readOnly *lease.Client
	held     *lease.Lease // nil unless this lock holds the lease
	closed   bool
}

var _ rl.Interface = (*Lock)(nil)

// New returns a lock on the lease name in table (a spannerlock lock table
// in db's database, of either dialect), for the elector whose identity is
// identity. It makes no call to Spanner.
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
	l := &Lock{db: db, table: table, name: name, identity: identity}
	for _, o := range opts {
		o(l)
	}
	// Get's client until the first acquisition; it also rejects a bad table
	// name now rather than at the first election.
	c, err := lease.NewClient(db, table)
	if err != nil {
		return nil, fmt.Errorf("resourcelock: New: %w", err)
	}
	l.readOnly = c
	return l, nil
}

// record is the raw record: what Get returns, with the fencing token.
type record struct {
	rl.LeaderElectionRecord
	Token int64 `json:"token"`
}

// Get returns the lease's live holder as a record, or a Kubernetes NotFound
// error when no one holds it.
func (l *Lock) Get(ctx context.Context) (*rl.LeaderElectionRecord, []byte, error) {
	h, err := l.reader().Holder(ctx, l.name)
	if errors.Is(err, lease.ErrNoHolder) {
		return nil, nil, apierrors.NewNotFound(resource, l.name)
	}
	if err != nil {
		return nil, nil, fmt.Errorf("resourcelock: reading %s: %w", l.Describe(), err)
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
// AlreadyExists when another holder has it.
func (l *Lock) Create(ctx context.Context, ler rl.LeaderElectionRecord) error {
	err := l.take(ctx, ler)
	if errors.Is(err, lease.ErrNotAcquired) {
		return apierrors.NewAlreadyExists(resource, l.name)
	}
	return err
}

// Update renews (keeps) or acquires the lease for this lock's identity,
// failing with Conflict when another holder has it, or releases it when
// ler's holder identity is empty.
func (l *Lock) Update(ctx context.Context, ler rl.LeaderElectionRecord) error {
	if ler.HolderIdentity == "" {
		return l.release(ctx)
	}
	err := l.take(ctx, ler)
	if errors.Is(err, lease.ErrNotAcquired) {
		return apierrors.NewConflict(resource, l.name, err)
	}
	return err
}

// take keeps the lease if this lock still holds it, or acquires it.
func (l *Lock) take(ctx context.Context, ler rl.LeaderElectionRecord) error {
	if ler.HolderIdentity != l.identity {
		return fmt.Errorf("resourcelock: %s can only write its own identity %q, not %q", l.Describe(), l.identity, ler.HolderIdentity)
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.held != nil && l.held.Context().Err() == nil {
		return nil
	}
	l.held = nil
	c, err := l.clientLocked(time.Duration(ler.LeaseDurationSeconds) * time.Second)
	if err != nil {
		return err
	}
	held, err := c.TryAcquire(ctx, l.name)
	if err != nil {
		return fmt.Errorf("resourcelock: acquiring %s: %w", l.Describe(), err)
	}
	l.held = held
	return nil
}

func (l *Lock) release(ctx context.Context) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	held := l.held
	l.held = nil
	if held == nil {
		return nil
	}
	if err := held.Release(ctx); err != nil && !errors.Is(err, lease.ErrLeaseLost) {
		return fmt.Errorf("resourcelock: releasing %s: %w", l.Describe(), err)
	}
	return nil
}

// clientLocked returns the lease.Client, creating it with ttl (the
// record's lease duration) the first time.
func (l *Lock) clientLocked(ttl time.Duration) (*lease.Client, error) {
	if l.closed {
		return nil, fmt.Errorf("resourcelock: %s: %w", l.Describe(), lease.ErrClosed)
	}
	if l.client != nil {
		return l.client, nil
	}
	opts := []lease.Option{lease.WithTTL(ttl)}
	opts = append(opts, l.leaseOpts...)
	opts = append(opts, lease.WithHolderID(l.identity))
	c, err := lease.NewClient(l.db, l.table, opts...)
	if err != nil {
		return nil, fmt.Errorf("resourcelock: %s: %w", l.Describe(), err)
	}
	l.client = c
	return c, nil
}

// reader is the client Get reads with: the lock's own, or, before its first
// acquisition, one that never acquires.
func (l *Lock) reader() *lease.Client {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.client != nil {
		return l.client
	}
	return l.readOnly
}

// Lease returns the lease while this lock holds it, else nil: its Token is
// the fencing token, its Context ends when leadership is lost (before a
// rival can take over), and its Guard fences Spanner writes.
func (l *Lock) Lease() *lease.Lease {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.held == nil || l.held.Context().Err() != nil {
		return nil
	}
	return l.held
}

// Close releases the lease if held and ends the lock's session in Spanner;
// the lock cannot acquire again. It does not close db.
func (l *Lock) Close() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.closed = true
	l.held = nil
	var errs []error
	for _, c := range []*lease.Client{l.client, l.readOnly} {
		if c != nil {
			errs = append(errs, c.Close())
		}
	}
	return errors.Join(errs...)
}

// RecordEvent records an elector's event with the recorder given to
// WithEventRecorder, if any.
func (l *Lock) RecordEvent(s string) {
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
