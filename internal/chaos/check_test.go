package chaos

import (
	"slices"
	"sort"
	"testing"
	"time"

	"github.com/spannerlock/terraform-provider-spannerlock/internal/chaos/record"
)

// The checker is a pure function; these hand-made histories show that each
// violation it exists for is reported, alone, and that clean ones pass.

var t0 = time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)

func ms(n int) time.Time { return t0.Add(time.Duration(n) * time.Millisecond) }

// hist builds a history step by step, keeping counters consistent with the
// writes unless a test overrides them.
type hist struct {
	h History
}

func newHist() *hist {
	return &hist{h: History{Counters: map[string]int64{}, Permits: map[string]int64{"sem": 2}}}
}

func (b *hist) acquire(holder, name string, token int64, at int) *hist {
	b.h.Events = append(b.h.Events, record.Event{Ev: record.EvAcquired, Holder: holder, Name: name, Sem: name == "sem", Token: token, Commit: ms(at)})
	return b
}

// write adds an accepted write that read prev, and the worker's log of it.
func (b *hist) write(op, holder, name string, token int64, at int, prev int64) *hist {
	b.h.Writes = append(b.h.Writes, record.Write{Op: op, CommittedAt: ms(at), Name: name, Sem: name == "sem", Token: token, Holder: holder, Prev: prev, Value: prev + 1})
	b.h.Counters[name] = max(b.h.Counters[name], prev+1)
	return b.logged(op, holder, name, token, record.Committed)
}

func (b *hist) logged(op, holder, name string, token int64, outcome string) *hist {
	b.h.Events = append(b.h.Events,
		record.Event{Ev: record.EvWrite, Holder: holder, Name: name, Token: token, Op: op},
		record.Event{Ev: record.EvWriteDone, Holder: holder, Name: name, Token: token, Op: op, Outcome: outcome})
	return b
}

func kinds(vs []Violation) []string {
	var ks []string
	for _, v := range vs {
		if !slices.Contains(ks, v.Kind) {
			ks = append(ks, v.Kind)
		}
	}
	sort.Strings(ks)
	return ks
}

func expect(t *testing.T, h History, want ...string) {
	t.Helper()
	vs := Check(h)
	sort.Strings(want)
	if got := kinds(vs); !slices.Equal(got, want) {
		t.Errorf("violations %v, want kinds %v", vs, want)
	}
}

// A clean history: a lock handed from w1 to w2 (one lost its lease and was
// rejected, one unknown outcome that did commit, one that did not), and a
// semaphore with two permits in use at once.
func clean() *hist {
	return newHist().
		acquire("w1", "lock-0", 1, 0).
		write("w1/1", "w1", "lock-0", 1, 10, 0).
		write("w1/2", "w1", "lock-0", 1, 20, 1).
		logged("w1/3", "w1", "lock-0", 1, record.Rejected).
		acquire("w2", "lock-0", 2, 30).
		write("w2/1", "w2", "lock-0", 2, 40, 2).
		logged("w2/2", "w2", "lock-0", 2, record.Unknown).
		write("w2/3", "w2", "lock-0", 2, 50, 3).
		logged("w2/3", "w2", "lock-0", 2, record.Unknown).
		acquire("w1", "sem", 1, 0).
		acquire("w2", "sem", 2, 5).
		write("w1/4", "w1", "sem", 1, 10, 0).
		write("w2/4", "w2", "sem", 2, 20, 1).
		write("w1/5", "w1", "sem", 1, 30, 2).
		acquire("w3", "sem", 3, 35).
		write("w3/1", "w3", "sem", 3, 40, 3).
		write("w2/5", "w2", "sem", 2, 50, 4)
}

func TestCheckerPassesACleanHistory(t *testing.T) {
	expect(t, clean().h)
}

func TestCheckerCatchesAStaleWrite(t *testing.T) {
	// w1 writes after w2, whose larger token it no longer holds; the
	// counter chain is intact, so only the order of tokens shows it.
	h := newHist().
		acquire("w1", "lock-0", 1, 0).
		acquire("w2", "lock-0", 2, 5).
		write("w2/1", "w2", "lock-0", 2, 10, 0).
		write("w1/1", "w1", "lock-0", 1, 20, 1).h
	expect(t, h, VStaleWrite)
}

func TestCheckerCatchesInterleavedHolders(t *testing.T) {
	h := newHist().
		acquire("w1", "lock-0", 1, 0).
		write("w1/1", "w1", "lock-0", 1, 10, 0).
		acquire("w2", "lock-0", 2, 15).
		write("w2/1", "w2", "lock-0", 2, 20, 1).
		write("w1/2", "w1", "lock-0", 1, 30, 2).
		write("w2/2", "w2", "lock-0", 2, 40, 3).h
	vs := Check(h)
	if got := kinds(vs); !slices.Equal(got, []string{VStaleWrite}) || len(vs) != 1 {
		t.Fatalf("violations %v, want the one stale write w1/2", vs)
	}
}

func TestCheckerCatchesTokensThatDoNotIncrease(t *testing.T) {
	expect(t, newHist().acquire("w1", "lock-0", 2, 0).acquire("w2", "lock-0", 1, 10).h, VTokenOrder)
	expect(t, newHist().acquire("w1", "lock-0", 1, 0).acquire("w2", "lock-0", 1, 10).h, VTokenShared)
	expect(t, newHist().acquire("w1", "sem", 3, 0).acquire("w2", "sem", 2, 10).h, VTokenOrder)
}

func TestCheckerCatchesALostUpdate(t *testing.T) {
	// Two holders read 0 and both wrote 1: one increment is lost, and the
	// counter says 1 for two accepted writes.
	h := newHist().
		acquire("w1", "lock-0", 1, 0).
		acquire("w2", "lock-0", 2, 5).
		write("w1/1", "w1", "lock-0", 1, 10, 0).
		write("w2/1", "w2", "lock-0", 2, 20, 0).h
	expect(t, h, VLostUpdate, VCounter)
}

func TestCheckerCatchesALostWrite(t *testing.T) {
	h := clean()
	h.logged("w2/9", "w2", "lock-0", 2, record.Committed)
	expect(t, h.h, VLost)
}

func TestCheckerCatchesAPhantomWrite(t *testing.T) {
	h := clean()
	// w2/1 committed, but its worker was told it was rejected.
	h.logged("w2/1", "w2", "lock-0", 2, record.Rejected)
	expect(t, h.h, VPhantom)
}

func TestCheckerCatchesADuplicatedWrite(t *testing.T) {
	h := newHist().
		acquire("w1", "lock-0", 1, 0).
		write("w1/1", "w1", "lock-0", 1, 10, 0).
		write("w1/1", "w1", "lock-0", 1, 20, 1).h
	expect(t, h, VDuplicate)
}

func TestCheckerCatchesACounterOutOfStep(t *testing.T) {
	h := clean().h
	h.Counters["lock-0"]++
	expect(t, h, VCounter)
	h = clean().h
	h.Counters["lock-9"] = 3
	expect(t, h, VCounter)
}

func TestCheckerCatchesAnOversubscribedSemaphore(t *testing.T) {
	b := newHist().
		acquire("w1", "sem", 1, 0).
		acquire("w2", "sem", 2, 1).
		acquire("w3", "sem", 3, 2).
		write("w1/1", "w1", "sem", 1, 10, 0).
		write("w2/1", "w2", "sem", 2, 20, 1).
		write("w3/1", "w3", "sem", 3, 30, 2).
		write("w2/2", "w2", "sem", 2, 35, 3).
		write("w1/2", "w1", "sem", 1, 40, 4)
	// At 30, w1 (writing from 10 to 40), w2 (20 to 35) and w3 all hold
	// permits they write under: three of two.
	expect(t, b.h, VOversubscribed)
	b.h.Permits["sem"] = 3
	expect(t, b.h)
}

func TestCheckerCatchesAWriteUnderATokenNeverAcquired(t *testing.T) {
	h := newHist().
		acquire("w1", "lock-0", 1, 0).
		write("w1/1", "w1", "lock-0", 1, 10, 0).
		write("w2/1", "w2", "lock-0", 1, 20, 1).h
	expect(t, h, VUnacquired, VTokenShared)
}

func TestCheckerCountsAPermitFromItsAcquisition(t *testing.T) {
	// w3's permit is in use from its acquisition at 15, while w1's and
	// w2's are, though its only write comes after theirs ended.
	h := newHist().
		acquire("w1", "sem", 1, 0).
		acquire("w2", "sem", 2, 1).
		acquire("w3", "sem", 3, 15).
		write("w1/1", "w1", "sem", 1, 10, 0).
		write("w2/1", "w2", "sem", 2, 20, 1).
		write("w1/2", "w1", "sem", 1, 30, 2).
		write("w3/1", "w3", "sem", 3, 45, 3).h
	expect(t, h, VOversubscribed)
}
