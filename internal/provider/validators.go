package provider

import (
	"context"
	"fmt"
	"math/big"
	"net"
	"net/url"
	"regexp"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

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
	// Terraform shows the attribute and its value with the diagnostic, so
	// the detail is the reason alone.
	if err := v.check(req.ConfigValue.ValueString()); err != nil {
		resp.Diagnostics.AddAttributeError(req.Path, v.summary, capitalize(err.Error())+".")
	}
}

func tableName() validator.String {
	return funcValidator{
		description: "a table name: an ASCII letter, then ASCII letters, digits and underscores",
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

// holderID is leaseName under the name the diagnostic should use: the lease
// package holds holder IDs to the rules of names.
func holderID() validator.String {
	return funcValidator{
		description: "a holder ID: 1 to 1024 characters of valid UTF-8",
		summary:     "Invalid holder ID",
		check: func(s string) error {
			if s == "" {
				return fmt.Errorf("holder ID is empty: leave holder_id unset for the default, <host>-<pid>-<random>")
			}
			if err := lease.ValidateName(s); err != nil {
				// lease says "lease name"; the rules are the same.
				return fmt.Errorf("holder ID%s", strings.TrimPrefix(err.Error(), "lease name"))
			}
			return nil
		},
	}
}

// wholeNumber accepts a whole number of at least minimum that fits in 64 bits.
func wholeNumber(minimum int64) validator.Number {
	return numberValidator{minimum: minimum}
}

type numberValidator struct{ minimum int64 }

func (v numberValidator) Description(context.Context) string {
	return fmt.Sprintf("a whole number, at least %d", v.minimum)
}

func (v numberValidator) MarkdownDescription(ctx context.Context) string { return v.Description(ctx) }

func (v numberValidator) ValidateNumber(_ context.Context, req validator.NumberRequest, resp *validator.NumberResponse) {
	if req.ConfigValue.IsNull() || req.ConfigValue.IsUnknown() {
		return
	}
	f := req.ConfigValue.ValueBigFloat()
	n, acc := f.Int64()
	if !f.IsInt() || acc != big.Exact || n < v.minimum {
		resp.Diagnostics.AddAttributeError(req.Path, "Invalid number",
			fmt.Sprintf("Must be a whole number, at least %d, not %s.", v.minimum, f.Text('g', -1)))
	}
}

// capitalize makes an error message read as a sentence in a diagnostic.
func capitalize(s string) string {
	r, n := utf8.DecodeRuneInString(s)
	return string(unicode.ToUpper(r)) + s[n:]
}

// durationBetween accepts a duration from minimum to maximum; a zero
// maximum means no limit.
func durationBetween(minimum, maximum time.Duration) validator.String {
	desc := fmt.Sprintf("a duration of at least %s", minimum)
	if maximum > 0 {
		desc = fmt.Sprintf("a duration from %s to %s", minimum, maximum)
	}
	return funcValidator{
		description: desc,
		summary:     "Invalid duration",
		check: func(s string) error {
			d, err := time.ParseDuration(s)
			switch {
			case err != nil:
				return fmt.Errorf("%q is not a duration like \"30s\" or \"10m\"", s)
			case maximum > 0 && (d < minimum || d > maximum):
				return fmt.Errorf("duration %q must be from %s to %s", s, minimum, maximum)
			case d < minimum:
				return fmt.Errorf("duration %q must be at least %s", s, minimum)
			}
			return nil
		},
	}
}

func customEndpoint() validator.String {
	return funcValidator{
		description: "a Spanner endpoint, host:port or https://host/",
		summary:     "Invalid Spanner endpoint",
		check: func(s string) error {
			_, err := parseCustomEndpoint(s)
			return err
		},
	}
}

// parseCustomEndpoint reads host:port, or a URL as the google provider's
// spanner_custom_endpoint has it (https://host[:port]/path/, whose path the
// gRPC clients do not use), and returns host:port.
func parseCustomEndpoint(s string) (string, error) {
	if !strings.Contains(s, "://") {
		if _, _, err := net.SplitHostPort(s); err != nil {
			return "", fmt.Errorf("endpoint %q must be host:port or an https:// URL: %v", s, err)
		}
		return s, nil
	}
	u, err := url.Parse(s)
	switch {
	case err != nil:
		return "", fmt.Errorf("endpoint %q is not a URL: %v", s, err)
	case u.Scheme == "http":
		return "", fmt.Errorf("endpoint %q is plain HTTP; the provider connects to Spanner with TLS only. For a Spanner emulator, set emulator_host instead", s)
	case u.Scheme != "https" || u.Hostname() == "":
		return "", fmt.Errorf("endpoint %q must be host:port or an https:// URL", s)
	}
	port := u.Port()
	if port == "" {
		port = "443"
	}
	return net.JoinHostPort(u.Hostname(), port), nil
}
