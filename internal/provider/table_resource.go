package provider

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"cloud.google.com/go/spanner"
	"github.com/googleapis/gax-go/v2"
	"github.com/hashicorp/terraform-plugin-framework-timeouts/resource/timeouts"
	"github.com/hashicorp/terraform-plugin-framework/attr"
	"github.com/hashicorp/terraform-plugin-framework/diag"
	"github.com/hashicorp/terraform-plugin-framework/path"
	"github.com/hashicorp/terraform-plugin-framework/resource"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema/booldefault"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema/planmodifier"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema/stringplanmodifier"
	"github.com/hashicorp/terraform-plugin-framework/schema/validator"
	"github.com/hashicorp/terraform-plugin-framework/tfsdk"
	"github.com/hashicorp/terraform-plugin-framework/types"
	"github.com/hashicorp/terraform-plugin-log/tflog"
	"google.golang.org/grpc/codes"

	"github.com/spannerlock/terraform-provider-spannerlock/internal/locktable"
	"github.com/spannerlock/terraform-provider-spannerlock/lease"
)

var (
	_ resource.ResourceWithConfigure   = (*tableResource)(nil)
	_ resource.ResourceWithModifyPlan  = (*tableResource)(nil)
	_ resource.ResourceWithImportState = (*tableResource)(nil)
)

// defaultTimeout matches google_spanner_database's: schema changes on a
// table with many rows run as long-running operations.
const defaultTimeout = 20 * time.Minute

// maxListedHolders keeps the refusal to destroy readable on a busy table.
const maxListedHolders = 5

type tableResource struct {
	data *providerData
}

func newTableResource() resource.Resource { return &tableResource{} }

type tableModel struct {
	ID                 types.String   `tfsdk:"id"`
	Name               types.String   `tfsdk:"name"`
	Database           types.String   `tfsdk:"database"`
	DeletionProtection types.Bool     `tfsdk:"deletion_protection"`
	ForceDestroy       types.Bool     `tfsdk:"force_destroy"`
	CleanupAfter       types.String   `tfsdk:"cleanup_after"`
	SchemaVersion      types.Int64    `tfsdk:"schema_version"`
	PendingDDL         types.List     `tfsdk:"pending_ddl"`
	Timeouts           timeouts.Value `tfsdk:"timeouts"`
}

func (r *tableResource) Metadata(_ context.Context, req resource.MetadataRequest, resp *resource.MetadataResponse) {
	resp.TypeName = req.ProviderTypeName + "_table"
}

func (r *tableResource) Schema(ctx context.Context, _ resource.SchemaRequest, resp *resource.SchemaResponse) {
	resp.Schema = schema.Schema{
		MarkdownDescription: "A Spanner table that `lease` clients keep their leases in, with its companion tables " +
			"`<name>_permits` and `<name>_sessions`, created, migrated and repaired in place from the one schema " +
			"definition the runtime uses, in a GoogleSQL- or a PostgreSQL-dialect database: the provider reads the " +
			"database's dialect and writes its DDL in it.",
		Attributes: map[string]schema.Attribute{
			"id": schema.StringAttribute{
				Computed:            true,
				MarkdownDescription: "`projects/P/instances/I/databases/D/tables/T`.",
			},
			"name": schema.StringAttribute{
				Required: true,
				MarkdownDescription: "Name of the table: an ASCII letter, then ASCII letters, digits and underscores, at most " +
					fmt.Sprint(locktable.MaxTableNameLength) + " characters; in a PostgreSQL-dialect database at most " +
					fmt.Sprint(locktable.MaxPostgreSQLTableNameLength) + " (PostgreSQL keeps 63 characters of a name, and " +
					"`<name>_sessions` must fit) and not starting with `pg_`, which the plan checks. Pass the same name to `lease.NewClient`. " +
					"Changing it replaces the table; names differing only in letter case are the same table to Spanner. " +
					"In a PostgreSQL-dialect database the DDL quotes the name, so it keeps its letter case: SQL names a " +
					"table `Locks` as `\"Locks\"`.",
				Validators:    []validator.String{tableName()},
				PlanModifiers: []planmodifier.String{stringplanmodifier.RequiresReplace()},
			},
			"database": schema.StringAttribute{
				Optional: true,
				Computed: true,
				MarkdownDescription: "Database of the table, `projects/P/instances/I/databases/D`. Defaults to the " +
					"provider's `database`. Changing it replaces the table.",
				Validators: []validator.String{databasePath()},
			},
			"deletion_protection": schema.BoolAttribute{
				Optional: true,
				Computed: true,
				Default:  booldefault.StaticBool(true),
				MarkdownDescription: "When true (the default), Terraform refuses to drop the table. Set it to false " +
					"and apply before destroying or replacing the table.",
			},
			"force_destroy": schema.BoolAttribute{
				Optional: true,
				Computed: true,
				Default:  booldefault.StaticBool(false),
				MarkdownDescription: "When false (the default), destroying the table fails while any lease in it is " +
					"live. When true, the table is dropped even while leases are held.",
			},
			"cleanup_after": schema.StringAttribute{
				Optional: true,
				MarkdownDescription: "Delete the table's rows not renewed for this long, as a whole number of days " +
					"(`\"30d\"` or `\"720h\"`). Installs a Spanner row deletion policy on `renewed_at`, which the runtime " +
					"stamps at least hourly on every lock it holds, so a held lock is never deleted; and makes new names' " +
					"tokens start at Spanner's clock in microseconds, so a deleted name resumes above every token it had. " +
					"Unset means rows are kept forever. The sessions table has its own fixed policy of 2 days either way.",
				Validators: []validator.String{cleanupPeriod()},
			},
			"schema_version": schema.Int64Attribute{
				Computed: true,
				MarkdownDescription: "Highest schema version the live table satisfies; 0 when it has drifted from " +
					"every version. After apply it is the latest version, " + fmt.Sprint(locktable.Latest) + ".",
			},
			"pending_ddl": schema.ListAttribute{
				Computed:            true,
				ElementType:         types.StringType,
				MarkdownDescription: "DDL statements the next apply will run; empty when the table is current.",
			},
		},
		Blocks: map[string]schema.Block{
			"timeouts": timeoutsBlock(ctx),
		},
	}
}

// timeoutsBlock describes what each timeout bounds, which the library's
// generic descriptions do not say.
func timeoutsBlock(ctx context.Context) schema.Block {
	const unit = ", as a duration like `\"30m\"` or `\"1h\"`; default `\"20m\"`. "
	const keeps = "Spanner keeps running a schema change the provider stopped waiting for; apply again to see where it got."
	b, ok := timeouts.Block(ctx, timeouts.Opts{
		Create: true, Update: true, Delete: true,
		CreateDescription: "How long creating the tables may take, the wait for Spanner's schema change included" + unit + keeps,
		UpdateDescription: "How long a migration or repair may take, the wait for Spanner's schema change included (with " +
			"many rows, adding a default or an option can take minutes)" + unit + keeps,
		DeleteDescription: "How long dropping the tables may take, the check for live leases and the wait for Spanner's " +
			"schema change included" + unit + "Only a timeout saved in the state before the destroy applies.",
	}).(schema.SingleNestedBlock)
	if !ok {
		panic("timeouts.Block is not a SingleNestedBlock")
	}
	b.MarkdownDescription = "How long each operation may take. The reads within it (inspections, the check for live " +
		"leases) are also bounded, each, by the provider's `request_timeout`."
	return b
}

func (r *tableResource) Configure(_ context.Context, req resource.ConfigureRequest, resp *resource.ConfigureResponse) {
	if data := configured(req.ProviderData, &resp.Diagnostics); data != nil {
		r.data = data
	}
}

// ModifyPlan shows what apply will do to the live table: the statements of
// a creation, an in-place migration or repair, or why there can be none. It
// runs on every plan, so drift found by Read becomes an update here; and on
// destroy plans, so that a destroy that would be refused is refused before
// anything else in the configuration is destroyed.
//
// Errors here stop every plan of the configuration, the one `terraform
// destroy` runs first included, so findings about the live table that
// Terraform cannot fix are warnings: the operator must always be able to
// change the Terraform-only settings, destroy the table, or replace it.
func (r *tableResource) ModifyPlan(ctx context.Context, req resource.ModifyPlanRequest, resp *resource.ModifyPlanResponse) {
	var state *tableModel
	if !req.State.Raw.IsNull() {
		state = &tableModel{}
		resp.Diagnostics.Append(req.State.Get(ctx, state)...)
	}
	if req.Plan.Raw.IsNull() {
		if state != nil && !resp.Diagnostics.HasError() {
			r.planDestroy(ctx, *state, &resp.Diagnostics)
		}
		return
	}
	var plan, config tableModel
	resp.Diagnostics.Append(req.Plan.Get(ctx, &plan)...)
	resp.Diagnostics.Append(req.Config.Get(ctx, &config)...)
	if resp.Diagnostics.HasError() {
		return
	}

	db, dbKnown, ok := r.data.defaultDatabase(config.Database, &resp.Diagnostics)
	if !ok {
		return
	}
	plan.Database, plan.ID = types.StringUnknown(), types.StringUnknown()
	if dbKnown {
		plan.Database = types.StringValue(db)
		if !plan.Name.IsUnknown() {
			plan.ID = types.StringValue(tableID(db, plan.Name.ValueString()))
		}
	}

	// database is Optional+Computed, so its replacement is decided here,
	// where the provider's default is known, not by an attribute modifier
	// that would see an unknown value and replace on every change.
	replace := state == nil
	if state != nil {
		if !plan.Database.Equal(state.Database) {
			resp.RequiresReplace.Append(path.Root("database"))
			replace = true
		}
		if !plan.Name.Equal(state.Name) {
			replace = true // the attribute's own modifier requests it
			if strings.EqualFold(plan.Name.ValueString(), state.Name.ValueString()) {
				// The new table would be the old one: Spanner resolves names
				// regardless of case, so create-before-destroy collides and
				// destroy-then-create loses every token.
				resp.Diagnostics.AddAttributeError(path.Root("name"), "Table name differs only in letter case",
					fmt.Sprintf("Spanner treats %q and %q as the same table, and spannerlock_table does not rename tables. "+
						"Keep name = %q.", plan.Name.ValueString(), state.Name.ValueString(), state.Name.ValueString()))
				return
			}
		}
	}

	switch {
	case replace:
		if state != nil && protected(*state) {
			resp.Diagnostics.AddAttributeError(path.Root("deletion_protection"), "Replacement blocked by deletion_protection",
				fmt.Sprintf("Changing name or database replaces table %s, which drops it and every lease and token in it, "+
					"and deletion_protection is true. To replace it, first set deletion_protection = false and apply; to keep it, "+
					"revert the change.", state.ID.ValueString()))
			return
		}
		plan.SchemaVersion = types.Int64Value(int64(locktable.Latest))
		plan.PendingDDL = types.ListUnknown(types.StringType)
		if state != nil {
			warnReplacement(*state, plan, &resp.Diagnostics)
		}
		if dbKnown && !plan.Name.IsUnknown() {
			r.planCreate(ctx, db, plan.Name.ValueString(), plan.CleanupAfter, &resp.Diagnostics)
		}
	case !dbKnown || plan.CleanupAfter.IsUnknown() || !r.data.canRead():
		// The statements depend on values known only at apply, and apply
		// brings the table to the latest version or fails.
		plan.SchemaVersion = types.Int64Value(int64(locktable.Latest))
		plan.PendingDDL = types.ListUnknown(types.StringType)
	default:
		r.planChanges(ctx, db, &plan, &resp.Diagnostics)
	}
	if resp.Diagnostics.HasError() {
		return
	}
	resp.Diagnostics.Append(resp.Plan.Set(ctx, plan)...)
}

// planDestroy refuses, at plan time, a destroy that Delete would refuse, so
// that nothing else is destroyed first (semaphores in the table, say), and
// names the holders of live leases that would make Delete refuse without
// force_destroy.
func (r *tableResource) planDestroy(ctx context.Context, state tableModel, diags *diag.Diagnostics) {
	if protected(state) {
		diags.AddAttributeError(path.Root("deletion_protection"), "Table is protected by deletion_protection", protectedDetail(state))
		return
	}
	if state.ForceDestroy.ValueBool() || !r.data.canRead() {
		return
	}
	db, table := state.Database.ValueString(), state.Name.ValueString()
	holders, err := r.liveLeases(ctx, db, table)
	switch {
	case err != nil && !databaseGone(err):
		diags.AddError("Cannot check table for live leases", fmt.Sprintf("Destroying table %s checks it for live leases "+
			"first, and reading them failed: %v\n\nSet force_destroy = true and apply to drop it without the check.", table, err))
	case len(holders) > 0:
		diags.AddAttributeWarning(path.Root("force_destroy"), "Table has live leases",
			describeHolders(fmt.Sprintf("Table %s has %d live lease(s), so applications are relying on it, and apply will "+
				"refuse to drop it while any is live:", table, len(holders)), holders))
	}
}

// warnReplacement tells the reviewer what a replacement costs applications:
// the new table is a new token sequence.
func warnReplacement(state, plan tableModel, diags *diag.Diagnostics) {
	from, to := state.ID.ValueString(), plan.ID.ValueString()
	if plan.ID.IsUnknown() {
		to = "a new table"
	}
	diags.AddAttributeWarning(path.Root("name"), fmt.Sprintf("Table %s will be replaced", state.Name.ValueString()),
		fmt.Sprintf("Changing name or database replaces %s with %s: apply drops the old table, with every lease, "+
			"semaphore declaration and fencing token in it, and creates the new one empty, where every name's tokens "+
			"start again (at 1, or at the commit clock with cleanup_after). A system that remembers the largest token it "+
			"has seen rejects the new holders until they pass it. Point the applications at the new table, and use "+
			"new names or reset what remembers tokens.", from, to))
}

// plannedTables are the lock tables a plan creates, by database, so that a
// table can be checked against the others planned with it, and a semaphore
// can tell a table that is missing from one this plan creates.
type plannedTables struct {
	mu   sync.Mutex
	byDB map[string][]string
}

// add records table in db and returns the tables recorded before it.
func (p *plannedTables) add(db, table string) []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.byDB == nil {
		p.byDB = map[string][]string{}
	}
	before := slices.Clone(p.byDB[db])
	if !slices.ContainsFunc(before, func(t string) bool { return strings.EqualFold(t, table) }) {
		p.byDB[db] = append(p.byDB[db], table)
	}
	return before
}

// has reports whether table in db is recorded.
func (p *plannedTables) has(db, table string) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return slices.ContainsFunc(p.byDB[db], func(t string) bool { return strings.EqualFold(t, table) })
}

// planCreate checks, before apply, what would make the creation of table
// fail or break other tables: a table by that name, a name that collides
// with another lock table's companion tables. It shows the statements apply
// will run, in the database's dialect.
func (r *tableResource) planCreate(ctx context.Context, db, table string, cleanup types.String, diags *diag.Diagnostics) {
	if r.data == nil {
		return
	}
	for _, other := range r.data.planned.add(db, table) {
		if why := locktable.Conflict(table, other); why != "" {
			diags.AddAttributeError(path.Root("name"), "Table name collides with another lock table", nameCollision(table, why,
				fmt.Sprintf("This configuration creates both %s and %s in %s.", table, other, db)))
			return
		}
	}
	if !r.data.canRead() {
		return
	}
	var existing []string
	var dialect locktable.Dialect
	err := r.data.call(ctx, db, table, func(ctx context.Context, sc *spanner.Client, d locktable.Dialect) error {
		var err error
		dialect = d
		existing, err = d.ExistingTables(ctx, sc, append([]string{table}, locktable.ConflictingNames(table)...))
		return err
	})
	switch {
	case databaseGone(err):
		// The database is created by this same apply, or the apply fails
		// saying it does not exist; Create checks again either way.
		return
	case err != nil:
		diags.AddError("Cannot read database", err.Error())
		return
	}
	if err := dialect.ValidateTableName(table); err != nil {
		diags.AddAttributeError(path.Root("name"), "Invalid table name", capitalize(err.Error())+".")
		return
	}
	// A table named like another's companion is refused even when it
	// exists (it is that companion, not a lock table to import); an
	// existing table's companions are its own.
	exists := slices.ContainsFunc(existing, func(e string) bool { return strings.EqualFold(e, table) })
	for _, e := range existing {
		why := locktable.Conflict(table, e)
		ours := slices.ContainsFunc(locktable.Companions(table), func(c string) bool { return strings.EqualFold(c, e) })
		if why != "" && (!exists || !ours) {
			diags.AddAttributeError(path.Root("name"), "Table name collides with another lock table",
				nameCollision(table, why, fmt.Sprintf("Table %s exists in %s.", e, db)))
			return
		}
	}
	if exists {
		diags.AddAttributeError(path.Root("name"), "Table already exists", alreadyExists(db, table))
		return
	}
	if opts, err := cleanupOptions(cleanup); err == nil && !cleanup.IsUnknown() {
		diags.AddAttributeWarning(path.Root("pending_ddl"), fmt.Sprintf("Table %s will be created", table),
			fmt.Sprintf("Apply will run these statements in %s:\n\n  %s", db, strings.Join(dialect.CreateDDL(table, opts), ";\n  ")))
	}
}

func nameCollision(table, why, where string) string {
	return fmt.Sprintf("Table %s cannot be created: %s. %s\n\nA lock table is three Spanner tables, T, %s and %s, so its "+
		"name must not be another lock table's companion, and its companions' names must be free. Choose another name.",
		table, why, where, locktable.PermitsTable("T"), locktable.SessionsTable("T"))
}

// planChanges sets the planned schema_version and pending_ddl of an existing
// table from its live schema.
func (r *tableResource) planChanges(ctx context.Context, db string, plan *tableModel, diags *diag.Diagnostics) {
	table := plan.Name.ValueString()
	ins, err := r.data.inspect(ctx, db, table)
	if err != nil {
		diags.AddError("Cannot read table", err.Error())
		return
	}
	opts, err := cleanupOptions(plan.CleanupAfter)
	if err != nil {
		diags.AddAttributeError(path.Root("cleanup_after"), "Invalid cleanup period", err.Error())
		return
	}
	stmts, err := ins.Plan(opts)
	if err != nil {
		// Only the update that would run a migration fails (in Update);
		// everything else the operator may need goes ahead.
		migrate := opts.CleanupAfter != ins.CleanupAfter
		diags.AddAttributeWarning(path.Root("name"), fmt.Sprintf("Table %s cannot be migrated in place", table), unmigratable(err, migrate))
		plan.SchemaVersion = types.Int64Value(int64(ins.Version))
		plan.PendingDDL = ddlList(nil)
		if migrate {
			plan.SchemaVersion = types.Int64Value(int64(locktable.Latest))
			plan.PendingDDL = types.ListUnknown(types.StringType)
		}
		return
	}
	if len(stmts) == 0 {
		plan.SchemaVersion = types.Int64Value(int64(ins.Version))
		plan.PendingDDL = ddlList(nil)
		return
	}
	plan.SchemaVersion = types.Int64Value(int64(locktable.Latest))
	// Unknown rather than empty: the prior value, the statements Read found
	// pending, stays visible in the plan as what this apply runs.
	plan.PendingDDL = types.ListUnknown(types.StringType)

	diags.AddAttributeWarning(path.Root("pending_ddl"), fmt.Sprintf("Table %s will be changed in place", table), describeChanges(ins, opts, stmts))
}

// describeChanges says what apply will run and what in the live table
// calls for it, so a reviewer can tell a migration from a repair of drift.
func describeChanges(ins locktable.Inspection, opts locktable.Options, stmts []string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "Apply will run these statements on table %s; none drops a column or a table, so its rows are kept:\n\n  %s\n",
		ins.Table, strings.Join(stmts, ";\n  "))
	switch {
	case !ins.Exists:
		b.WriteString("\nThe table does not exist.\n")
		return b.String()
	case ins.Version == 0:
		fmt.Fprintf(&b, "\nThe live table has drifted from every schema version. What differs from version %d with this configuration:\n", locktable.Latest)
	case ins.Version < locktable.Latest:
		fmt.Fprintf(&b, "\nThe live table is at schema version %d; the latest is %d. What differs with this configuration:\n", ins.Version, locktable.Latest)
	default:
		b.WriteString("\nWhat differs with this configuration:\n")
	}
	for _, d := range ins.Changes(opts) {
		fmt.Fprintf(&b, "  - %s\n", d)
	}
	return b.String()
}

func alreadyExists(db, table string) string {
	return fmt.Sprintf("Table %s already exists in %s. spannerlock_table never adopts or replaces an existing table "+
		"without review; import it instead, with an import block or with\n\n  terraform import <resource address> %s\n\n"+
		"The plan after the import shows any migration the table needs.", table, db, tableID(db, table))
}

// unmigratable explains a table no additive statement can repair. Its
// wording depends on whether this apply would fail on it: only an update
// that migrates the schema does.
func unmigratable(err error, migrate bool) string {
	msg := err.Error() + "\n\nspannerlock changes lock tables only additively and never drops a column or replaces a " +
		"table that may hold leases, because each row keeps its name's fencing token. Fix the table by hand as described, " +
		"or set name to a new table (and move the applications to it)."
	if migrate {
		return msg + "\n\nThis configuration changes cleanup_after, which needs a migration, so apply will fail until the table is fixed."
	}
	return msg + "\n\nUntil then, Terraform still changes deletion_protection, force_destroy and timeouts, destroys the " +
		"table, and replaces it."
}

func (r *tableResource) Create(ctx context.Context, req resource.CreateRequest, resp *resource.CreateResponse) {
	var plan tableModel
	resp.Diagnostics.Append(req.Plan.Get(ctx, &plan)...)
	if resp.Diagnostics.HasError() {
		return
	}
	timeout, diags := plan.Timeouts.Create(ctx, defaultTimeout)
	resp.Diagnostics.Append(diags...)
	if resp.Diagnostics.HasError() {
		return
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()

	db, table := plan.Database.ValueString(), plan.Name.ValueString()
	opts, err := cleanupOptions(plan.CleanupAfter)
	if err != nil {
		resp.Diagnostics.AddAttributeError(path.Root("cleanup_after"), "Invalid cleanup period", err.Error())
		return
	}
	ins, err := r.data.inspect(ctx, db, table)
	if err != nil {
		resp.Diagnostics.AddError("Cannot read table", err.Error())
		return
	}
	if ins.Exists {
		resp.Diagnostics.AddAttributeError(path.Root("name"), "Table already exists", alreadyExists(db, table))
		return
	}
	// The plan could not check it when the database did not exist yet.
	if err := ins.Dialect.ValidateTableName(table); err != nil {
		resp.Diagnostics.AddAttributeError(path.Root("name"), "Invalid table name", capitalize(err.Error())+".")
		return
	}
	stmts, err := ins.Plan(opts)
	if err != nil {
		resp.Diagnostics.AddAttributeError(path.Root("name"), "Cannot create table", err.Error())
		return
	}
	if err := r.apply(ctx, db, ins, "create", stmts); err != nil {
		resp.Diagnostics.AddError("Cannot create table", ddlFailure(ctx, err, "create",
			fmt.Sprintf("If the table was created before the failure, import it (terraform import <resource address> %s) "+
				"and apply again to finish.", tableID(db, table))))
		return
	}
	r.save(ctx, &plan, &resp.State, &resp.Diagnostics)
}

func (r *tableResource) Read(ctx context.Context, req resource.ReadRequest, resp *resource.ReadResponse) {
	var state tableModel
	resp.Diagnostics.Append(req.State.Get(ctx, &state)...)
	if resp.Diagnostics.HasError() {
		return
	}
	ins, err := r.data.inspect(ctx, state.Database.ValueString(), state.Name.ValueString())
	if err != nil && !databaseGone(err) {
		resp.Diagnostics.AddError("Cannot read table", err.Error())
		return
	}
	if err != nil || !ins.Exists {
		// Dropped outside Terraform, maybe with its database: the next plan
		// creates it again.
		resp.State.RemoveResource(ctx)
		return
	}
	state.refresh(ins)
	resp.Diagnostics.Append(resp.State.Set(ctx, state)...)
}

func (r *tableResource) Update(ctx context.Context, req resource.UpdateRequest, resp *resource.UpdateResponse) {
	var plan tableModel
	resp.Diagnostics.Append(req.Plan.Get(ctx, &plan)...)
	if resp.Diagnostics.HasError() {
		return
	}
	timeout, diags := plan.Timeouts.Update(ctx, defaultTimeout)
	resp.Diagnostics.Append(diags...)
	if resp.Diagnostics.HasError() {
		return
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()

	db, table := plan.Database.ValueString(), plan.Name.ValueString()
	opts, err := cleanupOptions(plan.CleanupAfter)
	if err != nil {
		resp.Diagnostics.AddAttributeError(path.Root("cleanup_after"), "Invalid cleanup period", err.Error())
		return
	}
	// The plan's statements are recomputed rather than replayed: the table
	// may have changed since the plan, and the statements must fit it now.
	ins, err := r.data.inspect(ctx, db, table)
	if err != nil {
		resp.Diagnostics.AddError("Cannot read table", err.Error())
		return
	}
	stmts, err := ins.Plan(opts)
	switch {
	case err != nil && plan.PendingDDL.IsUnknown():
		// The plan promised a migration, which cannot run.
		resp.Diagnostics.AddAttributeError(path.Root("name"), "Table cannot be migrated in place", unmigratable(err, true))
		return
	case err != nil:
		// The plan promised no DDL (ModifyPlan warned why): this update
		// changes only what lives in Terraform.
		stmts = nil
	}
	if err := r.apply(ctx, db, ins, "migrate", stmts); err != nil {
		resp.Diagnostics.AddError("Cannot update table", ddlFailure(ctx, err, "update",
			"Statements before the failing one stay applied; the next plan shows what is still pending."))
		return
	}
	r.save(ctx, &plan, &resp.State, &resp.Diagnostics)
}

func (r *tableResource) Delete(ctx context.Context, req resource.DeleteRequest, resp *resource.DeleteResponse) {
	var state tableModel
	resp.Diagnostics.Append(req.State.Get(ctx, &state)...)
	if resp.Diagnostics.HasError() {
		return
	}
	// Checked before anything else so that the refusal is the answer
	// whatever else is wrong (an unreachable database, live leases).
	if protected(state) {
		resp.Diagnostics.AddAttributeError(path.Root("deletion_protection"), "Table is protected by deletion_protection", protectedDetail(state))
		return
	}
	timeout, diags := state.Timeouts.Delete(ctx, defaultTimeout)
	resp.Diagnostics.Append(diags...)
	if resp.Diagnostics.HasError() {
		return
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()

	db, table := state.Database.ValueString(), state.Name.ValueString()
	ins, err := r.data.inspect(ctx, db, table)
	if err != nil && !databaseGone(err) {
		resp.Diagnostics.AddError("Cannot read table", err.Error())
		return
	}
	if err != nil || !ins.Exists {
		return
	}
	if !state.ForceDestroy.ValueBool() {
		holders, err := r.liveLeases(ctx, db, table)
		switch {
		case err != nil:
			resp.Diagnostics.AddAttributeError(path.Root("force_destroy"), "Cannot check table for live leases",
				fmt.Sprintf("Table %s was not dropped: checking it for live leases failed: %v\n\n"+
					"Set force_destroy = true and apply to drop it without the check.", table, err))
			return
		case len(holders) > 0:
			resp.Diagnostics.AddAttributeError(path.Root("force_destroy"), "Table has live leases",
				describeHolders(fmt.Sprintf("Table %s was not dropped: %d lease(s) in it are live, so applications are relying on it:",
					table, len(holders)), holders))
			return
		}
	}
	// Only what exists, as Spanner spells it: a table from an older version
	// lacks the later companion tables.
	if err := r.apply(ctx, db, ins, "drop", ins.DropPlan()); err != nil {
		resp.Diagnostics.AddError("Cannot drop table", ddlFailure(ctx, err, "delete", ""))
	}
}

// protectedDetail explains the refusal to drop a protected table.
func protectedDetail(state tableModel) string {
	return fmt.Sprintf("Table %s is not dropped while deletion_protection is true: dropping it deletes every lease, "+
		"semaphore declaration and fencing token in it. Nothing was destroyed. To drop it, set deletion_protection = false, "+
		"run terraform apply, then destroy.", state.ID.ValueString())
}

// liveLeases returns the live leases in the table, read through the lease
// package, so "live" means what it means to every application using it.
func (r *tableResource) liveLeases(ctx context.Context, db, table string) ([]lease.Holder, error) {
	var holders []lease.Holder
	err := r.data.withLease(ctx, db, table, func(ctx context.Context, lc *lease.Client) error {
		var err error
		holders, err = lc.Holders(ctx)
		return err
	})
	return holders, err
}

// describeHolders lists up to five holders after lead, and what to do.
func describeHolders(lead string, holders []lease.Holder) string {
	var b strings.Builder
	b.WriteString(lead + "\n")
	for i, h := range holders {
		if i == maxListedHolders {
			fmt.Fprintf(&b, "  ... and %d more\n", len(holders)-maxListedHolders)
			break
		}
		fmt.Fprintf(&b, "  - %q held by %q with token %d until %s\n", h.Name, h.HolderID, h.Token, h.ExpiresAt.UTC().Format(time.RFC3339))
	}
	b.WriteString("\nWait for them to be released or to expire, or set force_destroy = true and apply to drop the table anyway.")
	return b.String()
}

func (r *tableResource) ImportState(ctx context.Context, req resource.ImportStateRequest, resp *resource.ImportStateResponse) {
	var defaultDB string
	if r.data != nil {
		defaultDB = r.data.database
	}
	db, table, err := parseTableImportID(req.ID, defaultDB)
	if err != nil {
		resp.Diagnostics.AddError("Invalid import ID", err.Error())
		return
	}
	// The Terraform-only settings get their defaults, so the plan after
	// importing into a configuration that relies on them is empty; Read
	// fills in everything that lives in Spanner.
	for name, v := range map[string]attr.Value{
		"id":                  types.StringValue(tableID(db, table)),
		"name":                types.StringValue(table),
		"database":            types.StringValue(db),
		"deletion_protection": types.BoolValue(true),
		"force_destroy":       types.BoolValue(false),
		"pending_ddl":         ddlList(nil),
	} {
		resp.Diagnostics.Append(resp.State.SetAttribute(ctx, path.Root(name), v)...)
	}
}

// save records the table as it is after a change: the planned settings and
// what Spanner reports.
func (r *tableResource) save(ctx context.Context, m *tableModel, state *tfsdk.State, diags *diag.Diagnostics) {
	ins, err := r.data.inspect(ctx, m.Database.ValueString(), m.Name.ValueString())
	if err != nil {
		diags.AddError("Cannot read table after the change", err.Error())
		return
	}
	m.ID = types.StringValue(tableID(m.Database.ValueString(), m.Name.ValueString()))
	m.refresh(ins)
	diags.Append(state.Set(ctx, m)...)
}

// refresh updates the attributes that live in Spanner from an inspection.
func (m *tableModel) refresh(ins locktable.Inspection) {
	want, err := cleanupOptions(m.CleanupAfter)
	if err != nil {
		want = locktable.Options{}
	}
	stmts, err := ins.Plan(want)
	if err != nil {
		// Read must succeed so that Terraform can still destroy or import;
		// every plan warns about it (ModifyPlan), and an update that would
		// migrate fails.
		stmts = nil
	}
	m.PendingDDL = ddlList(stmts)
	m.SchemaVersion = types.Int64Value(int64(ins.Version))
	switch {
	case ins.CleanupAfter == 0:
		m.CleanupAfter = types.StringNull()
	case want.CleanupAfter == ins.CleanupAfter:
		// Keep the configured spelling ("720h" or "30d") to avoid a
		// perpetual diff between equal periods.
	default:
		m.CleanupAfter = types.StringValue(locktable.FormatCleanupAfter(ins.CleanupAfter))
	}
}

func protected(m tableModel) bool {
	return m.DeletionProtection.IsNull() || m.DeletionProtection.ValueBool()
}

func cleanupOptions(v types.String) (locktable.Options, error) {
	if v.IsNull() || v.IsUnknown() {
		return locktable.Options{}, nil
	}
	d, err := locktable.ParseCleanupAfter(v.ValueString())
	return locktable.Options{CleanupAfter: d}, err
}

func ddlList(stmts []string) types.List {
	elems := make([]attr.Value, len(stmts))
	for i, s := range stmts {
		elems[i] = types.StringValue(s)
	}
	return types.ListValueMust(types.StringType, elems)
}

// apply runs one schema change on table (ins is what it is now), logging
// each statement; action says what the change is for.
func (r *tableResource) apply(ctx context.Context, db string, ins locktable.Inspection, action string, stmts []string) error {
	if len(stmts) == 0 {
		return nil
	}
	conns, err := r.data.connections()
	if err != nil {
		return err
	}
	ctx = withLogging(ctx, db, ins.Table)
	admin, err := conns.Admin(ctx)
	if err != nil {
		return fmt.Errorf("database %s: %w", db, err)
	}
	lock := conns.schemaChange(db)
	lock.Lock()
	defer lock.Unlock()
	tflog.SubsystemInfo(ctx, logSchema, "Changing table schema", map[string]any{
		"action": action, "live_schema_version": ins.Version, "latest_schema_version": locktable.Latest, "statements": len(stmts),
	})
	for i, stmt := range stmts {
		tflog.SubsystemDebug(ctx, logSchema, "DDL statement", map[string]any{"statement": stmt, "position": i + 1})
	}
	backoff := gax.Backoff{Initial: 250 * time.Millisecond, Max: 5 * time.Second, Multiplier: 2}
	for {
		err := locktable.Apply(ctx, admin, db, stmts)
		if err == nil {
			break
		}
		if !concurrentSchemaChange(err) || ctx.Err() != nil {
			tflog.SubsystemError(ctx, logSchema, "Schema change failed", map[string]any{"error": err.Error()})
			return fmt.Errorf("on %s: %w", conns.target, err)
		}
		// Nothing of it ran: Spanner refused the whole change up front.
		pause := backoff.Pause()
		tflog.SubsystemDebug(ctx, logSchema, "Schema change refused while another runs; retrying", map[string]any{
			"error": err.Error(), "retry_in": pause.String(),
		})
		select {
		case <-ctx.Done():
			return fmt.Errorf("on %s: %w", conns.target, err)
		case <-time.After(pause):
		}
	}
	tflog.SubsystemDebug(ctx, logSchema, "Schema change done")
	return nil
}

// concurrentSchemaChange reports Spanner's refusal of a schema change
// because another schema change (or, on the emulator, a read-write
// transaction) is running: nothing of it was applied, and it can be retried.
func concurrentSchemaChange(err error) bool {
	return spanner.ErrCode(err) == codes.FailedPrecondition && strings.Contains(err.Error(), "concurrent schema change")
}

// ddlFailure explains a failed schema change; a timeout gets its own advice
// because Spanner keeps running a schema change the client stopped waiting for.
func ddlFailure(ctx context.Context, err error, op, advice string) string {
	msg := err.Error()
	if errors.Is(ctx.Err(), context.DeadlineExceeded) {
		msg += fmt.Sprintf("\n\nThe %s timeout ran out. Spanner may still be applying the schema change; "+
			"raise timeouts.%s for large tables and run terraform apply again.", op, op)
	}
	if advice != "" {
		msg += "\n\n" + advice
	}
	return msg
}
