// Package provider adapts spannerlock to Terraform: schemas, CRUD and
// diagnostics only. Every Spanner statement lives in internal/locktable or lease.
package provider

import (
	"context"
	"fmt"
	"net"
	"os"
	"strings"
	"time"

	"github.com/hashicorp/terraform-plugin-framework-validators/stringvalidator"
	"github.com/hashicorp/terraform-plugin-framework/attr"
	"github.com/hashicorp/terraform-plugin-framework/datasource"
	"github.com/hashicorp/terraform-plugin-framework/diag"
	"github.com/hashicorp/terraform-plugin-framework/ephemeral"
	"github.com/hashicorp/terraform-plugin-framework/function"
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

var (
	_ provider.Provider                       = (*spannerlockProvider)(nil)
	_ provider.ProviderWithFunctions          = (*spannerlockProvider)(nil)
	_ provider.ProviderWithEphemeralResources = (*spannerlockProvider)(nil)
)

// Address is the provider's registry address, which the binary serves under.
const Address = "registry.terraform.io/spannerlock/spannerlock"

// defaultRequestTimeout bounds each request to Spanner unless request_timeout
// says otherwise. Spanner answers the provider's reads in milliseconds; the
// budget is for a slow network, not for waiting on an endpoint that is down.
const defaultRequestTimeout = 30 * time.Second

type spannerlockProvider struct {
	version string
	// cache outlives each Configure: see connectionCache.
	cache connectionCache
	// leases are the ephemeral leases this process holds, from an Open to
	// its Close, or to the end of the process (see Serve).
	leases leaseRegistry
}

// New returns a constructor for the provider, as providerserver expects.
func New(version string) func() provider.Provider {
	return func() provider.Provider {
		return &spannerlockProvider{version: version}
	}
}

type providerModel struct {
	Database                           types.String `tfsdk:"database"`
	Credentials                        types.String `tfsdk:"credentials"`
	AccessToken                        types.String `tfsdk:"access_token"`
	ImpersonateServiceAccount          types.String `tfsdk:"impersonate_service_account"`
	ImpersonateServiceAccountDelegates types.List   `tfsdk:"impersonate_service_account_delegates"`
	EmulatorHost                       types.String `tfsdk:"emulator_host"`
	SpannerCustomEndpoint              types.String `tfsdk:"spanner_custom_endpoint"`
	RequestTimeout                     types.String `tfsdk:"request_timeout"`
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
	// planned are the tables this plan creates or changes, so that checks of
	// other resources can tell a table that is missing, or not at the latest
	// version, from one that is coming.
	planned plannedTables
	// leases is the provider's registry of open ephemeral leases.
	leases *leaseRegistry
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
		diags.AddAttributeError(path.Root("database"), "No database", `no database: set database here, in the `+
			`provider block (provider "spannerlock" { database = "projects/P/instances/I/databases/D" }), or in the `+
			databaseEnv+` environment variable`)
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

// canRead reports whether Spanner can be read now, at plan time: false while
// a connection setting is known only at apply.
func (d *providerData) canRead() bool {
	return d != nil && d.conns != nil
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
					"`projects/P/instances/I/databases/D`. Each may set its own `database` instead. Defaults to the `" +
					databaseEnv + "` environment variable.",
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
			"impersonate_service_account_delegates": schema.ListAttribute{
				Optional:    true,
				ElementType: types.StringType,
				MarkdownDescription: "Service accounts in a delegation chain to `impersonate_service_account`, in order: " +
					"the caller needs `roles/iam.serviceAccountTokenCreator` on the first, each on the next, and the last on " +
					"`impersonate_service_account`.",
			},
			"emulator_host": schema.StringAttribute{
				Optional: true,
				MarkdownDescription: "`host:port` of a Spanner emulator. Defaults to the `SPANNER_EMULATOR_HOST` " +
					"environment variable. When set, the provider connects without TLS or authentication and looks up no credentials.",
			},
			"spanner_custom_endpoint": schema.StringAttribute{
				Optional: true,
				MarkdownDescription: "Spanner endpoint to use instead of `spanner.googleapis.com:443`, such as a regional or " +
					"Private Service Connect endpoint, as `host:port` or as the `google` provider's URL form " +
					"(`https://spanner.example.com/`, port 443). The connection uses TLS. Defaults to the " +
					"`GOOGLE_SPANNER_CUSTOM_ENDPOINT` environment variable. Ignored when `emulator_host` is set.",
				Validators: []validator.String{customEndpoint()},
			},
			"request_timeout": schema.StringAttribute{
				Optional: true,
				MarkdownDescription: "How long each request to Spanner may take, as a duration like `\"30s\"` or `\"2m\"`; " +
					"default `\"" + defaultRequestTimeout.String() + "\"`. It bounds every read (inspections, holders, semaphores) " +
					"and every write of a semaphore, but not the wait for a schema change to finish, which the table's " +
					"`timeouts` bound, nor an ephemeral lease's `wait`. An endpoint that refuses connections fails at once.",
				Validators: []validator.String{durationBetween(time.Second, 0)},
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
	data := &providerData{database: cfg.Database.ValueString(), databaseUnknown: cfg.Database.IsUnknown(), leases: &p.leases}
	resp.ResourceData, resp.DataSourceData, resp.EphemeralResourceData = data, data, data
	resp.ActionData, resp.ListResourceData = data, data
	if cfg.Database.IsNull() {
		if data.database = os.Getenv(databaseEnv); data.database != "" && !databasePattern.MatchString(data.database) {
			resp.Diagnostics.AddAttributeError(path.Root("database"), "Invalid database",
				fmt.Sprintf("The %s environment variable is %q, which is not a database path like "+
					"projects/P/instances/I/databases/D.", databaseEnv, data.database))
			return
		}
	}

	// Settings computed by other resources are known at apply; until then
	// plans go ahead without reading Spanner.
	for _, a := range []struct {
		name string
		v    attr.Value
	}{
		{"emulator_host", cfg.EmulatorHost},
		{"credentials", cfg.Credentials},
		{"access_token", cfg.AccessToken},
		{"impersonate_service_account", cfg.ImpersonateServiceAccount},
		{"impersonate_service_account_delegates", cfg.ImpersonateServiceAccountDelegates},
		{"spanner_custom_endpoint", cfg.SpannerCustomEndpoint},
		{"request_timeout", cfg.RequestTimeout},
	} {
		if a.v.IsUnknown() {
			data.pending = a.name
			return
		}
	}

	settings := connectionSettings{
		timeout:   defaultRequestTimeout,
		userAgent: fmt.Sprintf("terraform-provider-spannerlock/%s terraform/%s", p.version, req.TerraformVersion),
	}
	if !cfg.RequestTimeout.IsNull() {
		// The validator has accepted it.
		settings.timeout, _ = time.ParseDuration(cfg.RequestTimeout.ValueString())
	}

	host, fromEnv := valueOrEnv(cfg.EmulatorHost, "SPANNER_EMULATOR_HOST")
	if host != "" {
		data.conns = p.emulatorConnections(host, fromEnv, cfg, settings, resp)
		return
	}
	var ok bool
	if settings.endpoint, ok = spannerEndpoint(cfg.SpannerCustomEndpoint, &resp.Diagnostics); !ok {
		return
	}
	creds, diags := resolveCredentials(ctx, cfg)
	resp.Diagnostics.Append(diags...)
	if resp.Diagnostics.HasError() {
		return
	}
	// Credentials are looked up once per distinct setting: the lookup reads
	// files and may ask the metadata server, which Configure should not
	// repeat per command.
	key := settings.key() + "\x00" + creds.key()
	if data.conns = p.cache.lookup(key); data.conns != nil {
		return
	}
	opts, diags := creds.clientOptions(ctx)
	resp.Diagnostics.Append(diags...)
	if resp.Diagnostics.HasError() {
		return
	}
	data.conns = p.cache.get(key, func() *connections {
		return newConnections("Spanner at "+settings.endpoint, settings, append(opts, option.WithEndpoint(settings.endpoint)))
	})
}

// databaseEnv is the default of the provider's database.
const databaseEnv = "SPANNERLOCK_DATABASE"

// defaultSpannerEndpoint is where the Spanner clients connect by default.
const defaultSpannerEndpoint = "spanner.googleapis.com:443"

// spannerEndpoint resolves spanner_custom_endpoint and its environment
// variable to host:port.
func spannerEndpoint(v types.String, diags *diag.Diagnostics) (string, bool) {
	s, fromEnv := valueOrEnv(v, "GOOGLE_SPANNER_CUSTOM_ENDPOINT")
	if s == "" {
		return defaultSpannerEndpoint, true
	}
	endpoint, err := parseCustomEndpoint(s)
	if err != nil {
		detail := err.Error()
		if fromEnv {
			detail += " (the value comes from the GOOGLE_SPANNER_CUSTOM_ENDPOINT environment variable)"
		}
		diags.AddAttributeError(path.Root("spanner_custom_endpoint"), "Invalid Spanner endpoint", detail)
		return "", false
	}
	return endpoint, true
}

// emulatorConnections connects to an emulator. No credentials are looked up
// at all: an emulator ignores them, and a stray GOOGLE_CREDENTIALS or missing
// ADC must not break a local setup.
func (p *spannerlockProvider) emulatorConnections(host string, fromEnv bool, cfg providerModel, settings connectionSettings, resp *provider.ConfigureResponse) *connections {
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
		v    attr.Value
	}{
		{"credentials", cfg.Credentials},
		{"access_token", cfg.AccessToken},
		{"impersonate_service_account", cfg.ImpersonateServiceAccount},
		{"impersonate_service_account_delegates", cfg.ImpersonateServiceAccountDelegates},
		{"spanner_custom_endpoint", cfg.SpannerCustomEndpoint},
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
	settings.endpoint = host
	return p.cache.get("emulator\x00"+settings.key(), func() *connections {
		return newConnections("the Spanner emulator at "+host, settings, []option.ClientOption{
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
	return []func() datasource.DataSource{newLeaderDataSource, newSemaphoreDataSource, newLeasesDataSource}
}

func (p *spannerlockProvider) Functions(context.Context) []func() function.Function {
	return []func() function.Function{newDDLFunction}
}

func (p *spannerlockProvider) EphemeralResources(context.Context) []func() ephemeral.EphemeralResource {
	return []func() ephemeral.EphemeralResource{newLeaseEphemeralResource}
}
