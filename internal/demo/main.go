// Command demo shows spannerlock end to end on the Spanner emulator:
// terraform apply of examples/quickstart with the provider built from this
// checkout creates the lock table; three replicas of examples/leader elect a
// leader; Terraform's spannerlock_leader data source shows it; the leader is
// killed without releasing, another takes over, and Terraform shows the new
// one. Then the spannerlock command: three shell loops take turns with
// `spannerlock lock`, three `spannerlock run-once` calls for one slot run the
// job once, and `status` and `holder` show a held lock. It starts an emulator
// unless SPANNER_EMULATOR_HOST names one, and finds terraform through
// $TERRAFORM or PATH. Run it with `make demo`.
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
	table    = "locks" // as examples/quickstart names it
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

	db, err := e.CreateDatabase(ctx)
	if err != nil {
		return err
	}
	say("created the empty database %s", db)

	work, err := os.MkdirTemp("", "spannerlock-demo")
	if err != nil {
		return err
	}
	defer func() { _ = os.RemoveAll(work) }()
	tf, err := newTerraform(ctx, work, db, e)
	if err != nil {
		return err
	}
	say("terraform apply of examples/quickstart (provider built from this checkout, via dev_overrides)")
	if err := tf.run(ctx, "apply", "-auto-approve"); err != nil {
		return err
	}

	bin := filepath.Join(work, "leader")
	if err := goBuild(ctx, bin, "./examples/leader"); err != nil {
		return err
	}

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
	say("%s leads with token %d", leader.HolderID, leader.Token)
	if err := tf.showLeader(ctx); err != nil {
		return err
	}
	if err := pause(ctx, 2*time.Second); err != nil {
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
	if err := tf.showLeader(ctx); err != nil {
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
	if err := cliDemo(ctx, e, db, work); err != nil {
		return err
	}
	say("terraform destroy: no lease is live, so the table may go")
	if err := tf.run(ctx, "destroy", "-auto-approve"); err != nil {
		return err
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

func goBuild(ctx context.Context, out, pkg string) error {
	cmd := exec.CommandContext(ctx, "go", "build", "-o", out, pkg)
	cmd.Stdout, cmd.Stderr = os.Stdout, os.Stderr
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("go build %s: %w", pkg, err)
	}
	return nil
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
