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
	_ resource.ResourceWithConfigure      = (*tableResource)(nil)
	_ resource.ResourceWithModifyPlan     = (*tableResource)(nil)
	_ resource.ResourceWithImportState    = (*tableResource)(nil)
	_ resource.ResourceWithValidateConfig = (*tableResource)(nil)
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
	PlannedDDL         types.List     `tfsdk:"planned_ddl"`
	Drifted            types.Bool     `tfsdk:"drifted"`
	Drift              types.List     `tfsdk:"drift"`
	Timeouts           timeouts.Value `tfsdk:"timeouts"`
}

func (r *tableResource) Metadata(_ context.Context, req resource.MetadataRequest, resp *resource.MetadataResponse) {
	resp.TypeName = req.ProviderTypeName + "_table"
}

func (r *tableResource) Schema(ctx context.Context, _ resource.SchemaRequest, resp *resource.SchemaResponse) {
	resp.Schema = schema.Schema{
		MarkdownDescription: "A Spanner table that `lease` clients keep their leases in, with its companion tables " +
			"`<name>_permits`, `<name>_sessions` and `<name>_waiters`, created, migrated and repaired in place from the one schema " +
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
				Computed:    true,
				ElementType: types.StringType,
				MarkdownDescription: "DDL statements the table needs to be at the latest version with this configuration, as " +
					"Terraform last read it; empty when the table is current.",
			},
			"planned_ddl": schema.ListAttribute{
				Computed:    true,
				ElementType: types.StringType,
				MarkdownDescription: "DDL statements the apply of this plan runs, in order: the creation of a new table, or " +
					"the migration or repair of an existing one. The plan lists them; after the apply they are in the state, " +
					"and the next refresh empties the list.",
			},
			"drifted": schema.BoolAttribute{
				Computed: true,
				MarkdownDescription: "Whether the live table differs from spannerlock's schema in a way that no additive " +
					"statement repairs, so that Terraform can neither migrate nor repair it (see `drift`). Plans only warn " +
					"about it; a `check` block or a `postcondition` can assert `!drifted`.",
			},
			"drift": schema.ListAttribute{
				Computed:    true,
				ElementType: types.StringType,
				MarkdownDescription: "The differences that make `drifted` true, each with what to do about it; empty when " +
					"there are none.",
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

// ValidateConfig refuses a timeout that is not positive: it would end the
// operation before it starts.
func (r *tableResource) ValidateConfig(ctx context.Context, req resource.ValidateConfigRequest, resp *resource.ValidateConfigResponse) {
	var t timeouts.Value
	resp.Diagnostics.Append(req.Config.GetAttribute(ctx, path.Root("timeouts"), &t)...)
	if resp.Diagnostics.HasError() || t.IsNull() || t.IsUnknown() {
		return
	}
	for op, v := range t.Attributes() {
		s, ok := v.(types.String)
		if !ok || s.IsNull() || s.IsUnknown() {
			continue
		}
		if d, err := time.ParseDuration(s.ValueString()); err == nil && d <= 0 {
			resp.Diagnostics.AddAttributeError(path.Root("timeouts").AtName(op), "Invalid timeout",
				fmt.Sprintf("Timeout %q must be positive, like \"30m\": the %s would end before it starts.", s.ValueString(), op))
		}
	}
}

func (r *tableResource) Configure(_ context.Context, req resource.ConfigureRequest, resp *resource.ConfigureResponse) {
	if data := configured(req.ProviderData, &resp.Diagnostics); data != nil {
		r.data = data
	}
}

// ModifyPlan shows what apply will do to the live table: the statements of
// a creation, an in-place migration or repair (planned_ddl), or why there
// can be none. It runs on every plan, so drift found by Read becomes an
// update here; and on destroy plans, so that a destroy that would be refused
// is refused before anything else in the configuration is destroyed.
//
// Errors here stop every plan of the configuration, the one `terraform
// destroy` runs first included, so findings about the live table that
// Terraform cannot fix are warnings: the operator must always be able to
// change the Terraform-only settings, destroy the table, or replace it.
// What apply would refuse (a protected table, live leases) is an error.
//
// Terraform plans a replacement in two calls: the first, with the prior
// state, decides it; the second plans the new table as a creation, with the
// first call's private data. The second is told apart by privateReplacing
// and says nothing the first has said.
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
	replacing, diags := req.Private.GetKey(ctx, privateReplacing)
	resp.Diagnostics.Append(diags...)
	secondCall := state == nil && replacing != nil

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
	if dbKnown && !plan.Name.IsUnknown() && !secondCall && r.data != nil && !r.data.planned.manage(db, plan.Name.ValueString()) {
		resp.Diagnostics.AddAttributeError(path.Root("name"), "Table managed twice", fmt.Sprintf("Another "+
			"spannerlock_table of this configuration manages table %s in %s too (Spanner compares table names regardless "+
			"of letter case). Each table needs exactly one resource: remove one of them, or give it another name.",
			plan.Name.ValueString(), db))
		return
	}

	// database is Optional+Computed, so its replacement is decided here,
	// where the provider's default is known, not by an attribute modifier
	// that would see an unknown value and replace on every change.
	var why replacement
	if state != nil {
		switch {
		case plan.Database.IsUnknown():
			why = databaseUnknown
		case !plan.Database.Equal(state.Database):
			why = databaseChanged
		}
		if why != noReplacement {
			resp.RequiresReplace.Append(path.Root("database"))
		}
		if !plan.Name.Equal(state.Name) {
			why = nameChanged // the attribute's own modifier requests it
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
	case state == nil || why != noReplacement:
		if state != nil {
			if protected(*state) {
				resp.Diagnostics.AddAttributeError(path.Root("deletion_protection"), "Replacement blocked by deletion_protection",
					fmt.Sprintf("%s, which drops it and every lease and token in it, and deletion_protection is true. To replace "+
						"it, first set deletion_protection = false and apply; to keep it, %s.", why.describe(*state), why.keep()))
				return
			}
			r.planDrop(ctx, *state, why.describe(*state)+", which drops it", &resp.Diagnostics)
			if resp.Diagnostics.HasError() {
				return
			}
			warnReplacement(*state, plan, why, &resp.Diagnostics)
			resp.Diagnostics.Append(resp.Private.SetKey(ctx, privateReplacing, []byte(`true`))...)
		}
		plan.SchemaVersion = types.Int64Value(int64(locktable.Latest))
		plan.PendingDDL = ddlList(nil)
		plan.PlannedDDL = types.ListUnknown(types.StringType)
		plan.Drifted, plan.Drift = types.BoolValue(false), ddlList(nil)
		if dbKnown && !plan.Name.IsUnknown() {
			var checks diag.Diagnostics
			if stmts, ok := r.planCreate(ctx, db, plan.Name.ValueString(), plan.CleanupAfter, &checks); ok {
				plan.PlannedDDL = ddlList(stmts)
			}
			if !secondCall {
				resp.Diagnostics.Append(checks...)
			}
		}
	case !dbKnown || plan.CleanupAfter.IsUnknown() || !r.data.canRead():
		// The statements depend on values known only at apply, and apply
		// brings the table to the latest version or fails.
		plan.SchemaVersion = types.Int64Value(int64(locktable.Latest))
		plan.PendingDDL = types.ListUnknown(types.StringType)
		plan.PlannedDDL = types.ListUnknown(types.StringType)
		plan.Drifted, plan.Drift = types.BoolUnknown(), types.ListUnknown(types.StringType)
	default:
		r.planChanges(ctx, db, &plan, state.PlannedDDL, &resp.Diagnostics)
	}
	if resp.Diagnostics.HasError() {
		return
	}
	resp.Diagnostics.Append(resp.Plan.Set(ctx, plan)...)
}

// privateReplacing marks, in the private data of the first call that plans
// a replacement, that the second call plans the same resource.
const privateReplacing = "replacing"

// replacement is why a table is replaced.
type replacement int

const (
	noReplacement replacement = iota
	nameChanged
	databaseChanged
	// databaseUnknown: the database is known only at apply, so Terraform
	// must plan for it to change.
	databaseUnknown
)

// describe says what replaces the table of state, as the start of a sentence.
func (w replacement) describe(state tableModel) string {
	switch w {
	case databaseUnknown:
		return fmt.Sprintf("The database of table %s is known only at apply (it, or the provider's database, comes from "+
			"a resource that this plan changes), so Terraform must plan to replace the table in case it is another "+
			"database", state.ID.ValueString())
	case databaseChanged:
		return fmt.Sprintf("Changing database replaces table %s", state.ID.ValueString())
	}
	return fmt.Sprintf("Changing name replaces table %s", state.ID.ValueString())
}

// keep says how to keep the table instead.
func (w replacement) keep() string {
	if w == databaseUnknown {
		return "set database to a value known at plan time, or apply the change the database depends on first " +
			"(terraform apply -target)"
	}
	return "revert the change"
}

// planDestroy refuses, at plan time, a destroy that Delete would refuse, so
// that nothing else is destroyed first (semaphores in the table, say).
func (r *tableResource) planDestroy(ctx context.Context, state tableModel, diags *diag.Diagnostics) {
	if protected(state) {
		diags.AddAttributeError(path.Root("deletion_protection"), "Table is protected by deletion_protection", protectedDetail(state))
		return
	}
	r.planDrop(ctx, state, fmt.Sprintf("Destroying table %s drops it", state.ID.ValueString()), diags)
}

// planDrop says at plan time what Delete will do about the live leases of
// the table of state, which a destroy or a replacement drops (why says
// which): without force_destroy it refuses to drop a table with live
// leases, so the plan does, before anything else is destroyed (the
// semaphores in the table, say); with it, the plan names the leases that
// apply will drop.
func (r *tableResource) planDrop(ctx context.Context, state tableModel, why string, diags *diag.Diagnostics) {
	if !r.data.canRead() {
		return
	}
	force := state.ForceDestroy.ValueBool()
	db, table := state.Database.ValueString(), state.Name.ValueString()
	holders, err := r.liveLeases(ctx, db, table)
	switch {
	case err != nil && (databaseGone(err) || force):
		// Nothing to drop, or nothing to check (Delete does not check).
	case err != nil:
		diags.AddError("Cannot check table for live leases", fmt.Sprintf("%s, and it is checked for live leases "+
			"first; reading them failed: %v\n\nSet force_destroy = true and apply to drop it without the check.", why, err))
	case len(holders) == 0:
	case !force:
		diags.AddAttributeError(path.Root("force_destroy"), "Table has live leases", describeHolders(
			fmt.Sprintf("%s, and %d lease(s) in it are live, so applications are relying on it; apply would refuse to drop "+
				"it. Nothing was destroyed:", why, len(holders)), holders,
			"Wait for them to be released or to expire, or set force_destroy = true and apply to drop the table anyway."))
	default:
		diags.AddAttributeWarning(path.Root("force_destroy"), "Table will be dropped with live leases", describeHolders(
			fmt.Sprintf("%s, and force_destroy is true: apply drops it with the %d live lease(s) in it, whose holders "+
				"lose them:", why, len(holders)), holders,
			"Their applications fail to renew, and to acquire until the table exists again."))
	}
}

// warnReplacement tells the reviewer what a replacement costs applications:
// the new table is a new token sequence.
func warnReplacement(state, plan tableModel, why replacement, diags *diag.Diagnostics) {
	to := plan.ID.ValueString()
	if plan.ID.IsUnknown() {
		to = "a new table"
	}
	diags.AddAttributeWarning(path.Root("name"), fmt.Sprintf("Table %s will be replaced", state.Name.ValueString()),
		fmt.Sprintf("%s with %s: apply drops the old table, with every lease, "+
			"semaphore declaration and fencing token in it, and creates the new one empty, where every name's tokens "+
			"start again (at 1, or at the commit clock with cleanup_after). A system that remembers the largest token it "+
			"has seen rejects the new holders until they pass it. Point the applications at the new table, and use "+
			"new names or reset what remembers tokens.", why.describe(state), to))
}

// plannedTables are the lock tables of a plan, by database: those its
// spannerlock_table resources manage, so that two resources never manage
// one table; those it creates, so that a table can be checked against the
// others created with it, and a semaphore or a lease can tell a table that
// is missing from one this plan creates; and those it migrates or repairs,
// so that a lease can tell a table it cannot use yet from one it never
// will. Names compare regardless of letter case, as Spanner compares them.
type plannedTables struct {
	mu      sync.Mutex
	created map[string][]string
	managed map[string][]string
	changed map[string][]string
}

// manage records that a resource of the plan manages table in db, and
// reports false when another one does already.
func (p *plannedTables) manage(db, table string) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.managed == nil {
		p.managed = map[string][]string{}
	}
	if containsFold(p.managed[db], table) {
		return false
	}
	p.managed[db] = append(p.managed[db], table)
	return true
}

// add records that the plan creates table in db and returns the tables
// recorded before it.
func (p *plannedTables) add(db, table string) []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.created == nil {
		p.created = map[string][]string{}
	}
	before := slices.Clone(p.created[db])
	if !containsFold(before, table) {
		p.created[db] = append(p.created[db], table)
	}
	return before
}

// has reports whether the plan creates table in db.
func (p *plannedTables) has(db, table string) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return containsFold(p.created[db], table)
}

// change records that the plan runs statements on table in db, which exists.
func (p *plannedTables) change(db, table string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.changed == nil {
		p.changed = map[string][]string{}
	}
	if !containsFold(p.changed[db], table) {
		p.changed[db] = append(p.changed[db], table)
	}
}

// changes reports whether the plan creates table in db, or runs statements
// on it.
func (p *plannedTables) changes(db, table string) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return containsFold(p.created[db], table) || containsFold(p.changed[db], table)
}

func containsFold(names []string, name string) bool {
	return slices.ContainsFunc(names, func(n string) bool { return strings.EqualFold(n, name) })
}

// planCreate checks, before apply, what would make the creation of table
// fail or break other tables: a table by that name, a name that collides
// with another lock table's companion tables, a name the database's dialect
// cannot hold. It returns the statements apply will run, in the database's
// dialect, when they can be known now (ok).
func (r *tableResource) planCreate(ctx context.Context, db, table string, cleanup types.String, diags *diag.Diagnostics) (stmts []string, ok bool) {
	if r.data == nil {
		return nil, false
	}
	for _, other := range r.data.planned.add(db, table) {
		if why := locktable.Conflict(table, other); why != "" {
			diags.AddAttributeError(path.Root("name"), "Table name collides with another lock table", nameCollision(table, why,
				fmt.Sprintf("This configuration creates both %s and %s in %s.", table, other, db)))
			return nil, false
		}
	}
	if !r.data.canRead() {
		return nil, false
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
		return nil, false
	case err != nil:
		diags.AddError("Cannot read database", err.Error())
		return nil, false
	}
	if err := dialect.ValidateTableName(table); err != nil {
		diags.AddAttributeError(path.Root("name"), "Invalid table name", capitalize(err.Error())+".")
		return nil, false
	}
	// A table named like another's companion is refused even when it
	// exists (it is that companion, not a lock table to import); an
	// existing table's companions are its own.
	exists := containsFold(existing, table)
	for _, e := range existing {
		why := locktable.Conflict(table, e)
		ours := containsFold(locktable.Companions(table), e)
		if why != "" && (!exists || !ours) {
			diags.AddAttributeError(path.Root("name"), "Table name collides with another lock table",
				nameCollision(table, why, fmt.Sprintf("Table %s exists in %s.", e, db)))
			return nil, false
		}
	}
	if exists {
		diags.AddAttributeError(path.Root("name"), "Table already exists", alreadyExists(db, table))
		return nil, false
	}
	opts, err := cleanupOptions(cleanup)
	if err != nil || cleanup.IsUnknown() {
		return nil, false
	}
	return dialect.CreateDDL(table, opts), true
}

func nameCollision(table, why, where string) string {
	return fmt.Sprintf("Table %s cannot be created: %s. %s\n\nA lock table is %s in Spanner, so its "+
		"name must not be another lock table's companion, and its companions' names must be free. Choose another name.",
		table, why, where, locktable.Family("T"))
}

// planChanges sets the planned schema_version, pending_ddl, planned_ddl
// and drift of an existing table from its live schema. When apply runs no
// statement, planned_ddl stays as it was (prior): empty after a refresh, and
// what the last apply ran in a plan without one (-refresh=false), which must
// not show a change either.
func (r *tableResource) planChanges(ctx context.Context, db string, plan *tableModel, prior types.List, diags *diag.Diagnostics) {
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
	plan.Drift = ddlList(drift(ins, opts))
	plan.Drifted = types.BoolValue(len(plan.Drift.Elements()) > 0)
	stmts, err := ins.Plan(opts)
	if err != nil {
		// Only the update that would run a migration fails (in Update);
		// everything else the operator may need goes ahead.
		migrate := opts.CleanupAfter != ins.CleanupAfter
		diags.AddAttributeWarning(path.Root("name"), fmt.Sprintf("Table %s cannot be migrated in place", table), unmigratable(err, migrate))
		plan.SchemaVersion = types.Int64Value(int64(ins.Version))
		plan.PendingDDL, plan.PlannedDDL = ddlList(nil), prior
		if migrate {
			plan.SchemaVersion = types.Int64Value(int64(locktable.Latest))
			plan.PendingDDL, plan.PlannedDDL = types.ListUnknown(types.StringType), types.ListUnknown(types.StringType)
		}
		return
	}
	if len(stmts) == 0 {
		plan.SchemaVersion = types.Int64Value(int64(ins.Version))
		plan.PendingDDL, plan.PlannedDDL = ddlList(nil), prior
		return
	}
	plan.SchemaVersion = types.Int64Value(int64(locktable.Latest))
	plan.PlannedDDL = ddlList(stmts)
	r.data.planned.change(db, table)
	// Unknown rather than empty: what a refresh after the apply finds.
	plan.PendingDDL = types.ListUnknown(types.StringType)

	diags.AddAttributeWarning(path.Root("planned_ddl"), fmt.Sprintf("Table %s will be changed in place", table), describeChanges(ins, opts))
}

// drift lists the differences of a live table from the latest schema
// version, with options o, that no additive statement repairs.
func drift(ins locktable.Inspection, o locktable.Options) []string {
	var unrepairable []string
	if !ins.Exists {
		return nil
	}
	for _, d := range ins.Changes(o) {
		if d.Fix == "" {
			unrepairable = append(unrepairable, d.String())
		}
	}
	return unrepairable
}

// describeChanges says what apply will run and what in the live table
// calls for it, so a reviewer can tell a migration from a repair of drift.
func describeChanges(ins locktable.Inspection, opts locktable.Options) string {
	var b strings.Builder
	fmt.Fprintf(&b, "Apply will run the statements in planned_ddl on table %s; none drops a column or a table, so its rows "+
		"are kept.\n", ins.Table)
	switch {
	case !ins.Exists:
		b.WriteString("\nThe table does not exist.\n")
		return b.String()
	case ins.Version == 0:
		fmt.Fprintf(&b, "\nThe live table has drifted from every schema version. What differs from version %d with this configuration:\n", locktable.Latest)
	case ins.Version < locktable.Latest:
		fmt.Fprintf(&b, "\nThe live table is at schema version %d; the latest is %d.%s What differs with this configuration:\n",
			ins.Version, locktable.Latest, olderApplications(ins))
	default:
		b.WriteString("\nWhat differs with this configuration:\n")
	}
	for _, d := range ins.Changes(opts) {
		fmt.Fprintf(&b, "  - %s\n", d)
	}
	return b.String()
}

// olderApplications says what the migration of a table at an older schema
// version means for the applications of a release that wrote that version,
// if any still use it.
func olderApplications(ins locktable.Inspection) string {
	if ins.Version >= 3 {
		return fmt.Sprintf("\n\nApplications of a release that wrote version %d keep their leases, which stay live to "+
			"this release's applications, but they neither wait in nor respect the line of waiters (%s) that version %d adds: "+
			"until they are upgraded they may take a name ahead of the waiters.\n", ins.Version, locktable.WaitersTable(ins.Table), locktable.Latest)
	}
	return fmt.Sprintf("\n\nA live lease of an application of a release that wrote version %d is free once this migration is applied: "+
		"that release judges a lease by its own row, this one by its holder's session in %s, which that release never "+
		"writes, so this release's applications take the name while the old holder still works under it. Stop those "+
		"applications, or wait for their leases to end, before applying; then deploy this release's.\n",
		ins.Version, locktable.SessionsTable(ins.Table))
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
	ctx, cancel := context.WithTimeoutCause(ctx, timeout, &operationTimeout{op: "create", timeout: timeout})
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
	r.save(ctx, &plan, stmts, &resp.State, &resp.Diagnostics)
	setTableIdentity(ctx, resp.Identity, db, table, &resp.Diagnostics)
}

func (r *tableResource) Read(ctx context.Context, req resource.ReadRequest, resp *resource.ReadResponse) {
	var state tableModel
	resp.Diagnostics.Append(req.State.Get(ctx, &state)...)
	if resp.Diagnostics.HasError() {
		return
	}
	setTableIdentity(ctx, resp.Identity, state.Database.ValueString(), state.Name.ValueString(), &resp.Diagnostics)
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
	// As Spanner spells it, which an import in another letter case does
	// not: the configuration must then say the same, or every plan would
	// find a change of name.
	if live := ins.LiveName(); live != state.Name.ValueString() {
		state.Name = types.StringValue(live)
		state.ID = types.StringValue(tableID(state.Database.ValueString(), live))
	}
	state.refresh(ins)
	// What the last apply ran is done.
	state.PlannedDDL = ddlList(nil)
	resp.Diagnostics.Append(resp.State.Set(ctx, state)...)
	setTableIdentity(ctx, resp.Identity, state.Database.ValueString(), state.Name.ValueString(), &resp.Diagnostics)
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
	ctx, cancel := context.WithTimeoutCause(ctx, timeout, &operationTimeout{op: "update", timeout: timeout})
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
	if planned, known := listStrings(plan.PlannedDDL); known && !slices.Equal(planned, stmts) {
		resp.Diagnostics.AddAttributeWarning(path.Root("planned_ddl"), fmt.Sprintf("Table %s changed since the plan", table),
			fmt.Sprintf("The plan showed these statements:\n\n  %s\n\nbut the table changed since, and now needs these, "+
				"which apply ran instead (each only adds to the table):\n\n  %s",
				strings.Join(planned, ";\n  "), strings.Join(stmts, ";\n  ")))
	}
	if err := r.apply(ctx, db, ins, "migrate", stmts); err != nil {
		resp.Diagnostics.AddError("Cannot update table", ddlFailure(ctx, err, "update",
			"Statements before the failing one stay applied; the next plan shows what is still pending."))
		return
	}
	r.save(ctx, &plan, stmts, &resp.State, &resp.Diagnostics)
	keepTableIdentity(ctx, resp.Identity, db, table, &resp.Diagnostics)
}

// listStrings returns the elements of a list of strings, and whether the
// list is known.
func listStrings(l types.List) ([]string, bool) {
	if l.IsUnknown() || l.IsNull() {
		return nil, false
	}
	out := make([]string, 0, len(l.Elements()))
	for _, e := range l.Elements() {
		if v, ok := e.(types.String); ok {
			out = append(out, v.ValueString())
		}
	}
	return out, true
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
	ctx, cancel := context.WithTimeoutCause(ctx, timeout, &operationTimeout{op: "delete", timeout: timeout})
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
					table, len(holders)), holders,
					"Wait for them to be released or to expire, or set force_destroy = true and apply to drop the table anyway."))
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

// describeHolders lists up to five holders after lead, then advice.
func describeHolders(lead string, holders []lease.Holder, advice string) string {
	var b strings.Builder
	b.WriteString(lead + "\n")
	for i, h := range holders {
		if i == maxListedHolders {
			fmt.Fprintf(&b, "  ... and %d more\n", len(holders)-maxListedHolders)
			break
		}
		fmt.Fprintf(&b, "  - %q held by %q with token %d until %s\n", h.Name, h.HolderID, h.Token, h.ExpiresAt.UTC().Format(time.RFC3339))
	}
	b.WriteString("\n" + advice)
	return b.String()
}

func (r *tableResource) ImportState(ctx context.Context, req resource.ImportStateRequest, resp *resource.ImportStateResponse) {
	var defaultDB string
	if r.data != nil {
		defaultDB = r.data.database
	}
	db, table, err := tableToImport(ctx, req, defaultDB)
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
		"planned_ddl":         ddlList(nil),
		"drift":               ddlList(nil),
	} {
		resp.Diagnostics.Append(resp.State.SetAttribute(ctx, path.Root(name), v)...)
	}
}

// save records the table as it is after a change: the planned settings,
// what Spanner reports, and the statements the change ran, when the plan
// could not say which (planned_ddl is what the plan showed).
func (r *tableResource) save(ctx context.Context, m *tableModel, ran []string, state *tfsdk.State, diags *diag.Diagnostics) {
	ins, err := r.data.inspect(ctx, m.Database.ValueString(), m.Name.ValueString())
	if err != nil {
		diags.AddError("Cannot read table after the change", err.Error())
		return
	}
	m.ID = types.StringValue(tableID(m.Database.ValueString(), m.Name.ValueString()))
	m.refresh(ins)
	if m.PlannedDDL.IsUnknown() {
		m.PlannedDDL = ddlList(ran)
	}
	diags.Append(state.Set(ctx, m)...)
}

// refresh updates the attributes that live in Spanner from an inspection.
func (m *tableModel) refresh(ins locktable.Inspection) {
	want, err := cleanupOptions(m.CleanupAfter)
	if err != nil {
		want = locktable.Options{}
	}
	switch {
	case ins.CleanupAfter == 0:
		m.CleanupAfter = types.StringNull()
	case want.CleanupAfter == ins.CleanupAfter:
		// Keep the configured spelling ("720h" or "30d") to avoid a
		// perpetual diff between equal periods.
	default:
		m.CleanupAfter = types.StringValue(locktable.FormatCleanupAfter(ins.CleanupAfter))
	}
	// The state records the table as it is, cleanup period included, so
	// pending_ddl is what the table needs with that period (a version
	// migration, a repair); a plan that changes cleanup_after adds its
	// statements. Computed from the cleanup_after the state held before,
	// an import (which holds none) recorded DROP ROW DELETION POLICY for
	// every table with cleanup, and planned an update of pending_ddl.
	live := locktable.Options{CleanupAfter: ins.CleanupAfter}
	stmts, err := ins.Plan(live)
	if err != nil {
		// Read must succeed so that Terraform can still destroy or import;
		// every plan warns about it (ModifyPlan), and an update that would
		// migrate fails.
		stmts = nil
	}
	m.PendingDDL = ddlList(stmts)
	m.Drift = ddlList(drift(ins, live))
	m.Drifted = types.BoolValue(len(m.Drift.Elements()) > 0)
	m.SchemaVersion = types.Int64Value(int64(ins.Version))
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
