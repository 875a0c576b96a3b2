package lease

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"go.opentelemetry.io/otel/attribute"
)

// AcquireAll blocks until it holds every one of names, or ctx ends. It takes
// them all in one Spanner transaction or none, so callers that need several
// locks cannot deadlock each other whatever order they name them in, and it
// waits in line for each name as Acquire does. The leases are released
// together by the set's Release. Each lease of the set has its own fencing
// token, and Guard checks it as for any lease. Errors are Acquire's; a name
// that is a semaphore's is refused with ErrWrongKind.
func (c *Client) AcquireAll(ctx context.Context, names ...string) (*LeaseSet, error) {
	if len(names) == 0 {
		return nil, errors.New("lease: AcquireAll: no names")
	}
	for _, name := range names {
		if err := validateName("lease name", name); err != nil {
			return nil, fmt.Errorf("lease: AcquireAll: %w", err)
		}
	}
	leases, err := c.acquire(ctx, "AcquireAll", lockTarget{lockNames: sortedNames(names)}, newAcquireConfig(nil), false)
	if err != nil {
		return nil, err
	}
	return newLeaseSet(leases), nil
}

// LeaseSet is leases held together: AcquireAll took them in one transaction,
// and Release lets them go in one.
type LeaseSet struct {
	leases []*Lease
	ctx    context.Context
	// cancel ends ctx with the cause of the first lease to end; every
	// lease ends by its Client's Close at the latest.
	cancel context.CancelCauseFunc
	once   sync.Once
}

func newLeaseSet(leases []*Lease) *LeaseSet {
	ctx, cancel := context.WithCancelCause(context.Background())
	set := &LeaseSet{leases: leases, ctx: ctx, cancel: cancel}
	for _, l := range leases {
		context.AfterFunc(l.ctx, func() { set.cancel(context.Cause(l.ctx)) })
	}
	return set
}

// Leases returns the set's leases, in the order of their names.
func (s *LeaseSet) Leases() []*Lease { return s.leases }

// Lease returns the set's lease of name, or nil.
func (s *LeaseSet) Lease(name string) *Lease {
	for _, l := range s.leases {
		if l.name == name {
			return l
		}
	}
	return nil
}

// Context is cancelled when any lease of the set ends; context.Cause tells
// why, as for Lease.Context.
func (s *LeaseSet) Context() context.Context { return s.ctx }

// Release lets every lease of the set go in one transaction; the first
// waiter in each name's line then takes it. It returns an error matching
// ErrLeaseLost if any of them was lost before; the others are released all
// the same. Later calls return nil.
func (s *LeaseSet) Release(ctx context.Context) error {
	var err error
	s.once.Do(func() { err = s.release(ctx) })
	return err
}

func (s *LeaseSet) release(ctx context.Context) error {
	c := s.leases[0].c
	if ctx.Err() == nil {
		// As for a Lease: ending the leases may cancel ctx (one derived
		// from s.Context()); the release goes through all the same.
		var cancel context.CancelFunc
		ctx, cancel = unlessReleased(ctx)
		defer cancel()
	}
	ctx, span := c.tel.start(ctx, "Release", attrKind.String(kindLock), attribute.Int("spannerlock.names", len(s.leases)))
	var (
		gos  []letGo
		lost error
	)
	for _, l := range s.leases {
		l.releasing.Lock()
		defer l.releasing.Unlock()
		if !l.end(ErrReleased, nil) {
			if cause := context.Cause(l.ctx); lost == nil && errors.Is(cause, ErrLeaseLost) {
				lost = fmt.Errorf("lease: Release: %w", cause)
			}
			continue
		}
		defer c.forget(l)
		gos = append(gos, letGo{leaseKey: l.key()})
	}
	outcome, err := outcomeEnded, error(nil)
	if len(gos) > 0 {
		outcome, err = c.letGoAll(ctx, s.leases[0].sess, gos, "Release")
	}
	if err == nil {
		err = lost
	}
	end(span, outcome, err)
	return err
}
