// Command demo shows spannerlock end to end on the Spanner emulator: it
// creates a lock table, runs three replicas of examples/leader, kills the
// leader without letting it release, and shows another replica take over.
// It starts an emulator unless SPANNER_EMULATOR_HOST names one. Run it with
// `make demo`.
package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"sync"
	"syscall"
	"time"

	"github.com/spannerlock/terraform-provider-spannerlock/internal/emulator"
	"github.com/spannerlock/terraform-provider-spannerlock/lease"
)

const (
	table    = "locks"
	election = "jobs"
	ttl      = 3 * time.Second
	replicas = 3
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx); err != nil {
		fmt.Fprintln(os.Stderr, "demo:", err)
		os.Exit(1)
	}
}

func say(format string, args ...any) {
	fmt.Printf("%s demo: %s\n", time.Now().Format("15:04:05.000"), fmt.Sprintf(format, args...))
}

func run(ctx context.Context) error {
	e, err := startEmulator(ctx)
	if err != nil {
		return err
	}
	defer func() { _ = e.Stop() }()

	db, err := e.CreateDatabase(ctx, lease.DDL(table)...)
	if err != nil {
		return err
	}
	say("created %s with table %s (lease.DDL)", db, table)

	bin, err := buildLeader(ctx)
	if err != nil {
		return err
	}
	defer func() { _ = os.RemoveAll(filepath.Dir(bin)) }()

	procs := map[string]*exec.Cmd{}
	var output sync.WaitGroup
	for i := 1; i <= replicas; i++ {
		id := fmt.Sprintf("replica-%d", i)
		cmd := exec.Command(bin, "-name", election, "-table", table, "-id", id, "-ttl", ttl.String())
		cmd.Env = append(os.Environ(), e.Env()...)
		cmd.Env = append(cmd.Env, "SPANNERLOCK_DATABASE="+db)
		out, err := cmd.StdoutPipe()
		if err != nil {
			return err
		}
		cmd.Stderr = os.Stderr
		if err := cmd.Start(); err != nil {
			return fmt.Errorf("start %s: %w", id, err)
		}
		procs[id] = cmd
		output.Add(1)
		go func() { defer output.Done(); relay(out) }()
	}
	defer func() {
		for _, cmd := range procs {
			_ = cmd.Process.Kill()
			_ = cmd.Wait()
		}
		output.Wait()
	}()

	sc, err := e.NewClient(ctx, db)
	if err != nil {
		return err
	}
	defer sc.Close()
	watcher, err := lease.NewClient(sc, table)
	if err != nil {
		return err
	}
	defer func() { _ = watcher.Close() }()

	leader, err := waitForLeader(ctx, watcher, "")
	if err != nil {
		return err
	}
	say("%s leads with token %d; letting it lead for a few seconds", leader.HolderID, leader.Token)
	if err := pause(ctx, 4*time.Second); err != nil {
		return err
	}

	killed := time.Now()
	say("killing %s with SIGKILL: it cannot release, so its lease must expire (TTL %s)", leader.HolderID, ttl)
	victim := procs[leader.HolderID]
	_ = victim.Process.Kill()
	_ = victim.Wait()
	delete(procs, leader.HolderID)

	next, err := waitForLeader(ctx, watcher, leader.HolderID)
	if err != nil {
		return err
	}
	took := time.Since(killed)
	say("%s took over with token %d, %s after the kill (%.2f×TTL)", next.HolderID, next.Token, took.Round(time.Millisecond), took.Seconds()/ttl.Seconds())
	if err := pause(ctx, 3*time.Second); err != nil {
		return err
	}

	say("stopping the remaining replicas with SIGTERM: the leader steps down and releases")
	for id, cmd := range procs {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		_ = cmd.Wait()
		delete(procs, id)
	}
	output.Wait()
	if _, err := watcher.Holder(ctx, election); errors.Is(err, lease.ErrNoHolder) {
		say("no one holds %q now: the last leader released it on the way out", election)
	}
	say("done")
	return nil
}

func startEmulator(ctx context.Context) (*emulator.Emulator, error) {
	if host := os.Getenv("SPANNER_EMULATOR_HOST"); host != "" {
		say("using the emulator at %s", host)
		return emulator.External(ctx, host)
	}
	e, err := emulator.Start(ctx, emulator.Options{})
	if err != nil {
		return nil, err
	}
	say("started the Spanner emulator at %s", e.Host())
	return e, nil
}

func buildLeader(ctx context.Context) (string, error) {
	dir, err := os.MkdirTemp("", "spannerlock-demo")
	if err != nil {
		return "", err
	}
	bin := filepath.Join(dir, "leader")
	cmd := exec.CommandContext(ctx, "go", "build", "-o", bin, "./examples/leader")
	cmd.Stdout, cmd.Stderr = os.Stdout, os.Stderr
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("build examples/leader: %w", err)
	}
	return bin, nil
}

func relay(r io.Reader) {
	s := bufio.NewScanner(r)
	for s.Scan() {
		fmt.Println("  " + s.Text())
	}
}

// waitForLeader polls until someone other than not holds the election.
func waitForLeader(ctx context.Context, c *lease.Client, not string) (lease.Holder, error) {
	ctx, cancel := context.WithTimeout(ctx, 5*ttl)
	defer cancel()
	for {
		h, err := c.Holder(ctx, election)
		if err == nil && h.HolderID != not {
			return h, nil
		}
		if err != nil && !errors.Is(err, lease.ErrNoHolder) {
			return lease.Holder{}, err
		}
		if err := pause(ctx, 50*time.Millisecond); err != nil {
			return lease.Holder{}, fmt.Errorf("waiting for a leader: %w", err)
		}
	}
}

func pause(ctx context.Context, d time.Duration) error {
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(d):
		return nil
	}
}
