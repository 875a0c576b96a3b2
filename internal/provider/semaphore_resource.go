package provider

import (
	"context"
	"errors"
	"fmt"
	"math/big"
	"strings"
	"time"

	"github.com/hashicorp/terraform-plugin-framework/diag"
	"github.com/hashicorp/terraform-plugin-framework/path"
	"github.com/hashicorp/terraform-plugin-framework/resource"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema/planmodifier"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema/stringplanmodifier"
	"github.com/hashicorp/terraform-plugin-framework/schema/validator"
	"github.com/hashicorp/terraform-plugin-framework/types"

	"github.com/spannerlock/terraform-provider-spannerlock/lease"
)

var (
	_ resource.ResourceWithConfigure   = (*semaphoreResource)(nil)
	_ resource.ResourceWithModifyPlan  = (*semaphoreResource)(nil)
	_ resource.ResourceWithImportState = (*semaphoreResource)(nil)
)

// semaphoreResource declares a semaphore's capacity. Every change goes
// through lease.Client (SetPermits, Undeclare, Semaphore), so Terraform and
// applications share one definition of a semaphore.
type semaphoreResource struct {
	data *providerData
}

func newSemaphoreResource() resource.Resource { return &semaphoreResource{} }

type semaphoreModel struct {
	ID       types.String `tfsdk:"id"`
	Database types.String `tfsdk:"database"`
	Table    types.String `tfsdk:"table"`
	Name     types.String `tfsdk:"name"`
	// Permits is a Number, not an Int64, so that a fraction gets a message
	// of ours (wholeNumber) rather than the framework's conversion error.
	Permits types.Number `tfsdk:"permits"`
}

// permits returns the validated limit, or 0 when it is not known (an
// import that could not read it yet).
func (m semaphoreModel) permits() int64 {
	if m.Permits.IsNull() || m.Permits.IsUnknown() {
		return 0
	}
	n, _ := m.Permits.ValueBigFloat().Int64()
	return n
}

func (r *semaphoreResource) Metadata(_ context.Context, req resource.MetadataRequest, resp *resource.MetadataResponse) {
	resp.TypeName = req.ProviderTypeName + "_semaphore"
	// The identity follows table's spelling, which an update may change
	// in letter case in a GoogleSQL database: the same table.
	resp.ResourceBehavior.MutableIdentity = true
}

func (r *semaphoreResource) Schema(_ context.Context, _ resource.SchemaRequest, resp *resource.SchemaResponse) {
	resp.Schema = schema.Schema{
		MarkdownDescription: "A semaphore's capacity, declared in a lock table: applications take its permits with " +
			"`lease.Client.AcquirePermit`, and never more than `permits` are granted at once.",
		Attributes: map[string]schema.Attribute{
			"id": schema.StringAttribute{
				Computed:            true,
				MarkdownDescription: "`projects/P/instances/I/databases/D/tables/T/semaphores/N`.",
			},
			"database": schema.StringAttribute{
				Optional: true,
				Computed: true,
				MarkdownDescription: "Database of the table, `projects/P/instances/I/databases/D`. Defaults to the " +
					"provider's `database`. Changing it undeclares the semaphore in the old database and declares it in the new one.",
				Validators: []validator.String{databasePath()},
			},
			"table": schema.StringAttribute{
				Required: true,
				MarkdownDescription: "Name of the lock table, usually `spannerlock_table.<name>.name`. Changing it " +
					"undeclares the semaphore in the old table and declares it in the new one; a change of letter case " +
					"only is the same table to Spanner, and changes nothing but the spelling Terraform records. In a " +
					"PostgreSQL-dialect database, where SQL names tables case-sensitively, the plan refuses a spelling " +
					"other than the table's own.",
				Validators: []validator.String{tableName()},
				PlanModifiers: []planmodifier.String{stringplanmodifier.RequiresReplaceIf(
					func(_ context.Context, req planmodifier.StringRequest, resp *stringplanmodifier.RequiresReplaceIfFuncResponse) {
						resp.RequiresReplace = !strings.EqualFold(req.StateValue.ValueString(), req.PlanValue.ValueString())
					},
					"Changing the table, other than its letter case, replaces the semaphore.",
					"Changing the table, other than its letter case, replaces the semaphore.",
				)},
			},
			"name": schema.StringAttribute{
				Required: true,
				MarkdownDescription: "Name of the semaphore, as applications pass it to `AcquirePermit`: 1 to 1024 " +
					"characters of valid UTF-8. It shares the table's names with locks, so it must not be a lock's name. " +
					"Changing it undeclares the old semaphore and declares the new one.",
				Validators:    []validator.String{semaphoreName()},
				PlanModifiers: []planmodifier.String{stringplanmodifier.RequiresReplace()},
			},
			"permits": schema.NumberAttribute{
				Required: true,
				MarkdownDescription: "How many permits may be held at once: a whole number, at least 1. Changing it changes " +
					"the limit in place; lowering it takes no permit away, but no new one is granted until fewer than `permits` are held.",
				Validators: []validator.Number{wholeNumber(1)},
			},
		},
	}
}

func (r *semaphoreResource) Configure(_ context.Context, req resource.ConfigureRequest, resp *resource.ConfigureResponse) {
	if data := configured(req.ProviderData, &resp.Diagnostics); data != nil {
		r.data = data
	}
}

// ModifyPlan resolves the database, decides replacement on it, checks that
// the table exists, refuses to declare a semaphore that already is, and
// warns when a lowered limit is below the permits held.
func (r *semaphoreResource) ModifyPlan(ctx context.Context, req resource.ModifyPlanRequest, resp *resource.ModifyPlanResponse) {
	if req.Plan.Raw.IsNull() {
		return
	}
	var plan, config semaphoreModel
	resp.Diagnostics.Append(req.Plan.Get(ctx, &plan)...)
	resp.Diagnostics.Append(req.Config.Get(ctx, &config)...)
	var state *semaphoreModel
	if !req.State.Raw.IsNull() {
		state = &semaphoreModel{}
		resp.Diagnostics.Append(req.State.Get(ctx, state)...)
	}
	if resp.Diagnostics.HasError() {
		return
	}

	db, dbKnown, ok := r.data.defaultDatabase(config.Database, &resp.Diagnostics)
	if !ok {
		return
	}
	plan.Database, plan.ID = types.StringUnknown(), types.StringUnknown()
	known := dbKnown && !plan.Table.IsUnknown() && !plan.Name.IsUnknown()
	if dbKnown {
		plan.Database = types.StringValue(db)
	}
	if known {
		plan.ID = types.StringValue(semaphoreID(db, plan.Table.ValueString(), plan.Name.ValueString()))
	}

	// As for spannerlock_table: database is Optional+Computed, so its
	// replacement is decided here, where the provider's default is known.
	replace := state == nil
	if state != nil {
		if !plan.Database.Equal(state.Database) {
			resp.RequiresReplace.Append(path.Root("database"))
			replace = true
		}
		// The attributes' own modifiers request these replacements.
		replace = replace || !strings.EqualFold(plan.Table.ValueString(), state.Table.ValueString()) || !plan.Name.Equal(state.Name)
	}
	table := plan.Table.ValueString()
	switch {
	case !known || !r.data.canRead():
		// Spanner cannot be read yet; Create checks again.
	case replace:
		// Also on replacement: apply would undeclare the old semaphore
		// before finding the new one taken.
		if r.tableReady(ctx, db, table, &resp.Diagnostics) {
			r.refuseDeclared(ctx, db, table, plan.Name.ValueString(), &resp.Diagnostics)
			r.refuseLock(ctx, db, table, plan.Name.ValueString(), &resp.Diagnostics)
		}
	default:
		// A change of letter case only names the same table, but in a
		// PostgreSQL-dialect database SQL may not find it by the new one.
		if table != state.Table.ValueString() && !r.tableReady(ctx, db, table, &resp.Diagnostics) {
			break
		}
		if !plan.Permits.IsUnknown() && plan.permits() < state.permits() {
			r.warnLowering(ctx, db, table, plan.Name.ValueString(), plan.permits(), &resp.Diagnostics)
		}
	}
	if resp.Diagnostics.HasError() {
		return
	}
	resp.Diagnostics.Append(resp.Plan.Set(ctx, plan)...)
}

// tableReady reports whether the semaphore's table exists under that name,
// so that it can be read. A table that this plan creates, or whose database
// this apply creates, is not there yet and is no error. Any other missing
// table gets a warning rather than an error, because something this provider
// cannot see, such as the ddl of a google_spanner_database, may create it in
// the same apply; apply fails with a clear error if nothing does. A table that
// exists in another letter case than a PostgreSQL-dialect database's SQL finds
// is an error: applications given that name cannot find it either.
func (r *semaphoreResource) tableReady(ctx context.Context, db, table string, diags *diag.Diagnostics) bool {
	if r.data.planned.has(db, table) {
		return false
	}
	ins, err := r.data.inspect(ctx, db, table)
	switch {
	case databaseGone(err):
		return false
	case err != nil:
		diags.AddError("Cannot read table", err.Error())
		return false
	case !ins.Exists:
		diags.AddAttributeWarning(path.Root("table"), fmt.Sprintf("Table %s does not exist", table), missingTable(db, table)+
			" Unless something else in this configuration creates it before this semaphore, apply will fail.")
		return false
	}
	if live, misspelled := ins.Misspelled(); misspelled {
		diags.AddAttributeError(path.Root("table"), fmt.Sprintf("Table %s is spelled %s", table, live), misspelledTable(db, table, live))
		return false
	}
	return true
}

// unreadable explains err, a failed read of semaphore name, with a warning
// when its table exists but has drifted from spannerlock's schema in a way
// that keeps semaphores from being read (locks_permits dropped by hand, say),
// and reports whether it did. An error there would fail every plan, the one
// in which spannerlock_table repairs the table included; the semaphore is
// read again once the table is repaired.
//
// An import has nothing to keep: it fails, saying to apply the table first.
func (r *semaphoreResource) unreadable(ctx context.Context, db, table, name string, err error, importing bool, diags *diag.Diagnostics) bool {
	ins, inspectErr := r.data.inspect(ctx, db, table)
	if inspectErr != nil || !ins.Exists || ins.Current() {
		return false
	}
	var b strings.Builder
	fmt.Fprintf(&b, "Semaphore %q in table %s cannot be read: %v\n\nTable %s differs from spannerlock's schema:\n", name, table, err, table)
	for _, d := range ins.Diffs {
		fmt.Fprintf(&b, "  - %s\n", d)
	}
	if importing {
		fmt.Fprintf(&b, "\nApply the spannerlock_table resource for table %s first, which migrates or repairs it (for example "+
			"terraform apply -target=spannerlock_table.<name>), then import the semaphore.", table)
		diags.AddAttributeError(path.Root("table"), "Cannot import semaphore", b.String())
		return true
	}
	b.WriteString("\nTerraform keeps what it last knew of the semaphore. A spannerlock_table resource for the table repairs " +
		"what can be repaired when it is applied (see its plan); the semaphore is read again after that.")
	diags.AddAttributeWarning(path.Root("table"), fmt.Sprintf("Table %s has drifted", table), b.String())
	return true
}

// refuseDeclared stops the plan from declaring a semaphore that is already
// declared: taking over a limit that applications (or another configuration)
// set would hide it from review.
func (r *semaphoreResource) refuseDeclared(ctx context.Context, db, table, name string, diags *diag.Diagnostics) {
	s, err := readSemaphore(ctx, r.data, db, table, name)
	switch {
	case errors.Is(err, lease.ErrUnknownSemaphore):
	case err != nil && r.unreadable(ctx, db, table, name, err, false, diags):
	case err != nil:
		diags.AddError("Cannot read semaphore", semaphoreFailure(table, name, err))
	default:
		diags.AddAttributeError(path.Root("name"), "Semaphore already declared", alreadyDeclared(db, table, s))
	}
}

// refuseLock stops the plan from declaring a semaphore under the name of a
// lock that is held: locks and semaphores share a table's names, and apply
// would fail. A lock that nobody holds now is not seen (lease reads holders,
// not the kind of a name), and apply fails on it with lease's explanation.
func (r *semaphoreResource) refuseLock(ctx context.Context, db, table, name string, diags *diag.Diagnostics) {
	var h lease.Holder
	err := r.data.withLease(ctx, db, table, func(ctx context.Context, lc *lease.Client) error {
		var err error
		h, err = lc.Holder(ctx, name)
		return err
	})
	if err != nil || h.Kind != "lock" {
		// No holder, or a read that failed: Create explains a failure.
		return
	}
	diags.AddAttributeError(path.Root("name"), "Name is a lock", fmt.Sprintf("%q is a lock in table %s of %s, held now by "+
		"%q with token %d, so it cannot be declared a semaphore: locks and semaphores share the names of a table. Choose "+
		"another name for the semaphore.", name, table, db, h.HolderID, h.Token))
}

func alreadyDeclared(db, table string, s lease.Semaphore) string {
	return fmt.Sprintf("Semaphore %q is already declared in table %s of %s, with %d permit(s). spannerlock_semaphore "+
		"never takes over an existing limit without review; import it instead, with an import block or with\n\n"+
		"  terraform import <resource address> %s\n\nThe plan after the import shows any change to its limit.",
		s.Name, table, db, s.Permits, semaphoreID(db, table, s.Name))
}

// warnLowering tells the reviewer of a plan that lowers the limit below the
// permits held now what apply will and will not do about them.
func (r *semaphoreResource) warnLowering(ctx context.Context, db, table, name string, permits int64, diags *diag.Diagnostics) {
	s, err := readSemaphore(ctx, r.data, db, table, name)
	if err != nil {
		// Read found the semaphore moments ago; apply reports any failure.
		diags.AddWarning("Cannot read the permits held", semaphoreFailure(table, name, err))
		return
	}
	if int64(s.InUse()) <= permits {
		return
	}
	diags.AddAttributeWarning(path.Root("permits"), fmt.Sprintf("Semaphore %s has more permits held than the new limit", name),
		fmt.Sprintf("%d permit(s) of %q are held now, more than the new limit of %d. Lowering the limit takes none away: "+
			"their holders keep them until they release them or their leases expire, and no new permit is granted "+
			"while %d or more are held.", s.InUse(), name, permits, permits))
}

func (r *semaphoreResource) Create(ctx context.Context, req resource.CreateRequest, resp *resource.CreateResponse) {
	var plan semaphoreModel
	resp.Diagnostics.Append(req.Plan.Get(ctx, &plan)...)
	if resp.Diagnostics.HasError() {
		return
	}
	db, table, name := plan.Database.ValueString(), plan.Table.ValueString(), plan.Name.ValueString()
	var existing lease.Semaphore
	declared := false
	err := r.data.withLease(ctx, db, table, func(ctx context.Context, lc *lease.Client) error {
		s, err := lc.Semaphore(ctx, name)
		switch {
		case err == nil:
			existing, declared = s, true
			return nil
		case !errors.Is(err, lease.ErrUnknownSemaphore):
			return err
		}
		return lc.SetPermits(ctx, name, plan.permits())
	})
	switch {
	case declared:
		resp.Diagnostics.AddAttributeError(path.Root("name"), "Semaphore already declared", alreadyDeclared(db, table, existing))
		return
	case err != nil && r.tableGone(ctx, db, table):
		resp.Diagnostics.AddAttributeError(path.Root("table"), "Table does not exist", missingTable(db, table))
		return
	case err != nil:
		resp.Diagnostics.AddAttributeError(path.Root("name"), "Cannot declare semaphore", semaphoreFailure(table, name, err))
		return
	}
	plan.ID = types.StringValue(semaphoreID(db, table, name))
	resp.Diagnostics.Append(resp.State.Set(ctx, plan)...)
	setSemaphoreIdentity(ctx, resp.Identity, db, table, name, &resp.Diagnostics)
}

func (r *semaphoreResource) Read(ctx context.Context, req resource.ReadRequest, resp *resource.ReadResponse) {
	var state semaphoreModel
	resp.Diagnostics.Append(req.State.Get(ctx, &state)...)
	if resp.Diagnostics.HasError() {
		return
	}
	db, table, name := state.Database.ValueString(), state.Table.ValueString(), state.Name.ValueString()
	setSemaphoreIdentity(ctx, resp.Identity, db, table, name, &resp.Diagnostics)
	s, err := readSemaphore(ctx, r.data, db, table, name)
	switch {
	case errors.Is(err, lease.ErrUnknownSemaphore), err != nil && r.tableGone(ctx, db, table):
		// Undeclared outside Terraform, maybe with its table or database:
		// the next plan declares it again.
		resp.State.RemoveResource(ctx)
		return
	case err != nil && r.unreadable(ctx, db, table, name, err, state.Permits.IsNull(), &resp.Diagnostics):
		// Kept as it was, so that the table's plan can repair its table;
		// an import (no permits known yet) fails instead.
		return
	case err != nil:
		resp.Diagnostics.AddError("Cannot read semaphore", semaphoreFailure(table, name, err))
		return
	}
	// From Spanner, so a limit changed behind Terraform's back shows as a diff.
	state.Permits = types.NumberValue(new(big.Float).SetInt64(s.Permits))
	state.ID = types.StringValue(semaphoreID(db, table, name))
	resp.Diagnostics.Append(resp.State.Set(ctx, state)...)
}

func (r *semaphoreResource) Update(ctx context.Context, req resource.UpdateRequest, resp *resource.UpdateResponse) {
	var plan semaphoreModel
	resp.Diagnostics.Append(req.Plan.Get(ctx, &plan)...)
	if resp.Diagnostics.HasError() {
		return
	}
	db, table, name := plan.Database.ValueString(), plan.Table.ValueString(), plan.Name.ValueString()
	err := r.data.withLease(ctx, db, table, func(ctx context.Context, lc *lease.Client) error {
		// In place: holders keep their permits and tokens whichever way the
		// limit moves. A table renamed only in letter case is the same
		// table, and this writes the same limit to the same row.
		return lc.SetPermits(ctx, name, plan.permits())
	})
	if err != nil {
		resp.Diagnostics.AddAttributeError(path.Root("permits"), "Cannot change semaphore limit", semaphoreFailure(table, name, err))
		return
	}
	plan.ID = types.StringValue(semaphoreID(db, table, name))
	resp.Diagnostics.Append(resp.State.Set(ctx, plan)...)
	setSemaphoreIdentity(ctx, resp.Identity, db, table, name, &resp.Diagnostics)
}

func (r *semaphoreResource) Delete(ctx context.Context, req resource.DeleteRequest, resp *resource.DeleteResponse) {
	var state semaphoreModel
	resp.Diagnostics.Append(req.State.Get(ctx, &state)...)
	if resp.Diagnostics.HasError() {
		return
	}
	db, table, name := state.Database.ValueString(), state.Table.ValueString(), state.Name.ValueString()
	var s lease.Semaphore
	err := r.data.withLease(ctx, db, table, func(ctx context.Context, lc *lease.Client) error {
		// Read first, only to tell who still holds permits: Undeclare
		// itself takes nothing away.
		var err error
		if s, err = lc.Semaphore(ctx, name); err != nil {
			return err
		}
		return lc.Undeclare(ctx, name)
	})
	switch {
	case errors.Is(err, lease.ErrUnknownSemaphore), err != nil && r.tableGone(ctx, db, table):
		return
	case err != nil:
		resp.Diagnostics.AddError("Cannot undeclare semaphore", semaphoreFailure(table, name, err))
		return
	}
	if s.InUse() > 0 {
		resp.Diagnostics.AddWarning(fmt.Sprintf("Semaphore %s undeclared while permits are held", name), describePermits(table, s))
	}
}

// describePermits says what undeclaring a semaphore with live permits did
// and did not do.
func describePermits(table string, s lease.Semaphore) string {
	var b strings.Builder
	fmt.Fprintf(&b, "Semaphore %q in table %s is undeclared, but %d permit(s) of it were held:\n", s.Name, table, s.InUse())
	for i, h := range s.Holders {
		if i == maxListedHolders {
			fmt.Fprintf(&b, "  ... and %d more\n", len(s.Holders)-maxListedHolders)
			break
		}
		fmt.Fprintf(&b, "  - held by %q with token %d until %s\n", h.HolderID, h.Token, h.ExpiresAt.UTC().Format(time.RFC3339))
	}
	fmt.Fprintf(&b, "\nUndeclaring deletes nothing: these permits stay valid until their holders release them or their "+
		"leases expire. New permits fail with ErrUnknownSemaphore until %q is declared again, which continues its tokens.", s.Name)
	return b.String()
}

func (r *semaphoreResource) ImportState(ctx context.Context, req resource.ImportStateRequest, resp *resource.ImportStateResponse) {
	var defaultDB string
	if r.data != nil {
		defaultDB = r.data.database
	}
	db, table, name, err := semaphoreToImport(ctx, req, defaultDB)
	if err != nil {
		resp.Diagnostics.AddError("Invalid import ID", err.Error())
		return
	}
	// Read fills in permits, or finds no semaphore and the import fails.
	resp.Diagnostics.Append(resp.State.SetAttribute(ctx, path.Root("id"), semaphoreID(db, table, name))...)
	resp.Diagnostics.Append(resp.State.SetAttribute(ctx, path.Root("database"), db)...)
	resp.Diagnostics.Append(resp.State.SetAttribute(ctx, path.Root("table"), table)...)
	resp.Diagnostics.Append(resp.State.SetAttribute(ctx, path.Root("name"), name)...)
}

// tableGone reports that the table, or its whole database, no longer exists,
// so neither does any semaphore in it.
func (r *semaphoreResource) tableGone(ctx context.Context, db, table string) bool {
	ins, err := r.data.inspect(ctx, db, table)
	if err != nil {
		return databaseGone(err)
	}
	return !ins.Exists
}

// readSemaphore is lease.Client.Semaphore itself, not a copy of its query.
func readSemaphore(ctx context.Context, data *providerData, db, table, name string) (lease.Semaphore, error) {
	var s lease.Semaphore
	err := data.withLease(ctx, db, table, func(ctx context.Context, lc *lease.Client) error {
		var err error
		s, err = lc.Semaphore(ctx, name)
		return err
	})
	return s, err
}

// semaphoreFailure explains a failed call on a semaphore; err names the
// database and where it is.
func semaphoreFailure(table, name string, err error) string {
	return fmt.Sprintf("semaphore %q in table %s: %v", name, table, err)
}
