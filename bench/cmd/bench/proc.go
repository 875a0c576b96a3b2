package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"time"
)

// child is a running child process (see child.go) as the parent sees it.
type child struct {
	label  string
	cmd    *exec.Cmd
	stdin  io.WriteCloser
	events chan event
	done   chan struct{} // closed when the process has exited
	killed bool
	mu     sync.Mutex
	// progress holds the "progress" events seen while waiting for others.
	progress []event
}

// childOpts are the flags of one child.
type childOpts struct {
	lib   string // spannerlock or spindle
	db    string
	table string
	ttl   time.Duration
	poll  time.Duration
	id    string
}

// startChild starts a child and waits for it to be ready.
func (b *bench) startChild(label string, o childOpts) (*child, error) {
	exe, err := os.Executable()
	if err != nil {
		return nil, err
	}
	host := b.emu.Host()
	if b.childHost != "" {
		host = b.childHost // the latency proxy
	}
	args := []string{"child", "-lib", o.lib, "-host", host, "-db", o.db, "-table", o.table, "-ttl", o.ttl.String()}
	if o.poll > 0 {
		args = append(args, "-poll", o.poll.String())
	}
	if o.id != "" {
		args = append(args, "-id", o.id)
	}
	if b.verbose {
		args = append(args, "-v")
	}
	cmd := exec.Command(exe, args...)
	cmd.Env = append(os.Environ(), b.emu.Env()...)
	cmd.Stderr = prefixWriter{w: b.log, prefix: label + ": "}
	// The kernel kills the child if the parent dies, so no holder outlives a run.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return nil, err
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	c := &child{label: label, cmd: cmd, stdin: stdin, events: make(chan event, 1024), done: make(chan struct{})}
	go func() {
		sc := bufio.NewScanner(stdout)
		sc.Buffer(make([]byte, 1<<20), 1<<24)
		for sc.Scan() {
			var e event
			if err := json.Unmarshal(sc.Bytes(), &e); err != nil {
				_, _ = fmt.Fprintf(b.log, "%s: stdout: %s\n", label, sc.Text())
				continue
			}
			c.events <- e
		}
		_ = cmd.Wait()
		close(c.done)
	}()
	if _, err := c.next("ready", time.Minute); err != nil {
		c.kill()
		return nil, err
	}
	return c, nil
}

// send writes one command line to the child.
func (c *child) send(format string, args ...any) error {
	_, err := fmt.Fprintf(c.stdin, format+"\n", args...)
	if err != nil {
		return fmt.Errorf("%s: sending %q: %w", c.label, fmt.Sprintf(format, args...), err)
	}
	return nil
}

// next waits for the next event named ev, failing on an error event, the
// child's exit or the timeout. Other events are dropped.
func (c *child) next(ev string, timeout time.Duration) (event, error) {
	t := time.NewTimer(timeout)
	defer t.Stop()
	for {
		select {
		case e := <-c.events:
			switch e.Ev {
			case ev:
				return e, nil
			case "error":
				return e, fmt.Errorf("%s: %s: %s", c.label, e.Name, e.Err)
			case "progress":
				c.progress = append(c.progress, e)
				progress("%s: %d after %s", c.label, e.N, nanosToDur(e.T-e.T0).Round(time.Second))
			}
		case <-c.done:
			// Drain what it said before exiting.
			select {
			case e := <-c.events:
				if e.Ev == ev {
					return e, nil
				}
			default:
			}
			return event{}, fmt.Errorf("%s exited while we waited for %q", c.label, ev)
		case <-t.C:
			return event{}, fmt.Errorf("%s: no %q within %s", c.label, ev, timeout)
		}
	}
}

// nextAny waits for the child's next event of any name, failing on its
// exit or the timeout.
func (c *child) nextAny(timeout time.Duration) (event, error) {
	select {
	case e := <-c.events:
		return e, nil
	case <-c.done:
		select {
		case e := <-c.events:
			return e, nil
		default:
		}
		return event{}, fmt.Errorf("%s exited", c.label)
	case <-time.After(timeout):
		return event{}, fmt.Errorf("%s: nothing within %s", c.label, timeout)
	}
}

// stats asks for a snapshot; gc forces a collection first (for the live heap).
func (c *child) stats(gc bool) (procStats, error) {
	cmd := "stats"
	if gc {
		cmd = "gcstats"
	}
	if err := c.send("%s", cmd); err != nil {
		return procStats{}, err
	}
	e, err := c.next("stats", time.Minute)
	if err != nil {
		return procStats{}, err
	}
	return *e.Stats, nil
}

// kill SIGKILLs the child and returns when it was sent.
func (c *child) kill() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	t := time.Now()
	if !c.killed {
		c.killed = true
		_ = c.cmd.Process.Signal(syscall.SIGKILL)
	}
	return t
}

// stop asks the child to exit (closing its Client releases what it holds)
// and kills it if it has not within the timeout.
func (c *child) stop() {
	_ = c.send("exit")
	_ = c.stdin.Close()
	select {
	case <-c.done:
	case <-time.After(15 * time.Second):
		c.kill()
		<-c.done
	}
}

type prefixWriter struct {
	w      io.Writer
	prefix string
}

func (p prefixWriter) Write(b []byte) (int, error) {
	lines := strings.SplitAfter(string(b), "\n")
	var sb strings.Builder
	for _, l := range lines {
		if l != "" {
			sb.WriteString(p.prefix + l)
		}
	}
	_, err := io.WriteString(p.w, sb.String())
	return len(b), err
}
