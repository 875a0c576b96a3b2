package lease

import (
	"context"
	"time"

	"cloud.google.com/go/spanner"
)

// startKeeper starts the renewal loop once; c.mu is held.
func (c *Client) startKeeper() {
	if c.keeping {
		return
	}
	c.keeping = true
	c.keeper.Add(1)
	go c.keep()
}

// keep renews every lease the Client holds, all in one transaction per
// interval. A failed renewal is retried with backoff; leases whose local
// deadline passes meanwhile are lost by their own timers, so a transient
// error never ends a lease early.
func (c *Client) keep() {
	defer c.keeper.Done()
	t := time.NewTimer(c.cfg.renewInterval)
	defer t.Stop()
	failures := 0
	for {
		select {
		case <-c.background.Done():
			return
		case <-t.C:
		}
		leases := c.heldLeases()
		if len(leases) == 0 {
			t.Reset(c.cfg.renewInterval)
			continue
		}
		if err := c.renew(leases); err != nil {
			failures++
			if c.background.Err() == nil {
				c.log.Warn("renewal failed; retrying", "leases", len(leases), "failures", failures, "err", err)
			}
			t.Reset(backoff(failures, c.cfg.renewInterval/2))
			continue
		}
		failures = 0
		t.Reset(c.cfg.renewInterval)
	}
}

func (c *Client) heldLeases() []*Lease {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.leasesLocked()
}

// renew extends the given leases in one transaction: a compare-and-set on
// session and token that skips expired rows. Leases it could not renew are
// lost; if the transaction fails, nothing is concluded and nothing extended.
// Permit rows also record, by this process's wall clock, the latest moment
// their holder may use them (see WorkerID).
func (c *Client) renew(leases []*Lease) error {
	g := groupLeases(leases)
	ctx, cancel := context.WithTimeout(c.background, c.cfg.renewInterval)
	defer cancel()
	var (
		sent    time.Time
		renewed int64
	)
	resp, err := c.db.ReadWriteTransactionWithOptions(ctx, func(ctx context.Context, tx *spanner.ReadWriteTransaction) error {
		sent = time.Now()
		highWater := map[string]any{"high_water": c.deadlineFrom(sent)}
		counts, err := tx.BatchUpdate(ctx, g.statements(c, c.sql.renew, c.sql.renewPermits, highWater))
		renewed = sum(counts)
		return err
	}, spanner.TransactionOptions{TransactionTag: "spannerlock-renew"})
	if err != nil {
		return c.explain(err)
	}
	if renewed == int64(len(leases)) {
		for _, l := range leases {
			l.confirm(sent)
		}
		return nil
	}
	// Some rows no longer matched: the ones this commit renewed carry its
	// timestamp; every other lease expired or was taken.
	confirmed := map[permitKey]bool{}
	read := func(sql string, names []string) error {
		return c.db.Single().Query(ctx, spanner.Statement{SQL: sql, Params: map[string]any{
			"names": names, "session": c.session, "committed": resp.CommitTs,
		}}).Do(func(r *spanner.Row) error {
			var k permitKey
			if err := r.Columns(&k.Name, &k.Slot, &k.Token); err != nil {
				return err
			}
			confirmed[k] = true
			return nil
		})
	}
	if len(g.locks) > 0 {
		if err := read(c.sql.confirmed, g.lockNames); err != nil {
			return c.explain(err)
		}
	}
	if len(g.permits) > 0 {
		if err := read(c.sql.confirmedPermits, g.permitNames); err != nil {
			return c.explain(err)
		}
	}
	for _, l := range leases {
		if confirmed[permitKey{Name: l.name, Slot: l.slot, Token: l.token}] {
			l.confirm(sent)
		} else {
			l.lose("a renewal found it expired or held by another")
		}
	}
	return nil
}

// deadlineFrom is when a lease renewed (or acquired) by a transaction that
// began at sent is presumed lost.
func (c *Client) deadlineFrom(sent time.Time) time.Time {
	return sent.Add(c.cfg.ttl - c.cfg.safetyMargin())
}
