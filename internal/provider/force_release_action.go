package provider

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/hashicorp/terraform-plugin-framework-validators/int64validator"
	"github.com/hashicorp/terraform-plugin-framework/action"
	"github.com/hashicorp/terraform-plugin-framework/action/schema"
	"github.com/hashicorp/terraform-plugin-framework/path"
	"github.com/hashicorp/terraform-plugin-framework/schema/validator"
	"github.com/hashicorp/terraform-plugin-framework/types"

	"github.com/spannerlock/terraform-provider-spannerlock/lease"
)

var _ action.ActionWithConfigure = (*forceReleaseAction)(nil)

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
		},
	}
}

func (a *forceReleaseAction) Configure(_ context.Context, req action.ConfigureRequest, resp *action.ConfigureResponse) {
	if data := configured(req.ProviderData, &resp.Diagnostics); data != nil {
		a.data = data
	}
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
	table, name := m.Table.ValueString(), m.Name.ValueString()
	what := fmt.Sprintf("lease %q in table %s", name, table)
	if !m.Slot.IsNull() {
		what = fmt.Sprintf("slot %d of %q in table %s", m.Slot.ValueInt64(), name, table)
	}
	var h lease.Holder
	err := a.data.withLease(ctx, db, table, func(ctx context.Context, lc *lease.Client) error {
		var err error
		if m.Slot.IsNull() {
			h, err = lc.ForceRelease(ctx, name)
		} else {
			h, err = lc.ForceReleasePermit(ctx, name, m.Slot.ValueInt64())
		}
		return err
	})
	switch {
	case errors.Is(err, lease.ErrNoHolder):
		resp.Diagnostics.AddWarning("Nothing to release", fmt.Sprintf("Nobody holds %s: there was no lease to end.", what))
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
