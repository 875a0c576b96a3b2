package chaos

import (
	"fmt"
	"sort"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spannerlock/terraform-provider-spannerlock/internal/chaos/record"
)

// Stats summarises a run's operations.
type Stats struct {
	Acquired, AcquireFailed               int
	Released, ReleaseLost, ReleaseErrored int
	// LeasesLost counts leases whose Context ended with ErrLeaseLost.
	LeasesLost int
	// Guarded writes by outcome; RejectedByGuard of Rejected were refused
	// by Guard (or the lease's Context); UnknownCommitted of Unknown are in
	// the resource.
	Writes, Committed, Rejected, RejectedByGuard, Unknown, UnknownCommitted int
	// Worker-side faults: ambiguous commits injected (by transaction tag)
	// and commits the emulator's fault injection aborted.
	AmbiguousCommits map[string]int
	EmulatorAborts   int
	// RecoveriesStruck counts, by kind, second faults of compound nemeses
	// that struck a worker's recovery from an ambiguous commit.
	RecoveriesStruck map[string]int
}

// Stats computes the run's operation counts.
func (r *Result) Stats() Stats {
	st := Stats{AmbiguousCommits: map[string]int{}, RecoveriesStruck: map[string]int{}}
	present := map[string]bool{}
	for _, w := range r.History.Writes {
		present[w.Op] = true
	}
	for _, e := range r.History.Events {
		switch e.Ev {
		case record.EvAcquired:
			st.Acquired++
		case record.EvAcquireFailed:
			st.AcquireFailed++
		case record.EvReleased:
			switch e.Outcome {
			case record.Released:
				st.Released++
			case record.ReleaseLost:
				st.ReleaseLost++
			default:
				st.ReleaseErrored++
			}
		case record.EvEnded:
			if e.Outcome == record.EndedLost {
				st.LeasesLost++
			}
		case record.EvWrite:
			st.Writes++
		case record.EvWriteDone:
			switch e.Outcome {
			case record.Committed:
				st.Committed++
			case record.Rejected:
				st.Rejected++
				if e.Detail == record.RejectedByGuard {
					st.RejectedByGuard++
				}
			case record.Unknown:
				st.Unknown++
				if present[e.Op] {
					st.UnknownCommitted++
				}
			}
		case record.EvFault:
			switch e.Fault {
			case record.FaultAmbiguousCommit:
				tag := e.Detail
				if tag == "" {
					tag = "untagged"
				}
				st.AmbiguousCommits[tag]++
			case record.FaultEmulatorAbort:
				st.EmulatorAborts++
			case record.FaultRecoveryBlackhole, record.FaultRecoveryPause:
				st.RecoveriesStruck[e.Fault]++
			}
		}
	}
	return st
}

// FaultCounts counts the faults the driver injected, by kind.
func (r *Result) FaultCounts() map[string]int {
	m := map[string]int{}
	for _, f := range r.Faults {
		m[f.Kind]++
	}
	return m
}

// Report is the run's account: configuration, histories, operations,
// faults and the verdict.
func (r *Result) Report() string {
	var b strings.Builder
	c := r.Config
	sem := "no semaphore"
	if c.Permits > 0 {
		sem = fmt.Sprintf("semaphore %q with %d permits", Semaphore, c.Permits)
	}
	fmt.Fprintf(&b, "spannerlock fault suite, seed %d\n", c.Seed)
	fmt.Fprintf(&b, "  rerun: go run ./internal/chaos/cmd/chaos -seed %d -dialect %s -duration %s -workers %d -locks %d -permits %d -ttl %s -emulator-faults=%v\n",
		c.Seed, DialectName(c.Dialect), c.Duration, c.Workers, c.Locks, c.Permits, c.TTL, c.FaultInjection)
	fmt.Fprintf(&b, "  build %s; %s database; %d workers (%d processes with restarts), %d locks, %s, TTL %s; emulator fault injection %v\n",
		r.Build, DialectName(c.Dialect), c.Workers, r.Processes, c.Locks, sem, c.TTL, c.FaultInjection)
	fmt.Fprintf(&b, "  ran %s (+%s to finish); logs in %s\n", c.Duration, r.End.Sub(r.Start.Add(c.Duration)).Round(100*time.Millisecond), r.Dir)

	b.WriteString("\nhistories by name:\n")
	r.writeNames(&b)
	b.WriteString("\nhistories by holder:\n")
	r.writeHolders(&b)

	st := r.Stats()
	b.WriteString("\noperations:\n")
	fmt.Fprintf(&b, "  acquisitions %d (%d gave up), releases %d (%d found the lease already lost, %d failed), leases lost %d\n",
		st.Acquired, st.AcquireFailed, st.Released, st.ReleaseLost, st.ReleaseErrored, st.LeasesLost)
	fmt.Fprintf(&b, "  guarded writes %d: %d committed, %d rejected (%d by Guard or the lease's end), %d unknown outcome (%d of them committed)",
		st.Writes, st.Committed, st.Rejected, st.RejectedByGuard, st.Unknown, st.UnknownCommitted)
	if cut := st.Writes - st.Committed - st.Rejected - st.Unknown; cut > 0 {
		fmt.Fprintf(&b, ", %d cut short by SIGKILL", cut)
	}
	b.WriteString("\n")
	if r.TornLines > 0 {
		fmt.Fprintf(&b, "  %d log lines torn by SIGKILL (skipped)\n", r.TornLines)
	}

	b.WriteString("\nfaults:\n")
	counts := r.FaultCounts()
	for _, k := range sortedKeys(counts) {
		fmt.Fprintf(&b, "  %-22s %d\n", k, counts[k])
	}
	var amb []string
	total := 0
	for _, k := range sortedKeys(st.AmbiguousCommits) {
		amb = append(amb, fmt.Sprintf("%s %d", k, st.AmbiguousCommits[k]))
		total += st.AmbiguousCommits[k]
	}
	fmt.Fprintf(&b, "  %-22s %d (by transaction: %s)\n", "ambiguous commits", total, strings.Join(amb, ", "))
	fmt.Fprintf(&b, "  %-22s %d\n", "emulator-injected aborts", st.EmulatorAborts)
	fmt.Fprintf(&b, "  %-22s %d blackholed, %d paused\n", "recoveries struck", st.RecoveriesStruck[record.FaultRecoveryBlackhole], st.RecoveriesStruck[record.FaultRecoveryPause])
	b.WriteString("  timeline:\n")
	for _, f := range r.Faults {
		d := ""
		if f.Duration > 0 {
			d = " for " + f.Duration.Round(time.Millisecond).String()
		}
		fmt.Fprintf(&b, "    +%-8s %-18s %-6s%s: %s\n", f.At.Sub(r.Start).Round(time.Millisecond), f.Kind, f.Target, d, f.Detail)
	}

	b.WriteString("\nverdict: ")
	if r.OK() {
		fmt.Fprintf(&b, "PASS: %d accepted writes on %d names, no violation\n", len(r.History.Writes), len(r.History.Counters))
		return b.String()
	}
	byKind := map[string]int{}
	for _, v := range r.Violations {
		byKind[v.Kind]++
	}
	var kinds []string
	for _, k := range sortedKeys(byKind) {
		kinds = append(kinds, fmt.Sprintf("%s %d", k, byKind[k]))
	}
	fmt.Fprintf(&b, "FAIL: %d violations (%s)\n", len(r.Violations), strings.Join(kinds, ", "))
	for i, v := range r.Violations {
		if i == 30 {
			fmt.Fprintf(&b, "  ... %d more\n", len(r.Violations)-i)
			break
		}
		fmt.Fprintf(&b, "  %s\n", v)
	}
	return b.String()
}

func (r *Result) writeNames(b *strings.Builder) {
	type nameStats struct {
		acquisitions   int
		holders        map[string]bool
		minTok, maxTok int64
		writes         int
	}
	names := map[string]*nameStats{}
	get := func(n string) *nameStats {
		if names[n] == nil {
			names[n] = &nameStats{holders: map[string]bool{}}
		}
		return names[n]
	}
	for _, e := range r.History.Events {
		if e.Ev != record.EvAcquired {
			continue
		}
		s := get(e.Name)
		s.acquisitions++
		s.holders[e.Holder] = true
		if s.minTok == 0 || e.Token < s.minTok {
			s.minTok = e.Token
		}
		s.maxTok = max(s.maxTok, e.Token)
	}
	for _, w := range r.History.Writes {
		get(w.Name).writes++
	}
	tw := tabwriter.NewWriter(b, 0, 0, 2, ' ', 0)
	_, _ = fmt.Fprintln(tw, "  name\tacquisitions\tholders\ttokens\taccepted writes\tcounter\t")
	for _, n := range sortedKeys(names) {
		s := names[n]
		_, _ = fmt.Fprintf(tw, "  %s\t%d\t%d\t%d..%d\t%d\t%d\t\n", n, s.acquisitions, len(s.holders), s.minTok, s.maxTok, s.writes, r.History.Counters[n])
	}
	_ = tw.Flush()
}

func (r *Result) writeHolders(b *strings.Builder) {
	type holderStats struct {
		acquired, failed, committed, rejected, unknown, released, lost int
		names                                                          map[string]bool
	}
	hs := map[string]*holderStats{}
	for _, e := range r.History.Events {
		s := hs[e.Holder]
		if s == nil {
			s = &holderStats{names: map[string]bool{}}
			hs[e.Holder] = s
		}
		switch e.Ev {
		case record.EvAcquired:
			s.acquired++
			s.names[e.Name] = true
		case record.EvAcquireFailed:
			s.failed++
		case record.EvWriteDone:
			switch e.Outcome {
			case record.Committed:
				s.committed++
			case record.Rejected:
				s.rejected++
			default:
				s.unknown++
			}
		case record.EvReleased:
			if e.Outcome == record.Released {
				s.released++
			}
		case record.EvEnded:
			if e.Outcome == record.EndedLost {
				s.lost++
			}
		}
	}
	holders := sortedKeys(hs)
	sort.SliceStable(holders, func(i, j int) bool { return holderLess(holders[i], holders[j]) })
	tw := tabwriter.NewWriter(b, 0, 0, 2, ' ', 0)
	_, _ = fmt.Fprintln(tw, "  holder\tacquired\tgave up\twrites committed/rejected/unknown\treleased\tlost\tnames\t")
	for _, h := range holders {
		s := hs[h]
		_, _ = fmt.Fprintf(tw, "  %s\t%d\t%d\t%d/%d/%d\t%d\t%d\t%s\t\n", h, s.acquired, s.failed, s.committed, s.rejected, s.unknown, s.released, s.lost, strings.Join(sortedKeys(s.names), ","))
	}
	_ = tw.Flush()
}

// holderLess orders w2.0 before w10.0.
func holderLess(a, b string) bool {
	var ai, ag, bi, bg int
	if _, err := fmt.Sscanf(a, "w%d.%d", &ai, &ag); err != nil {
		return a < b
	}
	if _, err := fmt.Sscanf(b, "w%d.%d", &bi, &bg); err != nil {
		return a < b
	}
	if ai != bi {
		return ai < bi
	}
	return ag < bg
}
