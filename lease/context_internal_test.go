package lease

import (
	"context"
	"errors"
	"testing"
	"time"
)

type valueKey struct{}

// The context made for reads outside a transaction ends as its parent
// does and says why as its parent says: DeadlineExceeded when the parent's
// deadline passed (a copy that cancelled itself on its parent's Done
// raced its own timer, and said Canceled about a quarter of the time),
// Canceled when the parent was cancelled. It carries none of the parent's
// values. Every iteration compares errors; none relies on timing.
func TestOutsideTransactionEndsAsItsParentDoes(t *testing.T) {
	base := context.WithValue(context.Background(), valueKey{}, "txn")
	for i := range 2000 {
		parent, cancel := context.WithTimeout(base, time.Duration(i%5)*100*time.Microsecond)
		out, done := outsideTransaction(parent)
		if out.Value(valueKey{}) != nil {
			t.Fatal("the copy carries its parent's values")
		}
		if d, ok := out.Deadline(); !ok || !d.Equal(must(parent.Deadline())) {
			t.Fatalf("the copy's deadline is %v, %v; want its parent's", d, ok)
		}
		bounded, cancelBound := context.WithTimeout(out, time.Hour)
		<-bounded.Done()
		if err := out.Err(); !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("iteration %d: the copy ended with %v after its parent's deadline, want DeadlineExceeded", i, err)
		}
		if err := bounded.Err(); !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("iteration %d: a context under the copy ended with %v, want DeadlineExceeded", i, err)
		}
		cancelBound()
		done()
		cancel()
	}
	for i := range 200 {
		parent, cancel := context.WithTimeout(base, time.Hour)
		out, done := outsideTransaction(parent)
		cancel()
		<-out.Done()
		if err := out.Err(); !errors.Is(err, context.Canceled) {
			t.Fatalf("iteration %d: the copy of a cancelled context ended with %v, want Canceled", i, err)
		}
		done()
	}
}

func must(d time.Time, ok bool) time.Time {
	if !ok {
		panic("no deadline")
	}
	return d
}
