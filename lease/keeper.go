package lease

import (
	"cmp"
	"context"
	"errors"
	"log/slog"
	"slices"
	"sync"
	"time"
)

// maxSyncBatch bounds the leases one renewal checks and the let-goes one
// transaction clears, and maxRestamps the lock rows one restamp stamps, so
// that their parameters and commits stay far below Spanner's limits however
// many leases a Client holds. A renewal extends every lease of the session
// whether or not it checked it; the checks rotate, so each lease is checked
// every few renewals.
var (
	maxSyncBatch = 1000
	maxRestamps  = 1000
)

// keeper keeps a Client's leases alive: it owns the Client's current
// session, the leases that name it, and the loop that renews it once per
// interval. Acquisitions join its session and register what they acquire;
// the keeper never calls back into acquisition.
type keeper struct {
	st  *store
	cfg config
	log *slog.Logger
	tel telemetry

	// background is cancelled by close; the keeper's transactions run
	// under it.
	background context.Context
	stop       context.CancelFunc
	// kick wakes the renewal loop when a lease is short of time; clearKick
	// wakes the clearing loop when a let-go or a leave is waiting.
	kick, clearKick chan struct{}

	mu      sync.Mutex
	closed  bool
	sess    *session
	leases  map[*Lease]struct{}
	running bool
	// clearing is whether the clearing loop (line.go) runs: from the first
	// let-go or leave left to the keeper until close.
	clearing bool
	loop     sync.WaitGroup
	// places are, by name, the places in line of this Client's callers
	// that wait: the session must live while they wait, leases or not, and
	// an entry of this Client's that is not among them is one nobody waits
	// in (its enqueue's outcome was never learnt, or its leave failed).
	places map[string]map[queueKey]struct{}
	// expiring are ended sessions whose rows are being written as expired
	// in the background; Close writes the ones still pending itself.
	expiring   map[*session]struct{}
	expiringWG sync.WaitGroup
	// ended are this Client's recent sessions that ended: a live row that
	// names one is an orphan nothing uses. dead are other sessions that
	// Spanner was seen to have expired: a lease that names one is free
	// (see session.confirm for why that holds even if a late renewal
	// lands).
	ended, dead *recentIDs
}

func newKeeper(st *store, cfg config, log *slog.Logger, tel telemetry) *keeper {
	background, stop := context.WithCancel(context.Background())
	k := &keeper{st: st, cfg: cfg, log: log, tel: tel, background: background, stop: stop,
		kick: make(chan struct{}, 1), clearKick: make(chan struct{}, 1), leases: map[*Lease]struct{}{}, expiring: map[*session]struct{}{}, places: map[string]map[queueKey]struct{}{},
		ended: newRecentIDs(1000), dead: newRecentIDs(10000)}
	k.sess = newSession(cfg, k.deadlinePassed)
	return k
}

// join returns the session an acquisition should use and its role in it,
// waiting while another acquisition of this Client creates the session.
func (k *keeper) join(ctx context.Context) (*session, role, error) {
	for {
		s, err := k.current()
		if err != nil {
			return nil, 0, err
		}
		r, left, wait, ended := s.begin()
		switch {
		case ended:
			continue // current starts another
		case r == joinRefresh && left < k.cfg.ttl/4 && !k.holdsOn(s):
			// So close to its deadline that the renewal could commit after
			// it (the session would then end, and the lease be born lost):
			// an idle session is left to expire, and a new one starts.
			k.endSession(s, lossDeadline, "it idled to within a quarter TTL of its deadline")
			continue
		case wait != nil:
			select {
			case <-wait:
			case <-ctx.Done():
				return nil, 0, ctx.Err()
			case <-k.background.Done():
				return nil, 0, ErrClosed
			}
		default:
			return s, r, nil
		}
	}
}

// current returns the session new acquisitions use, starting a new one if
// the last ended.
func (k *keeper) current() (*session, error) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.closed {
		return nil, ErrClosed
	}
	if k.sess.isEnded() {
		k.sess = newSession(k.cfg, k.deadlinePassed)
	}
	return k.sess, nil
}

// holdsOn reports whether any lease or let-go still names s.
func (k *keeper) holdsOn(s *session) bool {
	if len(s.pendingLetGos(1)) > 0 {
		return true
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	for l := range k.leases {
		if l.sess == s {
			return true
		}
	}
	return false
}

// owns reports whether a session ID is one of this Client's, live or ended.
func (k *keeper) owns(id string) bool {
	k.mu.Lock()
	cur := k.sess.id
	k.mu.Unlock()
	return id == cur || k.ended.has(id)
}

// ownLive reports whether a session ID is one of this Client's, and if so
// whether it is live: the current session until it ends.
func (k *keeper) ownLive(id string) (live, own bool) {
	k.mu.Lock()
	cur := k.sess
	k.mu.Unlock()
	if id == cur.id {
		return !cur.isEnded(), true
	}
	return false, k.ended.has(id)
}

// register records a newly held lease so that it is renewed; it reports
// false if the keeper closed meanwhile. A lease whose session has less than
// half a TTL left (its acquisition was slow) gets a renewal at once.
func (k *keeper) register(l *Lease) bool {
	k.mu.Lock()
	if k.closed {
		k.mu.Unlock()
		return false
	}
	k.leases[l] = struct{}{}
	k.startLocked()
	k.mu.Unlock()
	if l.sess.remaining() < k.cfg.ttl/2 {
		k.wake()
	}
	return true
}

// waiting records that a caller took place in the lines of names (joined)
// or left it.
func (k *keeper) waiting(names []string, place queueKey, joined bool) {
	k.mu.Lock()
	defer k.mu.Unlock()
	for _, name := range names {
		switch {
		case joined && k.places[name] == nil:
			k.places[name] = map[queueKey]struct{}{place: {}}
		case joined:
			k.places[name][place] = struct{}{}
		default:
			delete(k.places[name], place)
			if len(k.places[name]) == 0 {
				delete(k.places, name)
			}
		}
	}
	if joined {
		k.startLocked()
	}
}

// unheld reports whether a waiter of name's line is this Client's and no
// caller of it waits there: an entry to take out, which holds up nobody.
func (k *keeper) unheld(name string, w waiterRow) bool {
	if !k.owns(w.key.session) {
		return false
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	_, held := k.places[name][w.key]
	return !held
}

// forget drops an ended lease.
func (k *keeper) forget(l *Lease) {
	k.mu.Lock()
	defer k.mu.Unlock()
	delete(k.leases, l)
}

// held returns the leases the keeper renews.
func (k *keeper) held() []*Lease {
	k.mu.Lock()
	defer k.mu.Unlock()
	leases := make([]*Lease, 0, len(k.leases))
	for l := range k.leases {
		leases = append(leases, l)
	}
	return leases
}

func (k *keeper) startLocked() {
	if k.running || k.closed {
		return
	}
	k.running = true
	k.loop.Add(1)
	go k.run()
}

func (k *keeper) wake() { nudge(k.kick) }

func (k *keeper) wakeClear() { nudge(k.clearKick) }

// nudge wakes whoever waits on c, unless a wake is already pending.
func nudge(c chan struct{}) {
	select {
	case c <- struct{}{}:
	default:
	}
}

// run renews the current session, and so all its leases, once per interval.
// A failed renewal is retried with backoff; if the local deadline passes
// meanwhile the session's timer loses its leases, so a transient error never
// ends a lease early. An idle session is left to expire: the next
// acquisition renews it, or starts a new one.
func (k *keeper) run() {
	k.repeat(k.kick, func(failures int) error {
		s, leases, waiting := k.work()
		if len(leases) == 0 && !waiting {
			return nil
		}
		err := k.renew(s, leases)
		if err != nil && k.background.Err() == nil {
			k.log.Warn("renewal failed; retrying", "leases", len(leases), "failures", failures+1, "err", err)
		}
		return err
	})
}

// repeat runs step once per renewal interval, and at once when kick is
// signalled, until close; after a failure it runs step again with backoff,
// from half an interval, passing the failures in a row so far. It is the
// loop of each of the keeper's background tasks (run, clearLoop), which run
// apart so that neither waits for the other.
func (k *keeper) repeat(kick <-chan struct{}, step func(failures int) error) {
	defer k.loop.Done()
	t := time.NewTimer(k.cfg.renewInterval)
	defer t.Stop()
	failures := 0
	for {
		select {
		case <-k.background.Done():
			return
		case <-t.C:
		case <-kick:
		}
		if err := step(failures); err != nil {
			failures++
			t.Reset(backoff(failures, k.cfg.renewInterval/2))
			continue
		}
		failures = 0
		t.Reset(k.cfg.renewInterval)
	}
}

// work returns the current session, the leases its next renewal checks (at
// most maxSyncBatch), and whether a caller of this Client waits in a line.
func (k *keeper) work() (*session, []*Lease, bool) {
	k.mu.Lock()
	s := k.sess
	var leases []*Lease
	for l := range k.leases {
		if l.sess == s && !l.isEnded() {
			leases = append(leases, l)
		}
	}
	waiting := len(k.places) > 0
	k.mu.Unlock()
	return s, s.rotate(leases, maxSyncBatch), waiting
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

// renew extends s in one transaction, losing the leases it finds gone. If
// the session's row is gone from Spanner, or the renewal committed too late
// to count (session.confirm), every lease of the session is lost; if the
// transaction fails, nothing is concluded and nothing extended.
func (k *keeper) renew(s *session, leases []*Lease) error {
	ctx, cancel := context.WithTimeout(k.background, k.cfg.renewTimeout())
	defer cancel()
	ctx, span := k.tel.start(ctx, "Renew", attrLeases.Int(len(leases)))
	began := time.Now()
	keys := make([]leaseKey, len(leases))
	for i, l := range leases {
		keys[i] = l.key()
	}
	out, err := k.st.renew(ctx, s, keys, func() (context.Context, context.CancelFunc) {
		// The renewal's span, not its deadline: the check gets a bound
		// of its own.
		return context.WithTimeout(context.WithoutCancel(ctx), k.cfg.renewTimeout())
	})
	var gone errSessionGone
	sessionGone := errors.As(err, &gone)
	if sessionGone {
		err = nil // a finding, not a failure: its leases are lost below
	} else if err != nil {
		err = k.st.explain(err)
	}
	// The renewal is recorded before any lease it finds lost ends, so
	// whoever watches a lease's Context finds the renewal recorded too.
	k.tel.renewed(ctx, time.Since(began))
	outcome := "renewed"
	if err != nil {
		outcome = resultError
	}
	end(span, outcome, err)
	switch {
	case sessionGone:
		k.endSession(s, lossSessionGone, "a renewal found its session gone from Spanner")
		return nil
	case err != nil:
		return err
	}
	// Leases found taken end before the deadline moves, so nothing uses
	// them on the strength of this renewal.
	var stale []leaseKey
	for _, l := range leases {
		o, ok := out.owned[l.key()]
		if !ok {
			l.lose(lossTaken, "a renewal found it released, expired or held by another")
			continue
		}
		if o.stale && len(stale) < maxRestamps {
			stale = append(stale, l.key())
		}
	}
	if !s.renewed(out.sent, out.commitTs) {
		k.endSession(s, lossDeadline, "a renewal committed after the session could have expired in Spanner")
		return nil
	}
	if len(stale) > 0 {
		rctx, rcancel := context.WithTimeout(k.background, k.cfg.renewTimeout())
		defer rcancel()
		if err := k.st.restamp(rctx, s, stale); err != nil && k.background.Err() == nil {
			// Cleanup deletes rows days old; the next renewal tries again.
			k.log.Warn("restamping held lock rows failed; retrying at the next renewal", "rows", len(stale), "err", k.st.explain(err))
		}
	}
	return nil
}

// deadlinePassed ends a session whose local deadline passed.
func (k *keeper) deadlinePassed(s *session) {
	k.endSession(s, lossDeadline, "no renewal was confirmed before the local deadline")
}

// endSession ends s and loses every lease that names it. Unless Spanner
// said the row is gone, the row is written as expired in the background, so
// that the leases it still makes live in Spanner (a renewal whose reply was
// lost may have extended it) are free for others at once rather than
// within a TTL.
func (k *keeper) endSession(s *session, reason lossReason, why string) {
	ended, mayBeLive := s.end(reason)
	if !ended {
		return
	}
	k.ended.add(s.id)
	if mayBeLive && reason != lossSessionGone {
		k.expireInBackground(s)
	}
	for _, l := range k.held() {
		if l.sess == s {
			l.lose(reason, why)
		}
	}
}

// abandon gives up on a session whose row's fate is unknown: a creating
// commit whose outcome could not be confirmed. Guessing either way is
// unsafe (a lease without a deadline, or a second insert of the row), so
// the session ends, its row is written as expired, and the Client starts
// another.
func (k *keeper) abandon(s *session, why string) {
	if ended, _ := s.end(lossSessionGone); ended {
		k.ended.add(s.id)
		k.expireInBackground(s)
		for _, l := range k.held() {
			if l.sess == s {
				l.lose(lossSessionGone, why)
			}
		}
	}
}

// expireInBackground writes s as expired, retrying transient failures for a
// TTL (by then it has expired on its own), or until Close, which writes it
// itself.
func (k *keeper) expireInBackground(s *session) {
	k.mu.Lock()
	if k.closed {
		k.mu.Unlock()
		return
	}
	k.expiring[s] = struct{}{}
	k.expiringWG.Add(1)
	k.mu.Unlock()
	go func() {
		defer k.expiringWG.Done()
		ctx, cancel := context.WithTimeout(k.background, k.cfg.ttl)
		defer cancel()
		for attempt := 0; ; attempt++ {
			tctx, tcancel := context.WithTimeout(ctx, k.cfg.callTimeout())
			err := k.st.expireSession(tctx, s.id, k.cfg.holderID)
			tcancel()
			if err == nil || !transient(err) || ctx.Err() != nil {
				if err != nil && k.background.Err() == nil {
					k.log.Warn("expiring an ended session failed; it expires within the TTL", "err", k.st.explain(err))
				}
				if err == nil || k.background.Err() == nil {
					k.mu.Lock()
					delete(k.expiring, s)
					k.mu.Unlock()
				}
				return
			}
			t := time.NewTimer(backoff(attempt, k.cfg.renewInterval))
			select {
			case <-ctx.Done():
			case <-t.C:
			}
			t.Stop()
		}
	}()
}

// close stops the loop and its background writes, and returns the session,
// the leases it renewed, and the IDs of ended sessions not yet written as
// expired, for Client.Close to release.
func (k *keeper) close() (*session, []*Lease, []string) {
	k.mu.Lock()
	k.closed = true
	s := k.sess
	k.mu.Unlock()
	k.stop()
	k.loop.Wait()
	k.expiringWG.Wait()
	k.mu.Lock()
	var pending []string
	for e := range k.expiring {
		pending = append(pending, e.id)
	}
	k.mu.Unlock()
	return s, k.held(), pending
}

// recentIDs remembers up to n IDs, forgetting the oldest first.
type recentIDs struct {
	mu    sync.Mutex
	n     int
	set   map[string]struct{}
	order []string
}

func newRecentIDs(n int) *recentIDs { return &recentIDs{n: n, set: map[string]struct{}{}} }

func (r *recentIDs) add(id string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if _, ok := r.set[id]; ok {
		return
	}
	if len(r.order) == r.n {
		delete(r.set, r.order[0])
		r.order = r.order[1:]
	}
	r.set[id] = struct{}{}
	r.order = append(r.order, id)
}

func (r *recentIDs) has(id string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	_, ok := r.set[id]
	return ok
}
