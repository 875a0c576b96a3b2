//go:build unix

package main

import (
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"
)

// Every command documents itself with its synopsis and examples, through
// both `CMD --help` and `help CMD`, on stdout and with status 0.
func TestHelp(t *testing.T) {
	dir := t.TempDir()
	overview := run(t, dir, env(""), nil, "--help")
	if overview.code != 0 {
		t.Fatalf("--help exited %d: %s", overview.code, overview.stderr)
	}
	for _, c := range commands() {
		if !strings.Contains(overview.stdout, "  "+c.name+" ") {
			t.Errorf("--help does not list %s:\n%s", c.name, overview.stdout)
		}
		for _, args := range [][]string{{c.name, "--help"}, {"help", c.name}, {c.name, "-h"}} {
			r := run(t, dir, env(""), nil, args...)
			if r.code != 0 {
				t.Errorf("%v exited %d: %s", args, r.code, r.stderr)
			}
			first := strings.SplitN(c.synopsis, "\n", 2)[0]
			for _, want := range []string{"Usage:", first, "Global flags:", "--database"} {
				if !strings.Contains(r.stdout, want) {
					t.Errorf("%v does not show %q:\n%s", args, want, r.stdout)
				}
			}
			if c.name != "version" && !strings.Contains(r.stdout, "Examples:") {
				t.Errorf("%v has no examples:\n%s", args, r.stdout)
			}
		}
	}
}

// A wrong command line exits 2 with a message saying what is wrong, before
// spannerlock connects to anything.
func TestUsageErrors(t *testing.T) {
	dir := t.TempDir()
	db := "projects/p/instances/i/databases/d"
	for _, tc := range []struct {
		args []string
		env  []string
		want string
	}{
		{args: nil, want: "Usage:"},
		{args: []string{"frobnicate"}, want: `unknown command "frobnicate"`},
		{args: []string{"lock"}, want: "NAME is required"},
		{args: []string{"lock", "x", "ls", "-l"}, want: "put it after --"},
		{args: []string{"lock", "x", "ls"}, want: "spannerlock lock x -- ls"},
		{args: []string{"lock", "x", "--"}, want: "no command after --"},
		{args: []string{"lock", "--try", "--timeout", "1s", "x", "--", "true"}, want: "exclude each other"},
		{args: []string{"lock", "--shell", "x"}, want: "--shell needs a command"},
		{args: []string{"holder", "x"}, env: env(""), want: "no database configured: pass --database"},
		{args: []string{"--database", "orders", "holder", "x"}, want: "not a database path"},
		{args: []string{"--ttl", "100ms", "holder", "x"}, want: "--ttl 100ms"},
		{args: []string{"--table", "no-dashes", "holder", "x"}, want: "--table"},
		{args: []string{"holder", "x", "--", "true"}, want: "runs no command"},
		{args: []string{"run-once", "job", "--", "true"}, want: "--slot TIME or --every INTERVAL"},
		{args: []string{"run-once", "job", "--slot", "tomorrow", "--", "true"}, want: "not an RFC 3339 time"},
		{args: []string{"run-once", "job", "--slot", "2026-01-01T00:00:00Z"}, want: "needs a command"},
		{args: []string{"status", "extra"}, want: "takes no arguments"},
		{args: []string{"status", "-o", "yaml"}, want: "table or json"},
		{args: []string{"elect", "--observe", "x", "--", "true"}, want: "--observe runs no command"},
		{args: []string{"init", "--cleanup-after", "36h"}, want: "whole number of days"},
		{args: []string{"--ttl", "10", "holder", "x"}, want: "10 has no unit: write 10s, 10m, 10h or 10d"},
		{args: []string{"lock", "--timeout", "5", "x"}, want: "5 has no unit"},
		{args: []string{"--poll-interval", "1ms", "holder", "x"}, want: "--poll-interval 1ms is below the minimum"},
		{args: []string{"holder", "js", "extra"}, want: `unexpected argument "extra" after NAME`},
		{args: []string{"lock", "--", "-x", "ls"}, want: `put the command to run after a second --, as in: spannerlock lock -- -x -- ls`},
		{args: []string{"holder", "x"}, env: append(env(db), "SPANNERLOCK_TTL=10"), want: "SPANNERLOCK_TTL=10: 10 has no unit"},
		{args: []string{"lock", "--try", "--timeout", "0", "x"}, want: "exclude each other"},
		{args: []string{"holder", "x"}, env: append(env(db), "OTEL_EXPORTER_OTLP_ENDPOINT=http://127.0.0.1:4318", "OTEL_EXPORTER_OTLP_PROTOCOL=http/json"),
			want: "OTEL_EXPORTER_OTLP_PROTOCOL=http/json: spannerlock exports OTLP over grpc or http/protobuf"},
	} {
		envv := tc.env
		if envv == nil {
			envv = env(db)
		}
		r := run(t, dir, envv, nil, tc.args...)
		if r.code != exitUsage || !strings.Contains(r.stderr, tc.want) {
			t.Errorf("spannerlock %v: exit %d, stderr:\n%s\nwant exit 2 and %q", tc.args, r.code, r.stderr, tc.want)
		}
		if strings.Contains(r.stderr, "put the command to run after --") && !runsCommand(tc.args[0]) {
			t.Errorf("spannerlock %v suggests a command after --, which %s refuses:\n%s", tc.args, tc.args[0], r.stderr)
		}
	}
}

// Durations take Go's units and whole days, the same for every flag.
func TestParseDuration(t *testing.T) {
	for in, want := range map[string]time.Duration{
		"10s": 10 * time.Second, "1h30m": 90 * time.Minute, "1d": 24 * time.Hour, "30d": 30 * 24 * time.Hour,
		"1d12h": 36 * time.Hour, "0": 0, "250ms": 250 * time.Millisecond,
	} {
		if got, err := parseDuration(in); err != nil || got != want {
			t.Errorf("parseDuration(%q) = %s, %v; want %s", in, got, err, want)
		}
	}
	for _, in := range []string{"10", "1.5", "d", "1w", "-", "1d-"} {
		if _, err := parseDuration(in); err == nil {
			t.Errorf("parseDuration(%q) accepted it", in)
		}
	}
	if got := formatDuration(48 * time.Hour); got != "2d" {
		t.Errorf("formatDuration(48h) = %q", got)
	}
}

// Every help lists each flag once: -o is --output's short form.
func TestHelpListsFlagsOnce(t *testing.T) {
	r := run(t, t.TempDir(), env(""), nil, "status", "--help")
	if strings.Count(r.stdout, "--output") != 1 || !strings.Contains(r.stdout, "-o, --output format") || strings.Contains(r.stdout, "\n  -o format") {
		t.Errorf("status --help lists -o and --output apart:\n%s", r.stdout)
	}
	r = run(t, t.TempDir(), env(""), nil, "permit", "--help")
	if !strings.Contains(r.stdout, "exit 75 at once if every permit is in use") {
		t.Errorf("permit --try is not described in terms of permits:\n%s", r.stdout)
	}
}

// CMD is resolved before anything is acquired (the database here does not
// exist): a missing one exits 127, and shell syntax without --shell is
// pointed out.
func TestCommandNotFound(t *testing.T) {
	for _, tc := range []struct{ cmd, want string }{
		{"no-such-command-anywhere", "no-such-command-anywhere: command not found\n"},
		{"./missing.sh", "./missing.sh: command not found\n"},
		{"echo $HOME", "echo $HOME: command not found (CMD runs without a shell: put shell syntax after --shell)\n"},
	} {
		r := run(t, t.TempDir(), env("projects/p/instances/i/databases/d"), nil, "lock", "x", "--", tc.cmd)
		if r.code != exitNotFound || r.stderr != "spannerlock: "+tc.want {
			t.Errorf("%q: exit %d, stderr %q; want 127 and %q", tc.cmd, r.code, r.stderr, tc.want)
		}
	}
}

// version and --version say which build this is, never Go's placeholder
// "(devel)", with the Go version it was built with.
func TestVersion(t *testing.T) {
	r := run(t, t.TempDir(), env(""), nil, "version")
	if r.code != 0 || !strings.HasPrefix(r.stdout, "spannerlock ") || strings.Contains(r.stdout, "(devel)") ||
		!strings.Contains(r.stdout, runtime.Version()) {
		t.Fatalf("version: exit %d, stdout %q", r.code, r.stdout)
	}
	if v := run(t, t.TempDir(), env(""), nil, "--version"); v.code != 0 || v.stdout != r.stdout {
		t.Fatalf("--version: exit %d, stdout %q; want %q", v.code, v.stdout, r.stdout)
	}
}

// A script that exec cannot run (no #! line, or a #! line naming a missing
// interpreter) is refused with 126 before anything is acquired (the
// database here does not exist), not after taking the lock.
func TestScriptThatCannotRun(t *testing.T) {
	dir := t.TempDir()
	for name, content := range map[string]string{
		"no-shebang.sh":      "echo hello\n",
		"bad-interpreter.sh": "#!/no/such/interpreter\necho hello\n",
		"empty-shebang.sh":   "#!\necho hello\n",
	} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	for cmd, want := range map[string]string{
		"./no-shebang.sh":      "it is a script without a #! line",
		"./bad-interpreter.sh": "names the interpreter /no/such/interpreter, which is not an executable file here",
		"./empty-shebang.sh":   "names no interpreter",
	} {
		r := run(t, dir, env("projects/p/instances/i/databases/d"), nil, "lock", "x", "--", cmd)
		if r.code != exitCannotRun || !strings.Contains(r.stderr, want) {
			t.Errorf("%s: exit %d, stderr %q; want 126 and %q", cmd, r.code, r.stderr, want)
		}
	}
}

// help TOPIC covers what no command's help does; the overview lists the
// topics, and an unknown one is named with the ones there are.
func TestHelpTopics(t *testing.T) {
	dir := t.TempDir()
	overview := run(t, dir, env(""), nil, "help")
	for _, topic := range helpTopics() {
		if !strings.Contains(overview.stdout, "  "+topic.name+" ") {
			t.Errorf("the overview does not list topic %s", topic.name)
		}
		r := run(t, dir, env(""), nil, "help", topic.name)
		if r.code != 0 || !strings.HasPrefix(r.stdout, "spannerlock help "+topic.name+": ") {
			t.Errorf("help %s: exit %d, stdout %q", topic.name, r.code, r.stdout)
		}
	}
	r := run(t, dir, env(""), nil, "help", "exit-status")
	for _, want := range []string{"75 ", "76 ", "77 ", "--conflict-exit-code", "--done-exit-code"} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("help exit-status lacks %q:\n%s", want, r.stdout)
		}
	}
	r = run(t, dir, env(""), nil, "help", "nosuch")
	if r.code != exitUsage || !strings.Contains(r.stderr, "exit-status, environment, signals, durations") {
		t.Errorf("help nosuch: exit %d, stderr %q", r.code, r.stderr)
	}
}
