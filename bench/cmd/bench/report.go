package main

import (
	"encoding/json"
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/spannerlock/terraform-provider-spannerlock/internal/emulator"
)

// results collects the table rows and the details behind them.
type results struct {
	cfg     config
	start   time.Time
	elapsed time.Duration
	env     env
	idle    string

	mu      sync.Mutex
	rows    []resultRow
	details []string
	notes   []string
	// dialects compares spannerlock's RPC counts on a GoogleSQL and on a
	// PostgreSQL-dialect database.
	dialects []dialectRow
	// chart holds what results.svg draws.
	chart chartData
}

// dialectRow is one line of the dialect comparison: a figure on each
// dialect and whether they are the same.
type dialectRow struct {
	measure, googleSQL, postgreSQL, same string
}

// dialectRow records a comparison.
func (r *results) dialectRow(x dialectRow) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.dialects = append(r.dialects, x)
}

// compareCounts records an RPC count measured on each dialect (the mean of
// its trials), which must be equal.
func (r *results) compareCounts(measure string, googleSQL, postgreSQL []float64) {
	g, p := mean(googleSQL), mean(postgreSQL)
	x := dialectRow{measure: measure, googleSQL: num(g), postgreSQL: num(p), same: "yes"}
	switch {
	case math.IsNaN(g) || math.IsNaN(p):
		x.same = "—"
	case g != p || maxOf(googleSQL) != maxOf(postgreSQL):
		x.same = fmt.Sprintf("**no**: PostgreSQL %+.2f (max %s vs %s)", p-g, num(maxOf(postgreSQL)), num(maxOf(googleSQL)))
	}
	r.dialectRow(x)
}

// resultRow is one line of the table. slv and spv are the comparable
// numbers (NaN when there is none); the ratio is spv/slv, and every measure
// is lower-is-better.
type resultRow struct {
	measure, target string
	sl, sp          string
	slv, spv        float64
	met             string
}

func newResults(c config, start time.Time) *results {
	return &results{cfg: c, start: start}
}

func (r *results) row(x resultRow) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.rows = append(r.rows, x)
}

func (r *results) detail(format string, args ...any) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.details = append(r.details, fmt.Sprintf(format, args...))
}

func (r *results) note(format string, args ...any) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.notes = append(r.notes, fmt.Sprintf(format, args...))
}

// met says whether a value is within a target.
func met(ok bool) string {
	if ok {
		return "yes"
	}
	return "**no**"
}

func (r *results) markdown() string {
	var b strings.Builder
	fmt.Fprintf(&b, "# Benchmark results\n\n")
	fmt.Fprintf(&b, "Produced by `make bench` (`cd bench && go run ./cmd/bench%s`) on %s; the run took %s.\n",
		r.flags(), r.start.UTC().Format("2006-01-02 15:04 MST"), r.elapsed.Round(time.Second))
	fmt.Fprintf(&b, "Every figure is measured in this run on one emulator; lower is better everywhere, and the ratio is spindle ÷ spannerlock.\n")
	fmt.Fprintf(&b, "RPCs are counted per process by a gRPC interceptor on its spanner.Client, excluding session-management methods; aborted attempts are included and also counted on their own.\n\n")
	fmt.Fprintf(&b, "| measure | target | spannerlock | spindle v2.2.0 | ratio | spannerlock meets target |\n|---|---|---|---|---|---|\n")
	for _, x := range r.rows {
		ratio := "—"
		if !math.IsNaN(x.slv) && !math.IsNaN(x.spv) && x.slv > 0 {
			ratio = fmt.Sprintf("%.1f×", x.spv/x.slv)
		}
		met := x.met
		if met == "" {
			met = "—"
		}
		fmt.Fprintf(&b, "| %s | %s | %s | %s | %s | %s |\n", x.measure, orDash(x.target), orDash(x.sl), orDash(x.sp), ratio, met)
	}
	if len(r.dialects) > 0 {
		fmt.Fprintf(&b, "\n## Both dialects\n\n")
		fmt.Fprintf(&b, "spannerlock's RPC counts measured again on a PostgreSQL-dialect database, the same way and in the same run; "+
			"the table above is GoogleSQL throughout (spindle has no PostgreSQL support). A count that differs says **no**.\n\n")
		fmt.Fprintf(&b, "| measure (spannerlock) | GoogleSQL | PostgreSQL | same |\n|---|---|---|---|\n")
		for _, x := range r.dialects {
			fmt.Fprintf(&b, "| %s | %s | %s | %s |\n", x.measure, orDash(x.googleSQL), orDash(x.postgreSQL), orDash(x.same))
		}
	}
	fmt.Fprintf(&b, "\n## Environment\n\n")
	e := r.env
	fmt.Fprintf(&b, "- Emulator: Cloud Spanner emulator %s (%s), multiplexed sessions off\n", e.emulator, e.emulatorBin)
	fmt.Fprintf(&b, "- Client: cloud.google.com/go/spanner %s; peer: github.com/flowerinthenight/spindle/v2 %s (its lock/ package runs github.com/flowerinthenight/spindle %s)\n", e.spanner, e.spindle, e.spindleV1)
	fmt.Fprintf(&b, "- %s, %s; %d CPUs (%s)\n", e.goVersion, runtime.GOOS+"/"+runtime.GOARCH, runtime.NumCPU(), e.cpuModel)
	fmt.Fprintf(&b, "- Load average at start %s, at end %s. Other work shares this machine; see the CPU notes below.\n", e.loadStart, e.loadEnd)
	fmt.Fprintf(&b, "- %s\n", r.idle)
	if len(r.notes) > 0 {
		fmt.Fprintf(&b, "\n## Notes\n\n")
		for _, n := range r.notes {
			fmt.Fprintf(&b, "- %s\n", n)
		}
	}
	fmt.Fprintf(&b, "\n## Details\n\n")
	for _, d := range r.details {
		fmt.Fprintf(&b, "- %s\n", d)
	}
	return b.String()
}

func (r *results) flags() string {
	var f []string
	if r.cfg.quick {
		f = append(f, "-quick")
	}
	if r.cfg.only != "" {
		f = append(f, "-only "+r.cfg.only)
	}
	if len(f) == 0 {
		return ""
	}
	return " " + strings.Join(f, " ")
}

// orDash is s, or a dash for a figure there is none of.
func orDash(s string) string {
	if s == "" {
		return "—"
	}
	return s
}

type env struct {
	emulator, emulatorBin       string
	spanner, spindle, spindleV1 string
	goVersion, cpuModel         string
	loadStart, loadEnd          string
}

func environment() env {
	e := env{goVersion: runtime.Version(), cpuModel: cpuModel(), loadStart: loadavg(), emulator: "unknown version"}
	if bin, err := emulator.Binary(); err == nil {
		e.emulatorBin = bin
		e.emulator = emulatorVersion(bin)
	}
	if bi, ok := debug.ReadBuildInfo(); ok {
		for _, d := range bi.Deps {
			switch d.Path {
			case "cloud.google.com/go/spanner":
				e.spanner = d.Version
			case "github.com/flowerinthenight/spindle/v2":
				e.spindle = d.Version
			case "github.com/flowerinthenight/spindle":
				e.spindleV1 = d.Version
			}
		}
	}
	return e
}

// emulatorVersion reads the version the gcloud SDK recorded for the
// emulator component next to the binary (<sdk>/.install/*.snapshot.json).
func emulatorVersion(bin string) string {
	sdk := filepath.Dir(filepath.Dir(filepath.Dir(bin)))
	files, _ := filepath.Glob(filepath.Join(sdk, ".install", "cloud-spanner-emulator*.snapshot.json"))
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		var snap struct {
			Components []struct {
				ID      string `json:"id"`
				Version struct {
					VersionString string `json:"version_string"`
				} `json:"version"`
			} `json:"components"`
		}
		if json.Unmarshal(data, &snap) != nil {
			continue
		}
		for _, c := range snap.Components {
			if strings.HasPrefix(c.ID, "cloud-spanner-emulator") && c.Version.VersionString != "" {
				return c.Version.VersionString
			}
		}
	}
	if out, err := exec.Command("dpkg-query", "-W", "-f=${Version}", "google-cloud-cli-spanner-emulator").Output(); err == nil {
		return "gcloud package " + string(out)
	}
	return "unknown version"
}

func cpuModel() string {
	b, err := os.ReadFile("/proc/cpuinfo")
	if err != nil {
		return "unknown CPU"
	}
	for _, line := range strings.Split(string(b), "\n") {
		if k, v, ok := strings.Cut(line, ":"); ok && strings.TrimSpace(k) == "model name" {
			return strings.TrimSpace(v)
		}
	}
	return "unknown CPU"
}

func loadavg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "unknown"
	}
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return "unknown"
	}
	return strings.Join(f[:3], " ")
}

// Small numeric helpers.

func median(xs []float64) float64 {
	if len(xs) == 0 {
		return math.NaN()
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

func maxOf(xs []float64) float64 {
	if len(xs) == 0 {
		return math.NaN()
	}
	return slices.Max(xs)
}

func mean(xs []float64) float64 {
	if len(xs) == 0 {
		return math.NaN()
	}
	var t float64
	for _, x := range xs {
		t += x
	}
	return t / float64(len(xs))
}

func itoa(n int64) string { return strconv.FormatInt(n, 10) }

// num formats a figure without trailing zeros beyond what it needs.
func num(x float64) string {
	switch {
	case math.IsNaN(x):
		return "—"
	case x == math.Trunc(x) && math.Abs(x) < 1e9:
		return strconv.FormatInt(int64(x), 10)
	case math.Abs(x) >= 100:
		return fmt.Sprintf("%.0f", x)
	case math.Abs(x) >= 10:
		return fmt.Sprintf("%.1f", x)
	default:
		return fmt.Sprintf("%.2f", x)
	}
}

func list(xs []float64, f func(float64) string) string {
	parts := make([]string, len(xs))
	for i, x := range xs {
		parts[i] = f(x)
	}
	return strings.Join(parts, ", ")
}

func ms(x float64) string { return fmt.Sprintf("%.0f ms", x*1000) }

func nanosToDur(n int64) time.Duration { return time.Duration(n) }

// cpuTicks reads user+system time of process pid from /proc, in clock ticks
// of 10 ms (USER_HZ is 100 on Linux); 0 when it cannot be read.
func cpuTicks(pid int) int64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0
	}
	// The command name may contain spaces; fields start after the last ')'.
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return 0
	}
	f := strings.Fields(s[i+1:])
	if len(f) < 13 {
		return 0
	}
	ut, _ := strconv.ParseInt(f[11], 10, 64)
	st, _ := strconv.ParseInt(f[12], 10, 64)
	return ut + st
}

// emulatorPID finds the emulator process serving host.
func emulatorPID(host string) int {
	dirs, _ := filepath.Glob("/proc/[0-9]*")
	for _, d := range dirs {
		b, err := os.ReadFile(filepath.Join(d, "cmdline"))
		if err != nil {
			continue
		}
		args := strings.Split(string(b), "\x00")
		if len(args) == 0 || !strings.HasSuffix(args[0], "emulator_main") {
			continue
		}
		if slices.Contains(args, host) {
			pid, _ := strconv.Atoi(filepath.Base(d))
			return pid
		}
	}
	return 0
}

// machineCPU reads the busy and total jiffies of all CPUs from /proc/stat.
func machineCPU() (busy, total int64) {
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return 0, 0
	}
	line, _, _ := strings.Cut(string(b), "\n")
	f := strings.Fields(line)
	// user nice system idle iowait irq softirq steal [guest guest_nice,
	// already counted in user and nice]
	for i, v := range f[1:] {
		if i >= 8 {
			break
		}
		n, _ := strconv.ParseInt(v, 10, 64)
		total += n
		if i != 3 && i != 4 {
			busy += n
		}
	}
	return busy, total
}

func numCPU() int { return runtime.NumCPU() }
