package lease_test

import (
	"context"
	"fmt"
	"regexp"
	"strings"
	"sync"
	"time"

	"cloud.google.com/go/spanner/apiv1/spannerpb"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/structpb"
)

// lockModel adds to the emulator what it does not do: Spanner's locking.
// The emulator runs one read-write transaction at a time and never makes a
// transaction wait for another's lock. Spanner holds a shared lock on every
// row a read-write transaction reads until that transaction ends: commit,
// rollback, or, when its end is lost (its client paused, cut off, or gave
// up without a rollback reaching Spanner), Spanner aborting it as idle
// about 10 s after its last request (spannerIdleAbort), however close the
// client's deadline was. A younger transaction that writes such a row
// waits for it, while an older one wounds (aborts) the reader. A Commit
// takes exclusive locks on the rows it writes; a read of such a row waits
// until the Commit ends, and an older reader wounds a Commit still waiting
// for its locks. The model sees every RPC of the spanner Clients that share
// it (through faults), records each transaction's read set and write set
// (table and key), holds a Commit back while an older transaction holds a
// shared lock on a row it writes, and holds a statement back while a
// Commit holds an exclusive lock on a row it reads, each up to the
// waiter's deadline. It records every such wait.
//
// Exclusive locks are held, conservatively, from the moment a Commit
// reaches Spanner (while it waits for other transactions' shared locks
// too) until it is answered; a Commit that never reached Spanner takes
// none. Strong and stale reads outside transactions take no lock and are
// not held back: on Spanner they wait only for a commit that is being
// applied, which Spanner finishes without its client.
//
// Read sets are taken from requests: a Read names its keys; a query's are
// the tables it mentions, each at the keys its string parameters name (a
// lock or pool name), or the whole table when it has none; the sessions
// table is locked whole, since which session rows a join reads depends on
// the data, but for a read driven by the session IDs it names. That over-approximates Spanner, which locks only the
// rows a query reads: any wait the model reports could happen on Spanner
// for some data, and no wait Spanner could impose is missed.
type lockModel struct {
	mu    sync.Mutex
	txns  map[string]*modelTxn // by transaction ID
	last  map[string]*modelTxn // by Spanner session: its latest transaction
	waits []modelWait
	// commits counts the transactions that committed, by tag.
	commits map[string]int
	// idleAbort is how long after its last request a transaction whose
	// end was lost keeps its locks: spannerIdleAbort unless a test asks
	// for a shorter stand-in.
	idleAbort time.Duration
}

// spannerIdleAbort is how long Spanner lets a read-write transaction lie
// idle before it aborts it and frees its locks.
const spannerIdleAbort = 10 * time.Second

func newLockModel() *lockModel {
	return &lockModel{txns: map[string]*modelTxn{}, last: map[string]*modelTxn{}, commits: map[string]int{},
		idleAbort: spannerIdleAbort}
}

// renewalsCommitted returns how many renewal transactions committed.
func (m *lockModel) renewalsCommitted() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.commits["spannerlock-renew"]
}

// modelTxn is one read-write transaction as the model sees it.
type modelTxn struct {
	id      string
	session string
	tag     string
	// began orders transactions for wound-wait; a retry keeps its
	// predecessor's.
	began    time.Time
	reads    []modelRow
	writes   []modelRow
	deadline time.Time
	ended    bool
	aborted  bool
	done     chan struct{}
	// stuck is set when a fault cut the transaction off from Spanner: its
	// later RPCs are not sent and its locks last until Spanner aborts it
	// as idle.
	stuck bool
	// lastActive is when Spanner last heard from the transaction: idle
	// aborts count from it.
	lastActive time.Time
	// committing is set while its Commit is in Spanner's hands: it holds
	// exclusive locks on its writes. applying is set once the Commit has
	// every lock it waited for; an older reader can no longer wound it.
	committing, applying bool
	// cc reaches the emulator, to roll the transaction back there when the
	// model ends it at its deadline.
	cc grpc.ClientConnInterface
	// heldUntil is when the model ended it as idle, with its locks held
	// to the end: nobody committed or rolled it back.
	heldUntil time.Time
}

// modelRow is a row, or a set of rows, of one table: key "" is the whole
// table; a permit key "name/" covers every slot of a pool.
type modelRow struct{ table, key string }

func (r modelRow) String() string {
	if r.key == "" {
		return r.table + "(all rows)"
	}
	return r.table + "(" + r.key + ")"
}

// covers reports whether a lock on r covers a write of w.
func (r modelRow) covers(w modelRow) bool {
	if r.table != w.table {
		return false
	}
	return r.key == "" || w.key == "" || r.key == w.key ||
		strings.HasSuffix(r.key, "/") && strings.HasPrefix(w.key, r.key) ||
		strings.HasSuffix(w.key, "/") && strings.HasPrefix(r.key, w.key)
}

// modelWait is one wait a write made for a reader's shared lock, or a read
// for a Commit's exclusive lock.
type modelWait struct {
	waiter, holder string // transaction tags
	row            modelRow
	waited         time.Duration
	// exclusive says a read waited for a Commit's exclusive lock.
	exclusive bool
	// timedOut says the waiter's deadline came first.
	timedOut bool
}

func (w modelWait) String() string {
	mode := "shared"
	if w.exclusive {
		mode = "exclusive"
	}
	out := fmt.Sprintf("%s waited %s for %s's %s lock on %s", w.waiter, w.waited.Round(time.Millisecond), w.holder, mode, w.row)
	if w.timedOut {
		out += " until its deadline"
	}
	return out
}

// waitsBy returns the waits of transactions tagged tag.
func (m *lockModel) waitsBy(tag string) []modelWait {
	m.mu.Lock()
	defer m.mu.Unlock()
	var out []modelWait
	for _, w := range m.waits {
		if w.waiter == tag {
			out = append(out, w)
		}
	}
	return out
}

// tagOf resolves the transaction tag of an RPC that carries none: a
// Rollback names its transaction; a BeginTransaction (a retry after an
// abort) runs on the session of the transaction it retries.
func (m *lockModel) tagOf(req any) string {
	if m == nil {
		return ""
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	switch r := req.(type) {
	case *spannerpb.RollbackRequest:
		if t := m.txns[string(r.GetTransactionId())]; t != nil {
			return t.tag
		}
	case *spannerpb.BeginTransactionRequest:
		// A retry begins on the session of the attempt Spanner aborted; any
		// other BeginTransaction is of a transaction not yet known.
		if t := m.last[r.GetSession()]; t != nil && t.aborted {
			return t.tag
		}
	}
	return ""
}

// selectorOf returns a request's transaction selector and session.
func selectorOf(req any) (*spannerpb.TransactionSelector, string) {
	switch r := req.(type) {
	case *spannerpb.ExecuteSqlRequest:
		return r.GetTransaction(), r.GetSession()
	case *spannerpb.ReadRequest:
		return r.GetTransaction(), r.GetSession()
	case *spannerpb.ExecuteBatchDmlRequest:
		return r.GetTransaction(), r.GetSession()
	}
	return nil, ""
}

// pending is what the model knows of an RPC before it is sent: the
// transaction it belongs to, if read-write, and whether it must not reach
// Spanner (its transaction was wounded or is stuck).
type pending struct {
	txn *modelTxn
	// begins is set for a statement that begins its transaction inline:
	// the response names it.
	begins bool
	refuse error
}

// before records a request about to be sent. For a Commit it waits while
// an older transaction holds a lock on a row the Commit writes, and wounds
// younger ones; it returns an error when the RPC must fail unsent.
func (m *lockModel) before(ctx context.Context, req any, tag string, cc grpc.ClientConnInterface) pending {
	if m == nil {
		return pending{}
	}
	p := m.record(ctx, req, tag)
	if p.txn != nil {
		m.mu.Lock()
		if p.txn.cc == nil {
			p.txn.cc = cc
			m.expireAtDeadline(p.txn)
		}
		m.mu.Unlock()
	}
	return p
}

// record is before without the emulator connection.
func (m *lockModel) record(ctx context.Context, req any, tag string) pending {
	deadline, _ := ctx.Deadline()
	switch r := req.(type) {
	case *spannerpb.ExecuteSqlRequest, *spannerpb.ReadRequest, *spannerpb.ExecuteBatchDmlRequest:
		sel, session := selectorOf(req)
		m.mu.Lock()
		var t *modelTxn
		begins := false
		switch {
		case sel.GetBegin().GetReadWrite() != nil:
			t = m.newTxn(session, tag, deadline)
			begins = true
		case sel.GetId() != nil:
			t = m.txns[string(sel.GetId())]
		}
		if t == nil {
			m.mu.Unlock()
			return pending{} // a read-only or single-use read takes no lock
		}
		if err := t.refusal(); err != nil {
			m.mu.Unlock()
			return pending{txn: t, refuse: err}
		}
		t.extend(deadline)
		t.lastActive = time.Now()
		if tag != "" {
			t.tag = tag // a transaction begun explicitly learns its tag here
		}
		reads, writes := rowsOf(req)
		t.reads = append(t.reads, reads...)
		t.writes = append(t.writes, writes...)
		m.mu.Unlock()
		if err := m.waitToRead(ctx, t, reads); err != nil {
			return pending{txn: t, begins: begins, refuse: err}
		}
		return pending{txn: t, begins: begins}
	case *spannerpb.BeginTransactionRequest:
		if r.GetOptions().GetReadWrite() == nil {
			return pending{}
		}
		m.mu.Lock()
		defer m.mu.Unlock()
		return pending{txn: m.newTxn(r.GetSession(), tag, deadline), begins: true}
	case *spannerpb.RollbackRequest:
		m.mu.Lock()
		defer m.mu.Unlock()
		t := m.txns[string(r.GetTransactionId())]
		if t == nil {
			return pending{}
		}
		if err := t.refusal(); err != nil {
			return pending{txn: t, refuse: err}
		}
		return pending{txn: t}
	case *spannerpb.CommitRequest:
		m.mu.Lock()
		var t *modelTxn
		if id := r.GetTransactionId(); id != nil {
			t = m.txns[string(id)]
		} else {
			// A single-use transaction (Apply at least once): writes only.
			t = m.newTxn(r.GetSession(), tag, deadline)
			t.id = fmt.Sprintf("single-use-%p", t)
			m.txns[t.id] = t
		}
		if t == nil {
			m.mu.Unlock()
			return pending{}
		}
		if err := t.refusal(); err != nil {
			m.mu.Unlock()
			return pending{txn: t, refuse: err}
		}
		t.extend(deadline)
		t.lastActive = time.Now()
		if tag != "" {
			t.tag = tag
		}
		t.writes = append(t.writes, mutationRows(r.GetMutations())...)
		t.committing = true
		m.mu.Unlock()
		if err := m.waitToCommit(ctx, t); err != nil {
			m.mu.Lock()
			t.committing = false
			m.mu.Unlock()
			return pending{txn: t, refuse: err}
		}
		m.mu.Lock()
		t.applying = true
		m.mu.Unlock()
		return pending{txn: t}
	}
	return pending{}
}

func (m *lockModel) newTxn(session, tag string, deadline time.Time) *modelTxn {
	now := time.Now()
	t := &modelTxn{session: session, tag: tag, began: now, lastActive: now, deadline: deadline, done: make(chan struct{})}
	if prev := m.last[session]; prev != nil && prev.aborted && prev.tag == tag {
		t.began = prev.began // Spanner keeps a retried transaction's priority
	}
	m.last[session] = t
	return t
}

// refusal is why an RPC of t must not reach Spanner; m.mu is held.
func (t *modelTxn) refusal() error {
	switch {
	case t.stuck:
		return errNotSent
	case t.aborted:
		return status.Error(codes.Aborted, "model: transaction wounded by an older writer")
	}
	return nil
}

func (t *modelTxn) extend(deadline time.Time) {
	if deadline.After(t.deadline) {
		t.deadline = deadline
	}
}

// after records what a response said: the ID of a transaction begun
// inline or explicitly, or the end of a transaction. ok says Spanner
// answered without error.
func (m *lockModel) after(p pending, method string, ok bool, id []byte) {
	if m == nil || p.txn == nil {
		return
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	t := p.txn
	if p.begins {
		if id == nil {
			t.endLocked(false) // it never began
			return
		}
		t.id = string(id)
		m.txns[t.id] = t
	}
	switch {
	case strings.HasSuffix(method, "/Commit"):
		if ok {
			m.commits[t.tag]++
		}
		t.endLocked(false)
	case strings.HasSuffix(method, "/Rollback"):
		t.endLocked(false)
	case !ok:
		// A statement that failed leaves the transaction open, as Spanner
		// does, unless it aborted it.
	}
}

// answered records Spanner's answer to an RPC that was sent: an abort
// (the emulator's one-at-a-time rule, or a conflict) ends its transaction.
func (m *lockModel) answered(p pending, method string, err error, id []byte) {
	if m == nil || p.txn == nil {
		return
	}
	if status.Code(err) == codes.Aborted {
		m.mu.Lock()
		defer m.mu.Unlock()
		if p.begins && id != nil {
			p.txn.id = string(id)
			m.txns[p.txn.id] = p.txn
		}
		p.txn.endLocked(true)
		return
	}
	m.after(p, method, err == nil, id)
}

// stick cuts t off from Spanner after the current RPC: its later RPCs are
// not sent, and its locks last until Spanner aborts it as idle, as a
// transaction's do on Spanner when its end is lost. A Commit cut off never
// reached Spanner: it takes no exclusive lock. The emulator, which runs
// one transaction at a time and would refuse every other meanwhile, has it
// rolled back through cc at once: only the model keeps its locks.
func (m *lockModel) stick(p pending, cc grpc.ClientConnInterface) {
	if m == nil || p.txn == nil {
		return
	}
	m.mu.Lock()
	t := p.txn
	t.stuck = true
	t.committing, t.applying = false, false
	id, session := t.id, t.session
	m.mu.Unlock()
	abandon(cc, txnRef{session, []byte(id)})
	m.expireWhenIdle(t)
}

// expireWhenIdle ends t, its locks held to the end, once it has been idle
// for m.idleAbort, unless something ended it first.
func (m *lockModel) expireWhenIdle(t *modelTxn) {
	m.mu.Lock()
	d := time.Until(t.lastActive.Add(m.idleAbort))
	m.mu.Unlock()
	time.AfterFunc(max(d, 0), func() {
		m.mu.Lock()
		switch {
		case t.ended:
		case t.committing:
			// A Commit in Spanner's hands is not idle: look again once
			// it has had time to end.
			m.mu.Unlock()
			time.AfterFunc(m.idleAbort/10, func() { m.expireWhenIdle(t) })
			return
		case time.Since(t.lastActive) < m.idleAbort: // a later request moved it
			m.mu.Unlock()
			m.expireWhenIdle(t)
			return
		default:
			t.expireLocked()
		}
		m.mu.Unlock()
	})
}

// expireAtDeadline rolls t back on the emulator at its deadline if nothing
// has ended it by then: a transaction whose Commit or Rollback never
// reached it, or whose ID its client never learnt (the reply of the
// statement that began it was lost), would otherwise stay open there,
// making the emulator refuse or hold up every other for as long as it
// keeps it. In the model it keeps its locks until Spanner would abort it
// as idle, unless a later Rollback ends it. m.mu is held.
func (m *lockModel) expireAtDeadline(t *modelTxn) {
	if t.deadline.IsZero() {
		return
	}
	time.AfterFunc(time.Until(t.deadline), func() {
		m.mu.Lock()
		switch {
		case t.ended:
			m.mu.Unlock()
			return
		case time.Now().Before(t.deadline): // a later RPC extended it
			m.expireAtDeadline(t)
			m.mu.Unlock()
			return
		}
		id, session, cc := t.id, t.session, t.cc
		m.mu.Unlock()
		if !strings.HasPrefix(id, "single-use-") {
			abandon(cc, txnRef{session, []byte(id)})
		}
		m.expireWhenIdle(t)
	})
}

// expireLocked ends t as Spanner's idle abort does, its locks held to the
// end; m.mu is held.
func (t *modelTxn) expireLocked() {
	if t.ended {
		return
	}
	t.heldUntil = time.Now()
	t.endLocked(true)
}

// lockedUntil returns the latest moment a transaction that nobody ended
// held, or holds, a shared lock on row (any row, for the zero row) until Spanner aborted it, or aborts
// it, as idle (zero if none did): until then no writer of the row could
// commit.
func (m *lockModel) lockedUntil(row modelRow) time.Time {
	m.mu.Lock()
	defer m.mu.Unlock()
	var until time.Time
	for _, t := range m.txns {
		if _, ok := t.locks([]modelRow{row}); !ok && row != (modelRow{}) {
			continue
		}
		held := t.heldUntil
		if !t.ended && (t.stuck || !t.deadline.IsZero() && time.Now().After(t.deadline)) {
			// Its end is lost and Spanner has not aborted it yet: it holds
			// the lock until the idle abort.
			held = t.lastActive.Add(m.idleAbort)
		}
		if held.After(until) {
			until = held
		}
	}
	return until
}

// locksFreedAt returns the latest moment any transaction that nobody
// ended held, or holds, a lock until Spanner aborted it, or aborts it, as
// idle (zero if none did): until then any statement of the Client may wait
// for it, as on Spanner, where such a transaction holds its locks for
// about 10 s however short its client's deadline was.
func (m *lockModel) locksFreedAt() time.Time {
	return m.lockedUntil(modelRow{})
}

// unfaulted marks a context whose RPCs the faults interceptor passes
// through untouched: the model's own rollbacks on the emulator.
type unfaulted struct{}

// endLocked ends t and frees its locks; m.mu is held.
func (t *modelTxn) endLocked(aborted bool) {
	if t.ended {
		return
	}
	t.ended, t.aborted = true, aborted
	close(t.done)
}

// waitToCommit holds t's Commit while an older live transaction holds a
// shared lock on a row t writes, wounding younger ones, up to ctx's
// deadline.
func (m *lockModel) waitToCommit(ctx context.Context, t *modelTxn) error {
	for {
		m.mu.Lock()
		if err := t.refusal(); err != nil {
			m.mu.Unlock()
			return err
		}
		var holder *modelTxn
		var on modelRow
		var holderIdle time.Time // read under m.mu: requests move it
		for _, o := range m.txns {
			if o == t || o.ended {
				continue
			}
			if m.idleLocked(o) {
				o.expireLocked() // Spanner has aborted it as idle
				continue
			}
			if r, ok := o.locks(t.writes); ok {
				if o.began.Before(t.began) {
					holder, on = o, r
					if !o.committing {
						holderIdle = o.lastActive.Add(m.idleAbort)
					}
					break
				}
				o.endLocked(true) // wounded: the older writer goes first
			}
		}
		var w modelWait
		if holder != nil {
			w = modelWait{waiter: t.tag, holder: holder.tag, row: on}
		}
		m.mu.Unlock()
		if holder == nil {
			return nil
		}
		var idle <-chan time.Time // nil for a holder that is committing
		if !holderIdle.IsZero() {
			timer := time.NewTimer(time.Until(holderIdle))
			defer timer.Stop()
			idle = timer.C // look again once it is idle, or active since
		}
		if err := m.wait(ctx, w, holder, t, idle); err != nil {
			return err
		}
	}
}

// wait holds t until holder ends, t is wounded, idle fires (nil: never)
// or ctx ends, and records the wait w; it returns DeadlineExceeded if ctx
// ended first, as Spanner answers a statement whose deadline passed while
// it waited for a lock.
func (m *lockModel) wait(ctx context.Context, w modelWait, holder, t *modelTxn, idle <-chan time.Time) error {
	began := time.Now()
	select {
	case <-holder.done:
	case <-idle:
	case <-t.done: // wounded meanwhile
	case <-ctx.Done():
		w.timedOut = true
	}
	w.waited = time.Since(began)
	m.mu.Lock()
	m.waits = append(m.waits, w)
	m.mu.Unlock()
	if !w.timedOut {
		return nil
	}
	if w.exclusive {
		return status.Error(codes.DeadlineExceeded, "model: waited for an exclusive lock until the deadline")
	}
	return status.Error(codes.DeadlineExceeded, "model: waited for a lock until the deadline")
}

// idleLocked reports whether Spanner has aborted o as idle by now; m.mu is
// held.
func (m *lockModel) idleLocked(o *modelTxn) bool {
	return !o.committing && time.Since(o.lastActive) > m.idleAbort
}

// waitToRead holds a statement of t that reads reads while another
// transaction's Commit holds an exclusive lock on one of them, up to ctx's
// deadline. t wounds a Commit still waiting for its locks if t is older,
// as Spanner's wound-wait does; a Commit whose locks are all granted is
// being applied, and t waits for it whatever their ages.
func (m *lockModel) waitToRead(ctx context.Context, t *modelTxn, reads []modelRow) error {
	for {
		m.mu.Lock()
		if err := t.refusal(); err != nil {
			m.mu.Unlock()
			return err
		}
		var holder *modelTxn
		var on modelRow
		for _, o := range m.txns {
			if o == t || o.ended || !o.committing {
				continue
			}
			r, ok := exclusiveOn(o.writes, reads)
			if !ok {
				continue
			}
			if !o.applying && t.began.Before(o.began) {
				o.endLocked(true) // wounded: the older reader goes first
				continue
			}
			holder, on = o, r
			break
		}
		m.mu.Unlock()
		if holder == nil {
			return nil
		}
		w := modelWait{waiter: t.tag, holder: holder.tag, row: on, exclusive: true}
		if err := m.wait(ctx, w, holder, t, nil); err != nil {
			return err
		}
	}
}

// exclusiveOn returns a row of reads that a Commit writing writes holds an
// exclusive lock on.
func exclusiveOn(writes, reads []modelRow) (modelRow, bool) {
	for _, w := range writes {
		for _, r := range reads {
			if r.covers(w) {
				return r, true
			}
		}
	}
	return modelRow{}, false
}

// locks returns a row of writes that t holds a shared lock on.
func (t *modelTxn) locks(writes []modelRow) (modelRow, bool) {
	for _, r := range t.reads {
		for _, w := range writes {
			if r.covers(w) {
				return w, true
			}
		}
	}
	return modelRow{}, false
}

// tablePattern finds the lock tables a statement mentions (the tests' table
// is named locks), quoted or not.
var tablePattern = regexp.MustCompile(`(?i)["` + "`" + `]?\b(locks(?:_permits|_sessions|_waiters)?)\b["` + "`" + `]?`)

// rowsOf returns what a statement or read locks (reads) and, for DML, the
// rows it writes.
func rowsOf(req any) (reads, writes []modelRow) {
	switch r := req.(type) {
	case *spannerpb.ReadRequest:
		for _, k := range r.GetKeySet().GetKeys() {
			reads = append(reads, modelRow{table: strings.ToLower(r.GetTable()), key: keyOf(r.GetTable(), k.GetValues())})
		}
		if r.GetKeySet().GetAll() || len(r.GetKeySet().GetRanges()) > 0 {
			reads = append(reads, modelRow{table: strings.ToLower(r.GetTable())})
		}
		return reads, nil
	case *spannerpb.ExecuteSqlRequest:
		return sqlRows(r.GetSql(), r.GetParams())
	case *spannerpb.ExecuteBatchDmlRequest:
		for _, s := range r.GetStatements() {
			rd, wr := sqlRows(s.GetSql(), s.GetParams())
			reads, writes = append(reads, rd...), append(writes, wr...)
		}
	}
	return reads, writes
}

// sessionIDPattern is the form of a session ID: a string parameter of this
// form names a session, not a row of the lock or permits table.
var sessionIDPattern = regexp.MustCompile(`^[0-9a-f]{32}$`)

// sessionsByKey finds a read of session rows driven by the session IDs a
// statement names (UNNEST(@ids) joined on the key), which reads only
// those rows.
var sessionsByKey = regexp.MustCompile(`(?i)\bsess\.session_id\s*=\s*k\b`)

func sqlRows(sql string, params *structpb.Struct) (reads, writes []modelRow) {
	var keys, sessionKeys []string
	key := func(v *structpb.Value) {
		switch s := v.GetStringValue(); {
		case s == "":
		case sessionIDPattern.MatchString(s):
			sessionKeys = append(sessionKeys, s)
		default:
			keys = append(keys, s)
		}
	}
	for _, v := range params.GetFields() {
		key(v)
		for _, e := range v.GetListValue().GetValues() {
			key(e)
		}
	}
	seen := map[string]bool{}
	for _, m := range tablePattern.FindAllStringSubmatch(sql, -1) {
		table := strings.ToLower(m[1])
		if seen[table] {
			continue
		}
		seen[table] = true
		if table == "locks_sessions" && len(sessionKeys) > 0 && sessionsByKey.MatchString(sql) {
			for _, k := range sessionKeys {
				reads = append(reads, modelRow{table: table, key: k})
			}
			continue
		}
		if table == "locks_sessions" || len(keys) == 0 {
			reads = append(reads, modelRow{table: table})
			continue
		}
		for _, k := range keys {
			if table == "locks_permits" {
				k += "/"
			}
			reads = append(reads, modelRow{table: table, key: k})
		}
	}
	// DML writes the rows of the first table it names.
	if dml := strings.ToUpper(strings.TrimSpace(sql)); strings.HasPrefix(dml, "INSERT") || strings.HasPrefix(dml, "UPDATE") || strings.HasPrefix(dml, "DELETE") {
		for _, r := range reads {
			if r.table == reads[0].table {
				writes = append(writes, r)
			}
		}
	}
	return reads, writes
}

// mutationRows returns the rows a Commit's mutations write.
func mutationRows(ms []*spannerpb.Mutation) []modelRow {
	var rows []modelRow
	for _, m := range ms {
		var w *spannerpb.Mutation_Write
		switch op := m.GetOperation().(type) {
		case *spannerpb.Mutation_Insert:
			w = op.Insert
		case *spannerpb.Mutation_Update:
			w = op.Update
		case *spannerpb.Mutation_InsertOrUpdate:
			w = op.InsertOrUpdate
		case *spannerpb.Mutation_Replace:
			w = op.Replace
		case *spannerpb.Mutation_Delete_:
			table := strings.ToLower(op.Delete.GetTable())
			for _, k := range op.Delete.GetKeySet().GetKeys() {
				rows = append(rows, modelRow{table: table, key: keyOf(table, k.GetValues())})
			}
			continue
		}
		table := strings.ToLower(w.GetTable())
		for _, vals := range w.GetValues() {
			key := map[string]string{}
			for i, c := range w.GetColumns() {
				if i < len(vals.GetValues()) {
					v := vals.GetValues()[i]
					if s := v.GetStringValue(); s != "" {
						key[c] = s
					}
				}
			}
			switch table {
			case "locks_sessions":
				rows = append(rows, modelRow{table: table, key: key["session_id"]})
			case "locks_permits":
				rows = append(rows, modelRow{table: table, key: key["name"] + "/" + key["slot"]})
			default:
				rows = append(rows, modelRow{table: table, key: key["name"]})
			}
		}
	}
	return rows
}

// keyOf is the model's key of a row named by its key values.
func keyOf(table string, vals []*structpb.Value) string {
	var parts []string
	for _, v := range vals {
		parts = append(parts, v.GetStringValue())
	}
	if strings.EqualFold(table, "locks_permits") && len(parts) == 2 {
		return parts[0] + "/" + parts[1]
	}
	if len(parts) > 0 {
		return parts[0]
	}
	return ""
}
