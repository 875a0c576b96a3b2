// Command spannerlock runs any program under a Spanner lock, once per
// schedule slot, or as the elected leader, over the same lease package Go
// applications import. Run `spannerlock --help` for the commands.
//
//	go install github.com/spannerlock/terraform-provider-spannerlock/cmd/spannerlock@latest
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"runtime"
	"runtime/debug"
	"strings"

	"go.opentelemetry.io/otel/trace"
)

// Exit statuses. CMD's own status passes through unchanged, so these are
// chosen where programs rarely use them: sysexits' EX_TEMPFAIL and
// EX_PROTOCOL for the two outcomes a caller acts on, and the shells' 126
// and 127 for a command that cannot run.
const (
	exitOK = 0
	// exitFailure: spannerlock could not do its part (Spanner unreachable,
	// table missing, permission denied); the message says what to do.
	exitFailure = 1
	// exitUsage: the command line is wrong.
	exitUsage = 2
	// exitNoHolder: `holder` or `break` found nobody holding the name.
	exitNoHolder = 3
	// exitNotAcquired: --try or --timeout found the name held; a Spanner
	// that did not answer is exitFailure, never this.
	exitNotAcquired = 75
	// exitLost: the lease was lost while CMD ran; CMD was stopped.
	exitLost = 76
	// exitAlreadyDone: run-once found its slot done, by this or another
	// host, and did not run CMD: "skipped", as automake's test drivers
	// read 77.
	exitAlreadyDone = 77
	// exitCannotRun and exitNotFound: CMD could not be started.
	exitCannotRun = 126
	exitNotFound  = 127
)

// version is set by the release build; `go install` builds report the
// module version instead.
var version = ""

func main() {
	if len(os.Args) > 1 && os.Args[1] == reaperArg {
		os.Exit(reaperMain(os.Args[2:]))
	}
	a := newApp(os.Stdout, os.Stderr)
	code := a.main(os.Args[1:])
	if code == signalStatus(os.Interrupt) && (a.sigs.interrupted.Load() || a.interruptGroup) {
		// Interrupted, spannerlock dies of SIGINT, having released its
		// lease, so that the shell that ran it stops too: bash ends a
		// script's loop only for a child that died of SIGINT, not for one
		// that exited 130, and only if it got SIGINT itself, which it did
		// not when CMD had the terminal: then the SIGINT goes to
		// spannerlock's whole group.
		dieOf(os.Interrupt, a.interruptGroup)
	}
	os.Exit(code)
}

// app is one invocation of spannerlock.
type app struct {
	stdout, stderr io.Writer
	// environ is the environment spannerlock started with: CMD gets it
	// plus the SPANNERLOCK_* variables, and nothing spannerlock set for
	// itself.
	environ []string
	global  globalFlags
	sigs    *signals
	// command is the name of the command being run.
	command string
	// ctx carries the span of this run, when OpenTelemetry is set up, to
	// everything the command does.
	ctx context.Context
	// telemetry is the OpenTelemetry SDK, set up by startTelemetry when the
	// environment asks for it, and runSpan the span of this run.
	telemetry *telemetry
	runSpan   trace.Span
	// interruptGroup is set when CMD, with the terminal its group's, died
	// of SIGINT: a Ctrl-C that reached neither spannerlock nor the shells
	// that ran it, in spannerlock's process group.
	interruptGroup bool
	// interrupted is set when a stopping signal ended the run: the user
	// wants spannerlock gone, and a release Spanner does not answer at
	// once is left to the TTL.
	interrupted bool
	// conflictCode is the exit status for "held" (--conflict-exit-code),
	// doneCode for a run-once slot done already (--done-exit-code).
	conflictCode, doneCode int
	// describe, when set, receives the flag set of the command instead of
	// its being parsed (see describeCommands).
	describe **flag.FlagSet
	// onCommandLine and fromEnv record which flags (by their long names)
	// the command line set, and which their environment variables set.
	onCommandLine, fromEnv map[string]bool
}

func newApp(stdout, stderr io.Writer) *app {
	return &app{stdout: stdout, stderr: stderr, environ: os.Environ(), global: defaultGlobalFlags(), sigs: notifySignals(),
		ctx: context.Background(), conflictCode: exitNotAcquired, doneCode: exitAlreadyDone,
		onCommandLine: map[string]bool{}, fromEnv: map[string]bool{}}
}

// lookupEnv reads spannerlock's environment as it started.
func (a *app) lookupEnv(key string) (string, bool) {
	return lookupIn(a.environ, key)
}

// lookupIn reads key in env, whose last value wins.
func lookupIn(env []string, key string) (string, bool) {
	for i := len(env) - 1; i >= 0; i-- {
		if k, v, ok := strings.Cut(env[i], "="); ok && k == key {
			return v, true
		}
	}
	return "", false
}

// command is one subcommand: its help and what it runs.
type command struct {
	name    string
	summary string
	// synopsis lists the ways to call it, one per line.
	synopsis string
	// help is the description and examples after the synopsis.
	help string
	// runsCMD is set for the commands that run a command after --.
	runsCMD bool
	run     func(a *app, args []string) error
}

func commands() []*command {
	return []*command{
		initCommand(), lockCommand(), permitCommand(), runOnceCommand(), electCommand(),
		holderCommand(), statusCommand(), semaphoreCommand(), breakCommand(), completionCommand(), versionCommand(),
	}
}

func findCommand(name string) *command {
	for _, c := range commands() {
		if c.name == name {
			return c
		}
	}
	return nil
}

// main runs the command line and returns the exit status.
func (a *app) main(args []string) int {
	fs := a.newFlagSet("")
	err := fs.Parse(args)
	switch {
	case errors.Is(err, errHelp):
		a.printOverview(a.stdout)
		return exitOK
	case err != nil:
		return a.fail(usageError("%v", err))
	}
	fs.Visit(func(f *flag.Flag) { a.onCommandLine[canonicalFlag(f.Name)] = true })
	if a.global.version {
		say(a.stdout, "spannerlock %s\n", buildVersion())
		return exitOK
	}
	rest := fs.Args()
	if len(rest) == 0 {
		a.printOverview(a.stderr)
		return exitUsage
	}
	name, args := rest[0], rest[1:]
	if name == "help" {
		if len(args) == 0 {
			a.printOverview(a.stdout)
			return exitOK
		}
		if t := findTopic(args[0]); t != nil {
			printTopic(a.stdout, t)
			return exitOK
		}
		c := findCommand(args[0])
		if c == nil {
			return a.fail(usageError("no command or help topic %q: the topics are %s", args[0], strings.Join(topicNames(), ", ")))
		}
		name, args = c.name, []string{"--help"}
	}
	c := findCommand(name)
	if c == nil {
		return a.fail(usageError("unknown command %q", name))
	}
	a.command = c.name
	err = c.run(a, args)
	if errors.Is(err, errHelp) {
		return exitOK // parse printed it
	}
	if err != nil {
		var u *exitError
		if errors.As(err, &u) && u.usage {
			u.command = c.name
		}
	}
	code := a.fail(err)
	a.stopTelemetry(code)
	return code
}

// fail prints what went wrong and returns the exit status for it.
func (a *app) fail(err error) int {
	if err == nil {
		return exitOK
	}
	var e *exitError
	if !errors.As(err, &e) {
		e = &exitError{code: exitFailure, err: err}
	}
	help := ""
	if e.usage {
		help = "spannerlock --help"
		if e.command != "" {
			help = "spannerlock " + e.command + " --help"
		}
	}
	if a.global.logFormat == "json" {
		// One JSON record, as every other line on stderr, for a log
		// collector.
		if e.err != nil {
			attrs := []slog.Attr{slog.Int("exit_status", e.code)}
			if help != "" {
				attrs = append(attrs, slog.String("usage", help))
			}
			a.jsonLog().LogAttrs(context.Background(), slog.LevelError, e.err.Error(), attrs...)
		}
		return e.code
	}
	if e.err != nil {
		say(a.stderr, "spannerlock: %v\n", e.err)
	}
	if help != "" {
		say(a.stderr, "Run '%s' for usage.\n", help)
	}
	return e.code
}

// jsonLog writes JSON records to stderr whatever --verbose says: for what
// spannerlock always tells, with --log-format json.
func (a *app) jsonLog() *slog.Logger {
	return slog.New(slog.NewJSONHandler(a.stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
}

// note tells the user on stderr what a command did ("Broke ...", "Declared
// ..."): a line of text, or with --log-format json a JSON record at level
// INFO, printed with or without --verbose.
func (a *app) note(format string, args ...any) {
	msg := fmt.Sprintf(format, args...)
	if a.global.logFormat == "json" {
		a.jsonLog().Info(strings.TrimSuffix(msg, "\n"))
		return
	}
	say(a.stderr, "%s", msg)
}

// exitError ends spannerlock with code, after printing err if it is not nil.
type exitError struct {
	code int
	err  error
	// usage marks spannerlock's own usage errors, which point to its help;
	// CMD exiting 2 (ls, grep and argparse do for their usage errors) is
	// CMD's business.
	usage bool
	// command names the command whose help a usage error points to.
	command string
}

func (e *exitError) Error() string {
	if e.err == nil {
		return fmt.Sprintf("exit status %d", e.code)
	}
	return e.err.Error()
}

func (e *exitError) Unwrap() error { return e.err }

// say writes to the terminal or a pipe; a failed write has nowhere better to
// be reported.
func say(w io.Writer, format string, args ...any) {
	_, _ = fmt.Fprintf(w, format, args...)
}

func exitWith(code int, format string, args ...any) error {
	return &exitError{code: code, err: fmt.Errorf(format, args...)}
}

// exitCode ends spannerlock with code and no message: CMD's own status.
func exitCode(code int) error {
	if code == exitOK {
		return nil
	}
	return &exitError{code: code}
}

func usageError(format string, args ...any) error {
	return &exitError{code: exitUsage, err: fmt.Errorf(format, args...), usage: true}
}

func versionCommand() *command {
	return &command{
		name:     "version",
		summary:  "print spannerlock's version",
		synopsis: "spannerlock version",
		help:     "Prints the version of this build.",
		run: func(a *app, args []string) error {
			fs := a.newFlagSet("version")
			if _, _, err := a.parse(fs, args); err != nil {
				return err
			}
			say(a.stdout, "spannerlock %s\n", buildVersion())
			return nil
		},
	}
}

// buildVersion is the release's version, or the module version of a go
// install; a build from a checkout says so, with its commit when the build
// recorded it. The Go version and platform follow.
func buildVersion() string {
	v := version
	bi, ok := debug.ReadBuildInfo()
	if v == "" && ok && bi.Main.Version != "" && bi.Main.Version != "(devel)" {
		v = bi.Main.Version
	}
	if v == "" {
		v = "built from source"
		settings := map[string]string{}
		if ok {
			for _, s := range bi.Settings {
				settings[s.Key] = s.Value
			}
		}
		if rev := settings["vcs.revision"]; rev != "" {
			v += ", commit " + rev[:min(12, len(rev))]
			if settings["vcs.modified"] == "true" {
				v += " with local changes"
			}
			if t := settings["vcs.time"]; t != "" {
				v += " of " + t
			}
		} else {
			v += " without version information"
		}
	}
	return fmt.Sprintf("%s (%s %s/%s)", v, runtime.Version(), runtime.GOOS, runtime.GOARCH)
}

// interrupted is the status of a process that a signal ended before CMD
// started: the shells' 128+signal.
func interrupted(sig os.Signal) error {
	return exitWith(signalStatus(sig), "interrupted by %s before running anything", signalName(sig))
}

func indent(s, prefix string) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	for i, l := range lines {
		if l != "" {
			lines[i] = prefix + l
		}
	}
	return strings.Join(lines, "\n")
}
