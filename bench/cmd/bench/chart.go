package main

import (
	"bytes"
	"fmt"
	"image/color"
	"math"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/font"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgsvg"
)

// chartData is what results.svg draws, collected as the phases run.
type chartData struct {
	// holding[lib][n] is the RPC/s of a process of lib holding n leases;
	// lost[lib][n] says it had lost them by the end of its window.
	holding map[string]map[int]float64
	lost    map[string]map[int]bool
	// failovers are each setting's trials, as multiples of the TTL.
	failovers []failoverSeries
}

type failoverSeries struct {
	lib    string
	ttl    time.Duration
	trials []float64
}

// holdingRate records the RPC/s of a process of lib meant to hold n
// leases, and whether it lost them.
func (r *results) holdingRate(lib string, n int, rps float64, lost bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.chart.holding == nil {
		r.chart.holding, r.chart.lost = map[string]map[int]float64{}, map[string]map[int]bool{}
	}
	if r.chart.holding[lib] == nil {
		r.chart.holding[lib], r.chart.lost[lib] = map[int]float64{}, map[int]bool{}
	}
	r.chart.holding[lib][n] = rps
	r.chart.lost[lib][n] = lost
}

// failoverTrials records the failover trials of lib at ttl.
func (r *results) failoverTrials(lib string, ttl time.Duration, trials []float64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.chart.failovers = append(r.chart.failovers, failoverSeries{lib: lib, ttl: ttl, trials: slices.Clone(trials)})
}

// Colours of the two libraries, the same in both panels (Okabe-Ito blue
// and orange, told apart with colour blindness too).
var (
	spannerlockColor = color.RGBA{R: 0x00, G: 0x72, B: 0xB2, A: 0xff}
	spindleColor     = color.RGBA{R: 0xE6, G: 0x9F, B: 0x00, A: 0xff}
	guideColor       = color.Gray{Y: 0x80}
)

func libColor(lib string) color.Color {
	if lib == "spindle" {
		return spindleColor
	}
	return spannerlockColor
}

// writeChart draws results.svg: RPC/s against leases held, and failover
// time per trial. It writes nothing when the run measured neither.
func (r *results) writeChart(path string) (bool, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	var row []*plot.Plot
	if p, ok := r.holdingPlot(); ok {
		row = append(row, p)
	}
	if p, ok := r.failoverPlot(); ok {
		row = append(row, p)
	}
	if len(row) == 0 {
		return false, nil
	}
	const panelWidth, height = 11 * vg.Centimeter, 9 * vg.Centimeter
	c := vgsvg.New(panelWidth*vg.Length(len(row)), height)
	dc := draw.New(c)
	tiles := draw.Tiles{Rows: 1, Cols: len(row), PadX: vg.Centimeter, PadTop: vg.Millimeter, PadBottom: vg.Millimeter,
		PadLeft: vg.Millimeter, PadRight: 3 * vg.Millimeter}
	canvases := plot.Align([][]*plot.Plot{row}, tiles, dc)
	for i, p := range row {
		p.Draw(canvases[0][i])
	}
	var buf bytes.Buffer
	if _, err := c.WriteTo(&buf); err != nil {
		return false, err
	}
	// The SVG names the font it was measured with, Liberation Sans, which
	// has Arial's metrics; let viewers without it use those.
	svg := strings.ReplaceAll(buf.String(), "font-family:Liberation Sans;", "font-family:Liberation Sans,Arial,Helvetica,sans-serif;")
	return true, os.WriteFile(path, []byte(svg), 0o644)
}

func newPlot(title, x, y string) *plot.Plot {
	plot.DefaultFont = font.Font{Typeface: "Liberation", Variant: "Sans"}
	p := plot.New()
	p.Title.Text = title
	p.X.Label.Text = x
	p.Y.Label.Text = y
	p.Legend.Top = true
	p.Legend.Left = true
	p.Legend.TextStyle.Font.Size = vg.Points(9)
	p.Add(plotter.NewGrid())
	return p
}

// holdingPlot: RPC/s of a process against the leases it holds, both axes
// logarithmic. spindle was run with up to 100 locks; its line continues,
// dashed, to what that rate scales to. A process that lost its leases is a
// cross off the line: its rate is not that of holding them.
func (r *results) holdingPlot() (*plot.Plot, bool) {
	if len(r.chart.holding) == 0 {
		return nil, false
	}
	p := newPlot(fmt.Sprintf("RPC/s of a process holding leases (TTL %s)", r.cfg.steadyTTL), "leases held", "RPC/s")
	p.X.Scale, p.Y.Scale = plot.LogScale{}, plot.LogScale{}
	p.X.Tick.Marker, p.Y.Tick.Marker = decadeTicks{}, decadeTicks{}
	maxN := 0
	lo, hi := math.Inf(1), math.Inf(-1)
	for _, lib := range []string{"spannerlock", "spindle"} {
		xys := holdingPoints(r.chart.holding[lib])
		var held, lost plotter.XYs
		for _, xy := range xys {
			maxN = max(maxN, int(xy.X))
			lo, hi = min(lo, xy.Y), max(hi, xy.Y)
			if r.chart.lost[lib][int(xy.X)] {
				lost = append(lost, xy)
			} else {
				held = append(held, xy)
			}
		}
		if len(held) > 0 {
			line, points, err := plotter.NewLinePoints(held)
			if err == nil {
				line.Color, points.Color = libColor(lib), libColor(lib)
				line.Width = vg.Points(1.5)
				points.Shape = draw.CircleGlyph{}
				points.Radius = vg.Points(3)
				p.Add(line, points)
				p.Legend.Add(legendName(lib), line, points)
			}
		}
		if len(lost) > 0 {
			if points, err := plotter.NewScatter(lost); err == nil {
				points.Color = libColor(lib)
				points.Shape = draw.CrossGlyph{}
				points.Radius = vg.Points(4)
				p.Add(points)
				p.Legend.Add(legendName(lib)+": leases lost, renewals failed", points)
			}
		}
	}
	if n := r.cfg.n10k; n > maxN {
		maxN = n
	}
	// spindle's measured rate at its largest n, scaled to maxN.
	if sp := holdingPoints(r.chart.holding["spindle"]); len(sp) > 0 && int(sp[len(sp)-1].X) < maxN && !r.chart.lost["spindle"][int(sp[len(sp)-1].X)] {
		last := sp[len(sp)-1]
		ext, err := plotter.NewLine(plotter.XYs{last, {X: float64(maxN), Y: last.Y * float64(maxN) / last.X}})
		if err == nil {
			ext.Color = spindleColor
			ext.Width = vg.Points(1.5)
			ext.Dashes = []vg.Length{vg.Points(4), vg.Points(3)}
			p.Add(ext)
			p.Legend.Add(fmt.Sprintf("spindle scaled from %d (not run)", int(last.X)), ext)
			hi = max(hi, last.Y*float64(maxN)/last.X)
		}
	}
	if math.IsInf(lo, 1) {
		return nil, false
	}
	// Whole decades around the data: log axes need positive bounds, and a
	// single point would otherwise give an empty range.
	p.X.Min, p.X.Max = 0.5, 2*float64(maxN)
	p.Y.Min, p.Y.Max = math.Pow(10, math.Floor(math.Log10(lo))), math.Pow(10, math.Ceil(math.Log10(hi)+0.01))
	return p, true
}

// decadeTicks labels each power of ten (1,000 rather than 1000) and marks
// the multiples between them.
type decadeTicks struct{}

func (decadeTicks) Ticks(lo, hi float64) []plot.Tick {
	var ticks []plot.Tick
	for e := math.Floor(math.Log10(lo)); math.Pow(10, e) <= hi; e++ {
		decade := math.Pow(10, e)
		for i := 1; i < 10; i++ {
			v := decade * float64(i)
			if v < lo || v > hi {
				continue
			}
			t := plot.Tick{Value: v}
			if i == 1 {
				t.Label = decadeLabel(decade)
			}
			ticks = append(ticks, t)
		}
	}
	return ticks
}

func decadeLabel(v float64) string {
	if v < 1 {
		return strconv.FormatFloat(v, 'f', -1, 64)
	}
	s := strconv.FormatFloat(v, 'f', 0, 64)
	for i := len(s) - 3; i > 0; i -= 3 {
		s = s[:i] + "," + s[i:]
	}
	return s
}

// holdingPoints are the measured rates by leases held, in order; a process
// holding nothing or a failed measurement has no place on log axes.
func holdingPoints(m map[int]float64) plotter.XYs {
	var ns []int
	for n, rps := range m {
		if n > 0 && rps > 0 && !math.IsNaN(rps) {
			ns = append(ns, n)
		}
	}
	slices.Sort(ns)
	xys := make(plotter.XYs, len(ns))
	for i, n := range ns {
		xys[i] = plotter.XY{X: float64(n), Y: m[n]}
	}
	return xys
}

func legendName(lib string) string {
	if lib == "spindle" {
		return "spindle v2.2.0"
	}
	return lib
}

// failoverPlot: each trial's failover time, from SIGKILL of the holder to
// the waiter holding the lease, as a multiple of the TTL, a column of
// points per library side by side for each TTL, with the TTL and the 1.25×
// target drawn across.
func (r *results) failoverPlot() (*plot.Plot, bool) {
	if len(r.chart.failovers) == 0 {
		return nil, false
	}
	p := newPlot("Failover after SIGKILL of the holder, per trial", "", "failover time ÷ TTL")
	var ttls []time.Duration
	for _, s := range r.chart.failovers {
		if !slices.Contains(ttls, s.ttl) {
			ttls = append(ttls, s.ttl)
		}
	}
	slices.Sort(ttls)
	top := 1.25
	legend := map[string]bool{}
	for _, s := range r.chart.failovers {
		if len(s.trials) == 0 {
			continue
		}
		// spannerlock left of the TTL's tick, spindle right; trials spread
		// across their column so that equal values stay visible.
		centre := float64(slices.Index(ttls, s.ttl)) - 0.18
		if s.lib == "spindle" {
			centre += 0.36
		}
		xys := make(plotter.XYs, len(s.trials))
		for j, v := range s.trials {
			offset := 0.0
			if len(s.trials) > 1 {
				offset = 0.2 * (float64(j)/float64(len(s.trials)-1) - 0.5)
			}
			xys[j] = plotter.XY{X: centre + offset, Y: v}
			top = max(top, v)
		}
		points, err := plotter.NewScatter(xys)
		if err != nil {
			continue
		}
		points.Color = libColor(s.lib)
		points.Shape = draw.CircleGlyph{}
		points.Radius = vg.Points(3.5)
		p.Add(points)
		if !legend[s.lib] {
			legend[s.lib] = true
			p.Legend.Add(legendName(s.lib), points)
		}
	}
	var names []string
	for _, ttl := range ttls {
		names = append(names, "TTL "+ttl.String())
	}
	p.NominalX(names...)
	p.X.Min, p.X.Max = -0.5, float64(len(ttls))-0.5
	// Room above the highest trial for the legend.
	p.Y.Min, p.Y.Max = 0, math.Ceil(top*1.4*4)/4
	p.Y.Tick.Marker = multipleTicks{}
	for _, g := range []struct {
		y     float64
		label string
		dash  bool
	}{{1, "TTL", false}, {1.25, "target ≤ 1.25× TTL", true}} {
		l, err := plotter.NewLine(plotter.XYs{{X: p.X.Min, Y: g.y}, {X: p.X.Max, Y: g.y}})
		if err != nil {
			continue
		}
		l.Color = guideColor
		if g.dash {
			l.Dashes = []vg.Length{vg.Points(4), vg.Points(3)}
		}
		p.Add(l)
		p.Legend.Add(g.label, l)
	}
	return p, true
}

// multipleTicks marks every quarter and labels every half: 0.5×, 1×, 1.5×.
type multipleTicks struct{}

func (multipleTicks) Ticks(lo, hi float64) []plot.Tick {
	var ticks []plot.Tick
	for q := math.Ceil(lo * 4); q <= hi*4; q++ {
		t := plot.Tick{Value: q / 4}
		if int(q)%2 == 0 {
			t.Label = strconv.FormatFloat(q/4, 'f', -1, 64) + "×"
		}
		ticks = append(ticks, t)
	}
	return ticks
}
