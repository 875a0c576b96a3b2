package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"golang.org/x/term"
)

// watchInterval is how often status --watch reads the table.
const watchInterval = time.Second

// watchStatus reads the status every watchInterval, through the same reads
// as status, and shows each read until a stopping signal, when it returns
// nil. A first read that fails ends it; later failures are shown and the
// read is tried again at the next refresh.
func (a *app) watchStatus(c *conn, timeout time.Duration, format string) error {
	ctx, end := a.sigs.interruptible(c.ctx)
	defer end()
	out := a.statusView(c, format)
	tick := time.NewTicker(watchInterval)
	defer tick.Stop()
	for shown := false; ; {
		var st statusJSON
		err := c.readWithin(ctx, timeout, func(ctx context.Context) (err error) {
			st, err = readStatus(ctx, c)
			return err
		})
		switch {
		case outage(ctx) != nil:
			return outage(ctx)
		case ctx.Err() != nil:
			return nil
		case err != nil && !shown:
			return err
		case err != nil:
			out.failed(err, time.Now())
		default:
			if err := out.show(st, time.Now()); err != nil {
				return fmt.Errorf("writing the status: %w", err)
			}
			// Once it has shown a read, it shows an outage and keeps
			// trying, instead of ending at one.
			c.outages.pause()
			shown = true
		}
		select {
		case <-ctx.Done():
			return outage(ctx) // nil after a stopping signal
		case <-tick.C:
		}
	}
}

// statusView shows the reads of status --watch.
type statusView interface {
	// show shows st, read at t.
	show(st statusJSON, t time.Time) error
	// failed says that the read at t failed.
	failed(err error, t time.Time)
}

// statusView returns the view for format on a's stdout: a screen redrawn in
// place on a terminal, else a stream of reads.
func (a *app) statusView(c *conn, format string) statusView {
	header := func(t time.Time) string {
		// The time first: a narrow window cuts the end of the line.
		return fmt.Sprintf("Read at %s, every %s: table %s in %s", t.UTC().Format(time.RFC3339), watchInterval, c.table, c.db)
	}
	if f, ok := a.stdout.(*os.File); ok && format == "table" && term.IsTerminal(int(f.Fd())) {
		return &screen{out: f, header: header}
	}
	return &stream{out: a.stdout, json: format == "json", header: header, c: c}
}

// stream prints each read in full, for a pipe or a file: a JSON object per
// line, or the table under its header line and followed by a blank line.
type stream struct {
	out    io.Writer
	json   bool
	header func(time.Time) string
	c      *conn
}

func (s *stream) show(st statusJSON, t time.Time) error {
	if s.json {
		return writeJSON(s.out, st)
	}
	var b strings.Builder
	say(&b, "%s\n\n", s.header(t))
	if err := printStatus(&b, st); err != nil {
		return err
	}
	b.WriteString("\n")
	_, err := io.WriteString(s.out, b.String())
	return err
}

func (s *stream) failed(err error, t time.Time) {
	s.c.log.Warn("reading the table failed; trying again at the next refresh", "at", t.UTC().Format(time.RFC3339), "err", err)
}

// screen redraws the table in place on a terminal: the cursor goes home,
// each line is written over the last read's and cleared to its end, and
// what the last read had below is cleared, so the picture never flickers
// blank. Lines are cut to the terminal's size, which would otherwise wrap
// or scroll the picture out of place.
type screen struct {
	out    *os.File
	header func(time.Time) string
	// last is the last read shown, and when it was read.
	last   *statusJSON
	lastAt time.Time
	drawn  bool
}

const (
	cursorHome     = "\x1b[H"
	clearScreen    = "\x1b[2J"
	clearLineEnd   = "\x1b[K"
	clearScreenEnd = "\x1b[J"
)

func (s *screen) show(st statusJSON, t time.Time) error {
	s.last, s.lastAt = &st, t
	return s.draw(s.header(t), st)
}

func (s *screen) failed(err error, t time.Time) {
	top := fmt.Sprintf("Reading the table failed at %s; trying again every %s: %v", t.UTC().Format(time.RFC3339), watchInterval, err)
	if s.last != nil {
		top += fmt.Sprintf("\nShowing the read at %s:", s.lastAt.UTC().Format(time.RFC3339))
		_ = s.draw(top, *s.last)
		return
	}
	_ = s.draw(top, statusJSON{})
}

func (s *screen) draw(top string, st statusJSON) error {
	var body strings.Builder
	say(&body, "%s\n\n", top)
	if err := printStatus(&body, st); err != nil {
		return err
	}
	lines := strings.Split(strings.TrimSuffix(body.String(), "\n"), "\n")
	if width, height, err := term.GetSize(int(s.out.Fd())); err == nil && width > 1 && height > 1 {
		lines = fit(lines, width, height)
	}
	var b strings.Builder
	b.WriteString(cursorHome)
	if !s.drawn {
		b.WriteString(clearScreen)
	}
	for _, l := range lines {
		b.WriteString(l)
		b.WriteString(clearLineEnd + "\n")
	}
	b.WriteString(clearScreenEnd)
	_, err := io.WriteString(s.out, b.String())
	s.drawn = true
	return err
}

// fit cuts lines to a terminal of width columns and height rows: one
// column short of the edge, where a terminal would wrap, and one row short
// of the bottom, where it would scroll, saying how many lines did not fit.
func fit(lines []string, width, height int) []string {
	if len(lines) > height-1 {
		more := len(lines) - (height - 2)
		lines = append(lines[:height-2:height-2], fmt.Sprintf("... %d more lines (a larger window, or -o json, shows them)", more))
	}
	out := make([]string, len(lines))
	for i, l := range lines {
		if r := []rune(l); len(r) > width-1 {
			l = string(r[:width-1])
		}
		out[i] = l
	}
	return out
}
