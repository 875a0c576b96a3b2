package provider

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"sync"
	"testing"

	"github.com/hashicorp/go-version"
	"github.com/hashicorp/terraform-plugin-testing/tfversion"

	"github.com/spannerlock/terraform-provider-spannerlock/internal/emulator"
)

// The acceptance tests run on Terraform and on OpenTofu (make test under
// CI runs both). OpenTofu reports the version of its own releases, and has
// none of what Terraform added in 1.12 and 1.14 (resource identity, list
// resources, actions): a test of those skips on OpenTofu, even under CI,
// where the run on Terraform covers it.

// openTofu reports whether the acceptance tests run OpenTofu.
var openTofu = sync.OnceValue(func() bool {
	bin := os.Getenv("TF_ACC_TERRAFORM_PATH")
	if bin == "" {
		bin = "terraform"
	}
	out, err := exec.Command(bin, "version").Output()
	return err == nil && strings.HasPrefix(string(out), "OpenTofu")
})

// terraformOnly is tfversion's check that Terraform is at least minimum,
// for a feature OpenTofu lacks: it skips on OpenTofu, skips on an older
// Terraform, and fails on an older Terraform under CI=true.
type terraformOnly struct {
	minimum *version.Version
	feature string
}

func (c terraformOnly) CheckTerraformVersion(_ context.Context, req tfversion.CheckTerraformVersionRequest, resp *tfversion.CheckTerraformVersionResponse) {
	switch {
	case openTofu():
		resp.Skip = fmt.Sprintf("OpenTofu has no %s (Terraform %s added them)", c.feature, c.minimum)
	case req.TerraformVersion.Core().LessThan(c.minimum):
		msg := fmt.Sprintf("%s need Terraform %s or later; this is %s", c.feature, c.minimum, req.TerraformVersion)
		if emulator.CI() {
			resp.Error = fmt.Errorf("%s (failing, not skipping, because CI=true)", msg)
			return
		}
		resp.Skip = msg
	}
}

// requireTerraformOnly is terraformOnly for a test that runs the CLI.
func (tf *terraformCLI) requireTerraformOnly(ctx context.Context, minimum *version.Version, feature string) {
	tf.t.Helper()
	if openTofu() {
		tf.t.Skipf("OpenTofu has no %s (Terraform %s added them)", feature, minimum)
	}
	tf.require(ctx, minimum)
}

func TestTerraformOnlySkipsOrFails(t *testing.T) {
	if openTofu() {
		t.Skip("this checks the gate on Terraform")
	}
	check := terraformOnly{minimum: terraform114, feature: "actions"}
	var resp tfversion.CheckTerraformVersionResponse
	check.CheckTerraformVersion(context.Background(), tfversion.CheckTerraformVersionRequest{TerraformVersion: version.Must(version.NewVersion("1.11.4"))}, &resp)
	if emulator.CI() && resp.Error == nil || !emulator.CI() && resp.Skip == "" {
		t.Errorf("on Terraform 1.11.4: %+v; want a skip, or an error under CI=true", resp)
	}
	resp = tfversion.CheckTerraformVersionResponse{}
	check.CheckTerraformVersion(context.Background(), tfversion.CheckTerraformVersionRequest{TerraformVersion: version.Must(version.NewVersion("1.14.9"))}, &resp)
	if resp.Error != nil || resp.Skip != "" {
		t.Errorf("on Terraform 1.14.9: %+v; want the test to run", resp)
	}
}

// skipOnOpenTofu skips a test of behaviour OpenTofu does not have, even
// under CI, saying why: each use is a known difference to remove.
func skipOnOpenTofu(t *testing.T, why string) {
	t.Helper()
	if openTofu() {
		t.Skip("OpenTofu: " + why)
	}
}

// openTofuUnknownEphemeral: the lease returns unknown values from an Open
// it does not acquire in (a plan, or a database known only at apply), which
// Terraform accepts and OpenTofu 1.11 refuses ("produced a value for
// ephemeral.spannerlock_lease.deploy that is not wholly known").
const openTofuUnknownEphemeral = "it refuses the unknown values an ephemeral lease returns when it does not acquire"
