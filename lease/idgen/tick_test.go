package idgen

import (
	"testing"
	"time"
)

// A generator started right after a mark must not issue IDs in the mark's
// tick: the previous holder may have issued IDs in it.
func TestWaitPastTickLeavesTheMarksTick(t *testing.T) {
	for _, tick := range []time.Duration{snowflakeTick, sonyflakeTick} {
		mark := time.Now().Round(0)
		waitPastTick(mark, tick)
		if now := time.Now().Round(0); now.Truncate(tick).Equal(mark.Truncate(tick)) {
			t.Fatalf("tick %s: still in the mark's tick (%s) at %s", tick, mark.Truncate(tick).Format(time.StampMicro), now.Format(time.StampMicro))
		}
	}
}

