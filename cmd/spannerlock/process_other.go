//go:build !unix

package main

import (
	"errors"
	"fmt"
	"log/slog"
	"os"
	"time"

	"github.com/spannerlock/terraform-provider-spannerlock/lease"
)

// Running CMD needs process groups and signals: Linux, macOS or another
// Unix. Everything else (init, holder, status, holding without a command)
// works everywhere.
const reaperArg = "__spannerlock_reaper"

var errNoProcessGroups = errors.New("running a command under a lease needs Linux, macOS or another Unix")

type runOutcome struct {
	status    int
	lost      bool
	stoppedBy os.Signal
}

func reaperMain([]string) int {
	fmt.Fprintln(os.Stderr, "spannerlock:", errNoProcessGroups)
	return exitUsage
}

func (a *app) runChild(*lease.Lease, *childSpec, time.Duration, *slog.Logger) (runOutcome, error) {
	return runOutcome{}, exitWith(exitCannotRun, "%v", errNoProcessGroups)
}

// jobControl is Unix job control; there is none here.
type jobControl struct{}

func notifyJobControl() *jobControl { return &jobControl{} }
