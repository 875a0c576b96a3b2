package lease

import (
	"context"
	"sync"
	"time"

	"cloud.google.com/go/spanner"
)

// session is a Client's presence in Spanner: one row in the sessions table
// that every lease of the Client names, renewed once per interval for all
// of them. A lease lives in Spanner exactly as long as its session does.
//
// Locally a session has one deadline on the monotonic clock, set only from
// writes of its row that the Client saw commit: every lease of a session
// therefore has a deadline, and when it passes every lease of the session is
// lost. A session that ends is never written again (a new one, with a new
// ID, takes its place), so a lease presumed lost never comes back to life.
type session struct {
	c  *Client
	id string

	mu    sync.Mutex
	state sessionState
	// resolved is closed when a creation in flight is resolved.
	resolved chan struct{}
	deadline time.Time // monotonic; set once live
	timer    *time.Timer
	// letGos are leases of this session whose owners let go while their
	// release did not reach Spanner; renewals clear them (keeper.go).
	letGos map[leaseKey]letGo
	// cursor rotates renewals through more leases than one renewal checks.
	cursor int
	// reason is why it ended, when a loss ended it.
	reason lossReason
}

type sessionState int

const (
	// sessionNew has no row; the first acquisition creates it.
	sessionNew sessionState = iota
	// sessionCreating has one acquisition in flight that inserts the row;
	// others wait for its outcome rather than insert it twice.
	sessionCreating
	// sessionActive has a row the Client saw committed, and a deadline.
	sessionActive
	// sessionEnded is over: lost, abandoned or closed.
	sessionEnded
)

func newSession(c *Client) *session {
	return &session{c: c, id: randomHex(16), letGos: map[leaseKey]letGo{}}
}

// role is what an acquiring transaction does with its session's row.
type role int

const (
	// joinLive: the row exists and is fresh; the transaction checks that
	// Spanner agrees it is live, and writes nothing to it.
	joinLive role = iota
	// joinRefresh: as joinLive, and the transaction also renews the row,
	// because the session has idled and its deadline is near: a new lease
	// starts with (close to) a full TTL.
	joinRefresh
	// create: the transaction inserts the row.
	create
)

// writes reports whether a transaction in this role writes the session row.
func (r role) writes() bool { return r != joinLive }

// join returns the session an acquisition should use and its role in it,
// waiting while another acquisition of this Client creates the session.
func (c *Client) join(ctx context.Context) (*session, role, error) {
	for {
		s := c.currentSession()
		s.mu.Lock()
		switch s.state {
		case sessionNew:
			s.state, s.resolved = sessionCreating, make(chan struct{})
			s.mu.Unlock()
			return s, create, nil
		case sessionCreating:
			resolved := s.resolved
			s.mu.Unlock()
			select {
			case <-resolved:
			case <-ctx.Done():
				return nil, 0, ctx.Err()
			case <-c.background.Done():
				return nil, 0, ErrClosed
			}
		case sessionActive:
			r := joinLive
			// Renewals keep a session with leases above this; only an idle
			// session falls below it.
			if time.Until(s.deadline) < c.cfg.ttl/2 {
				r = joinRefresh
			}
			s.mu.Unlock()
			return s, r, nil
		default:
			s.mu.Unlock() // ended: currentSession starts another
		}
	}
}

// currentSession returns the session new acquisitions use, starting a new
// one if the last ended.
func (c *Client) currentSession() *session {
	c.mu.Lock()
	defer c.mu.Unlock()
	if s := c.sess; s.isEnded() {
		c.sess = newSession(c)
	}
	return c.sess
}

func (s *session) isEnded() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.state == sessionEnded
}

// confirmed records that a transaction in role r, begun at sent, committed.
func (s *session) confirmed(r role, sent time.Time) {
	if !r.writes() {
		return
	}
	s.mu.Lock()
	if r == create && s.state == sessionCreating {
		s.state = sessionActive
		close(s.resolved)
	}
	s.mu.Unlock()
	s.extend(sent)
}

// extend records a committed write of the row by a transaction that began
// at sent. Spanner's commit timestamp is no earlier than sent, so the
// session cannot expire on Spanner's clock before the local deadline
// computed from it.
func (s *session) extend(sent time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.state != sessionActive {
		return
	}
	d := s.c.deadlineFrom(sent)
	if !d.After(s.deadline) {
		return
	}
	s.deadline = d
	if s.timer == nil {
		s.timer = time.AfterFunc(time.Until(d), s.checkDeadline)
	} else {
		s.timer.Reset(time.Until(d))
	}
}

// addLetGo records a lease of s to clear in a later sync; it reports false
// when s has ended, since its rows then expire with it.
func (s *session) addLetGo(g letGo) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.state == sessionEnded {
		return false
	}
	s.letGos[g.leaseKey] = g
	return true
}

// pendingLetGos returns up to n let-goes waiting for a sync.
func (s *session) pendingLetGos(n int) []letGo {
	s.mu.Lock()
	defer s.mu.Unlock()
	gos := make([]letGo, 0, min(n, len(s.letGos)))
	for _, g := range s.letGos {
		if len(gos) == n {
			break
		}
		gos = append(gos, g)
	}
	return gos
}

func (s *session) dropLetGo(g letGo) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.letGos, g.leaseKey)
}

// takeLetGos removes and returns every waiting let-go.
func (s *session) takeLetGos() []letGo {
	s.mu.Lock()
	defer s.mu.Unlock()
	gos := make([]letGo, 0, len(s.letGos))
	for _, g := range s.letGos {
		gos = append(gos, g)
	}
	clear(s.letGos)
	return gos
}

// notCreated records that a creating transaction certainly did not write
// the row (it rolled back, or committed without it), so the next
// acquisition may create the session under the same ID. It does nothing
// once the creation was confirmed or the session ended.
func (s *session) notCreated() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.state == sessionCreating {
		s.state = sessionNew
		close(s.resolved)
	}
}

// abandon gives up on a session whose row's fate is unknown: a creating
// commit whose outcome could not be confirmed. Guessing either way is
// unsafe (a lease without a deadline, or a second insert of the row), so
// the session ends, its row is made expired in the background, and the
// Client starts another.
func (c *Client) abandon(s *session, why string) {
	if c.endSession(s, lossSessionGone, why) {
		c.runInBackground(func(ctx context.Context) error { return c.expireSession(ctx, s) })
	}
}

// expireSession writes the session row as expired, inserting it if the
// creation never landed: a creating commit still in flight then fails on
// the existing row, and one that landed is expired at once, so no lease
// naming the session lives on. The row keeps its worker-ID high-water mark.
func (c *Client) expireSession(ctx context.Context, s *session) error {
	_, err := c.db.Apply(ctx, []*spanner.Mutation{c.sql.sessionTombstone(s.id, c.cfg.holderID)},
		spanner.TransactionTag("spannerlock-end-session"))
	return err
}

func (s *session) checkDeadline() {
	s.mu.Lock()
	if wait := time.Until(s.deadline); wait > 0 && s.state == sessionActive {
		// A renewal moved the deadline after this timer fired.
		s.timer.Reset(wait)
		s.mu.Unlock()
		return
	}
	s.mu.Unlock()
	s.c.endSession(s, lossDeadline, "no renewal was confirmed before the local deadline")
}

// end marks the session over, once; it reports whether this call did it.
func (s *session) end() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	switch s.state {
	case sessionEnded:
		return false
	case sessionCreating:
		close(s.resolved)
	}
	s.state = sessionEnded
	if s.timer != nil {
		s.timer.Stop()
	}
	clear(s.letGos) // they expire with the session
	return true
}

// live reports whether the session's local deadline has not passed, so its
// leases may be used. It does not wait for the deadline's timer, which a
// loaded machine may run late.
func (s *session) live() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.state == sessionActive && time.Now().Before(s.deadline)
}

// endReason is why the session ended, for leases found on it afterwards.
func (s *session) endReason() lossReason {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.reason == "" {
		return lossSessionGone
	}
	return s.reason
}

func (s *session) localDeadline() time.Time {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.deadline
}

// endSession ends s and loses every lease that names it; it reports whether
// this call ended it.
func (c *Client) endSession(s *session, reason lossReason, why string) bool {
	if !s.end() {
		return false
	}
	s.mu.Lock()
	s.reason = reason
	s.mu.Unlock()
	c.mu.Lock()
	leases := c.leasesLocked()
	c.mu.Unlock()
	for _, l := range leases {
		if l.sess == s {
			l.lose(reason, why)
		}
	}
	return true
}

// errSessionGone rolls back a transaction that found its session expired,
// deleted, or (for a session being created) already present in Spanner.
type errSessionGone struct{ s *session }

func (e errSessionGone) Error() string { return "lease: session " + e.s.id + " is gone from Spanner" }

// check decides, inside an acquiring transaction, whether the session may
// be used given what Spanner says of its row (self: NULL when there is no
// row, else whether it is live). A joiner needs it live; a creator needs it
// absent, since a row it did not see created may have had leases taken.
func (r role) check(s *session, self spanner.NullBool) error {
	ok := self.Valid && self.Bool
	if r == create {
		ok = !self.Valid
	}
	if !ok {
		return errSessionGone{s}
	}
	return nil
}

// write is the mutation of the session row that a transaction in role r,
// begun at sent, makes: none, an insert, or a renewal.
func (r role) write(c *Client, s *session, sent time.Time) *spanner.Mutation {
	switch r {
	case create:
		return spanner.Insert(c.sql.sessions,
			[]string{"session_id", "holder_id", "ttl_ms", "renewed_at", "high_water"},
			[]any{s.id, c.cfg.holderID, c.cfg.ttl.Milliseconds(), spanner.CommitTimestamp, c.markFrom(sent)})
	case joinRefresh:
		return c.renewal(s, sent)
	}
	return nil
}

// renewal is the write that extends a session from a transaction begun at
// sent: its new renewed_at, and the latest moment its worker IDs may be used.
func (c *Client) renewal(s *session, sent time.Time) *spanner.Mutation {
	return spanner.Update(c.sql.sessions, []string{"session_id", "renewed_at", "high_water"},
		[]any{s.id, spanner.CommitTimestamp, c.markFrom(sent)})
}

// deadlineFrom is when a session renewed (or created) by a transaction that
// began at sent is presumed lost, on the monotonic clock.
func (c *Client) deadlineFrom(sent time.Time) time.Time {
	return sent.Add(c.cfg.ttl - c.cfg.safetyMargin())
}

// markFrom is the worker-ID high-water mark of a session renewed by a
// transaction that began at sent: by this process's wall clock, later than
// any moment its worker IDs may be used. Its IDs stop at the local deadline
// (deadlineFrom); the mark adds the safety margin on top, for a wall clock
// that steps forward by up to that much while the ID is held.
func (c *Client) markFrom(sent time.Time) time.Time {
	return sent.Round(0).Add(c.cfg.ttl)
}
