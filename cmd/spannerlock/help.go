package main

import (
	"io"
	"slices"
	"strings"
)

// helpTopic is a page of 'spannerlock help TOPIC': what no one command's
// help covers.
type helpTopic struct {
	name, summary, text string
}

func helpTopics() []helpTopic {
	return []helpTopic{
		{"exit-status", "what each exit status means", exitStatusText},
		{"environment", "the environment variables spannerlock reads and sets", environmentText},
		{"signals", "signals, job control (Ctrl-Z, fg, bg) and the terminal", signalsText},
		{"durations", "how to write the values of duration flags", durationsText},
	}
}

func findTopic(name string) *helpTopic {
	for _, t := range helpTopics() {
		if t.name == name {
			return &t
		}
	}
	return nil
}

func topicNames() []string {
	var names []string
	for _, t := range helpTopics() {
		names = append(names, t.name)
	}
	return names
}

// helpWords are what 'help' takes: commands and topics.
func helpWords() []string {
	var words []string
	for _, c := range commands() {
		words = append(words, c.name)
	}
	for _, t := range helpTopics() {
		words = append(words, t.name)
	}
	return slices.Clip(words)
}

func printTopic(w io.Writer, t *helpTopic) {
	say(w, "spannerlock help %s: %s\n\n%s\n", t.name, t.summary, strings.TrimSpace(t.text))
}

const exitStatusText = `
The exit status is the contract for scripts and cron wrappers:

  CMD's own status when spannerlock ran CMD, or 128+N if CMD died of signal N
  0      success
  1      spannerlock failed: Spanner unreachable or not answering (for
         --max-outage, or before --timeout), table missing, permission
         denied; the message says what to do
  2      wrong command line (CMD's own 2 passes through without spannerlock's
         usage hint)
  3      holder, break: nobody holds NAME
  75     --try or --timeout found it held: Spanner said so, and the message
         names the holder (--conflict-exit-code N replaces 75; with 0
         nothing is written unless --verbose); a Spanner that did not
         answer is 1, never 75
  76     the lease was lost while CMD ran, so CMD was stopped
  77     run-once: the slot was done already, here or elsewhere, so CMD did
         not run (--done-exit-code N replaces 77)
  126    CMD could not be started (not executable, a script without #!)
  127    CMD was not found
  128+N  interrupted by signal N while waiting, before CMD started
`

const environmentText = `
Every flag can be set by an environment variable: SPANNERLOCK_ and the
flag's name in capitals, with - as _ (--poll-interval is
SPANNERLOCK_POLL_INTERVAL, --try is SPANNERLOCK_TRY=true). A flag on the
command line wins over its variable, and a variable gives way to a flag on
the command line that excludes it (SPANNERLOCK_TIMEOUT to --try). A
spannerlock that CMD runs does not take the variables set for CMD (listed
in SPANNERLOCK_SET_FOR_CMD) as its flags: the outer SPANNERLOCK_HOLDER_ID
and SPANNERLOCK_SLOT are not its --holder-id and --slot. A command ignores
an SPANNERLOCK_OUTPUT format it does not have (table, for status, in
break); SPANNERLOCK_TIMEOUT=0 is the default timeout of the commands that
only read.

Read:
  SPANNERLOCK_DATABASE, SPANNERLOCK_TABLE   --database and --table
  SPANNER_EMULATOR_HOST                     use the Spanner emulator at this host:port
  GOOGLE_APPLICATION_CREDENTIALS            credentials; otherwise Application Default Credentials
  HTTPS_PROXY, NO_PROXY                     the proxy to Spanner, as for any Google client
  OTEL_EXPORTER_OTLP_ENDPOINT               export spans and metrics to this OTLP collector (HTTP;
                                            OTEL_EXPORTER_OTLP_PROTOCOL=grpc for gRPC); the other
                                            OTEL_* variables work as in any OpenTelemetry SDK
  TRACEPARENT, TRACESTATE                   when exporting: the trace a run joins

Set for CMD, besides spannerlock's own environment:
  SPANNERLOCK_NAME        NAME (run-once: JOB)
  SPANNERLOCK_TOKEN       the fencing token
  SPANNERLOCK_HOLDER_ID   this process's holder ID
  SPANNERLOCK_SLOT        run-once: the slot, RFC 3339 in UTC
  SPANNERLOCK_SET_FOR_CMD the names of these, for a spannerlock CMD runs
  TRACEPARENT, TRACESTATE when exporting: CMD's span, for its own tracing to join
`

const signalsText = `
CMD runs in a process group of its own. SIGINT, SIGTERM, SIGHUP, SIGQUIT,
SIGUSR1 and SIGUSR2 sent to spannerlock go to CMD's whole group; spannerlock
releases the lease once CMD has exited and exits with CMD's status. Before
CMD starts, SIGINT, SIGTERM, SIGHUP and SIGQUIT end the wait (128+N).
SIGHUP or SIGINT that spannerlock was started with ignored (nohup, or a
script's spannerlock ... &) stays ignored, by spannerlock and by CMD, as
with flock. Interrupted by SIGINT, spannerlock releases the lease and dies
of SIGINT itself, so that a calling script's loop stops as around flock;
when CMD had the terminal, so that Ctrl-C reached CMD alone, spannerlock
sends SIGINT to its own process group (the shells that ran it) as it dies.

The lease and CMD: CMD's processes are dead before any rival can acquire
the lease. The lease's local deadline passes a tenth of the TTL before the
lease can expire on Spanner's clock, and renewals (every TTL/3) move it
forward. If it comes near, because renewals fail or spannerlock is paused,
CMD's group gets SIGTERM (and SIGCONT, should it be stopped) --kill-after
before it, and SIGKILL at it:

  last renewal       SIGTERM              SIGKILL        earliest takeover
       |----------------|--- --kill-after ---|--- TTL/10 ---|
       0     0.9 TTL - --kill-after       0.9 TTL          TTL

--kill-after defaults to TTL/5 (at most 10s; 2s at the default TTL of
10s) and may be at most TTL/3: more would stop CMD while the lease is
healthy. A CMD that needs longer to stop needs a longer --ttl. A lease
that ends before its deadline (broken by 'spannerlock break', which frees
it at once, so there the promise cannot hold) stops CMD then: SIGTERM, and
SIGKILL after --kill-after or at the deadline, whichever comes first.
spannerlock then exits 76.

On Linux a small reaper process that starts CMD does this, whatever happens
to spannerlock: so a spannerlock paused by SIGSTOP, or stopped for longer
than the TTL, does not leave CMD running beside the next holder. The reaper
is a child subreaper: what CMD leaves behind when it exits, in its group or
not (a daemon that called setsid), is stopped the same way, and spannerlock
releases the lease only once none of it is left. If spannerlock is killed
with SIGKILL, the reaper kills all of it at once; if the reaper is killed,
spannerlock does, and waits for it to be gone before it releases. Only if
both are killed at once (pkill -9 -f spannerlock) can CMD's other
processes outlive the lease: run spannerlock where the whole tree is
killed together (a systemd unit, a container) if that may happen.

Under systemd, set KillMode=mixed in the unit: the default, control-group,
sends SIGTERM to every process of the unit at once, so that CMD gets it
twice, from systemd and again from spannerlock. With mixed, systemd signals
spannerlock alone, which passes it on to CMD's group, waits for CMD and
releases the lease; what is left when TimeoutStopSec runs out is killed,
the whole unit together. Give TimeoutStopSec room for CMD to stop.

Job control: CMD and spannerlock stop and continue together, as the
processes of a shell's job do. Ctrl-Z (or CMD reading the terminal from
the background) stops CMD and then spannerlock, so the shell says the job
stopped and gives its prompt back; fg and bg continue both. A job stopped
for longer than the TTL loses its lease: CMD is stopped at the deadline
and spannerlock exits 76 when continued.

The terminal: when spannerlock is in the foreground of its terminal and
CMD is the whole job, CMD's group gets the terminal (so it can prompt, and
Ctrl-C reaches it directly), and spannerlock takes it back when CMD stops
or exits, or gives it back to the shell if spannerlock is killed. In a
pipeline (spannerlock lock x -- seq 100 | less) the other commands need
the terminal and keep it: CMD then runs in the background of the terminal,
and one that reads it stops with the job.
`

const durationsText = `
Duration flags (--ttl, --timeout, --poll-interval, --kill-after,
--max-outage, --every) take Go's durations, a number and a unit: 250ms,
30s, 5m, 1h30m; and whole days: 1d, 30d, 1d12h. A number without a unit is
refused, with the forms to write it in. --timeout 0 does not wait (as
--try), and is the default for the commands that only read;
--poll-interval is at least 50ms.
`
