package idgen

import (
	"testing"
	"time"

	"github.com/bwmarrin/snowflake"
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

// SnowflakeTime reads the time an ID was issued from the ID alone.
func TestSnowflakeTimeIsWhenTheIDWasIssued(t *testing.T) {
	node, err := snowflake.NewNode(7)
	if err != nil {
		t.Fatal(err)
	}
	before := time.Now().Truncate(time.Millisecond)
	id := node.Generate()
	after := time.Now()
	if at := SnowflakeTime(id); at.Before(before) || at.After(after) {
		t.Fatalf("SnowflakeTime = %s, want between %s and %s", at.Format(time.StampMilli), before.Format(time.StampMilli), after.Format(time.StampMilli))
	}
}
