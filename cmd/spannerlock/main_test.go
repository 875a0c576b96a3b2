//go:build unix

package main

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/spannerlock/terraform-provider-spannerlock/internal/emulator"
	"github.com/spannerlock/terraform-provider-spannerlock/internal/locktable"
	"github.com/spannerlock/terraform-provider-spannerlock/lease"
)

// binary is spannerlock, built once for the package by TestMain; the tests
// run it as users do, as a process, against the package's emulator.
var binary string

// raceEnabled is set when the tests run with -race, so that the binary is
// built with it too and a data race in spannerlock fails the test that
// provoked it (the race detector exits 66).
var raceEnabled bool

const (
	table = "locks"
	// runTimeout bounds one spannerlock run; tests that wait longer say so.
	runTimeout = 90 * time.Second
	// conditionTimeout bounds a wait for something a test expects to
	// happen: generous, because the machine may be loaded.
	conditionTimeout = 60 * time.Second
)

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "spannerlock-cli-test-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	binary = filepath.Join(dir, "spannerlock")
	args := []string{"build", "-o", binary}
	if raceEnabled {
		args = append(args, "-race")
	}
	build := exec.Command("go", append(args, ".")...)
	if out, err := build.CombinedOutput(); err != nil {
		fmt.Fprintf(os.Stderr, "building spannerlock: %v\n%s", err, out)
		_ = os.RemoveAll(dir)
		os.Exit(1)
	}
	code := emulator.Run(m)
	_ = os.RemoveAll(dir)
	os.Exit(code)
}

// env is an environment for spannerlock: the test process's own, which
// reaches the emulator through SPANNER_EMULATOR_HOST, without the settings
// spannerlock must make for itself, and with db as SPANNERLOCK_DATABASE.
func env(db string) []string {
	var out []string
	for _, kv := range os.Environ() {
		k, _, _ := strings.Cut(kv, "=")
		switch {
		case k == "GOOGLE_CLOUD_SPANNER_MULTIPLEXED_SESSIONS", strings.HasPrefix(k, "SPANNERLOCK_"):
			continue
		}
		out = append(out, kv)
	}
	if db != "" {
		out = append(out, "SPANNERLOCK_DATABASE="+db)
	}
	if raceEnabled {
		// The race detector otherwise waits a second at every exit.
		out = append(out, "GORACE=atexit_sleep_ms=0")
	}
	return out
}

// proc is a spannerlock process.
type proc struct {
	t      *testing.T
	cmd    *exec.Cmd
	stdout *syncBuffer
	stderr *syncBuffer
	done   chan struct{}
}

// start starts spannerlock with args in dir (the test's files live there),
// with environment envv. It is killed at the end of the test if still running.
func start(t *testing.T, dir string, envv []string, stdin io.Reader, args ...string) *proc {
	t.Helper()
	return startProgram(t, dir, envv, stdin, binary, args...)
}

// startProgram is start for any program.
func startProgram(t *testing.T, dir string, envv []string, stdin io.Reader, program string, args ...string) *proc {
	t.Helper()
	return startProgramWith(t, nil, dir, envv, stdin, program, args...)
}

// startProgramWith is startProgram with attr for the process (a process
// group of its own).
func startProgramWith(t *testing.T, attr *syscall.SysProcAttr, dir string, envv []string, stdin io.Reader, program string, args ...string) *proc {
	t.Helper()
	cmd := exec.Command(program, args...)
	cmd.Dir, cmd.Env, cmd.Stdin, cmd.SysProcAttr = dir, envv, stdin, attr
	p := &proc{t: t, cmd: cmd, stdout: &syncBuffer{}, stderr: &syncBuffer{}, done: make(chan struct{})}
	cmd.Stdout, cmd.Stderr = p.stdout, p.stderr
	// A process left behind holding stdout open must not hang the test:
	// the tests that look for leftovers say so instead.
	cmd.WaitDelay = 5 * time.Second
	if err := cmd.Start(); err != nil {
		t.Fatalf("starting spannerlock %v: %v", args, err)
	}
	go func() {
		_ = cmd.Wait()
		close(p.done)
	}()
	t.Cleanup(func() {
		select {
		case <-p.done:
		default:
			_ = cmd.Process.Kill()
			<-p.done
		}
	})
	return p
}

// wait waits for the process to exit and returns its exit status; death by
// a signal is 128+N, as a shell reports it.
func (p *proc) wait() int {
	p.t.Helper()
	select {
	case <-p.done:
	case <-time.After(runTimeout):
		_ = p.cmd.Process.Kill()
		<-p.done
		p.t.Fatalf("%v did not exit within %s\nstdout:\n%s\nstderr:\n%s", p.cmd.Args, runTimeout, p.stdout, p.stderr)
	}
	ws, _ := p.cmd.ProcessState.Sys().(syscall.WaitStatus)
	if ws.Signaled() {
		return 128 + int(ws.Signal())
	}
	return ws.ExitStatus()
}

// expect waits for the process and fails the test unless it exited with code.
func (p *proc) expect(code int) {
	p.t.Helper()
	if got := p.wait(); got != code {
		p.t.Fatalf("%v exited %d, want %d\nstdout:\n%s\nstderr:\n%s", p.cmd.Args, got, code, p.stdout, p.stderr)
	}
}

func (p *proc) signal(sig syscall.Signal) {
	p.t.Helper()
	if err := p.cmd.Process.Signal(sig); err != nil {
		p.t.Fatalf("signalling spannerlock: %v", err)
	}
}

// result is a finished run.
type result struct {
	code           int
	stdout, stderr string
}

// run runs spannerlock to completion.
func run(t *testing.T, dir string, envv []string, stdin io.Reader, args ...string) result {
	t.Helper()
	p := start(t, dir, envv, stdin, args...)
	code := p.wait()
	return result{code: code, stdout: p.stdout.String(), stderr: p.stderr.String()}
}

// cli runs spannerlock against one database of the package's emulator.
type cli struct {
	t       *testing.T
	db      string
	dialect locktable.Dialect
	dir     string
	env     []string
}

// newCLI gives the test a GoogleSQL database with the lock table and a
// directory, for tests of what spannerlock does whatever the dialect
// (running CMD, signals, the terminal).
func newCLI(t *testing.T) *cli {
	t.Helper()
	return newCLIIn(t, locktable.GoogleSQL)
}

// newCLIIn gives the test a database of dialect d with the lock table and a
// directory.
func newCLIIn(t *testing.T, d locktable.Dialect) *cli {
	t.Helper()
	db := emulator.DatabaseIn(t, string(d), lease.Dialect(d).DDL(table)...)
	return &cli{t: t, db: db, dialect: d, dir: t.TempDir(), env: env(db)}
}

// emptyCLIIn gives the test a database of dialect d without tables.
func emptyCLIIn(t *testing.T, d locktable.Dialect) *cli {
	t.Helper()
	db := emulator.DatabaseIn(t, string(d))
	return &cli{t: t, db: db, dialect: d, dir: t.TempDir(), env: env(db)}
}

// inEachDialect runs test once against each Spanner dialect, for tests of
// what reaches Spanner through SQL. The two run side by side: they share
// nothing but the emulator.
func inEachDialect(t *testing.T, test func(t *testing.T, d locktable.Dialect)) {
	t.Helper()
	for _, d := range locktable.Dialects {
		t.Run(dialectName(d), func(t *testing.T) {
			t.Parallel()
			test(t, d)
		})
	}
}

func dialectName(d locktable.Dialect) string {
	if d == locktable.PostgreSQL {
		return "PostgreSQL"
	}
	return "GoogleSQL"
}

func (c *cli) run(args ...string) result {
	c.t.Helper()
	return run(c.t, c.dir, c.env, nil, args...)
}

func (c *cli) start(args ...string) *proc {
	c.t.Helper()
	return start(c.t, c.dir, c.env, nil, args...)
}

// expect runs spannerlock and fails the test unless it exits with code.
func (c *cli) expect(code int, args ...string) result {
	c.t.Helper()
	r := c.run(args...)
	if r.code != code {
		c.t.Fatalf("spannerlock %v exited %d, want %d\nstdout:\n%s\nstderr:\n%s", args, r.code, code, r.stdout, r.stderr)
	}
	return r
}

// path is a file in the test's directory.
func (c *cli) path(name string) string { return filepath.Join(c.dir, name) }

// read returns a file of the test's directory, "" if it does not exist.
func (c *cli) read(name string) string {
	b, err := os.ReadFile(c.path(name))
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		c.t.Fatal(err)
	}
	return string(b)
}

func (c *cli) exists(name string) bool {
	_, err := os.Stat(c.path(name))
	return err == nil
}

// lines returns the lines of a file of the test's directory.
func (c *cli) lines(name string) []string {
	var out []string
	s := bufio.NewScanner(strings.NewReader(c.read(name)))
	for s.Scan() {
		out = append(out, s.Text())
	}
	return out
}

// pid reads a process ID a command wrote to a file.
func (c *cli) pid(name string) int {
	c.t.Helper()
	var pid int
	if _, err := fmt.Sscan(c.read(name), &pid); err != nil {
		c.t.Fatalf("reading a pid from %s: %v", name, err)
	}
	return pid
}

// waitFile waits until a command has written the file.
func (c *cli) waitFile(name string) {
	c.t.Helper()
	waitFor(c.t, "file "+name, func() bool { return strings.HasSuffix(c.read(name), "\n") })
}

// client is a lease Client of the test's own on the database, to hold
// leases and read holders beside the processes under test.
func (c *cli) client(opts ...lease.Option) *lease.Client {
	c.t.Helper()
	lc, err := lease.NewClient(emulator.Client(c.t, c.db), table, opts...)
	if err != nil {
		c.t.Fatal(err)
	}
	c.t.Cleanup(func() { _ = lc.Close() })
	return lc
}

// waitFor polls cond until it holds, failing the test after conditionTimeout.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(conditionTimeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s", conditionTimeout, what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// dead reports whether a process is gone: exited and reaped, or a zombie
// (this machine's PID 1 may reap nothing).
func dead(pid int) bool {
	if err := syscall.Kill(pid, 0); errors.Is(err, syscall.ESRCH) {
		return true
	}
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return errors.Is(err, os.ErrNotExist)
	}
	// pid (comm) state ...: comm may hold spaces and parentheses.
	rest := stat[bytes.LastIndexByte(stat, ')')+1:]
	fields := strings.Fields(string(rest))
	return len(fields) > 0 && (fields[0] == "Z" || fields[0] == "X")
}

// holderOf returns the live holder of name, or nil.
func holderOf(t *testing.T, lc *lease.Client, name string) *lease.Holder {
	t.Helper()
	h, err := lc.Holder(emulator.Context(t), name)
	if errors.Is(err, lease.ErrNoHolder) {
		return nil
	}
	if err != nil {
		t.Fatalf("Holder(%q): %v", name, err)
	}
	return &h
}

func testContext(t *testing.T) context.Context { return emulator.Context(t) }

// syncBuffer is a bytes.Buffer safe for a process's output and a test's reads.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}
