package chaos

import (
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/spannerlock/terraform-provider-spannerlock/internal/chaos/record"
)

// History is everything the checker judges: what the workers logged, and
// what the fenced resource holds at the end.
type History struct {
	// Events are every worker's log lines, in any order.
	Events []record.Event
	// Writes are the rows of the accepted-writes table.
	Writes []record.Write
	// Counters are the resource counters by lock or semaphore name.
	Counters map[string]int64
	// Permits are the semaphores' limits by name.
	Permits map[string]int64
}

// Kinds of violation.
const (
	// VStaleWrite: for one lock, a write by a token was accepted after a
	// write by a larger token (in commit order): two holders' accepted
	// writes overlap.
	VStaleWrite = "stale-write"
	// VLostUpdate: a lock's read-then-write increment read a value another
	// holder had already replaced, or a semaphore's counter skipped.
	VLostUpdate = "lost-update"
	// VTokenOrder: a later acquisition of a name got a token that is not
	// larger than an earlier one's.
	VTokenOrder = "token-not-increasing"
	// VTokenShared: two acquisitions, or writes by two holders, share a token.
	VTokenShared = "token-shared"
	// VUnacquired: an accepted write carries a token its holder never
	// logged acquiring.
	VUnacquired = "write-without-acquisition"
	// VOversubscribed: more permits of a semaphore wrote concurrently than
	// it has.
	VOversubscribed = "oversubscribed"
	// VDuplicate: one operation was committed more than once.
	VDuplicate = "duplicated-write"
	// VLost: an operation its worker saw commit is not in the resource.
	VLost = "lost-write"
	// VPhantom: an operation whose transaction never committed (its worker
	// saw it rejected) is in the resource.
	VPhantom = "phantom-write"
	// VCounter: a counter disagrees with the accepted writes.
	VCounter = "counter-mismatch"
)

// Violation is one broken guarantee.
type Violation struct {
	Kind   string
	Name   string
	Detail string
}

func (v Violation) String() string { return fmt.Sprintf("%s on %s: %s", v.Kind, v.Name, v.Detail) }

// Check judges a history. A clean history returns no violations. It
// trusts nothing a worker says about order: accepted writes are ordered by
// Spanner's commit timestamps, acquisitions by theirs.
func Check(h History) []Violation {
	var vs []Violation
	add := func(kind, name, format string, args ...any) {
		vs = append(vs, Violation{Kind: kind, Name: name, Detail: fmt.Sprintf(format, args...)})
	}
	acquired := checkAcquisitions(h.Events, add)

	byOp := map[string][]record.Write{}
	byName := map[string][]record.Write{}
	for _, w := range h.Writes {
		byOp[w.Op] = append(byOp[w.Op], w)
		byName[w.Name] = append(byName[w.Name], w)
	}
	for _, op := range sortedKeys(byOp) {
		if ws := byOp[op]; len(ws) > 1 {
			add(VDuplicate, ws[0].Name, "operation %s committed %d times (at %s)", op, len(ws), commitTimes(ws))
		}
	}
	checkOutcomes(h.Events, byOp, add)

	for _, name := range sortedKeys(byName) {
		ws := byName[name]
		sort.SliceStable(ws, func(i, j int) bool { return ws[i].CommittedAt.Before(ws[j].CommittedAt) })
		sem := ws[0].Sem
		holders := map[int64]string{}
		for _, w := range ws {
			if hd, ok := holders[w.Token]; ok && hd != w.Holder {
				add(VTokenShared, name, "token %d wrote as %s and as %s", w.Token, hd, w.Holder)
			}
			holders[w.Token] = w.Holder
			if a, ok := acquired[acqKey{name, w.Token}]; !ok || a.Holder != w.Holder {
				add(VUnacquired, name, "operation %s by %s with token %d, which %s", w.Op, w.Holder, w.Token, describeAcquirer(a.Holder, ok))
			}
		}
		// Counter chain: each accepted write read what the previous one wrote.
		var last int64
		for i, w := range ws {
			if w.Prev != last {
				prevOp := "none"
				if i > 0 {
					prevOp = fmt.Sprintf("%s (token %d) wrote %d at %s", ws[i-1].Op, ws[i-1].Token, last, stamp(ws[i-1].CommittedAt))
				}
				add(VLostUpdate, name, "operation %s (%s, token %d) at %s wrote %d over %d, but the previous accepted write %s",
					w.Op, w.Holder, w.Token, stamp(w.CommittedAt), w.Value, w.Prev, prevOp)
			}
			last = w.Value
		}
		if c, ok := h.Counters[name]; !ok || c != int64(len(ws)) || c != last {
			add(VCounter, name, "counter is %d (present: %v); %d accepted writes, the last wrote %d", c, ok, len(ws), last)
		}
		if sem {
			checkSemaphore(name, ws, acquired, h.Permits[name], add)
			continue
		}
		// Tokens never go down in commit order: a smaller token after a
		// larger one is a stale holder's write accepted.
		top := ws[0]
		for _, w := range ws[1:] {
			if w.Token < top.Token {
				add(VStaleWrite, name, "operation %s by %s with token %d committed at %s, after %s by %s with token %d at %s",
					w.Op, w.Holder, w.Token, stamp(w.CommittedAt), top.Op, top.Holder, top.Token, stamp(top.CommittedAt))
				continue
			}
			top = w
		}
	}
	for _, name := range sortedKeys(h.Counters) {
		if _, ok := byName[name]; !ok && h.Counters[name] != 0 {
			add(VCounter, name, "counter is %d with no accepted writes", h.Counters[name])
		}
	}
	return vs
}

type acqKey struct {
	name  string
	token int64
}

// checkAcquisitions checks that every name's tokens grow with its
// acquisitions' commit timestamps and are never handed out twice; it
// returns each token's acquisition.
func checkAcquisitions(events []record.Event, add func(kind, name, format string, args ...any)) map[acqKey]record.Event {
	holders := map[acqKey]record.Event{}
	byName := map[string][]record.Event{}
	for _, e := range events {
		if e.Ev != record.EvAcquired {
			continue
		}
		k := acqKey{e.Name, e.Token}
		if a, ok := holders[k]; ok {
			add(VTokenShared, e.Name, "token %d acquired by %s and again by %s", e.Token, a.Holder, e.Holder)
			continue
		}
		holders[k] = e
		byName[e.Name] = append(byName[e.Name], e)
	}
	for _, name := range sortedKeys(byName) {
		as := byName[name]
		sort.SliceStable(as, func(i, j int) bool { return as[i].Commit.Before(as[j].Commit) })
		for i := 1; i < len(as); i++ {
			a, b := as[i-1], as[i]
			if b.Token <= a.Token {
				add(VTokenOrder, name, "%s acquired token %d at %s, after %s acquired token %d at %s",
					b.Holder, b.Token, stamp(b.Commit), a.Holder, a.Token, stamp(a.Commit))
			}
		}
	}
	return holders
}

// checkOutcomes compares what workers saw of their writes with the
// resource: a write seen committed must be there, one seen rejected must
// not; an unknown outcome (an ambiguous commit, a worker killed mid-write)
// may go either way.
func checkOutcomes(events []record.Event, byOp map[string][]record.Write, add func(kind, name, format string, args ...any)) {
	for _, e := range events {
		if e.Ev != record.EvWriteDone {
			continue
		}
		n := len(byOp[e.Op])
		switch {
		case e.Outcome == record.Committed && n == 0:
			add(VLost, e.Name, "operation %s by %s (token %d) committed at %s but is not in the resource", e.Op, e.Holder, e.Token, stamp(e.Commit))
		case e.Outcome == record.Rejected && n > 0:
			add(VPhantom, e.Name, "operation %s by %s (token %d) was rejected (%s) but committed at %s", e.Op, e.Holder, e.Token, e.Err, commitTimes(byOp[e.Op]))
		}
	}
}

// checkSemaphore checks that at no instant more permits were in use than
// the semaphore has. A permit is in use from its acquisition's commit to its
// last accepted write: Guard found its session live then, and a session
// that expires never comes back, so Spanner held it live all along.
func checkSemaphore(name string, ws []record.Write, acquired map[acqKey]record.Event, permits int64, add func(kind, name, format string, args ...any)) {
	type span struct {
		token       int64
		holder      string
		first, last time.Time
	}
	spans := map[int64]*span{}
	for _, w := range ws {
		s := spans[w.Token]
		if s == nil {
			s = &span{token: w.Token, holder: w.Holder, first: w.CommittedAt}
			if a, ok := acquired[acqKey{name, w.Token}]; ok && a.Commit.Before(s.first) {
				s.first = a.Commit
			}
			spans[w.Token] = s
		}
		s.last = w.CommittedAt
	}
	// Sweep span starts and ends in time order (at a tie, starts first:
	// spans are closed), counting the permits in use.
	type edge struct {
		at    time.Time
		start bool
		s     *span
	}
	var edges []edge
	for _, s := range spans {
		edges = append(edges, edge{s.first, true, s}, edge{s.last, false, s})
	}
	sort.Slice(edges, func(i, j int) bool {
		if !edges[i].at.Equal(edges[j].at) {
			return edges[i].at.Before(edges[j].at)
		}
		if edges[i].start != edges[j].start {
			return edges[i].start
		}
		return edges[i].s.token < edges[j].s.token
	})
	open := map[int64]*span{}
	reported := false
	for _, e := range edges {
		if !e.start {
			delete(open, e.s.token)
			if int64(len(open)) <= permits {
				reported = false
			}
			continue
		}
		open[e.s.token] = e.s
		if int64(len(open)) > permits && !reported {
			var who []string
			for _, t := range sortedKeys(open) {
				s := open[t]
				who = append(who, fmt.Sprintf("token %d (%s, %s..%s)", t, s.holder, stamp(s.first), stamp(s.last)))
			}
			add(VOversubscribed, name, "%d permits in use at once, limit %d: %s", len(open), permits, strings.Join(who, "; "))
			reported = true // one report per burst
		}
	}
}

func describeAcquirer(holder string, ok bool) string {
	if !ok {
		return "no worker logged acquiring"
	}
	return holder + " acquired"
}

func commitTimes(ws []record.Write) string {
	var ts []string
	for _, w := range ws {
		ts = append(ts, stamp(w.CommittedAt))
	}
	return strings.Join(ts, ", ")
}

func stamp(t time.Time) string { return t.UTC().Format("15:04:05.000000") }

func sortedKeys[K interface{ ~string | ~int64 }, V any](m map[K]V) []K {
	keys := make([]K, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool { return keys[i] < keys[j] })
	return keys
}
