package lease

import (
	"cmp"
	"context"
	"errors"
	"slices"
	"time"

	"cloud.google.com/go/spanner"
)

// maxSyncBatch bounds the leases one sync transaction checks, and
// maxRestamps the lock rows it stamps, so that a renewal's parameters and
// its commit (at most 3 + 2×maxRestamps + 4×maxSyncBatch mutations) stay far
// below Spanner's limits however many leases a Client holds. A session
// renewal extends every lease of the session whether or not it checked it;
// the checks rotate, so each lease is checked every few renewals.
var (
	maxSyncBatch = 1000
	maxRestamps  = 1000
)

// startKeeper starts the renewal loop once; c.mu is held.
func (c *Client) startKeeper() {
	if c.keeping || c.closed {
		return
	}
	c.keeping = true
	c.keeper.Add(1)
	go c.keep()
}

// keep renews the Client's session, and so all its leases, once per
// interval, and at once when a let-go is waiting. A failed renewal is
// retried with backoff; if the local deadline passes meanwhile the session's
// timer loses its leases, so a transient error never ends a lease early. An
// idle session is left to expire: the next acquisition renews it, or starts
// a new one.
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
		case <-c.kick:
		}
		s, leases, gos := c.syncWork()
		if len(leases) == 0 && len(gos) == 0 {
			t.Reset(c.cfg.renewInterval)
			continue
		}
		if err := c.renew(s, leases, gos); err != nil {
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

// syncWork returns the current session, the leases its next renewal
// checks, and the let-goes it clears, at most maxSyncBatch in all.
func (c *Client) syncWork() (*session, []*Lease, []letGo) {
	c.mu.Lock()
	s := c.sess
	var leases []*Lease
	for _, l := range c.leasesLocked() {
		if l.sess == s && !l.isEnded() {
			leases = append(leases, l)
		}
	}
	c.mu.Unlock()
	gos := s.pendingLetGos(maxSyncBatch)
	return s, s.rotate(leases, maxSyncBatch-len(gos)), gos
}

// rotate returns n of leases, the next n after the previous call's.
func (s *session) rotate(leases []*Lease, n int) []*Lease {
	if len(leases) <= n {
		return leases
	}
	slices.SortFunc(leases, func(a, b *Lease) int {
		return cmp.Or(cmp.Compare(a.name, b.name), cmp.Compare(a.slot, b.slot))
	})
	s.mu.Lock()
	from := s.cursor % len(leases)
	s.cursor = from + n
	s.mu.Unlock()
	return append(leases[from:min(from+n, len(leases))], leases[:max(0, from+n-len(leases))]...)
}

// renew extends s in one transaction, losing the leases it finds gone and
// clearing the let-goes it finds still held. If the session expired in
// Spanner, every lease is lost; if the transaction fails, nothing is
// concluded and nothing extended.
func (c *Client) renew(s *session, leases []*Lease, gos []letGo) error {
	ctx, cancel := context.WithTimeout(c.background, c.cfg.renewTimeout())
	defer cancel()
	ctx, span := c.tel.start(ctx, "Renew", attrLeases.Int(len(leases)))
	began := time.Now()
	out, err := c.sync(ctx, s, leases, gos, renewSession, "spannerlock-renew")
	var gone errSessionGone
	sessionGone := errors.As(err, &gone)
	if sessionGone {
		err = nil // a finding, not a failure: its leases are lost below
	} else if err != nil {
		err = c.explain(err)
	}
	// The renewal is recorded before any lease it finds lost ends, so
	// whoever watches a lease's Context finds the renewal recorded too.
	c.tel.renewed(ctx, time.Since(began))
	outcome := "renewed"
	if err != nil {
		outcome = resultError
	}
	end(span, outcome, err)
	switch {
	case sessionGone:
		c.endSession(s, lossSessionGone, "a renewal found its session expired in Spanner")
		return nil
	case err != nil:
		return err
	}
	s.extend(out.sent)
	for _, l := range leases {
		if !out.held[l.key()] {
			l.lose(lossTaken, "a renewal found it released, expired or held by another")
		}
	}
	for _, g := range gos {
		s.dropLetGo(g)
		if out.held[g.leaseKey] {
			c.log.Debug("released in the background", "name", g.name, "slot", g.slot, "token", g.token)
			announceRelease(c.signalPrefix + g.name)
		}
	}
	return nil
}

// sessionWrite is what a sync transaction writes to its session's row.
type sessionWrite int

const (
	keepSession sessionWrite = iota
	renewSession
	expireSession
)

// syncOutcome is what a sync transaction found.
type syncOutcome struct {
	// sent is when the transaction began.
	sent time.Time
	// live is whether Spanner had the session live.
	live bool
	// held are the leases and let-goes whose rows still named the session
	// with their token; the let-goes among them were cleared.
	held map[leaseKey]bool
}

// sync is the one transaction that compares and sets the rows of a
// session, for a renewal, a release, a RunOnce completion and Close. It
// reads whether s is live and which of leases and gos still name it with
// their tokens; then it clears the gos that do, stamps held lock rows due
// for it (row deletion policies must never see a held lock as old), and
// writes the session row as w says. A renewal of a session that is not live
// fails with errSessionGone, since leases naming it may have been taken.
func (c *Client) sync(ctx context.Context, s *session, leases []*Lease, gos []letGo, w sessionWrite, tag string) (syncOutcome, error) {
	// The query returns every row naming the session among these names;
	// the tokens are compared here, against the keys asked about.
	asked := map[leaseKey]bool{}
	var locks, pools []string
	seenPool := map[string]bool{}
	add := func(k leaseKey) {
		asked[k] = true
		switch {
		case k.slot == lockSlot:
			locks = append(locks, k.name)
		case !seenPool[k.name]:
			seenPool[k.name] = true
			pools = append(pools, k.name)
		}
	}
	for _, l := range leases {
		add(l.key())
	}
	for _, g := range gos {
		add(g.leaseKey)
	}
	var out syncOutcome
	_, err := c.db.ReadWriteTransactionWithOptions(ctx, func(ctx context.Context, tx *spanner.ReadWriteTransaction) error {
		out = syncOutcome{sent: time.Now(), held: map[leaseKey]bool{}}
		stale := map[leaseKey]bool{}
		err := tx.Query(ctx, c.sql.sync.bind(map[string]any{
			"session": s.id, "locks": append([]string{}, locks...), "pools": append([]string{}, pools...),
		})).Do(func(r *spanner.Row) error {
			var (
				part  string
				name  spanner.NullString
				slot  spanner.NullInt64
				token spanner.NullInt64
				flag  spanner.NullBool
			)
			if err := r.Columns(&part, &name, &slot, &token, &flag); err != nil {
				return err
			}
			k := leaseKey{name: name.StringVal, slot: lockSlot, token: token.Int64}
			switch part {
			case "session":
				out.live = flag.Bool
			case "lock":
				stale[k] = flag.Bool
			case "permit":
				k.slot = slot.Int64
			}
			if part != "session" && asked[k] {
				out.held[k] = true
			}
			return nil
		})
		if err != nil {
			return err
		}
		if !out.live && w == renewSession {
			return errSessionGone{s}
		}
		var writes []*spanner.Mutation
		if out.live {
			for _, g := range gos {
				if out.held[g.leaseKey] {
					writes = append(writes, g.clear(c.sql))
				}
			}
			restamps := 0
			for _, l := range leases {
				if k := l.key(); stale[k] && restamps < maxRestamps {
					restamps++
					writes = append(writes, spanner.Update(c.sql.table, []string{"name", "renewed_at"}, []any{k.name, spanner.CommitTimestamp}))
				}
			}
		} else {
			clear(out.held) // rows of an expired session hold nothing
		}
		switch w {
		case renewSession:
			writes = append(writes, c.renewal(s, out.sent))
		case expireSession:
			writes = append(writes, c.sql.sessionTombstone(s.id, c.cfg.holderID))
		}
		return tx.BufferWrite(writes)
	}, spanner.TransactionOptions{TransactionTag: tag})
	return out, err
}
