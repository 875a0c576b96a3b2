package provider

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/hashicorp/terraform-plugin-framework/datasource"
	"github.com/hashicorp/terraform-plugin-framework/datasource/schema"
	"github.com/hashicorp/terraform-plugin-framework/path"
	"github.com/hashicorp/terraform-plugin-framework/schema/validator"
	"github.com/hashicorp/terraform-plugin-framework/types"

	"github.com/spannerlock/terraform-provider-spannerlock/lease"
)

var _ datasource.DataSourceWithConfigure = (*leaderDataSource)(nil)

type leaderDataSource struct {
	data *providerData
}

func newLeaderDataSource() datasource.DataSource { return &leaderDataSource{} }

type leaderModel struct {
	ID         types.String `tfsdk:"id"`
	Database   types.String `tfsdk:"database"`
	Table      types.String `tfsdk:"table"`
	Name       types.String `tfsdk:"name"`
	Held       types.Bool   `tfsdk:"held"`
	HolderID   types.String `tfsdk:"holder_id"`
	Token      types.Int64  `tfsdk:"token"`
	AcquiredAt types.String `tfsdk:"acquired_at"`
	RenewedAt  types.String `tfsdk:"renewed_at"`
	ExpiresAt  types.String `tfsdk:"expires_at"`
}

func (d *leaderDataSource) Metadata(_ context.Context, req datasource.MetadataRequest, resp *datasource.MetadataResponse) {
	resp.TypeName = req.ProviderTypeName + "_leader"
}

func (d *leaderDataSource) Schema(_ context.Context, _ datasource.SchemaRequest, resp *datasource.SchemaResponse) {
	whenHeld := " Null when the lease is not held."
	resp.Schema = schema.Schema{
		MarkdownDescription: "Who holds a lease, read exactly as `lease.Client.Holder` reads it, so Terraform and " +
			"applications never disagree. A lease nobody holds is `held = false`, not an error.",
		Attributes: map[string]schema.Attribute{
			"id": schema.StringAttribute{
				Computed:            true,
				MarkdownDescription: "`<database>/tables/<table>/leases/<name>`.",
			},
			"database": schema.StringAttribute{
				Optional:            true,
				Computed:            true,
				MarkdownDescription: "Database of the table, `projects/P/instances/I/databases/D`. Defaults to the provider's `database`.",
				Validators:          []validator.String{databasePath()},
			},
			"table": schema.StringAttribute{
				Required:            true,
				MarkdownDescription: "Name of the lock table, usually `spannerlock_table.<name>.name`.",
				Validators:          []validator.String{tableName()},
			},
			"name": schema.StringAttribute{
				Required:            true,
				MarkdownDescription: "Name of the lease (an election's name, for a leader).",
				Validators:          []validator.String{leaseName()},
			},
			"held": schema.BoolAttribute{
				Computed:            true,
				MarkdownDescription: "Whether a live holder has the lease. Always known.",
			},
			"holder_id": schema.StringAttribute{
				Computed:            true,
				MarkdownDescription: "Identity the holder recorded (`lease.WithHolderID`)." + whenHeld,
			},
			"token": schema.Int64Attribute{
				Computed:            true,
				MarkdownDescription: "Fencing token of the holder's acquisition." + whenHeld,
			},
			"acquired_at": schema.StringAttribute{
				Computed:            true,
				MarkdownDescription: "Commit time of the acquisition, RFC 3339 with nanoseconds, UTC." + whenHeld,
			},
			"renewed_at": schema.StringAttribute{
				Computed:            true,
				MarkdownDescription: "Commit time of the last renewal, RFC 3339 with nanoseconds, UTC." + whenHeld,
			},
			"expires_at": schema.StringAttribute{
				Computed: true,
				MarkdownDescription: "When the lease expires unless renewed, by Spanner's clock, RFC 3339 with " +
					"nanoseconds, UTC." + whenHeld,
			},
		},
	}
}

func (d *leaderDataSource) Configure(_ context.Context, req datasource.ConfigureRequest, resp *datasource.ConfigureResponse) {
	if data := configured(req.ProviderData, &resp.Diagnostics); data != nil {
		d.data = data
	}
}

func (d *leaderDataSource) Read(ctx context.Context, req datasource.ReadRequest, resp *datasource.ReadResponse) {
	var m leaderModel
	resp.Diagnostics.Append(req.Config.Get(ctx, &m)...)
	if resp.Diagnostics.HasError() {
		return
	}
	db, ok := d.data.readDatabase(m.Database, &resp.Diagnostics)
	if !ok {
		return
	}
	table, name := m.Table.ValueString(), m.Name.ValueString()
	h, sem, err := d.data.holder(ctx, db, table, name)
	held := err == nil && sem == nil
	if err != nil && !errors.Is(err, lease.ErrNoHolder) {
		resp.Diagnostics.AddError("Cannot read lease", fmt.Sprintf("reading lease %q in table %s: %v", name, table, err))
		return
	}
	if sem != nil {
		resp.Diagnostics.AddAttributeWarning(path.Root("name"), fmt.Sprintf("%s is a semaphore", name), fmt.Sprintf(
			"%q in table %s is a semaphore with %d permit(s), %d of them held now, not a lock or an election: it has no "+
				"single holder, so held is false. Read its permits with the spannerlock_semaphore data source.",
			name, table, sem.Permits, sem.InUse()))
	}

	m.ID = types.StringValue(leaseID(db, table, name))
	m.Database = types.StringValue(db)
	m.Held = types.BoolValue(held)
	m.HolderID, m.Token = types.StringNull(), types.Int64Null()
	m.AcquiredAt, m.RenewedAt, m.ExpiresAt = types.StringNull(), types.StringNull(), types.StringNull()
	if held {
		m.HolderID = types.StringValue(h.HolderID)
		m.Token = types.Int64Value(h.Token)
		m.AcquiredAt = timestamp(h.AcquiredAt)
		m.RenewedAt = timestamp(h.RenewedAt)
		m.ExpiresAt = timestamp(h.ExpiresAt)
	}
	resp.Diagnostics.Append(resp.State.Set(ctx, m)...)
}

// holder is lease.Client.Holder itself, not a copy of its query. A
// semaphore's name has no single holder: sem then describes the semaphore,
// and err is nil. Another kind of name (a worker-ID pool's) is lease's
// error, which says what it is. The spannerlock_leader data source and the
// spannerlock_force_release action's plan read holders with it.
func (d *providerData) holder(ctx context.Context, db, table, name string) (h lease.Holder, sem *lease.Semaphore, err error) {
	err = d.withLease(ctx, db, table, func(ctx context.Context, lc *lease.Client) error {
		var err error
		if h, err = lc.Holder(ctx, name); !errors.Is(err, lease.ErrWrongKind) {
			return err
		}
		s, serr := lc.Semaphore(ctx, name)
		if serr != nil {
			return err
		}
		sem = &s
		return nil
	})
	return h, sem, err
}

// permitHolder is the holder of one permit of a semaphore, or of one worker
// ID of a pool (slot is the ID), as lease.Client.Holders lists it, as the
// spannerlock_leases data source reads it. When nobody holds it, the error
// matches lease.ErrNoHolder.
func (d *providerData) permitHolder(ctx context.Context, db, table, name string, slot int64) (lease.Holder, error) {
	var all []lease.Holder
	err := d.withLease(ctx, db, table, func(ctx context.Context, lc *lease.Client) error {
		var err error
		all, err = lc.Holders(ctx)
		return err
	})
	if err != nil {
		return lease.Holder{}, err
	}
	for _, h := range all {
		if h.Name == name && h.Slot == slot && (h.Kind == "permit" || h.Kind == "worker_id") {
			return h, nil
		}
	}
	return lease.Holder{}, fmt.Errorf("%w: slot %d of %q", lease.ErrNoHolder, slot, name)
}

func timestamp(t time.Time) types.String {
	return types.StringValue(t.UTC().Format(time.RFC3339Nano))
}
