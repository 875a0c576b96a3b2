package provider

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/go-version"
	"github.com/hashicorp/terraform-plugin-testing/helper/resource"

	"github.com/spannerlock/terraform-provider-spannerlock/internal/emulator"
)

// serveProviderEnv makes the test binary serve the provider instead of
// running tests; terraformCLI sets it for the Terraform it runs.
const serveProviderEnv = "SPANNERLOCK_TEST_SERVE_PROVIDER"

// providerPIDsEnv names a directory where each provider process that
// serveProvider starts leaves a file named by its pid, so that a test can
// tell whether the processes Terraform started outlive it.
const providerPIDsEnv = "SPANNERLOCK_TEST_PROVIDER_PIDS"

// serveProvider serves the provider as main.go does, for a Terraform that
// started this binary as its plugin.
func serveProvider() {
	if dir := os.Getenv(providerPIDsEnv); dir != "" {
		if err := os.WriteFile(filepath.Join(dir, strconv.Itoa(os.Getpid())), nil, 0o600); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
	}
	if err := Serve(context.Background(), "test", false); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	os.Exit(0)
}

// terraformCLI runs the Terraform CLI as a user does, in a directory of its
// own, with this test binary as the provider plugin (through dev_overrides,
// so no registry and no terraform init). terraform-plugin-testing cannot
// stand in here: it destroys with refresh off, while `terraform destroy`
// first refreshes and plans the whole configuration.
type terraformCLI struct {
	t   *testing.T
	bin string
	dir string
	env []string
	// pids is where the provider processes this Terraform starts record
	// their pids (providerPIDsEnv).
	pids string
}

func newTerraformCLI(t *testing.T) *terraformCLI {
	t.Helper()
	if os.Getenv(resource.EnvTfAcc) == "" {
		t.Skipf("acceptance test: set %s=1 (make testacc)", resource.EnvTfAcc)
	}
	bin := os.Getenv("TF_ACC_TERRAFORM_PATH")
	if bin == "" {
		var err error
		if bin, err = exec.LookPath("terraform"); err != nil {
			t.Fatal("terraform is not on PATH and TF_ACC_TERRAFORM_PATH is unset")
		}
	}
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	plugins := t.TempDir()
	if err := os.Symlink(self, filepath.Join(plugins, "terraform-provider-spannerlock")); err != nil {
		t.Fatal(err)
	}
	rc := filepath.Join(t.TempDir(), "terraformrc")
	config := fmt.Sprintf("provider_installation {\n  dev_overrides {\n    %q = %q\n  }\n  direct {}\n}\n", "spannerlock/spannerlock", plugins)
	if err := os.WriteFile(rc, []byte(config), 0o600); err != nil {
		t.Fatal(err)
	}
	pids := t.TempDir()
	env := append(os.Environ(), emulator.Shared(t).Env()...)
	env = append(env, "TF_CLI_CONFIG_FILE="+rc, "CHECKPOINT_DISABLE=1", "TF_IN_AUTOMATION=1", serveProviderEnv+"=1",
		providerPIDsEnv+"="+pids)
	return &terraformCLI{t: t, bin: bin, dir: t.TempDir(), env: env, pids: pids}
}

// providerPIDs returns the pids of every provider process this Terraform
// has started so far.
func (tf *terraformCLI) providerPIDs() []int {
	tf.t.Helper()
	entries, err := os.ReadDir(tf.pids)
	if err != nil {
		tf.t.Fatal(err)
	}
	pids := make([]int, 0, len(entries))
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			tf.t.Fatalf("%s in %s is not a pid", e.Name(), tf.pids)
		}
		pids = append(pids, pid)
	}
	return pids
}

// write replaces the configuration.
func (tf *terraformCLI) write(config string) {
	tf.t.Helper()
	if err := os.WriteFile(filepath.Join(tf.dir, "main.tf"), []byte(config), 0o600); err != nil {
		tf.t.Fatal(err)
	}
}

// result is one run of a command.
type result struct {
	args   []string
	output string
	err    error
	// diagnostics are those of a command run with -json.
	diagnostics []diagnosticJSON
	// planned are the actions a plan run with -json planned, by resource
	// address.
	planned map[string]string
}

type diagnosticJSON struct {
	Severity string `json:"severity"`
	Summary  string `json:"summary"`
	Detail   string `json:"detail"`
	// Snippet is the configuration the diagnostic points at: for a
	// provider's diagnostic on an attribute, that attribute's line.
	Snippet *struct {
		Code string `json:"code"`
	} `json:"snippet"`
}

// run runs terraform with args in the configuration's directory.
func (tf *terraformCLI) run(ctx context.Context, args ...string) result {
	tf.t.Helper()
	return tf.start(ctx, args...).wait()
}

// command is a terraform command running in the background, in a process
// group of its own, as a terminal runs a foreground job: a test can signal
// terraform alone (the OOM killer, kill -9 PID) or its whole group (Ctrl-C
// in a terminal), and read its -json output as it comes.
type command struct {
	t    *testing.T
	args []string
	cmd  *exec.Cmd
	out  *lockedBuffer
	done chan struct{}
	err  error
}

// start starts terraform with args in the configuration's directory.
func (tf *terraformCLI) start(ctx context.Context, args ...string) *command {
	tf.t.Helper()
	// Options go before the positional arguments (import's address and ID).
	var opts []string
	switch args[0] {
	case "version", "show":
	case "validate", "query":
		opts = []string{"-no-color"}
	default:
		opts = []string{"-input=false", "-no-color"}
	}
	args = append(append([]string{args[0]}, opts...), args[1:]...)
	c := &command{t: tf.t, args: args, out: &lockedBuffer{}, done: make(chan struct{})}
	c.cmd = exec.CommandContext(ctx, tf.bin, args...)
	c.cmd.Dir, c.cmd.Env = tf.dir, tf.env
	c.cmd.Stdout, c.cmd.Stderr = c.out, c.out
	inProcessGroup(c.cmd)
	if err := c.cmd.Start(); err != nil {
		tf.t.Fatalf("terraform %s: %v", strings.Join(args, " "), err)
	}
	go func() {
		c.err = c.cmd.Wait()
		close(c.done)
	}()
	return c
}

// wait waits for the command to end and returns its result.
func (c *command) wait() result {
	<-c.done
	r := result{args: c.args, err: c.err, output: c.out.String()}
	if strings.Contains(strings.Join(c.args, " "), "-json") {
		r.planned = map[string]string{}
		for _, m := range jsonMessages(r.output) {
			switch m.Type {
			case "diagnostic":
				r.diagnostics = append(r.diagnostics, m.Diagnostic)
			case "planned_change":
				r.planned[m.Change.Resource.Addr] = m.Change.Action
			}
		}
	}
	return r
}

// waitForOpens waits until the command (run with -json) has started to open
// ephemeral resources n times, and fails the test if it ends first.
func (c *command) waitForOpens(ctx context.Context, n int) {
	c.t.Helper()
	for {
		seen := 0
		for _, m := range jsonMessages(c.out.String()) {
			if m.Type == "ephemeral_op_start" && m.Hook.Action == "open" {
				seen++
			}
		}
		if seen >= n {
			return
		}
		select {
		case <-c.done:
			r := c.wait()
			c.t.Fatalf("terraform %s ended before it opened an ephemeral resource %d times: %v\n%s", strings.Join(c.args, " "), n, r.err, r.describe())
		case <-ctx.Done():
			c.t.Fatalf("terraform %s did not open an ephemeral resource %d times: %v", strings.Join(c.args, " "), n, ctx.Err())
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// message is one line of Terraform's -json output.
type message struct {
	Type       string         `json:"type"`
	Diagnostic diagnosticJSON `json:"diagnostic"`
	Hook       struct {
		Action string `json:"action"`
	} `json:"hook"`
	Change struct {
		Resource struct {
			Addr string `json:"addr"`
		} `json:"resource"`
		Action string `json:"action"`
	} `json:"change"`
}

func jsonMessages(output string) []message {
	var msgs []message
	sc := bufio.NewScanner(strings.NewReader(output))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		var m message
		if json.Unmarshal(sc.Bytes(), &m) == nil {
			msgs = append(msgs, m)
		}
	}
	return msgs
}

// lockedBuffer is a bytes.Buffer that a running command writes to while a
// test reads it.
type lockedBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// ok fails the test unless the command succeeded.
func (r result) ok(t *testing.T) result {
	t.Helper()
	if r.err != nil {
		t.Fatalf("terraform %s: %v\n%s", strings.Join(r.args, " "), r.err, r.output)
	}
	return r
}

// failed fails the test unless the command failed.
func (r result) failed(t *testing.T) result {
	t.Helper()
	var exit *exec.ExitError
	if !errors.As(r.err, &exit) {
		t.Fatalf("terraform %s: %v, want it to fail\n%s", strings.Join(r.args, " "), r.err, r.output)
	}
	return r
}

// has fails the test unless the command reported a diagnostic of severity
// ("error" or "warning") whose summary is summary and whose detail contains
// each of parts.
func (r result) has(t *testing.T, severity, summary string, parts ...string) {
	t.Helper()
	for _, d := range r.diagnostics {
		if d.Severity != severity || d.Summary != summary {
			continue
		}
		missing := false
		for _, p := range parts {
			if !strings.Contains(d.Detail, p) {
				missing = true
			}
		}
		if !missing {
			return
		}
	}
	t.Fatalf("terraform %s reported no %s %q with %q; it reported:\n%s", strings.Join(r.args, " "), severity, summary, parts, r.describe())
}

// count returns how many diagnostics of severity with summary the command
// reported.
func (r result) count(severity, summary string) int {
	n := 0
	for _, d := range r.diagnostics {
		if d.Severity == severity && d.Summary == summary {
			n++
		}
	}
	return n
}

// plannedValues plans the configuration and returns the planned values of
// the resource at address, as terraform show -json shows the saved plan.
func (tf *terraformCLI) plannedValues(ctx context.Context, address string) map[string]any {
	tf.t.Helper()
	tf.run(ctx, "plan", "-out=tfplan", "-json").ok(tf.t)
	r := tf.run(ctx, "show", "-json", "tfplan").ok(tf.t)
	var plan struct {
		ResourceChanges []struct {
			Address string `json:"address"`
			Change  struct {
				After map[string]any `json:"after"`
			} `json:"change"`
		} `json:"resource_changes"`
	}
	if err := json.Unmarshal([]byte(r.output), &plan); err != nil {
		tf.t.Fatalf("terraform show -json: %v\n%s", err, r.output)
	}
	for _, rc := range plan.ResourceChanges {
		if rc.Address == address {
			return rc.Change.After
		}
	}
	tf.t.Fatalf("the plan has no change for %s:\n%s", address, r.output)
	return nil
}

// stringList reads a list of strings from terraform show -json.
func stringList(v any) []string {
	l, _ := v.([]any)
	out := make([]string, 0, len(l))
	for _, e := range l {
		s, _ := e.(string)
		out = append(out, s)
	}
	return out
}

// plans fails the test unless the plan's action for each resource address
// is as in want; "" means no change.
func (r result) plans(t *testing.T, want map[string]string) {
	t.Helper()
	for addr, action := range want {
		if got := r.planned[addr]; got != action {
			t.Errorf("terraform %s planned %q for %s, want %q; it planned %v", strings.Join(r.args, " "), got, addr, action, r.planned)
		}
	}
}

// lacks fails the test if the command reported a diagnostic with summary.
func (r result) lacks(t *testing.T, summary string) {
	t.Helper()
	for _, d := range r.diagnostics {
		if d.Summary == summary {
			t.Fatalf("terraform %s reported %s %q, which it must not:\n%s", strings.Join(r.args, " "), d.Severity, summary, d.Detail)
		}
	}
}

func (r result) describe() string {
	if r.diagnostics == nil {
		return r.output
	}
	var b strings.Builder
	for _, d := range r.diagnostics {
		fmt.Fprintf(&b, "%s: %s\n  %s\n", d.Severity, d.Summary, strings.ReplaceAll(d.Detail, "\n", "\n  "))
	}
	return b.String()
}

// require skips the test when Terraform is older than minimum, or fails it
// under CI=true, where every test must run.
func (tf *terraformCLI) require(ctx context.Context, minimum *version.Version) {
	tf.t.Helper()
	r := tf.run(ctx, "version", "-json").ok(tf.t)
	var v struct {
		Version string `json:"terraform_version"`
	}
	if err := json.Unmarshal([]byte(r.output), &v); err != nil {
		tf.t.Fatalf("terraform version -json: %v\n%s", err, r.output)
	}
	got, err := version.NewVersion(v.Version)
	if err != nil {
		tf.t.Fatal(err)
	}
	if got.Core().LessThan(minimum) {
		msg := fmt.Sprintf("this test needs Terraform %s or later; %s is %s", minimum, tf.bin, got)
		if emulator.CI() {
			tf.t.Fatal(msg + " (failing, not skipping, because CI=true)")
		}
		tf.t.Skip(msg)
	}
}

// promptly bounds what should take a second or two, generously for a
// loaded machine; it is far below the hour a lease would otherwise stay
// held, and below the wait that would otherwise keep Terraform waiting.
const promptly = 90 * time.Second

// waitUntil polls cond until it holds, and fails the test if it does not
// within promptly, with what cond last said.
func waitUntil(ctx context.Context, t *testing.T, cond func() (ok bool, what string)) {
	t.Helper()
	ctx, cancel := context.WithTimeout(ctx, promptly)
	defer cancel()
	for {
		ok, what := cond()
		if ok {
			return
		}
		select {
		case <-ctx.Done():
			t.Fatalf("not within %s: %s", promptly, what)
		case <-time.After(50 * time.Millisecond):
		}
	}
}
