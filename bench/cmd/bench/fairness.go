package main

import (
	"fmt"
	"math"
	"slices"
	"strings"
	"time"

	"github.com/spannerlock/terraform-provider-spannerlock/internal/chaos"
	"github.com/spannerlock/terraform-provider-spannerlock/lease"
)

// fairnessProcs processes loop on one name, each holding it fairnessHold
// per grant, for fairnessRun.
const (
	fairnessProcs = 3
	fairnessHold  = 200 * time.Millisecond
)

func (b *bench) fairnessRun() time.Duration {
	if b.quick {
		return 10 * time.Second
	}
	return 40 * time.Second
}

// fairnessResult is one fairness run: the grants of each process, the
// longest any acquisition waited, and the grants that overtook an earlier
// waiter.
type fairnessResult struct {
	grants    []int
	total     int
	longest   time.Duration
	overtakes int
}

func (f fairnessResult) shares() string {
	parts := make([]string, len(f.grants))
	for i, g := range f.grants {
		parts[i] = fmt.Sprintf("%.0f%%", 100*float64(g)/float64(max(f.total, 1)))
	}
	return strings.Join(parts, " / ")
}

// fairness measures first come, first served: fairnessProcs processes each
// loop Acquire → hold → Release on one name. A grant overtakes a waiter when
// that waiter's Acquire began more than margin before the grant's own and
// was granted after it; margin is what joining the line takes (its
// transaction), so that two calls racing to join are not counted.
func (b *bench) fairness() error {
	r, err := b.fairnessOnce(50 * time.Millisecond)
	if err != nil {
		return err
	}
	b.results.row(resultRow{
		measure: fmt.Sprintf("fairness: %d processes looping Acquire → %s → Release on one name for %s: share of grants per process; grants that overtook an earlier waiter; longest wait",
			fairnessProcs, fairnessHold, b.fairnessRun()),
		target: "equal shares; 0 overtakes",
		sl:     fmt.Sprintf("%s of %d grants; %d overtakes; longest wait %s", r.shares(), r.total, r.overtakes, ms(r.longest.Seconds())),
		slv:    float64(r.overtakes), spv: math.NaN(),
		sp:  "not run: no release (Unlock stops the loop; the next holder waits for expiry), so every grant is a takeover",
		met: met(r.overtakes == 0 && r.fair()),
	})
	return nil
}

// fair reports whether every process got within one grant of its equal
// share, as strict first come, first served gives when all keep waiting.
func (f fairnessResult) fair() bool {
	for _, g := range f.grants {
		if math.Abs(float64(g)-float64(f.total)/float64(len(f.grants))) > 1.5 {
			return false
		}
	}
	return true
}

func (b *bench) fairnessOnce(margin time.Duration) (fairnessResult, error) {
	var r fairnessResult
	db, err := b.newDB("spannerlock")
	if err != nil {
		return r, err
	}
	var procs []*child
	for i := range fairnessProcs {
		c, err := b.startChild(fmt.Sprintf("fair-%d", i), childOpts{lib: "spannerlock", db: db, table: slTable, ttl: b.steadyTTL, id: fmt.Sprintf("fair-%d", i)})
		if err != nil {
			return r, err
		}
		defer c.stop()
		procs = append(procs, c)
	}
	for _, c := range procs {
		if err := c.send("loop fair %d", fairnessHold.Milliseconds()); err != nil {
			return r, err
		}
	}
	time.Sleep(b.fairnessRun())
	type grant struct {
		proc     int
		asked, t int64
	}
	var grants []grant
	var waiting []grant // acquisitions still waiting when their loop stopped
	firstStop := now()
	for i, c := range procs {
		if err := c.send("stop fair"); err != nil {
			return r, err
		}
		var asked int64
		for {
			e, err := c.nextAny(time.Minute)
			if err != nil {
				return r, err
			}
			switch e.Ev {
			case "acquiring":
				asked = e.T
			case "acquired":
				grants, asked = append(grants, grant{proc: i, asked: e.T0, t: e.T}), 0
			case "error":
				return r, fmt.Errorf("fair-%d: %s", i, e.Err)
			}
			if e.Ev == "stopped" {
				break
			}
		}
		if asked != 0 {
			waiting = append(waiting, grant{proc: i, asked: asked, t: math.MaxInt64})
		}
	}
	// The loops stop one after another: only grants before the first stop
	// count.
	r.grants = make([]int, fairnessProcs)
	slices.SortFunc(grants, func(a, b grant) int { return int(a.t - b.t) })
	all := append(slices.Clone(grants), waiting...)
	for _, g := range grants {
		if g.t > firstStop {
			continue
		}
		r.grants[g.proc]++
		r.total++
		r.longest = max(r.longest, nanosToDur(g.t-g.asked))
		for _, w := range all {
			if w.proc != g.proc && w.asked < g.asked-margin.Nanoseconds() && w.t > g.t {
				r.overtakes++
				break
			}
		}
	}
	return r, nil
}

// remote runs the headline measurements again with round-trip latency
// between the processes and the emulator, as between an application and a
// multi-region Spanner: every child dials a proxy that delays each chunk
// by half the RTT in each direction.
func (b *bench) remote() error {
	const rtt = 100 * time.Millisecond
	proxy, err := chaos.NewProxy(b.emu.Host())
	if err != nil {
		return err
	}
	defer func() { _ = proxy.Close() }()
	proxy.SetDelay(rtt / 2)
	b.childHost = proxy.Addr()
	defer func() { b.childHost = "" }()
	label := func(s string) string { return fmt.Sprintf("%s, %s RTT", s, rtt) }

	lat, err := b.remoteAcquisitions()
	if err != nil {
		return err
	}
	b.results.row(resultRow{measure: label("uncontended acquisition latency (median / max)"), target: "—",
		sl: fmt.Sprintf("%s / %s", ms(median(lat)), ms(maxOf(lat))), slv: median(lat), spv: math.NaN(), met: "—"})

	handoffs, err := b.crossProcessHandoff(0)
	if err != nil {
		return err
	}
	b.results.row(resultRow{measure: label("handoff after Release to a waiter in another process, default poll (median / max)"), target: "250 ms",
		sl: fmt.Sprintf("%s / %s", ms(median(handoffs)), ms(maxOf(handoffs))), slv: median(handoffs), spv: math.NaN(),
		met: met(median(handoffs) <= 0.25)})

	fail, err := b.slFailover(3*time.Second, max(b.nFail3, 1))
	if err != nil {
		return err
	}
	b.results.row(resultRow{measure: label("failover after SIGKILL of the holder, TTL 3s (median / max, × TTL)"), target: "≤ 1.25×",
		sl: fmt.Sprintf("%.2f× / %.2f×", median(fail), maxOf(fail)), slv: median(fail), spv: math.NaN(), met: met(maxOf(fail) <= 1.25)})

	w, err := b.waiterRate("spannerlock", lease.GoogleSQL, 0)
	if err != nil {
		return err
	}
	b.results.row(resultRow{measure: label(fmt.Sprintf("RPC/s of a blocked waiter, steady state (s 5–%d of the wait)", int(b.waitFor.Seconds()))), target: "≤ 1",
		sl: num(w.steady), slv: w.steady, spv: math.NaN(), met: met(w.steady <= 1)})

	f, err := b.fairnessOnce(3 * rtt)
	if err != nil {
		return err
	}
	b.results.row(resultRow{measure: label("fairness, as above"), target: "equal shares; 0 overtakes",
		sl:  fmt.Sprintf("%s of %d grants; %d overtakes; longest wait %s", f.shares(), f.total, f.overtakes, ms(f.longest.Seconds())),
		slv: float64(f.overtakes), spv: math.NaN(), met: met(f.overtakes == 0 && f.fair())})
	return nil
}

// remoteAcquisitions times uncontended acquisitions in a child, from the
// call to its return.
func (b *bench) remoteAcquisitions() ([]float64, error) {
	db, err := b.newDB("spannerlock")
	if err != nil {
		return nil, err
	}
	c, err := b.startChild("rtt-acquirer", childOpts{lib: "spannerlock", db: db, table: slTable, ttl: b.steadyTTL})
	if err != nil {
		return nil, err
	}
	defer c.stop()
	var out []float64
	for i := range max(b.nAcq, 1) + 1 {
		name := fmt.Sprintf("rtt-%d", i)
		if err := c.send("acquire %s", name); err != nil {
			return nil, err
		}
		e, err := c.next("acquired", time.Minute)
		if err != nil {
			return nil, err
		}
		if i > 0 { // the first also starts the process's session
			out = append(out, nanosToDur(e.T-e.T0).Seconds())
		}
	}
	return out, nil
}
