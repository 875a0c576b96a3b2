package main

import (
	"flag"
	"fmt"
	"io"
	"slices"
	"strings"
	"text/tabwriter"
	"time"
)

// errHelp is what parsing returns after printing help for -h or --help.
var errHelp = flag.ErrHelp

// globalFlags configure the connection and the leases of every command.
type globalFlags struct {
	database string
	table    string
	ttl      time.Duration
	holderID string
	poll     time.Duration
	verbose  bool
	// maxOutage bounds how long a command goes on while Spanner does not
	// answer.
	maxOutage time.Duration
	logFormat string
	// version is --version, of spannerlock itself only.
	version bool
}

const (
	envDatabase = "SPANNERLOCK_DATABASE"
	envTable    = "SPANNERLOCK_TABLE"
)

// minPollInterval keeps a waiter from reading Spanner hundreds of times a
// second.
const minPollInterval = 50 * time.Millisecond

func defaultGlobalFlags() globalFlags {
	return globalFlags{
		table:     "locks",
		ttl:       10 * time.Second,
		poll:      time.Second,
		maxOutage: defaultMaxOutage,
		logFormat: "text",
	}
}

var globalFlagNames = []string{"database", "table", "ttl", "holder-id", "poll-interval", "max-outage", "verbose", "log-format"}

// newFlagSet returns the flag set of the named command ("" for spannerlock
// itself) with the global flags in it, so they may come before the command
// or among its flags. Their defaults are the values parsed so far.
func (a *app) newFlagSet(name string) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	// Errors and help are printed by parse, to the right stream.
	fs.SetOutput(io.Discard)
	g := &a.global
	fs.StringVar(&g.database, "database", g.database,
		"database `path` projects/P/instances/I/databases/D (default $"+envDatabase+")")
	fs.StringVar(&g.table, "table", g.table, "lock `table` (default $"+envTable+", else locks)")
	durationVar(fs, &g.ttl, "ttl", g.ttl,
		"how long a lease lives after its last renewal; renewed every TTL/3 while held (1s to 24h)")
	fs.StringVar(&g.holderID, "holder-id", g.holderID,
		"`id` recorded with the leases this process holds (default hostname-pid-random)")
	durationVar(fs, &g.poll, "poll-interval", g.poll,
		"longest wait between reads of a lease held by another process, while waiting for it (at least "+minPollInterval.String()+")")
	durationVar(fs, &g.maxOutage, "max-outage", g.maxOutage,
		"give up with exit status 1 once every call to Spanner has failed for want of an answer for this long "+
			"(before Spanner first answers: "+connectTimeout.String()+" of connecting); status --watch keeps trying")
	fs.BoolVar(&g.verbose, "verbose", g.verbose, "log what spannerlock does to stderr")
	fs.Var(choiceValue{p: &g.logFormat, choices: []string{"text", "json"}}, "log-format", "`format` of what spannerlock writes on stderr: text, or json for one JSON record a line, the final error included")
	if name == "" {
		fs.BoolVar(&g.version, "version", false, "print spannerlock's version and exit")
	}
	return fs
}

// envPrefix starts the environment variable of every flag: --poll-interval
// is SPANNERLOCK_POLL_INTERVAL.
const envPrefix = "SPANNERLOCK_"

// envName is the environment variable that sets the flag name.
func envName(name string) string {
	return envPrefix + strings.ToUpper(strings.ReplaceAll(name, "-", "_"))
}

// flagAliases maps a short flag to the long one it stands for: the two share
// a value, and help lists them together.
var flagAliases = map[string]string{"o": "output"}

func canonicalFlag(name string) string {
	if long, ok := flagAliases[name]; ok {
		return long
	}
	return name
}

// applyEnv sets every flag of fs that the command line did not set from its
// environment variable, if that is set, and records which it set. A value
// from the environment is checked as one from the command line is; its
// error names the variable. Variables an outer spannerlock set for the CMD
// that runs this one (SPANNERLOCK_SET_FOR_CMD) are not flags here, and an
// output format that another command has but this one lacks
// (SPANNERLOCK_OUTPUT=table, for status, given to break) is left to the
// commands that have it.
func (a *app) applyEnv(fs *flag.FlagSet) error {
	fs.Visit(func(f *flag.Flag) { a.onCommandLine[canonicalFlag(f.Name)] = true })
	setForCMD, _ := a.lookupEnv(envSetForCMD)
	var err error
	fs.VisitAll(func(f *flag.Flag) {
		if _, alias := flagAliases[f.Name]; alias || err != nil || a.onCommandLine[f.Name] {
			return
		}
		if slices.Contains(strings.Fields(setForCMD), envName(f.Name)) {
			return
		}
		v, ok := a.lookupEnv(envName(f.Name))
		if !ok {
			return
		}
		if c, ok := f.Value.(choiceValue); ok && f.Name == "output" && !slices.Contains(c.choices, v) && slices.Contains(outputFormats, v) {
			return
		}
		if e := fs.Set(f.Name, v); e != nil {
			err = usageError("%s=%s: %v", envName(f.Name), v, e)
			return
		}
		a.fromEnv[f.Name] = true
	})
	return err
}

// yields reports whether flag name, set from the environment, gives way to
// other, set on the command line, where the two exclude each other:
// SPANNERLOCK_TIMEOUT does not make --try a usage error.
func (a *app) yields(name, other string) bool {
	return a.fromEnv[name] && a.onCommandLine[other]
}

// parse parses a command's flags wherever they are before "--", so that
// `lock --try NAME -- CMD` and `lock NAME --try -- CMD` are the same. It
// returns the positional arguments and the command after "--" (nil when
// there is no "--"). On -h or --help it prints the command's help and
// returns errHelp.
func (a *app) parse(fs *flag.FlagSet, args []string) (positional, argv []string, err error) {
	if a.describe != nil {
		*a.describe = fs
		return nil, nil, errHelp
	}
	if i := slices.Index(args, "--"); i >= 0 {
		args, argv = args[:i], args[i+1:]
		if argv == nil {
			argv = []string{}
		}
	}
	for {
		if err := fs.Parse(args); err != nil {
			if err == flag.ErrHelp {
				a.printHelp(a.stdout, fs)
				return nil, nil, errHelp
			}
			if len(positional) > 0 && argv == nil && runsCommand(fs.Name()) {
				return nil, nil, usageError("%v (to run a command, put it after --: spannerlock %s %s -- CMD ARGS...)", err, fs.Name(), positional[0])
			}
			return nil, nil, usageError("%v", err)
		}
		rest := fs.Args()
		if len(rest) == 0 {
			break
		}
		positional = append(positional, rest[0])
		args = rest[1:]
	}
	if err := a.applyEnv(fs); err != nil {
		return nil, nil, err
	}
	return positional, argv, nil
}

// runsCommand reports whether the named command runs a CMD after --.
func runsCommand(name string) bool {
	c := findCommand(name)
	return c != nil && c.runsCMD
}

// parseOne is parse for commands that take exactly one positional argument,
// called what. An argument that starts with "-" cannot come among the
// flags; it comes right after "--", and CMD after a second "--":
// spannerlock lock -- -x -- CMD.
func (a *app) parseOne(fs *flag.FlagSet, args []string, what string) (arg string, argv []string, err error) {
	pos, argv, err := a.parse(fs, args)
	if err == nil && len(pos) == 0 && len(argv) > 0 {
		pos = argv[:1]
		switch rest := argv[1:]; {
		case len(rest) == 0:
			argv = nil
		case rest[0] == "--":
			argv = rest[1:]
		case runsCommand(fs.Name()):
			return "", nil, usageError("unexpected argument %q after %s %s: put the command to run after a second --, as in: spannerlock %s -- %s -- %s",
				rest[0], what, quote(pos[0]), fs.Name(), pos[0], strings.Join(rest, " "))
		default:
			return "", nil, usageError("unexpected argument %q after %s %s", rest[0], what, quote(pos[0]))
		}
	}
	switch {
	case err != nil:
		return "", nil, err
	case len(pos) == 0:
		return "", nil, usageError("%s is required", what)
	case len(pos) > 1 && argv == nil && runsCommand(fs.Name()):
		return "", nil, usageError("unexpected argument %q after %s: put the command to run after --, as in: spannerlock %s %s -- %s",
			pos[1], what, fs.Name(), pos[0], strings.Join(pos[1:], " "))
	case len(pos) > 1:
		return "", nil, usageError("unexpected argument %q after %s", pos[1], what)
	}
	return pos[0], argv, nil
}

// noCommand rejects a command after "--" for commands that run none.
func noCommand(fs *flag.FlagSet, argv []string) error {
	if argv != nil {
		return usageError("%s runs no command; remove what follows --", fs.Name())
	}
	return nil
}

// outputFormats are the formats of every command's --output.
var outputFormats = []string{"table", "text", "json"}

// outputFlag registers -o/--output, whose values are the formats, some of
// outputFormats.
func outputFlag(fs *flag.FlagSet, formats ...string) *string {
	o := new(string)
	*o = formats[0]
	v := choiceValue{p: o, choices: formats}
	usage := "output `format`: " + strings.Join(formats, " or ")
	fs.Var(v, "o", usage)
	fs.Var(v, "output", usage)
	return o
}

// choiceValue is a flag that takes one of a few words.
type choiceValue struct {
	p       *string
	choices []string
}

func (v choiceValue) String() string {
	if v.p == nil {
		return ""
	}
	return *v.p
}

func (v choiceValue) Set(s string) error {
	if !slices.Contains(v.choices, s) {
		return fmt.Errorf("%q: it is %s", s, strings.Join(v.choices, " or "))
	}
	*v.p = s
	return nil
}

// exitStatusSummary is the overview's short form of 'help exit-status'.
const exitStatusSummary = `CMD's own status when spannerlock ran CMD, or 128+N if CMD died of signal N
0      success
1      spannerlock failed (Spanner unreachable, table missing, permission denied)
2      wrong command line
3      holder, break: nobody holds NAME
75     --try or --timeout found it held (--conflict-exit-code)
76     the lease was lost while CMD ran; CMD was stopped
77     run-once: the slot was done already; CMD did not run (--done-exit-code)
126    CMD could not be started
127    CMD was not found
128+N  interrupted by signal N while waiting, before CMD started`

func (a *app) printOverview(w io.Writer) {
	var b strings.Builder
	b.WriteString(`spannerlock runs a program under a lock on Google Cloud Spanner, once per
schedule slot, or while it is the elected leader.

Usage:
  spannerlock [global flags] COMMAND [flags] [ARGS] [-- CMD [ARGS...]]

Commands:
`)
	tw := tabwriter.NewWriter(&b, 0, 0, 2, ' ', 0)
	for _, c := range commands() {
		say(tw, "  %s\t%s\n", c.name, c.summary)
	}
	_ = tw.Flush() // into a strings.Builder, which cannot fail
	b.WriteString("\n")
	writeFlags(&b, "Global flags (before the command, or among its flags):", a.newFlagSet(""), func(string) bool { return true })
	b.WriteString("\nHelp topics:\n")
	tw = tabwriter.NewWriter(&b, 0, 0, 2, ' ', 0)
	for _, t := range helpTopics() {
		say(tw, "  %s\t%s\n", t.name, t.summary)
	}
	_ = tw.Flush()
	b.WriteString("\nExit status:\n")
	b.WriteString(indent(exitStatusSummary, "  "))
	b.WriteString(`

Quick start:
  export SPANNERLOCK_DATABASE=projects/P/instances/I/databases/D
  spannerlock init
  spannerlock lock nightly-report -- ./report.sh

Every flag can also be set by SPANNERLOCK_<FLAG> (spannerlock help environment).
Run 'spannerlock COMMAND --help' for a command's flags and examples, and
'spannerlock help TOPIC' for a topic.
`)
	say(w, "%s", b.String())
}

func (a *app) printHelp(w io.Writer, fs *flag.FlagSet) {
	c := findCommand(fs.Name())
	if c == nil {
		a.printOverview(w)
		return
	}
	var b strings.Builder
	say(&b, "spannerlock %s: %s\n\nUsage:\n%s\n\n%s\n\n", c.name, c.summary, indent(c.synopsis, "  "), strings.TrimSpace(c.help))
	isGlobal := func(name string) bool { return slices.Contains(globalFlagNames, name) }
	if writeFlags(&b, "Flags:", fs, func(name string) bool { return !isGlobal(name) }) {
		b.WriteString("\n")
	}
	writeFlags(&b, "Global flags:", fs, isGlobal)
	say(w, "%s", b.String())
}

// writeFlags lists the flags of fs that keep selects, as --name TYPE and
// their usage, and reports whether there were any.
func writeFlags(b *strings.Builder, title string, fs *flag.FlagSet, keep func(string) bool) bool {
	var list strings.Builder
	short := map[string]string{}
	for s, long := range flagAliases {
		short[long] = s
	}
	fs.VisitAll(func(f *flag.Flag) {
		if _, alias := flagAliases[f.Name]; alias || !keep(f.Name) {
			return
		}
		kind, usage := flag.UnquoteUsage(f)
		if _, ok := f.Value.(durationValue); ok && kind == "value" {
			kind = "duration"
		}
		say(&list, "  ")
		if s, ok := short[f.Name]; ok && fs.Lookup(s) != nil {
			say(&list, "-%s, ", s)
		}
		say(&list, "--%s", f.Name)
		if kind != "" {
			say(&list, " %s", kind)
		}
		if f.DefValue != "" && f.DefValue != "false" && f.DefValue != "0s" && !strings.Contains(usage, "(default") {
			usage += fmt.Sprintf(" (default %s)", f.DefValue)
		}
		say(&list, "\n      %s\n", usage)
	})
	if list.Len() == 0 {
		return false
	}
	say(b, "%s\n%s", title, list.String())
	return true
}
