// Package provider adapts spannerlock to Terraform: schemas, CRUD and
// diagnostics only. Every Spanner statement lives in internal/locktable or lease.
package provider

import (
	"context"
	"fmt"
	"net"
	"os"
	"strings"

	"cloud.google.com/go/spanner"
	"github.com/hashicorp/terraform-plugin-framework-validators/stringvalidator"
	"github.com/hashicorp/terraform-plugin-framework/datasource"
	"github.com/hashicorp/terraform-plugin-framework/diag"
	"github.com/hashicorp/terraform-plugin-framework/path"
	"github.com/hashicorp/terraform-plugin-framework/provider"
	"github.com/hashicorp/terraform-plugin-framework/provider/schema"
	"github.com/hashicorp/terraform-plugin-framework/resource"
	"github.com/hashicorp/terraform-plugin-framework/schema/validator"
	"github.com/hashicorp/terraform-plugin-framework/types"
	"google.golang.org/api/option"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
)

var _ provider.Provider = (*spannerlockProvider)(nil)

type spannerlockProvider struct {
	version string
	// cache outlives each Configure: see connectionCache.
	cache connectionCache
}

// New returns a constructor for the provider, as providerserver expects.
func New(version string) func() provider.Provider {
	return func() provider.Provider {
		return &spannerlockProvider{version: version}
	}
}

type providerModel struct {
	Database                  types.String `tfsdk:"database"`
	Credentials               types.String `tfsdk:"credentials"`
	AccessToken               types.String `tfsdk:"access_token"`
	ImpersonateServiceAccount types.String `tfsdk:"impersonate_service_account"`
	EmulatorHost              types.String `tfsdk:"emulator_host"`
}

// providerData is what Configure hands to resources and data sources.
type providerData struct {
	// database is the default database path, "" when there is none.
	database string
	// databaseUnknown is set while the default database is computed by
	// another resource, that is, until apply.
	databaseUnknown bool
	// conns is nil while connection settings are unknown (until apply);
	// pending then names the attribute that is unknown.
	conns   *connections
	pending string
}

// defaultDatabase resolves an optional database attribute against the
// provider's. The result is unknown (known == false) while the value that
// decides it is. When neither is set it adds an error on the attribute and
// returns ok == false.
func (d *providerData) defaultDatabase(v types.String, diags *diag.Diagnostics) (db string, known, ok bool) {
	switch {
	case v.IsUnknown():
		return "", false, true
	case !v.IsNull():
		return v.ValueString(), true, true
	case d == nil || d.databaseUnknown:
		return "", false, true
	case d.database == "":
		diags.AddAttributeError(path.Root("database"), "No database", `no database: set database here, or in the `+
			`provider block (provider "spannerlock" { database = "projects/P/instances/I/databases/D" })`)
		return "", false, false
	}
	return d.database, true, true
}

// readDatabase resolves the database of a data source being read, which
// cannot wait for apply: an unknown database is an error too.
func (d *providerData) readDatabase(v types.String, diags *diag.Diagnostics) (string, bool) {
	db, known, ok := d.defaultDatabase(v, diags)
	if ok && !known {
		diags.AddAttributeError(path.Root("database"), "Database not known",
			"The provider's database is computed by a resource that is not created yet. Set database here, or add "+
				"depends_on on that resource so that Terraform reads this data source during apply.")
	}
	return db, ok && known
}

// configured returns the provider's data as Configure of a resource or data
// source receives it: nil until the provider itself is configured.
func configured(raw any, diags *diag.Diagnostics) *providerData {
	if raw == nil {
		return nil
	}
	data, ok := raw.(*providerData)
	if !ok {
		diags.AddError("Unexpected provider data", fmt.Sprintf("expected *providerData, got %T; this is a bug in the provider", raw))
	}
	return data
}

// connections returns the clients, or an error when the provider could not
// be configured yet.
func (d *providerData) connections() (*connections, error) {
	switch {
	case d == nil:
		return nil, fmt.Errorf("the provider is not configured; this is a bug in the provider")
	case d.conns == nil:
		return nil, fmt.Errorf("the provider's %s is not known until apply, so Spanner cannot be reached yet", d.pending)
	}
	return d.conns, nil
}

// spanner returns the data client of db.
func (d *providerData) spanner(ctx context.Context, db string) (*spanner.Client, error) {
	conns, err := d.connections()
	if err != nil {
		return nil, err
	}
	return conns.Spanner(ctx, db)
}

func (p *spannerlockProvider) Metadata(_ context.Context, _ provider.MetadataRequest, resp *provider.MetadataResponse) {
	resp.TypeName = "spannerlock"
	resp.Version = p.version
}

func (p *spannerlockProvider) Schema(_ context.Context, _ provider.SchemaRequest, resp *provider.SchemaResponse) {
	resp.Schema = schema.Schema{
		Description: "Distributed locks, leader election and semaphores on Google Cloud Spanner.",
		MarkdownDescription: "Manages the Spanner tables that [spannerlock](https://github.com/spannerlock/terraform-provider-spannerlock) " +
			"leases live in and the semaphores declared in them, and reads who holds a lease or a permit. Credentials work as in the `google` provider: " +
			"Application Default Credentials unless `credentials` or `access_token` is set.",
		Attributes: map[string]schema.Attribute{
			"database": schema.StringAttribute{
				Optional: true,
				MarkdownDescription: "Default database of every resource and data source, as " +
					"`projects/P/instances/I/databases/D`. Each may set its own `database` instead.",
				Validators: []validator.String{databasePath()},
			},
			"credentials": schema.StringAttribute{
				Optional:  true,
				Sensitive: true,
				MarkdownDescription: "A service account key or other credential configuration, as JSON or as the path " +
					"of a file holding it. Defaults to the `GOOGLE_CREDENTIALS` environment variable; without either, " +
					"Application Default Credentials are used.",
				Validators: []validator.String{stringvalidator.ConflictsWith(path.MatchRoot("access_token"))},
			},
			"access_token": schema.StringAttribute{
				Optional:  true,
				Sensitive: true,
				MarkdownDescription: "An OAuth 2.0 access token, used as is (it is not refreshed). Defaults to the " +
					"`GOOGLE_OAUTH_ACCESS_TOKEN` environment variable. Conflicts with `credentials`.",
				Validators: []validator.String{stringvalidator.ConflictsWith(path.MatchRoot("credentials"))},
			},
			"impersonate_service_account": schema.StringAttribute{
				Optional: true,
				MarkdownDescription: "Email of a service account to impersonate, with the other credentials (or " +
					"Application Default Credentials) as the caller, which needs `roles/iam.serviceAccountTokenCreator` " +
					"on it. Defaults to the `GOOGLE_IMPERSONATE_SERVICE_ACCOUNT` environment variable.",
			},
			"emulator_host": schema.StringAttribute{
				Optional: true,
				MarkdownDescription: "`host:port` of a Spanner emulator. Defaults to the `SPANNER_EMULATOR_HOST` " +
					"environment variable. When set, the provider connects without TLS or authentication and looks up no credentials.",
			},
		},
	}
}

func (p *spannerlockProvider) Configure(ctx context.Context, req provider.ConfigureRequest, resp *provider.ConfigureResponse) {
	var cfg providerModel
	resp.Diagnostics.Append(req.Config.Get(ctx, &cfg)...)
	if resp.Diagnostics.HasError() {
		return
	}
	data := &providerData{database: cfg.Database.ValueString(), databaseUnknown: cfg.Database.IsUnknown()}
	resp.ResourceData, resp.DataSourceData = data, data

	// Settings computed by other resources are known at apply; until then
	// plans go ahead without reading Spanner.
	for _, a := range []struct {
		name string
		v    types.String
	}{
		{"emulator_host", cfg.EmulatorHost},
		{"credentials", cfg.Credentials},
		{"access_token", cfg.AccessToken},
		{"impersonate_service_account", cfg.ImpersonateServiceAccount},
	} {
		if a.v.IsUnknown() {
			data.pending = a.name
			return
		}
	}

	host, fromEnv := valueOrEnv(cfg.EmulatorHost, "SPANNER_EMULATOR_HOST")
	if host != "" {
		data.conns = p.emulatorConnections(host, fromEnv, cfg, resp)
		return
	}
	settings, diags := resolveCredentials(cfg)
	resp.Diagnostics.Append(diags...)
	if resp.Diagnostics.HasError() {
		return
	}
	// Options are built once per distinct setting: impersonation looks up
	// its base credentials, which Configure should not repeat per command.
	if data.conns = p.cache.lookup(settings.key()); data.conns != nil {
		return
	}
	opts, diags := settings.clientOptions(ctx)
	resp.Diagnostics.Append(diags...)
	if resp.Diagnostics.HasError() {
		return
	}
	data.conns = p.cache.get(settings.key(), func() *connections {
		return newConnections("Google Cloud Spanner", opts)
	})
}

// emulatorConnections connects to an emulator. No credentials are looked up
// at all: an emulator ignores them, and a stray GOOGLE_CREDENTIALS or missing
// ADC must not break a local setup.
func (p *spannerlockProvider) emulatorConnections(host string, fromEnv bool, cfg providerModel, resp *provider.ConfigureResponse) *connections {
	for _, scheme := range []string{"http://", "https://", "passthrough:///"} {
		host = strings.TrimPrefix(host, scheme)
	}
	if _, _, err := net.SplitHostPort(host); err != nil {
		detail := fmt.Sprintf("emulator_host must be host:port, like localhost:9010: %v", err)
		if fromEnv {
			detail += " (the value comes from the SPANNER_EMULATOR_HOST environment variable)"
		}
		resp.Diagnostics.AddAttributeError(path.Root("emulator_host"), "Invalid emulator host", detail)
		return nil
	}
	for _, a := range []struct {
		name string
		v    types.String
	}{
		{"credentials", cfg.Credentials},
		{"access_token", cfg.AccessToken},
		{"impersonate_service_account", cfg.ImpersonateServiceAccount},
	} {
		if !a.v.IsNull() {
			resp.Diagnostics.AddAttributeWarning(path.Root(a.name), "Ignored with an emulator",
				fmt.Sprintf("%s is not used: the provider connects to the Spanner emulator at %s without authentication.", a.name, host))
		}
	}
	// The emulator does not support multiplexed sessions, and the Spanner
	// client reads this switch only from the environment when it is created.
	if _, set := os.LookupEnv("GOOGLE_CLOUD_SPANNER_MULTIPLEXED_SESSIONS"); !set {
		_ = os.Setenv("GOOGLE_CLOUD_SPANNER_MULTIPLEXED_SESSIONS", "false")
	}
	return p.cache.get("emulator\x00"+host, func() *connections {
		return newConnections("the Spanner emulator at "+host, []option.ClientOption{
			option.WithEndpoint("passthrough:///" + host),
			option.WithoutAuthentication(),
			option.WithGRPCDialOption(grpc.WithTransportCredentials(insecure.NewCredentials())),
		})
	})
}

// valueOrEnv returns the configured value, else the environment variable's;
// fromEnv reports that it came from the environment.
func valueOrEnv(v types.String, env string) (value string, fromEnv bool) {
	if s := v.ValueString(); s != "" {
		return s, false
	}
	s := os.Getenv(env)
	return s, s != ""
}

func (p *spannerlockProvider) Resources(context.Context) []func() resource.Resource {
	return []func() resource.Resource{newTableResource, newSemaphoreResource}
}

func (p *spannerlockProvider) DataSources(context.Context) []func() datasource.DataSource {
	return []func() datasource.DataSource{newLeaderDataSource, newSemaphoreDataSource}
}
