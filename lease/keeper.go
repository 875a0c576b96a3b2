package lease

import (
	"context"
	"errors"
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

// keep renews the Client's session, and so all its leases, once per
// interval. A failed renewal is retried with backoff; if the local deadline
// passes meanwhile the session's timer loses its leases, so a transient error
// never ends a lease early. An idle session is left to expire: the next
// acquisition starts a new one.
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
		s, leases := c.sessionLeases()
		if len(leases) == 0 {
			t.Reset(c.cfg.renewInterval)
			continue
		}
		if err := c.renew(s, leases); err != nil {
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

// sessionLeases returns the current session and the leases it holds.
func (c *Client) sessionLeases() (*session, []*Lease) {
	c.mu.Lock()
	defer c.mu.Unlock()
	var leases []*Lease
	for _, l := range c.leasesLocked() {
		if l.sess == c.sess {
			leases = append(leases, l)
		}
	}
	return c.sess, leases
}

// renew extends a session in one transaction. It first reads, for every
// given lease, whether its row still names the session with the lease's
// token: the compare-and-set of the renewal; a lease that fails it is lost.
// Then it writes the session row alone, whatever the number of leases, and
// stamps lock rows not stamped for an hour so that row deletion policies
// never see a held lock as old. If the session expired, every lease is
// lost; if the transaction fails, nothing is concluded and nothing extended.
func (c *Client) renew(s *session, leases []*Lease) error {
	var locks []lockKey
	var permits []permitKey
	for _, l := range leases {
		if l.slot == lockSlot {
			locks = append(locks, lockKey{Name: l.name, Token: l.token})
		} else {
			permits = append(permits, permitKey{Name: l.name, Slot: l.slot, Token: l.token})
		}
	}
	ctx, cancel := context.WithTimeout(c.background, c.cfg.renewInterval)
	defer cancel()
	var (
		sent      time.Time
		confirmed map[permitKey]bool
	)
	_, err := c.db.ReadWriteTransactionWithOptions(ctx, func(ctx context.Context, tx *spanner.ReadWriteTransaction) error {
		sent, confirmed = time.Now(), map[permitKey]bool{}
		var (
			live      spanner.NullBool
			heldLocks []*heldLock
			heldSlots []*permitKey
		)
		err := tx.Query(ctx, spanner.Statement{SQL: c.sql.renew, Params: map[string]any{
			"session": s.id, "locks": locks, "permits": permits,
		}}).Do(func(r *spanner.Row) error { return r.Columns(&live, &heldLocks, &heldSlots) })
		if err != nil {
			return err
		}
		if !live.Bool {
			return errSessionGone{s}
		}
		writes := []*spanner.Mutation{spanner.Update(c.sql.sessions,
			[]string{"session_id", "renewed_at", "high_water"},
			[]any{s.id, spanner.CommitTimestamp, c.wallDeadlineFrom(sent)})}
		for _, h := range heldLocks {
			confirmed[permitKey{Name: h.Name, Slot: lockSlot, Token: h.Token}] = true
			if h.Stale {
				writes = append(writes, spanner.Update(c.sql.table, []string{"name", "renewed_at"}, []any{h.Name, spanner.CommitTimestamp}))
			}
		}
		for _, h := range heldSlots {
			confirmed[*h] = true
		}
		return tx.BufferWrite(writes)
	}, spanner.TransactionOptions{TransactionTag: "spannerlock-renew"})
	var gone errSessionGone
	switch {
	case errors.As(err, &gone):
		c.endSession(s, "a renewal found its session expired in Spanner")
		return nil
	case err != nil:
		return c.explain(err)
	}
	s.extend(sent, false)
	for _, l := range leases {
		if !confirmed[permitKey{Name: l.name, Slot: l.slot, Token: l.token}] {
			l.lose("a renewal found it released, expired or held by another")
		}
	}
	return nil
}

// heldLock is a lock the renewal found still held; stale when its row needs
// a new renewed_at for row deletion policies.
type heldLock struct {
	Name  string `spanner:"name"`
	Token int64  `spanner:"token"`
	Stale bool   `spanner:"stale"`
}
