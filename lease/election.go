package lease

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"go.opentelemetry.io/otel/trace"
)

// LeaderCallbacks are called on leadership transitions only, never per renewal.
type LeaderCallbacks struct {
	// OnStartedLeading runs in its own goroutine when this Client becomes the
	// leader. Its ctx ends when leadership ends, and it must return then:
	// Campaign waits for it before releasing the lease, so a successor never
	// overlaps the work of a leader that steps down. Returning earlier does
	// not end leadership. Required.
	OnStartedLeading func(ctx context.Context, l *Lease)
	// OnStoppedLeading is called after leadership ends and OnStartedLeading
	// has returned. Optional.
	OnStoppedLeading func()
	// OnNewLeader is called, in order, each time a different holder or token
	// leads, this Client included. Vacancies are not reported. Optional.
	OnNewLeader func(Holder)
}

// Campaign runs for leadership of name until ctx ends: it acquires the lease,
// waiting while another leads, and calls OnStartedLeading. When leadership is
// lost it calls OnStoppedLeading and campaigns again. To step down and stay
// in the election, Release the lease from OnStartedLeading: the first
// candidate in line then takes leadership, and Campaign joins the back of
// the line, so a leader that keeps stepping down and campaigning
// never starves the others. When ctx ends, Campaign stops
// the leader's work, releases the lease so a successor takes over at once,
// and returns nil. It returns an error only when it cannot campaign: an
// invalid name, a closed Client, or a missing table.
func (c *Client) Campaign(ctx context.Context, name string, cb LeaderCallbacks, opts ...AcquireOption) error {
	if cb.OnStartedLeading == nil {
		return errors.New("lease: Campaign: LeaderCallbacks.OnStartedLeading is required")
	}
	if err := validateName("lease name", name); err != nil {
		return fmt.Errorf("lease: Campaign: %w", err)
	}
	if cb.OnNewLeader != nil {
		// Observing stops before Campaign returns, so no callback runs after it.
		observeCtx, stopObserving := context.WithCancel(ctx)
		defer stopObserving()
		observed, err := c.Observe(observeCtx, name)
		if err != nil {
			return fmt.Errorf("lease: Campaign: %w", err)
		}
		var wg sync.WaitGroup
		defer wg.Wait()
		defer stopObserving()
		wg.Add(1)
		go func() {
			defer wg.Done()
			for h := range observed {
				if h.Token != 0 {
					cb.OnNewLeader(h)
				}
			}
		}()
	}
	for {
		l, err := c.Acquire(ctx, name, opts...)
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return fmt.Errorf("lease: Campaign %q: %w", name, err)
		}
		c.lead(ctx, l, cb)
		switch {
		case ctx.Err() != nil:
			return nil
		case errors.Is(context.Cause(l.Context()), ErrClosed):
			return ErrClosed
		}
	}
}

// lead runs one term of leadership until the lease ends or ctx does.
func (c *Client) lead(ctx context.Context, l *Lease, cb LeaderCallbacks) {
	c.log.Info("started leading", "name", l.name, "token", l.token)
	// The leader's work ends with the lease, and belongs to the caller's span.
	work, stop := context.WithCancel(trace.ContextWithSpan(l.Context(), trace.SpanFromContext(ctx)))
	done := make(chan struct{})
	go func() {
		defer close(done)
		cb.OnStartedLeading(work, l)
	}()
	select {
	case <-ctx.Done():
	case <-l.Context().Done():
	}
	stop()
	<-done
	if ctx.Err() != nil && l.Context().Err() == nil {
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), min(c.cfg.ttl, 5*time.Second))
		if err := l.Release(rctx); err != nil {
			c.log.Warn("releasing leadership failed; it expires after the TTL", "name", l.name, "err", err)
		}
		cancel()
	}
	c.log.Info("stopped leading", "name", l.name, "token", l.token, "cause", context.Cause(l.Context()))
	if cb.OnStoppedLeading != nil {
		cb.OnStoppedLeading()
	}
}
