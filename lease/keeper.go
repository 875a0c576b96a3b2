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
	var leases []*Lease
	for _, st := range c.names {
		if st.held != nil {
			leases = append(leases, st.held)
		}
	}
	return leases
}

// renew extends the given leases in one transaction: a compare-and-set on
// session and token that skips expired rows. Leases it could not renew are
// lost; if the transaction fails, nothing is concluded and nothing extended.
func (c *Client) renew(leases []*Lease) error {
	keys := make([]leaseKey, len(leases))
	names := make([]string, len(leases))
	for i, l := range leases {
		keys[i] = leaseKey{Name: l.name, Token: l.token}
		names[i] = l.name
	}
	ctx, cancel := context.WithTimeout(c.background, c.cfg.renewInterval)
	defer cancel()
	var (
		sent    time.Time
		renewed int64
	)
	resp, err := c.db.ReadWriteTransactionWithOptions(ctx, func(ctx context.Context, tx *spanner.ReadWriteTransaction) error {
		sent = time.Now()
		var err error
		renewed, err = tx.Update(ctx, spanner.Statement{SQL: c.sql.renew, Params: map[string]any{
			"names": names, "leases": keys, "session": c.session,
		}})
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
	confirmed := map[leaseKey]bool{}
	err = c.db.Single().Query(ctx, spanner.Statement{SQL: c.sql.confirmed, Params: map[string]any{
		"names": names, "session": c.session, "committed": resp.CommitTs,
	}}).Do(func(r *spanner.Row) error {
		var k leaseKey
		if err := r.Columns(&k.Name, &k.Token); err != nil {
			return err
		}
		confirmed[k] = true
		return nil
	})
	if err != nil {
		return c.explain(err)
	}
	for i, l := range leases {
		if confirmed[keys[i]] {
			l.confirm(sent)
		} else {
			l.lose("a renewal found it expired or held by another")
		}
	}
	return nil
}
