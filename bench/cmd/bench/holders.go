package main

import (
	"fmt"
	"math"
	"strings"
	"time"

	"cloud.google.com/go/spanner"
	"google.golang.org/grpc/codes"

	"github.com/spannerlock/terraform-provider-spannerlock/lease"
)

// holdResult is what one holder process did over a measurement window.
type holdResult struct {
	db      string
	lib     string
	dialect lease.Dialect
	n       int
	window  time.Duration
	rpc     rpcStats // in the window
	rps     float64  // RPCs per second, whole process
	ticks   int64    // successful commits in the window (spannerlock: renewals)
	cpu     float64  // fraction of one core, whole process
	// memory after the window: resident set, and the live Go heap after a
	// forced collection
	rss, heapLive, goSys int64
	goroutines           int
	// lost counts the spannerlock leases lost by the end of the window.
	lost int
	// acquiring the n leases
	acquireTime time.Duration
	acquireRPC  float64 // per acquisition
	acquireAbrt int64
	// acquireCurve is the time each successive thousand acquisitions took.
	acquireCurve []time.Duration
	// emulator and whole-machine CPU over the window, fractions of one core
	emuCPU, machineCPU float64
}

func (h holdResult) perTick() float64 {
	if h.ticks == 0 {
		return math.NaN()
	}
	return float64(h.rpc.total()) / float64(h.ticks)
}

// tickCell shows the RPCs per renewal tick, and says when leases were lost:
// then the process no longer renews what it was meant to hold.
func (h holdResult) tickCell() string {
	c := fmt.Sprintf("%s (%d ticks, %d aborted RPCs)", num(h.perTick()), h.ticks, h.rpc.aborts())
	if h.lost > 0 {
		c += fmt.Sprintf(", **%d of the %d leases lost** by the end of the window", h.lost, h.n)
	}
	return c
}

// hold runs a child that acquires n leases (spindle: n locks, each its own
// loop) on a database of dialect d with the steady TTL and measures it over
// window once it holds them.
func (b *bench) hold(lib string, d lease.Dialect, n int, window, settle time.Duration) (holdResult, error) {
	r := holdResult{lib: lib, dialect: d, n: n, window: window}
	db, err := b.newDBIn(lib, d)
	if err != nil {
		return r, err
	}
	r.db = db
	table := slTable
	if lib == "spindle" {
		table = spTable
	}
	c, err := b.startChild(fmt.Sprintf("%s-holder-%d", lib, n), childOpts{lib: lib, db: db, table: table, ttl: b.steadyTTL})
	if err != nil {
		return r, err
	}
	defer c.stop()
	s0, err := c.stats(false)
	if err != nil {
		return r, err
	}
	if err := c.send("hold %d h", n); err != nil {
		return r, err
	}
	held, err := c.next("held", 30*time.Minute)
	if err != nil {
		return r, err
	}
	sh, err := c.stats(false)
	if err != nil {
		return r, err
	}
	prev := held.T0
	for _, e := range append(c.progress, held) {
		r.acquireCurve = append(r.acquireCurve, nanosToDur(e.T-prev))
		prev = e.T
	}
	acq := sh.RPC.sub(s0.RPC)
	r.acquireTime = nanosToDur(held.T - held.T0)
	r.acquireRPC = withoutRenewals(acq) / float64(n)
	r.acquireAbrt = acq.aborts()

	time.Sleep(settle)
	emuPID := emulatorPID(b.emu.Host())
	e0 := cpuTicks(emuPID)
	mb0, mt0 := machineCPU()
	a, err := c.stats(false)
	if err != nil {
		return r, err
	}
	time.Sleep(window)
	z, err := c.stats(false)
	if err != nil {
		return r, err
	}
	e1 := cpuTicks(emuPID)
	mb1, mt1 := machineCPU()
	g, err := c.stats(true)
	if err != nil {
		return r, err
	}
	wall := nanosToDur(z.Wall - a.Wall).Seconds()
	r.rpc = z.RPC.sub(a.RPC)
	r.rps = float64(r.rpc.total()) / wall
	r.ticks = r.rpc.okCommits()
	r.cpu = nanosToDur(z.CPU-a.CPU).Seconds() / wall
	r.rss, r.heapLive, r.goSys, r.goroutines = z.RSS, int64(g.HeapAlloc), int64(z.GoSys), z.Goroutines
	r.lost = z.Lost
	if emuPID != 0 {
		r.emuCPU = float64(e1-e0) / 100 / wall
	}
	if mt1 > mt0 {
		// jiffies of all CPUs: busy share of the machine, in cores
		r.machineCPU = float64(mb1-mb0) / float64(mt1-mt0) * float64(numCPU())
	}
	return r, nil
}

// holders measures processes holding 1 and 100 leases, for both libraries.
func (b *bench) holders() error {
	// A process with a spanner.Client and a lease.Client that holds nothing:
	// the CPU every process pays before holding anything.
	base, err := b.hold("spannerlock", lease.GoogleSQL, 0, b.window, 2*time.Second)
	if err != nil {
		b.results.note("idle holder process: %v", err)
	} else {
		b.baseCPU = base.cpu
		b.describeHold(base)
	}
	res := map[string]map[int]holdResult{"spannerlock": {}, "spindle": {}}
	for _, n := range []int{1, 100} {
		for _, lib := range []string{"spannerlock", "spindle"} {
			r, err := b.hold(lib, lease.GoogleSQL, n, b.window, 2*time.Second)
			if err != nil {
				b.results.note("%s holding %d: %v", lib, n, err)
				r = holdResult{lib: lib, n: n, rps: math.NaN(), cpu: math.NaN(), ticks: 0}
			}
			res[lib][n] = r
			b.results.holdingRate(lib, n, r.rps, r.lost > 0)
			b.describeHold(r)
		}
	}
	for _, n := range []int{1, 100} {
		sl, sp := res["spannerlock"][n], res["spindle"][n]
		b.results.row(resultRow{
			measure: fmt.Sprintf("RPCs per renewal tick, process holding %d lease%s", n, plural(n)), target: "≤ 2",
			sl: sl.tickCell(), slv: sl.perTick(),
			sp: "no shared tick: every lock runs its own heartbeat transaction (3 RPCs) and check read", spv: math.NaN(),
			met: met(sl.perTick() <= 2 && sl.lost == 0),
		})
		b.results.row(resultRow{
			measure: fmt.Sprintf("RPC/s of a process holding %d lease%s, TTL %s", n, plural(n), b.steadyTTL), target: "—",
			sl: num(sl.rps), slv: sl.rps, sp: fmt.Sprintf("%s (%s per lock)", num(sp.rps), num(sp.rps/float64(n))), spv: sp.rps,
		})
	}
	sl, sp := res["spannerlock"][100], res["spindle"][100]
	b.sp100 = sp.rps
	b.results.row(resultRow{
		measure: fmt.Sprintf("CPU of a process holding 100 leases, TTL %s (share of one core)", b.steadyTTL), target: "—",
		sl: b.cpuCell(sl.cpu), slv: sl.cpu, sp: pct(sp.cpu), spv: sp.cpu,
	})

	// The renewal tick on a PostgreSQL-dialect database.
	for _, n := range []int{1, 100} {
		g := res["spannerlock"][n]
		p, err := b.hold("spannerlock", lease.PostgreSQL, n, b.window, 2*time.Second)
		if err != nil {
			b.results.note("spannerlock holding %d on a PostgreSQL-dialect database: %v", n, err)
			continue
		}
		b.describeHold(p)
		measure := fmt.Sprintf("RPCs per renewal tick, process holding %d lease%s", n, plural(n))
		b.results.compareCounts(measure, []float64{g.perTick()}, []float64{p.perTick()})
		b.results.dialectRow(dialectRow{
			measure:   fmt.Sprintf("RPC/s of a process holding %d lease%s, TTL %s (renewal ticks in the %s window)", n, plural(n), b.steadyTTL, b.window),
			googleSQL: fmt.Sprintf("%s (%d)", num(g.rps), g.ticks), postgreSQL: fmt.Sprintf("%s (%d)", num(p.rps), p.ticks),
			same: sameRate(g.ticks, p.ticks),
		})
	}
	return nil
}

// sameRate says whether two windows of renewals are alike: a tick falling
// just inside or just outside a window is timing, not cost.
func sameRate(g, p int64) string {
	switch p - g {
	case 0:
		return "yes"
	case 1, -1:
		return "yes: one tick more or less in the window (timing; the cost per tick is the row above)"
	default:
		return fmt.Sprintf("**no**: %+d ticks", p-g)
	}
}

// largeHolder measures one process holding n10k leases.
func (b *bench) largeHolder() error {
	r, err := b.hold("spannerlock", lease.GoogleSQL, b.n10k, b.window10k, 5*time.Second)
	if err != nil {
		return err
	}
	b.results.holdingRate("spannerlock", b.n10k, r.rps, r.lost > 0)
	b.describeHold(r)
	n := fmt.Sprintf("%d", b.n10k)
	if b.n10k == 10000 {
		n = "10,000"
	}
	b.results.row(resultRow{
		measure: fmt.Sprintf("RPCs per renewal tick, process holding %s leases", n), target: "≤ 2",
		sl: r.tickCell(), slv: r.perTick(),
		sp: b.spindleLarge(), spv: math.NaN(),
		met: met(r.perTick() <= 2 && r.lost == 0),
	})
	b.results.row(resultRow{
		measure: fmt.Sprintf("CPU of a process holding %s leases, TTL %s, over %s (share of one core)", n, b.steadyTTL, b.window10k), target: "< 5%",
		sl: b.cpuCell(r.cpu), slv: r.cpu, spv: math.NaN(), met: met(r.cpu < 0.05),
	})
	b.results.row(resultRow{
		measure: fmt.Sprintf("memory of a process holding %s leases: RSS / live Go heap", n), target: "—",
		sl: fmt.Sprintf("%s / %s", mb(r.rss), mb(r.heapLive)), slv: math.NaN(), spv: math.NaN(),
	})
	if len(r.acquireCurve) > 1 {
		var parts []string
		for _, d := range r.acquireCurve {
			parts = append(parts, fmt.Sprintf("%.0f", d.Seconds()))
		}
		sqlEmpty, readEmpty, _ := b.pointReads("")
		sqlFull, readFull, err := b.pointReads(r.db)
		if err != nil {
			b.results.note("point reads: %v", err)
		}
		b.results.detail("Acquiring the %s leases, seconds per successive thousand: %s. Each acquisition gets slower as the table grows because "+
			"the emulator answers SQL by scanning the table: a single-use `SELECT token FROM locks WHERE name = @name` takes %s on an empty table and %s with %s rows "+
			"(a Read of the same key: %s and %s). So sequential acquisition is quadratic on the emulator; on Spanner these reads are key lookups.",
			n, strings.Join(parts, ", "), ms(sqlEmpty), ms(sqlFull), n, ms(readEmpty), ms(readFull))
	}
	b.results.row(resultRow{
		measure: fmt.Sprintf("acquiring %s leases one after another in one process", n), target: "—",
		sl: fmt.Sprintf("%.0f s, %s RPCs per acquisition", r.acquireTime.Seconds(), num(r.acquireRPC)), slv: math.NaN(), spv: math.NaN(),
	})
	return nil
}

// cpuCell shows a holder's CPU next to that of a process holding nothing.
func (b *bench) cpuCell(cpu float64) string {
	if b.baseCPU == 0 {
		return pct(cpu)
	}
	return fmt.Sprintf("%s (a process holding nothing: %s)", pct(cpu), pct(b.baseCPU))
}

func (b *bench) describeHold(r holdResult) {
	if math.IsNaN(r.rps) {
		return
	}
	if r.n == 0 {
		b.results.detail("A process with a spanner.Client and a lease.Client holding nothing, over %s: %d RPCs, CPU %s of a core, RSS %s, live heap after GC %s, %d goroutines: "+
			"the baseline of every holder process below.", r.window, r.rpc.total(), pct(r.cpu), mb(r.rss), mb(r.heapLive), r.goroutines)
		return
	}
	b.results.detail("%s holding %d lease%s%s (TTL %s), over %s: %d RPCs = %s RPC/s (%s), %d aborted; %d successful commits; "+
		"CPU %s of a core; RSS %s, live heap after GC %s, Go runtime memory %s, %d goroutines. "+
		"Acquiring them took %s (%s RPCs each excluding renewals, %d aborted). Emulator CPU over the window %s of a core; whole machine %s cores busy.%s",
		r.lib, r.n, plural(r.n), onDialect(r.dialect), b.steadyTTL, r.window, r.rpc.total(), num(r.rps), r.rpc.methods(), r.rpc.aborts(), r.ticks,
		pct(r.cpu), mb(r.rss), mb(r.heapLive), mb(r.goSys), r.goroutines,
		r.acquireTime.Round(100*time.Millisecond), num(r.acquireRPC), r.acquireAbrt, pct(r.emuCPU), num(r.machineCPU), lostNote(r))
}

func plural(n int) string {
	if n == 1 {
		return ""
	}
	return "s"
}

func pct(x float64) string {
	if math.IsNaN(x) {
		return "—"
	}
	return fmt.Sprintf("%.1f%%", 100*x)
}

func mb(n int64) string { return fmt.Sprintf("%.0f MB", float64(n)/(1<<20)) }

// pointReads times reading one lock row by key, by SQL and by the Read
// API, in db (a fresh empty database when db is ""); medians of 20, in s.
func (b *bench) pointReads(db string) (sqlRead, keyRead float64, err error) {
	if db == "" {
		if db, err = b.newDB("spannerlock"); err != nil {
			return math.NaN(), math.NaN(), err
		}
	}
	sc, _, err := b.newSpanner(db)
	if err != nil {
		return math.NaN(), math.NaN(), err
	}
	defer sc.Close()
	var q, k []float64
	for i := range 20 {
		name := fmt.Sprintf("h-%05d", (i*487)%max(b.n10k, 1))
		t := time.Now()
		err := sc.Single().Query(b.ctx, spanner.Statement{SQL: "SELECT token FROM " + slTable + " WHERE name = @name",
			Params: map[string]any{"name": name}}).Do(func(*spanner.Row) error { return nil })
		if err != nil {
			return math.NaN(), math.NaN(), err
		}
		q = append(q, time.Since(t).Seconds())
		t = time.Now()
		if _, err := sc.Single().ReadRow(b.ctx, slTable, spanner.Key{name}, []string{"token"}); err != nil && spanner.ErrCode(err) != codes.NotFound {
			return math.NaN(), math.NaN(), err
		}
		k = append(k, time.Since(t).Seconds())
	}
	return median(q), median(k), nil
}

// spindleLarge says why spindle is not run with n10k locks, and what the
// 100-lock measurement implies for it.
func (b *bench) spindleLarge() string {
	if b.sp100 == 0 || math.IsNaN(b.sp100) {
		return "not run: every lock runs its own loop"
	}
	return fmt.Sprintf("not run: every lock runs its own loop; %s RPC/s at 100 locks scales to ~%.0f RPC/s", num(b.sp100), b.sp100*float64(b.n10k)/100)
}

// onDialect names a PostgreSQL-dialect database in a detail line; GoogleSQL,
// the dialect of every figure unless said otherwise, goes unnamed.
func onDialect(d lease.Dialect) string {
	if d == lease.PostgreSQL {
		return " on a PostgreSQL-dialect database"
	}
	return ""
}

func lostNote(r holdResult) string {
	if r.lost == 0 {
		return ""
	}
	return fmt.Sprintf(" **%d of the %d leases were lost** by the end of the window (their renewals failed; run with -v for the holder's warnings in the log).", r.lost, r.n)
}
