package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/spannerlock/terraform-provider-spannerlock/internal/emulator"
)

// cliDemo shows the spannerlock command on the table Terraform created:
// shell loops taking turns with `spannerlock lock`, and run-once calls for
// one slot of which exactly one runs the job.
func cliDemo(ctx context.Context, e *emulator.Emulator, db, work string) error {
	bin := filepath.Join(work, "spannerlock")
	say("go build ./cmd/spannerlock: the command for programs that are not written in Go")
	if err := goBuild(ctx, bin, "./cmd/spannerlock"); err != nil {
		return err
	}
	env := append(os.Environ(), e.Env()...)
	env = append(env, "SPANNERLOCK_DATABASE="+db, "SPANNERLOCK_TABLE="+table, "PATH="+work+string(os.PathListSeparator)+os.Getenv("PATH"))

	say("three shell loops run `spannerlock lock counter -- ...` three times each: one holds it at a time, each with a larger token")
	loop := `for i in 1 2 3; do
	  spannerlock --poll-interval 100ms lock counter -- sh -c 'echo "$WHO holds counter with token $SPANNERLOCK_TOKEN"; sleep 0.2'
	done`
	if err := together(ctx, env, "loop", loop); err != nil {
		return err
	}

	slot := time.Now().UTC().Truncate(24 * time.Hour).Format(time.RFC3339)
	say("three machines' crontabs call `spannerlock run-once nightly-report --slot %s` at once: the report runs once; that call exits 0, the two others 77 (done elsewhere, so CMD did not run)", slot)
	runOnce := fmt.Sprintf(`spannerlock --poll-interval 100ms run-once nightly-report --slot %s -- sh -c 'echo "$WHO runs the nightly report for $SPANNERLOCK_SLOT"; sleep 1'
	echo "$WHO: spannerlock exited $?"`, slot)
	if err := together(ctx, env, "vm", runOnce); err != nil {
		return err
	}

	say("`spannerlock lock deploy` without a command holds the lock; `spannerlock status` and `spannerlock holder deploy` show it")
	holder := exec.CommandContext(ctx, bin, "--holder-id", "release-pipeline", "lock", "deploy")
	holder.Env, holder.Stderr = env, os.Stderr
	out, err := holder.StdoutPipe()
	if err != nil {
		return err
	}
	if err := holder.Start(); err != nil {
		return err
	}
	defer func() { _ = holder.Process.Kill(); _ = holder.Wait() }()
	// It prints the token once it holds the lock.
	if _, err := bufio.NewReader(out).ReadString('\n'); err != nil {
		return fmt.Errorf("spannerlock lock deploy: %w", err)
	}
	for _, args := range [][]string{{"status"}, {"holder", "deploy"}} {
		if err := show(ctx, bin, env, args...); err != nil {
			return err
		}
	}
	_ = holder.Process.Signal(syscall.SIGTERM)
	if err := holder.Wait(); err != nil {
		return fmt.Errorf("spannerlock lock deploy: %w", err)
	}
	say("SIGTERM released it; `spannerlock holder deploy` now exits 3:")
	return show(ctx, bin, env, "holder", "deploy")
}

// together runs three copies of a shell script at once, each with WHO set
// to name-1..3, and relays their output.
func together(ctx context.Context, env []string, name, script string) error {
	var (
		wg   sync.WaitGroup
		mu   sync.Mutex
		errs []error
	)
	for i := 1; i <= 3; i++ {
		cmd := exec.CommandContext(ctx, "sh", "-c", script)
		cmd.Env = append(env, fmt.Sprintf("WHO=%s-%d", name, i))
		cmd.Stderr = os.Stderr
		out, err := cmd.StdoutPipe()
		if err != nil {
			return err
		}
		if err := cmd.Start(); err != nil {
			return err
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			relay(out)
			if err := cmd.Wait(); err != nil {
				mu.Lock()
				errs = append(errs, fmt.Errorf("%s-%d: %w", name, i, err))
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	if len(errs) > 0 {
		return errs[0]
	}
	return nil
}

// show runs one spannerlock command and relays its output, exit status
// included.
func show(ctx context.Context, bin string, env []string, args ...string) error {
	fmt.Printf("  $ spannerlock %s\n", strings.Join(args, " "))
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Env = env
	out, err := cmd.CombinedOutput()
	for _, line := range strings.Split(strings.TrimRight(string(out), "\n"), "\n") {
		fmt.Println("  " + line)
	}
	var exit *exec.ExitError
	if errors.As(err, &exit) {
		fmt.Printf("  (exit status %d)\n", exit.ExitCode())
		return nil
	}
	return err
}
