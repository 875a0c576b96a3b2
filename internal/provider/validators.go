package provider

import (
	"context"
	"fmt"
	"regexp"

	"github.com/hashicorp/terraform-plugin-framework-validators/stringvalidator"
	"github.com/hashicorp/terraform-plugin-framework/schema/validator"

	"github.com/spannerlock/terraform-provider-spannerlock/internal/locktable"
	"github.com/spannerlock/terraform-provider-spannerlock/lease"
)

// databasePattern is the full path every Spanner client call takes; shorter
// forms would need a project default this provider does not have.
var databasePattern = regexp.MustCompile(`^projects/[^/]+/instances/[^/]+/databases/[^/]+$`)

func databasePath() validator.String {
	return stringvalidator.RegexMatches(databasePattern, "must be a database path like projects/P/instances/I/databases/D")
}

// funcValidator runs a check from locktable at plan time, so Terraform and
// the runtime accept exactly the same values.
type funcValidator struct {
	description string
	summary     string
	check       func(string) error
}

func (v funcValidator) Description(context.Context) string         { return v.description }
func (v funcValidator) MarkdownDescription(context.Context) string { return v.description }

func (v funcValidator) ValidateString(_ context.Context, req validator.StringRequest, resp *validator.StringResponse) {
	if req.ConfigValue.IsNull() || req.ConfigValue.IsUnknown() {
		return
	}
	if err := v.check(req.ConfigValue.ValueString()); err != nil {
		resp.Diagnostics.AddAttributeError(req.Path, v.summary, fmt.Sprintf("%s: %v", req.Path, err))
	}
}

func tableName() validator.String {
	return funcValidator{
		description: "a table name: a letter, then letters, digits and underscores",
		summary:     "Invalid table name",
		check:       locktable.ValidateTableName,
	}
}

func cleanupPeriod() validator.String {
	return funcValidator{
		description: `a positive whole number of days, written like "30d" or "720h"`,
		summary:     "Invalid cleanup period",
		check: func(s string) error {
			_, err := locktable.ParseCleanupAfter(s)
			return err
		},
	}
}

func leaseName() validator.String {
	return funcValidator{
		description: "a lease name: 1 to 1024 characters of valid UTF-8",
		summary:     "Invalid lease name",
		check:       lease.ValidateName,
	}
}

// semaphoreName is leaseName under the name the diagnostic should use:
// semaphores share the lease names of their table.
func semaphoreName() validator.String {
	return funcValidator{
		description: "a semaphore name: 1 to 1024 characters of valid UTF-8",
		summary:     "Invalid semaphore name",
		check:       lease.ValidateName,
	}
}
