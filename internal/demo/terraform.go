package main

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"

	"github.com/spannerlock/terraform-provider-spannerlock/internal/emulator"
)

// terraform runs the Terraform CLI on a copy of examples/quickstart with the
// provider built from this checkout, through dev_overrides: no registry and
// no terraform init are needed.
type terraform struct {
	bin  string
	dir  string
	env  []string
	vars []string
}

func newTerraform(ctx context.Context, work, db string, e *emulator.Emulator) (*terraform, error) {
	bin := os.Getenv("TERRAFORM")
	if bin == "" {
		var err error
		if bin, err = exec.LookPath("terraform"); err != nil {
			return nil, fmt.Errorf("terraform is not on PATH and $TERRAFORM is unset; `make demo` installs it")
		}
	}
	plugins := filepath.Join(work, "plugins")
	if err := goBuild(ctx, filepath.Join(plugins, "terraform-provider-spannerlock"), "."); err != nil {
		return nil, err
	}
	rc := filepath.Join(work, "terraformrc")
	config := fmt.Sprintf("provider_installation {\n  dev_overrides {\n    \"spannerlock/spannerlock\" = %q\n  }\n  direct {}\n}\n", plugins)
	if err := os.WriteFile(rc, []byte(config), 0o644); err != nil {
		return nil, err
	}
	dir := filepath.Join(work, "quickstart")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	src, err := os.ReadFile(filepath.Join("examples", "quickstart", "main.tf"))
	if err != nil {
		return nil, fmt.Errorf("run the demo from the repository root: %w", err)
	}
	if err := os.WriteFile(filepath.Join(dir, "main.tf"), src, 0o644); err != nil {
		return nil, err
	}
	env := append(os.Environ(), e.Env()...)
	env = append(env, "TF_CLI_CONFIG_FILE="+rc, "CHECKPOINT_DISABLE=1", "TF_IN_AUTOMATION=1")
	return &terraform{
		bin:  bin,
		dir:  dir,
		env:  env,
		vars: []string{"-var", "database=" + db, "-var", "emulator_host=" + e.Host()},
	}, nil
}

// run runs a terraform command that takes variables, relaying its output.
func (tf *terraform) run(ctx context.Context, args ...string) error {
	args = append(append(args, "-input=false", "-no-color"), tf.vars...)
	out, err := tf.exec(ctx, args...)
	for _, line := range withoutOverrideWarning(strings.Split(strings.TrimRight(out, "\n"), "\n")) {
		if line != "" {
			fmt.Println("  terraform| " + line)
		}
	}
	if err != nil {
		return fmt.Errorf("terraform %s: %w", args[0], err)
	}
	return nil
}

// showLeader refreshes Terraform's view of the leader and prints it.
func (tf *terraform) showLeader(ctx context.Context) error {
	if _, err := tf.exec(ctx, append([]string{"apply", "-refresh-only", "-auto-approve", "-input=false", "-no-color"}, tf.vars...)...); err != nil {
		return fmt.Errorf("terraform apply -refresh-only: %w", err)
	}
	out, err := tf.exec(ctx, "output", "-raw", "leader")
	if err != nil {
		return fmt.Errorf("terraform output: %w", err)
	}
	say("terraform apply -refresh-only; terraform output leader: %s", out)
	return nil
}

func (tf *terraform) exec(ctx context.Context, args ...string) (string, error) {
	cmd := exec.CommandContext(ctx, tf.bin, args...)
	cmd.Dir, cmd.Env = tf.dir, tf.env
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	if err != nil {
		return out.String(), fmt.Errorf("%w\n%s", err, out.String())
	}
	return out.String(), nil
}

// withoutOverrideWarning drops Terraform's warning about dev_overrides, a
// paragraph the demo causes on purpose and which would otherwise fill the
// screen on every command.
func withoutOverrideWarning(lines []string) []string {
	var out []string
	skipping := false
	for _, l := range lines {
		switch {
		case strings.Contains(l, "Warning: Provider development overrides are in effect"):
			skipping = true
		case skipping && strings.Contains(l, "published releases."):
			skipping = false
		case !skipping:
			out = append(out, l)
		}
	}
	return out
}
