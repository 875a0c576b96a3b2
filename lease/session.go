package lease

import (
	"sync"
	"time"

	"cloud.google.com/go/spanner"
)

// session is a Client's presence in Spanner: one row in the sessions table
// that every lease of the Client names, renewed once per interval for all
// of them. It has one local deadline on the monotonic clock; when that
// passes, or a renewal finds the row expired, every lease of the session is
// lost, and the Client starts a new session with a new ID, so that leases
// presumed lost can never come back to life.
type session struct {
	c  *Client
	id string

	mu sync.Mutex
	// created is set once a transaction that inserted the row committed.
	created  bool
	ended    bool
	deadline time.Time // monotonic
	timer    *time.Timer
}

func newSession(c *Client) *session {
	return &session{c: c, id: randomHex(16)}
}

// extend records a renewal (or the creation) of the row by a transaction
// that began at sent. Spanner's commit timestamp is no earlier than that, so
// the session cannot expire on Spanner's clock before the local deadline.
func (s *session) extend(sent time.Time, created bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.ended {
		return
	}
	s.created = s.created || created
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

func (s *session) checkDeadline() {
	s.mu.Lock()
	if wait := time.Until(s.deadline); wait > 0 && !s.ended {
		// A renewal moved the deadline after this timer fired.
		s.timer.Reset(wait)
		s.mu.Unlock()
		return
	}
	s.mu.Unlock()
	s.c.endSession(s, "no renewal was confirmed before the local deadline")
}

// end marks the session over, once; it reports whether this call did it.
func (s *session) end() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.ended {
		return false
	}
	s.ended = true
	if s.timer != nil {
		s.timer.Stop()
	}
	return true
}

func (s *session) state() (created, ended bool, deadline time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.created, s.ended, s.deadline
}

// currentSession returns the session new acquisitions use, starting a new
// one if the last ended.
func (c *Client) currentSession() *session {
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, ended, _ := c.sess.state(); ended {
		c.sess = newSession(c)
	}
	return c.sess
}

// endSession ends s and loses every lease that names it.
func (c *Client) endSession(s *session, why string) {
	if !s.end() {
		return
	}
	c.mu.Lock()
	leases := c.leasesLocked()
	c.mu.Unlock()
	for _, l := range leases {
		if l.sess == s {
			l.lose(why)
		}
	}
}

// errSessionGone aborts a transaction that found its session expired or
// deleted in Spanner; the caller ends the session and tries again.
type errSessionGone struct{ s *session }

func (e errSessionGone) Error() string { return "lease: session " + e.s.id + " expired" }

// joinSession decides, inside an acquiring transaction, what to do about the
// acquirer's session given whether Spanner has it live (self is NULL when it
// has no row): nothing, insert it, or give up on it.
func (c *Client) joinSession(tx *spanner.ReadWriteTransaction, s *session, self spanner.NullBool, sent time.Time) (creating bool, err error) {
	created, _, _ := s.state()
	switch {
	case self.Valid && self.Bool:
		return false, nil
	case self.Valid || created:
		// Expired, or deleted after we created it: leases naming it may
		// have been taken, so it must not come back.
		return false, errSessionGone{s}
	}
	return true, tx.BufferWrite([]*spanner.Mutation{spanner.Insert(c.sql.sessions,
		[]string{"session_id", "holder_id", "ttl_ms", "renewed_at", "high_water"},
		[]any{s.id, c.cfg.holderID, c.cfg.ttl.Milliseconds(), spanner.CommitTimestamp, c.wallDeadlineFrom(sent)})})
}

// deadlineFrom is when a session renewed (or created) by a transaction that
// began at sent is presumed lost, on the monotonic clock.
func (c *Client) deadlineFrom(sent time.Time) time.Time {
	return sent.Add(c.cfg.ttl - c.cfg.safetyMargin())
}

// wallDeadlineFrom is deadlineFrom on this process's wall clock, as recorded
// for worker IDs.
func (c *Client) wallDeadlineFrom(sent time.Time) time.Time {
	return c.deadlineFrom(sent).Round(0)
}
