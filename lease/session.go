package lease

import (
	"sync"
	"time"

	"cloud.google.com/go/spanner"
)

// session is a Client's presence in Spanner: one row in the sessions table
// that every lease of the Client names, renewed once per interval for all of
// them. A lease lives in Spanner exactly as long as its session does.
//
// Locally a session has one deadline on the monotonic clock, set only from
// writes of its row that the Client saw commit: every lease of a session
// therefore has a deadline, and when it passes every lease of the session is
// lost. A session that ends is never written again, except to expire it (a
// new one, with a new ID, takes its place), so a lease presumed lost never
// comes back to life.
//
// Its row is written only by blind writes (the insert that creates it, the
// renewals, the tombstone that expires it), and no read-write transaction
// reads it: rivals and the Client itself learn whether a session is live
// from strong reads outside their transactions, which take no lock. So no
// transaction can make a renewal wait. The price is that a renewal could
// commit after a rival saw the session expired; Spanner's commit timestamps
// reveal that (see confirm), and the session then ends as if its deadline
// had passed, which locally it had.
type session struct {
	id  string
	cfg config

	mu    sync.Mutex
	state sessionState
	// resolved is closed when a creation in flight is resolved.
	resolved chan struct{}
	deadline time.Time // monotonic; set once active
	// lastCommit is the commit timestamp of the last write of the row the
	// Client saw commit: Spanner's clock, compared only with Spanner's.
	lastCommit time.Time
	timer      *time.Timer
	onDeadline func(*session)
	// letGos are leases of this session whose owners let go while their
	// release did not reach Spanner; the keeper clears them (keeper.go).
	letGos map[leaseKey]letGo
	// leaves are names whose lines may hold an entry of this session that
	// no caller waits in (its leave failed, or its enqueue's outcome was
	// never learnt); the keeper takes such entries out.
	leaves map[string]bool
	// cursor rotates renewals through more leases than one renewal checks.
	cursor int
	// reason is why it ended, when a loss ended it.
	reason lossReason
	// extended, when not nil, is closed when the deadline next moves
	// later, or when the session ends (see untilExtended).
	extended chan struct{}
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

func newSession(cfg config, onDeadline func(*session)) *session {
	return &session{id: randomHex(16), cfg: cfg, onDeadline: onDeadline, letGos: map[leaseKey]letGo{}, leaves: map[string]bool{}}
}

// role is what an acquiring transaction does with its session's row.
type role int

const (
	// joinLive: the session is live and not due for renewal; the
	// transaction does not touch its row.
	joinLive role = iota
	// joinRefresh: the session has idled and its deadline is near, so the
	// transaction also renews the row (a blind write): a new lease starts
	// with (close to) a full TTL.
	joinRefresh
	// create: the transaction inserts the row (a blind write, which fails
	// if the row exists).
	create
)

// writes reports whether a transaction in this role writes the session row.
func (r role) writes() bool { return r != joinLive }

// write is the mutation of the session row that a transaction in role r,
// begun at sent, makes: none, an insert, or a renewal.
func (s *session) write(r role, holderID string, sql statements, sent time.Time) *spanner.Mutation {
	switch r {
	case create:
		return spanner.Insert(sql.sessions,
			[]string{"session_id", "holder_id", "ttl_ms", "renewed_at", "high_water"},
			[]any{s.id, holderID, s.cfg.ttl.Milliseconds(), spanner.CommitTimestamp, s.cfg.markFrom(sent)})
	case joinRefresh:
		return sql.sessionRenewal(s.id, s.cfg.markFrom(sent))
	}
	return nil
}

// confirm records that a transaction in role r, begun at sent, committed at
// commitTs (Spanner's clock), and reports whether whatever it wrote lives
// within the session's life as the Client knows it.
//
// A write that names the session, or renews it, committed more than
// TTL - margin after the last write of the row the Client saw commit may
// have come after the session expired in Spanner (unseen writes between
// them could only have lived within that span): a rival may have taken its
// leases meanwhile. Such a commit confirms nothing and ends the session;
// the local deadline, counted from the older write, has passed by then
// anyway. A creation confirms the session.
func (s *session) confirm(r role, sent, commitTs time.Time) bool {
	s.mu.Lock()
	if r == create && s.state == sessionCreating {
		s.state = sessionActive
		s.lastCommit = commitTs
		close(s.resolved)
		s.mu.Unlock()
		s.extend(sent)
		return true
	}
	ok := s.state == sessionActive && commitTs.Sub(s.lastCommit) < s.cfg.ttl-s.cfg.safetyMargin()
	if ok && r.writes() && commitTs.After(s.lastCommit) {
		s.lastCommit = commitTs
	}
	s.mu.Unlock()
	if ok && r.writes() {
		s.extend(sent)
	}
	return ok
}

// untilExtended returns a channel closed when the session's deadline next
// moves later or the session ends.
func (s *session) untilExtended() <-chan struct{} {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.extended == nil {
		s.extended = make(chan struct{})
		if s.state == sessionEnded {
			close(s.extended)
		}
	}
	return s.extended
}

// signalExtendedLocked wakes the callers of untilExtended; s.mu is held.
func (s *session) signalExtendedLocked() {
	if s.extended != nil {
		close(s.extended)
		s.extended = nil
	}
}

// renewed is confirm for a renewal.
func (s *session) renewed(sent, commitTs time.Time) bool {
	return s.confirm(joinRefresh, sent, commitTs)
}

// extend moves the local deadline to TTL minus the safety margin after
// sent. Spanner's commit timestamp is no earlier than sent, so the session
// cannot expire on Spanner's clock before the local deadline computed from
// it.
func (s *session) extend(sent time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.state != sessionActive {
		return
	}
	d := s.cfg.deadlineFrom(sent)
	if !d.After(s.deadline) {
		return
	}
	s.deadline = d
	s.signalExtendedLocked()
	if s.timer == nil {
		s.timer = time.AfterFunc(time.Until(d), s.checkDeadline)
	} else {
		s.timer.Reset(time.Until(d))
	}
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
	s.onDeadline(s)
}

// begin claims the creation of a new session's row for one acquisition, or
// says how the session may be joined and how long it has left; wait is set
// while another acquisition creates it.
func (s *session) begin() (r role, left time.Duration, wait <-chan struct{}, ended bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	switch s.state {
	case sessionNew:
		s.state, s.resolved = sessionCreating, make(chan struct{})
		return create, 0, nil, false
	case sessionCreating:
		return 0, 0, s.resolved, false
	case sessionActive:
		// Renewals keep a session with leases above half a TTL; only an idle
		// session falls below it, and is renewed by the acquisition that
		// joins it.
		left := time.Until(s.deadline)
		if left < s.cfg.ttl/2 {
			return joinRefresh, left, nil, false
		}
		return joinLive, left, nil, false
	}
	return 0, 0, nil, true
}

// notCreated records that a creating transaction certainly did not write
// the row (it rolled back, or failed before its commit was sent), so the
// next acquisition may create the session under the same ID. It does
// nothing once the creation was confirmed or the session ended.
func (s *session) notCreated() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.state == sessionCreating {
		s.state = sessionNew
		close(s.resolved)
	}
}

// addLetGo records a lease of s to clear later; it reports false when s
// has ended, since its rows then expire with it.
func (s *session) addLetGo(g letGo) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.state == sessionEnded {
		return false
	}
	s.letGos[g.leaseKey] = g
	return true
}

// hasLetGo reports whether a let-go of key is waiting.
func (s *session) hasLetGo(key leaseKey) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	_, ok := s.letGos[key]
	return ok
}

// addLeaves records names whose lines hold entries of s to take out; it
// reports false when s has ended, since its entries die with it.
func (s *session) addLeaves(names []string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.state == sessionEnded {
		return false
	}
	for _, n := range names {
		s.leaves[n] = true
	}
	return true
}

// takeLeaves removes and returns up to n names to leave.
func (s *session) takeLeaves(n int) []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	var names []string
	for name := range s.leaves {
		if len(names) == n {
			break
		}
		names = append(names, name)
		delete(s.leaves, name)
	}
	return names
}

// pendingLetGos returns up to n let-goes waiting to be cleared.
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

// dropLetGo forgets g, unless it was recorded again meanwhile.
func (s *session) dropLetGo(g letGo) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.letGos[g.leaseKey] == g {
		delete(s.letGos, g.leaseKey)
	}
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

// end marks the session over, once; it reports whether this call did it,
// and whether its row may still be live in Spanner (it was created, or
// its creation's outcome is unknown).
func (s *session) end(reason lossReason) (ended, mayBeLive bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	switch s.state {
	case sessionEnded:
		return false, false
	case sessionCreating:
		close(s.resolved)
	}
	mayBeLive = s.state == sessionActive || s.state == sessionCreating
	s.state = sessionEnded
	s.reason = reason
	s.signalExtendedLocked()
	if s.timer != nil {
		s.timer.Stop()
	}
	clear(s.letGos) // they expire with the session
	clear(s.leaves)
	return true, mayBeLive
}

func (s *session) isEnded() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.state == sessionEnded
}

// live reports whether the session's local deadline has not passed, so its
// leases may be used. It does not wait for the deadline's timer, which a
// loaded machine may run late.
func (s *session) live() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.state == sessionActive && time.Now().Before(s.deadline)
}

// remaining is how long until the local deadline; 0 once it has passed or
// the session is not active.
func (s *session) remaining() time.Duration {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.state != sessionActive {
		return 0
	}
	return max(0, time.Until(s.deadline))
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

// errSessionGone ends a transaction that found its session's row gone from
// Spanner or, for a session being created, already present.
type errSessionGone struct{ s *session }

func (e errSessionGone) Error() string { return "lease: session " + e.s.id + " is gone from Spanner" }
