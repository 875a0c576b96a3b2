package main

import (
	"encoding/xml"
	"errors"
	"io"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// figures of a full run, as the phases record them.
func fullRun() *results {
	r := newResults(config{steadyTTL: 10 * time.Second, n10k: 10000}, time.Now())
	for n, rps := range map[int]float64{1: 0.6, 100: 0.6, 10000: 0.6} {
		r.holdingRate("spannerlock", n, rps, false)
	}
	r.holdingRate("spannerlock", 0, 0, false) // the process holding nothing: no place on log axes
	r.holdingRate("spindle", 1, 0.47, false)
	r.holdingRate("spindle", 100, 55.4, false)
	r.failoverTrials("spannerlock", 3*time.Second, []float64{0.99, 0.88, 0.78, 0.87, 0.77})
	r.failoverTrials("spindle", 3*time.Second, []float64{1.48, 1.51, 1.19, 1.52, 1.59})
	r.failoverTrials("spannerlock", 10*time.Second, []float64{0.99, 0.84, 0.76})
	r.failoverTrials("spindle", 10*time.Second, []float64{1.90, 1.23, 1.15})
	return r
}

// texts returns the text of every <text> element of an SVG document, and
// fails the test if it is not well-formed XML.
func texts(t *testing.T, path string) string {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = f.Close() }()
	d := xml.NewDecoder(f)
	var b strings.Builder
	inText := false
	for {
		tok, err := d.Token()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatalf("%s is not well-formed SVG: %v", path, err)
		}
		switch x := tok.(type) {
		case xml.StartElement:
			inText = x.Name.Local == "text"
		case xml.EndElement:
			inText = false
		case xml.CharData:
			if inText {
				b.Write(x)
				b.WriteString("\n")
			}
		}
	}
	return b.String()
}

func TestChartDrawsBothPanels(t *testing.T) {
	path := filepath.Join(t.TempDir(), "results.svg")
	drawn, err := fullRun().writeChart(path)
	if err != nil || !drawn {
		t.Fatalf("writeChart = %v, %v; want a chart", drawn, err)
	}
	got := texts(t, path)
	for _, want := range []string{
		"RPC/s of a process holding leases (TTL 10s)", "leases held", "10,000",
		"spannerlock", "spindle v2.2.0", "spindle scaled from 100 (not run)",
		"Failover after SIGKILL of the holder, per trial", "failover time ÷ TTL", "TTL 3s", "TTL 10s", "target ≤ 1.25× TTL",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("the chart has no text %q; it has:\n%s", want, got)
		}
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(b), "font-family:Liberation Sans,Arial,Helvetica,sans-serif;") {
		t.Error("the chart names no fallback for Liberation Sans")
	}
}

// A short or partial run (-quick, -only) still gets a chart of what it
// measured: one holder, or failovers only.
func TestChartOfAPartialRun(t *testing.T) {
	dir := t.TempDir()
	one := newResults(config{steadyTTL: 10 * time.Second, n10k: 2000}, time.Now())
	one.holdingRate("spannerlock", 2000, 0.13, true)
	if drawn, err := one.writeChart(filepath.Join(dir, "one.svg")); err != nil || !drawn {
		t.Fatalf("one holder: writeChart = %v, %v; want a chart", drawn, err)
	}
	got := texts(t, filepath.Join(dir, "one.svg"))
	if strings.Contains(got, "Failover") {
		t.Errorf("a run without failovers drew a failover panel:\n%s", got)
	}
	// A holder that lost its leases is not plotted as holding them.
	if !strings.Contains(got, "spannerlock: leases lost, renewals failed") {
		t.Errorf("the chart does not say the holder lost its leases:\n%s", got)
	}

	failed := newResults(config{steadyTTL: 10 * time.Second}, time.Now())
	failed.holdingRate("spindle", 100, math.NaN(), false) // a measurement that failed
	failed.failoverTrials("spannerlock", 3*time.Second, []float64{0.9})
	failed.failoverTrials("spindle", 3*time.Second, nil)
	if drawn, err := failed.writeChart(filepath.Join(dir, "failed.svg")); err != nil || !drawn {
		t.Fatalf("failovers only: writeChart = %v, %v; want a chart", drawn, err)
	}
	if got := texts(t, filepath.Join(dir, "failed.svg")); strings.Contains(got, "holding leases") {
		t.Errorf("a run without a holder's rate drew that panel:\n%s", got)
	}

	none := newResults(config{}, time.Now())
	if drawn, err := none.writeChart(filepath.Join(dir, "none.svg")); err != nil || drawn {
		t.Fatalf("nothing measured: writeChart = %v, %v; want no chart", drawn, err)
	}
	if _, err := os.Stat(filepath.Join(dir, "none.svg")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("nothing measured, yet a file was written: %v", err)
	}
}
