//go:build unix

package main

import (
	"slices"
	"strings"
	"syscall"
	"testing"

	"github.com/spannerlock/terraform-provider-spannerlock/internal/emulator"
	"github.com/spannerlock/terraform-provider-spannerlock/internal/locktable"
	"github.com/spannerlock/terraform-provider-spannerlock/lease"
)

// watchHeader ends the first line of each read status --watch prints,
// after the time of the read, before the database.
const watchHeader = ", every 1s: table locks in "

// lastRead returns the last complete read status --watch printed off a
// terminal: from its header line to the blank line after the table.
func lastRead(out string) string {
	i := strings.LastIndex(out, watchHeader)
	if i < 0 {
		return ""
	}
	read := out[strings.LastIndexByte(out[:i], '\n')+1:]
	// The header line, a blank line, the table and a blank line: the
	// table's own sections are separated by single blank lines.
	if !strings.HasSuffix(read, "\n\n") {
		return ""
	}
	return read
}

// completeLines returns the lines of out that a newline has ended.
func completeLines(out string) []string {
	end := strings.LastIndexByte(out, '\n')
	if end < 0 {
		return nil
	}
	return strings.Split(out[:end], "\n")
}

// status --watch, off a terminal, prints every read in full, without
// escape sequences, so a lease acquired while it watches appears in a later
// read and disappears once released; -o json prints a JSON object per read.
// SIGINT and SIGTERM end it with status 0.
func TestStatusWatch(t *testing.T) {
	inEachDialect(t, func(t *testing.T, d locktable.Dialect) {
		c := newCLIIn(t, d)
		text := c.start("status", "--watch")
		jsonl := c.start("status", "--watch", "-o", "json")
		waitFor(t, "the first read", func() bool {
			read := lastRead(text.stdout.String())
			return strings.HasPrefix(read, "Read at ") && strings.Contains(read, watchHeader+c.db+"\n")
		})
		if read := lastRead(text.stdout.String()); !strings.HasSuffix(read, "\n\nNo live leases in table locks.\n\n") {
			t.Fatalf("first read:\n%s", read)
		}

		l, err := c.client(lease.WithHolderID("web-1")).Acquire(testContext(t), "deploy")
		if err != nil {
			t.Fatal(err)
		}
		waitFor(t, "a read with the lease", func() bool { return strings.Contains(lastRead(text.stdout.String()), "deploy") })
		waitFor(t, "a JSON read with the lease", func() bool {
			lines := completeLines(jsonl.stdout.String())
			return len(lines) > 0 && slices.Equal(parseStatus(t, lines[len(lines)-1]).leases(), []string{"deploy/lock/web-1"})
		})
		if err := l.Release(testContext(t)); err != nil {
			t.Fatal(err)
		}
		waitFor(t, "a read without the lease", func() bool {
			return strings.Contains(lastRead(text.stdout.String()), "No live leases")
		})

		text.signal(syscall.SIGINT)
		text.expect(0)
		jsonl.signal(syscall.SIGTERM)
		jsonl.expect(0)
		if out := text.stdout.String(); strings.Contains(out, "\x1b") || strings.Count(out, watchHeader) < 3 {
			t.Errorf("off a terminal, want reads in full without escape sequences, got:\n%q", out)
		}
		for i, line := range completeLines(jsonl.stdout.String()) {
			if st := parseStatus(t, line); st.Table != "locks" {
				t.Errorf("JSON read %d: %q", i, line)
			}
		}
	})
}

// A read that fails after the first is reported on stderr and retried:
// status --watch goes on, and shows the table again once it is back.
func TestStatusWatchGoesOnAfterAFailedRead(t *testing.T) {
	c := newCLI(t)
	p := c.start("status", "--watch")
	waitFor(t, "the first read", func() bool { return strings.Contains(lastRead(p.stdout.String()), "No live leases") })
	if err := emulator.Shared(t).UpdateDDL(testContext(t), c.db, locktable.DropDDL(table)...); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "a failed read reported on stderr", func() bool { return p.stderr.String() != "" })
	c.expect(0, "init")
	if _, err := c.client(lease.WithHolderID("back")).Acquire(testContext(t), "deploy"); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "a read of the table created again", func() bool { return strings.Contains(lastRead(p.stdout.String()), "back") })
	p.signal(syscall.SIGINT)
	p.expect(0)
}

func TestFit(t *testing.T) {
	lines := []string{"header", "", "NAME  HOLDER", "a     h1", "b     h2", "c     h3"}
	for _, tc := range []struct {
		width, height int
		want          []string
	}{
		{80, 24, lines},
		{80, 7, lines},
		{80, 6, []string{"header", "", "NAME  HOLDER", "a     h1", "... 2 more lines (a larger window, or -o json, shows them)"}},
		{6, 24, []string{"heade", "", "NAME ", "a    ", "b    ", "c    "}},
	} {
		if got := fit(slices.Clone(lines), tc.width, tc.height); !slices.Equal(got, tc.want) {
			t.Errorf("fit to %dx%d: %q, want %q", tc.width, tc.height, got, tc.want)
		}
	}
}
