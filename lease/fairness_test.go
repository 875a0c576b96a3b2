package lease_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"cloud.google.com/go/spanner"

	"github.com/spannerlock/terraform-provider-spannerlock/internal/emulator"
	"github.com/spannerlock/terraform-provider-spannerlock/lease"
)

// A contender is a separate process with its own Client, driven by the
// test over stdin: "acquire NAME", "shared NAME" and "release NAME". It
// answers "granted NAME TOKEN" when an acquisition returns, "released NAME"
// and "error ..." on stdout.
const (
	contenderEnv    = "LEASE_TEST_CONTENDER_DB"
	contenderIDEnv  = "LEASE_TEST_CONTENDER_ID"
	contenderTTLEnv = "LEASE_TEST_CONTENDER_TTL"
)

func runContender() {
	ctx := context.Background()
	ttl, err := time.ParseDuration(os.Getenv(contenderTTLEnv))
	if err != nil {
		fmt.Println("error:", err)
		os.Exit(2)
	}
	sc, err := spanner.NewClient(ctx, os.Getenv(contenderEnv))
	if err != nil {
		fmt.Println("error:", err)
		os.Exit(2)
	}
	c, err := lease.NewClient(sc, table, lease.WithTTL(ttl), lease.WithHolderID(os.Getenv(contenderIDEnv)))
	if err != nil {
		fmt.Println("error:", err)
		os.Exit(2)
	}
	var (
		mu   sync.Mutex
		held = map[string]*lease.Lease{}
		say  = func(format string, args ...any) {
			mu.Lock()
			defer mu.Unlock()
			fmt.Printf(format+"\n", args...)
		}
	)
	say("ready")
	in := bufio.NewScanner(os.Stdin)
	for in.Scan() {
		verb, name, _ := strings.Cut(in.Text(), " ")
		switch verb {
		case "acquire", "shared":
			go func() {
				acquire := c.Acquire
				if verb == "shared" {
					acquire = c.AcquireShared
				}
				l, err := acquire(ctx, name)
				if err != nil {
					say("error: %v", err)
					return
				}
				mu.Lock()
				held[name] = l
				mu.Unlock()
				say("granted %s %d", name, l.Token())
			}()
		case "release":
			mu.Lock()
			l := held[name]
			delete(held, name)
			mu.Unlock()
			if err := l.Release(ctx); err != nil {
				say("error: %v", err)
				continue
			}
			say("released %s", name)
		}
	}
	os.Exit(0)
}

// contender is the test's handle on a contender process.
type contender struct {
	t   *testing.T
	id  string
	cmd *exec.Cmd
	in  io.Writer
	out chan string
}

func startContender(t *testing.T, db, id string, ttl time.Duration) *contender {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), emulator.Shared(t).Env()...)
	cmd.Env = append(cmd.Env, contenderEnv+"="+db, contenderIDEnv+"="+id, contenderTTLEnv+"="+ttl.String())
	in, err := cmd.StdinPipe()
	fatalIf(t, err, "pipe")
	stdout, err := cmd.StdoutPipe()
	fatalIf(t, err, "pipe")
	fatalIf(t, cmd.Start(), "start contender %s", id)
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	c := &contender{t: t, id: id, cmd: cmd, in: in, out: make(chan string, 16)}
	go func() {
		lines := bufio.NewScanner(stdout)
		for lines.Scan() {
			c.out <- lines.Text()
		}
		close(c.out)
	}()
	c.expect("ready")
	return c
}

func (c *contender) send(command string) {
	c.t.Helper()
	_, err := fmt.Fprintln(c.in, command)
	fatalIf(c.t, err, "tell %s to %s", c.id, command)
}

// next returns the contender's next line, failing after 30s.
func (c *contender) next() string {
	c.t.Helper()
	select {
	case line, ok := <-c.out:
		if !ok {
			c.t.Fatalf("contender %s exited", c.id)
		}
		return line
	case <-time.After(30 * time.Second):
		c.t.Fatalf("contender %s said nothing for 30s", c.id)
	}
	return ""
}

func (c *contender) expect(prefix string) string {
	c.t.Helper()
	line := c.next()
	if !strings.HasPrefix(line, prefix) {
		c.t.Fatalf("contender %s said %q, want %q…", c.id, line, prefix)
	}
	return line
}

// granted waits for the contender's grant of name and returns its token.
func (c *contender) granted(name string) int64 {
	c.t.Helper()
	line := c.expect("granted " + name + " ")
	token, err := strconv.ParseInt(strings.TrimPrefix(line, "granted "+name+" "), 10, 64)
	fatalIf(c.t, err, "token in %q", line)
	return token
}

// quiet fails the test if the contender says anything within d: it is still
// waiting.
func (c *contender) quiet(d time.Duration) {
	c.t.Helper()
	select {
	case line := <-c.out:
		c.t.Fatalf("contender %s said %q while others were ahead of it in line", c.id, line)
	case <-time.After(d):
	}
}

// inLine waits until Spanner lists the given holders as the name's waiters,
// in that order.
func inLine(t *testing.T, ctx context.Context, c *lease.Client, name string, holders ...string) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		line, err := lineOf(ctx, c, name)
		fatalIf(t, err, "Waiters")
		if slices.Equal(line, holders) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("line of %q = %v after 30s, want %v", name, line, holders)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// lineOf returns the holder IDs in name's line, first come first.
func lineOf(ctx context.Context, c *lease.Client, name string) ([]string, error) {
	ws, err := c.Waiters(ctx)
	if err != nil {
		return nil, err
	}
	var line []string
	for _, w := range ws {
		if w.Name == name {
			line = append(line, w.HolderID)
		}
	}
	return line, nil
}

func TestWaitersInOtherProcessesAreServedInTheOrderTheyCame(t *testing.T) {
	eachDialect(t, func(t *testing.T) {
		ctx := emulator.Context(t)
		db := newDatabase(t)
		ttl := 5 * time.Second
		observer := newClient(t, db)
		procs := map[string]*contender{}
		for _, id := range []string{"first", "second", "third", "fourth"} {
			procs[id] = startContender(t, db, id, ttl)
		}
		procs["first"].send("acquire job")
		token := procs["first"].granted("job")
		// second, third and fourth join the line one after another.
		var line []string
		for _, id := range []string{"second", "third", "fourth"} {
			procs[id].send("acquire job")
			line = append(line, id)
			inLine(t, ctx, observer, "job", line...)
		}
		// A newcomer does not jump the line, even when it tries at the
		// moment of a release.
		if _, err := observer.TryAcquire(ctx, "job"); !errors.Is(err, lease.ErrNotAcquired) {
			t.Fatalf("TryAcquire with a line of waiters: err = %v, want ErrNotAcquired", err)
		}
		// The releaser that wants it again joins the back of the line.
		procs["first"].send("release job")
		procs["first"].expect("released job")
		procs["first"].send("acquire job")
		for _, id := range []string{"second", "third", "fourth", "first"} {
			if id == "second" {
				inLine(t, ctx, observer, "job", "third", "fourth", "first")
			}
			got := procs[id].granted("job")
			if got != token+1 {
				t.Fatalf("%s granted token %d, want %d (one more than the previous holder's)", id, got, token+1)
			}
			token = got
			procs[id].send("release job")
			procs[id].expect("released job")
		}
	})
}

func TestAWaiterKilledInLineHoldsUpTheLineForAtMostATTL(t *testing.T) {
	eachDialect(t, func(t *testing.T) {
		ctx := emulator.Context(t)
		db := newDatabase(t)
		ttl := 3 * time.Second
		holder := startContender(t, db, "holder", ttl)
		doomed := startContender(t, db, "doomed", ttl)
		patient := startContender(t, db, "patient", ttl)
		observer := newClient(t, db)
		holder.send("acquire job")
		holder.granted("job")
		doomed.send("acquire job")
		inLine(t, ctx, observer, "job", "doomed")
		patient.send("acquire job")
		inLine(t, ctx, observer, "job", "doomed", "patient")

		fatalIf(t, doomed.cmd.Process.Signal(syscall.SIGKILL), "kill the first waiter")
		killed := time.Now()
		holder.send("release job")
		holder.expect("released job")
		patient.granted("job")
		// The killed waiter's session was renewed until the kill; it lives
		// at most a TTL after that, then the line moves on (a poll later).
		if took := time.Since(killed); took > ttl+ttl/2 {
			t.Fatalf("the waiter behind a killed one waited %s after the kill, want at most TTL plus a poll (%s)", took, ttl+ttl/2)
		}
	})
}

func TestReadersShareAndAWriterInLineStopsNewReaders(t *testing.T) {
	eachDialect(t, func(t *testing.T) {
		ctx := emulator.Context(t)
		db := newDatabase(t)
		ttl := 5 * time.Second
		r1 := startContender(t, db, "reader1", ttl)
		r2 := startContender(t, db, "reader2", ttl)
		w := startContender(t, db, "writer", ttl)
		r3 := startContender(t, db, "reader3", ttl)
		observer := newClient(t, db)

		r1.send("shared config")
		t1 := r1.granted("config")
		r2.send("shared config")
		t2 := r2.granted("config") // readers share
		if t2 <= t1 {
			t.Fatalf("second reader's token %d not above the first's %d", t2, t1)
		}
		h, err := observer.Holder(ctx, "config")
		fatalIf(t, err, "Holder of a lock held shared")
		if h.Kind != "shared" {
			t.Fatalf("Holder.Kind = %q, want shared", h.Kind)
		}
		if _, err := observer.TryAcquire(ctx, "config"); !errors.Is(err, lease.ErrNotAcquired) {
			t.Fatalf("TryAcquire of a name readers hold: err = %v, want ErrNotAcquired", err)
		}
		w.send("acquire config")
		inLine(t, ctx, observer, "config", "writer")
		// A reader that comes after a waiting writer waits behind it: readers
		// that keep coming cannot starve a writer.
		r3.send("shared config")
		inLine(t, ctx, observer, "config", "writer", "reader3")
		if _, err := observer.TryAcquireShared(ctx, "config"); !errors.Is(err, lease.ErrNotAcquired) {
			t.Fatalf("TryAcquireShared with a writer in line: err = %v, want ErrNotAcquired", err)
		}
		r1.send("release config")
		r1.expect("released config")
		w.quiet(500 * time.Millisecond) // reader2 still holds it
		r2.send("release config")
		r2.expect("released config")
		tw := w.granted("config")
		if tw <= t2 {
			t.Fatalf("writer's token %d not above the readers' %d", tw, t2)
		}
		r3.quiet(500 * time.Millisecond)
		w.send("release config")
		w.expect("released config")
		if t3 := r3.granted("config"); t3 <= tw {
			t.Fatalf("reader's token %d not above the writer's %d", t3, tw)
		}
	})
}
