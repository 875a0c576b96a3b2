package provider

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/hashicorp/terraform-plugin-framework-validators/int64validator"
	"github.com/hashicorp/terraform-plugin-framework/action"
	"github.com/hashicorp/terraform-plugin-framework/action/schema"
	"github.com/hashicorp/terraform-plugin-framework/diag"
	"github.com/hashicorp/terraform-plugin-framework/path"
	"github.com/hashicorp/terraform-plugin-framework/schema/validator"
	"github.com/hashicorp/terraform-plugin-framework/types"

	"github.com/spannerlock/terraform-provider-spannerlock/lease"
)

var (
	_ action.ActionWithConfigure  = (*forceReleaseAction)(nil)
	_ action.ActionWithModifyPlan = (*forceReleaseAction)(nil)
)

// forceReleaseAction is lease.Client.ForceRelease and ForceReleasePermit,
// for an operator facing a stuck holder: the same operation, not a copy.
type forceReleaseAction struct {
	data *providerData
}

func newForceReleaseAction() action.Action { return &forceReleaseAction{} }

type forceReleaseModel struct {
	Database types.String `tfsdk:"database"`
	Table    types.String `tfsdk:"table"`
	Name     types.String `tfsdk:"name"`
	Slot     types.Int64  `tfsdk:"slot"`
	Token    types.Int64  `tfsdk:"token"`
}

// what names the lease m ends, for messages.
func (m forceReleaseModel) what() string {
	if !m.Slot.IsNull() {
		return fmt.Sprintf("slot %d of %q in table %s", m.Slot.ValueInt64(), m.Name.ValueString(), m.Table.ValueString())
	}
	return fmt.Sprintf("lease %q in table %s", m.Name.ValueString(), m.Table.ValueString())
}

// describe says who h is for messages: holder, token, acquisition and
// deadline.
func describe(h lease.Holder) string {
	return fmt.Sprintf("%s with token %d (acquired %s, expires %s unless renewed)", h.HolderID, h.Token,
		h.AcquiredAt.UTC().Format(time.RFC3339), h.ExpiresAt.UTC().Format(time.RFC3339))
}

func (a *forceReleaseAction) Metadata(_ context.Context, req action.MetadataRequest, resp *action.MetadataResponse) {
	resp.TypeName = req.ProviderTypeName + "_force_release"
}

func (a *forceReleaseAction) Schema(_ context.Context, _ action.SchemaRequest, resp *action.SchemaResponse) {
	resp.Schema = schema.Schema{
		MarkdownDescription: "Ends the live holder's lease on a lock, a RunOnce slot, a semaphore's permit or a " +
			"worker ID, without asking the holder: `lease.Client.ForceRelease` (with `slot`, " +
			"`ForceReleasePermit`). Terraform 1.14 and later, with `terraform apply -invoke`.",
		Attributes: map[string]schema.Attribute{
			"database": schema.StringAttribute{
				Optional:            true,
				MarkdownDescription: "Database of the table, `projects/P/instances/I/databases/D`. Defaults to the provider's `database`.",
				Validators:          []validator.String{databasePath()},
			},
			"table": schema.StringAttribute{
				Required:            true,
				MarkdownDescription: "Name of the lock table, usually `spannerlock_table.<name>.name`.",
				Validators:          []validator.String{tableName()},
			},
			"name": schema.StringAttribute{
				Required: true,
				MarkdownDescription: "Name of the lock or election, or of a RunOnce slot (`lease.JobSlotName`, as the " +
					"`spannerlock_leases` data source lists it); with `slot`, the semaphore's or worker pool's.",
				Validators: []validator.String{leaseName()},
			},
			"slot": schema.Int64Attribute{
				Optional: true,
				MarkdownDescription: "The permit's slot, or the worker ID, when `name` is a semaphore or worker pool " +
					"(the `slot` of the `spannerlock_leases` data source). Omit it for a lock.",
				Validators: []validator.Int64{int64validator.AtLeast(0)},
			},
			"token": schema.Int64Attribute{
				Optional: true,
				MarkdownDescription: "End the lease only if its holder has this fencing token (`lease.IfToken`), the " +
					"`token` of the holder read before, as the `spannerlock_leader` or `spannerlock_leases` data " +
					"source or the plan's warning shows it: a holder that took the lease since keeps it, and the " +
					"action fails saying who holds it now. Omit it to end whoever holds the lease at invoke time.",
				Validators: []validator.Int64{int64validator.AtLeast(1)},
			},
		},
	}
}

func (a *forceReleaseAction) Configure(_ context.Context, req action.ConfigureRequest, resp *action.ConfigureResponse) {
	if data := configured(req.ProviderData, &resp.Diagnostics); data != nil {
		a.data = data
	}
}

// ModifyPlan warns, when the plan is made, who holds the lease the action
// would end, so that the operator sees whom they break before they confirm
// (and can pin that holder with token). It never fails the plan: the holder
// may change before the action runs, and Invoke reads it again.
func (a *forceReleaseAction) ModifyPlan(ctx context.Context, req action.ModifyPlanRequest, resp *action.ModifyPlanResponse) {
	var m forceReleaseModel
	if diags := req.Config.Get(ctx, &m); diags.HasError() {
		return
	}
	if m.Table.IsUnknown() || m.Name.IsUnknown() || m.Slot.IsUnknown() || m.Token.IsUnknown() || !a.data.canRead() {
		return
	}
	var diags diag.Diagnostics
	db, known, ok := a.data.defaultDatabase(m.Database, &diags)
	if !ok || !known {
		return
	}
	table, name, what := m.Table.ValueString(), m.Name.ValueString(), m.what()
	var (
		h   lease.Holder
		sem *lease.Semaphore
		err error
	)
	if m.Slot.IsNull() {
		h, sem, err = a.data.holder(ctx, db, table, name)
	} else {
		h, err = a.data.permitHolder(ctx, db, table, name, m.Slot.ValueInt64())
	}
	switch {
	case errors.Is(err, lease.ErrNoHolder):
		resp.Diagnostics.AddAttributeWarning(path.Root("name"), "Nobody holds "+what, fmt.Sprintf(
			"Nobody holds %s now: invoking this action ends no lease, unless one is taken before it runs.", what))
	case err != nil:
		resp.Diagnostics.AddAttributeWarning(path.Root("name"), "Cannot read who holds "+what, fmt.Sprintf(
			"Reading who holds %s, to show whom this action would end: %v. The plan goes on; the action reads the "+
				"holder again when it runs.", what, strings.TrimSuffix(err.Error(), ".")))
	case sem != nil:
		resp.Diagnostics.AddAttributeWarning(path.Root("name"), fmt.Sprintf("%s is a semaphore", name), fmt.Sprintf(
			"%q in table %s is a semaphore with %d permit(s), %d of them held now: invoking this action without slot "+
				"fails. Set slot to the permit's slot (the spannerlock_leases data source lists them).", name, table,
			sem.Permits, sem.InUse()))
	case !m.Token.IsNull() && h.Token != m.Token.ValueInt64():
		resp.Diagnostics.AddAttributeWarning(path.Root("token"), fmt.Sprintf("Token %d does not hold %s", m.Token.ValueInt64(), what),
			fmt.Sprintf("%s is held by %s, not with token %d: invoking this action ends nothing and fails. Set "+
				"token = %d to end this holder.", what, describe(h), m.Token.ValueInt64(), h.Token))
	default:
		shared := ""
		if h.Kind == "shared" {
			shared = " It is held shared: every reader loses it, not only this first one."
		}
		resp.Diagnostics.AddAttributeWarning(path.Root("name"), fmt.Sprintf("This ends %s's lease", h.HolderID), fmt.Sprintf(
			"%s is held by %s. Invoking this action ends that lease without asking its holder%s.%s", what, describe(h),
			pinned(m.Token), shared))
	}
}

// pinned says what token set to the holder's token adds to the plan's
// warning.
func pinned(token types.Int64) string {
	if token.IsNull() {
		return ", or whoever holds it then; set token to end only this holder"
	}
	return fmt.Sprintf(", and only while it holds it: token = %d", token.ValueInt64())
}

func (a *forceReleaseAction) Invoke(ctx context.Context, req action.InvokeRequest, resp *action.InvokeResponse) {
	var m forceReleaseModel
	resp.Diagnostics.Append(req.Config.Get(ctx, &m)...)
	if resp.Diagnostics.HasError() {
		return
	}
	db, ok := a.data.readDatabase(m.Database, &resp.Diagnostics)
	if !ok {
		return
	}
	table, name, what := m.Table.ValueString(), m.Name.ValueString(), m.what()
	var opts []lease.ForceReleaseOption
	if !m.Token.IsNull() {
		opts = append(opts, lease.IfToken(m.Token.ValueInt64()))
	}
	var h lease.Holder
	err := a.data.withLease(ctx, db, table, func(ctx context.Context, lc *lease.Client) error {
		var err error
		if m.Slot.IsNull() {
			h, err = lc.ForceRelease(ctx, name, opts...)
		} else {
			h, err = lc.ForceReleasePermit(ctx, name, m.Slot.ValueInt64(), opts...)
		}
		return err
	})
	switch {
	case errors.Is(err, lease.ErrNoHolder):
		resp.Diagnostics.AddWarning("Nothing to release", fmt.Sprintf("Nobody holds %s: there was no lease to end.", what))
		return
	case errors.Is(err, lease.ErrHolderChanged):
		resp.Diagnostics.AddAttributeError(path.Root("token"), fmt.Sprintf("Holder changed: token %d does not hold %s", m.Token.ValueInt64(), what),
			fmt.Sprintf("token = %d, but %s is held by %s now, so nothing was released: the holder with token %d "+
				"let go or lost the lease since it was read. Read the holder again (the plan warns who it is) and "+
				"set token = %d to end this one.", m.Token.ValueInt64(), what, describe(h), m.Token.ValueInt64(), h.Token))
		return
	case errors.Is(err, lease.ErrWrongKind):
		attr, hint := path.Root("slot"), "Omit slot to force-release a lock."
		if m.Slot.IsNull() {
			attr, hint = path.Root("name"), "Set slot to the permit's slot or the worker ID (the spannerlock_leases data source lists them)."
		}
		resp.Diagnostics.AddAttributeError(attr, "Cannot force-release "+what, fmt.Sprintf("%v. %s", err, hint))
		return
	case err != nil:
		resp.Diagnostics.AddError("Cannot force-release "+what, fmt.Sprintf("force-releasing %s: %v", what, err))
		return
	}
	resp.SendProgress(action.InvokeProgressEvent{Message: fmt.Sprintf(
		"Ended %s's lease on %s (token %d, acquired %s, would have expired %s); the next holder gets a larger token.",
		h.HolderID, what, h.Token, h.AcquiredAt.UTC().Format(time.RFC3339), h.ExpiresAt.UTC().Format(time.RFC3339))})
}
