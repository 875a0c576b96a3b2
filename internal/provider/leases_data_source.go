package provider

import (
	"context"
	"fmt"

	"github.com/hashicorp/terraform-plugin-framework/attr"
	"github.com/hashicorp/terraform-plugin-framework/datasource"
	"github.com/hashicorp/terraform-plugin-framework/datasource/schema"
	"github.com/hashicorp/terraform-plugin-framework/schema/validator"
	"github.com/hashicorp/terraform-plugin-framework/types"

	"github.com/spannerlock/terraform-provider-spannerlock/lease"
)

var _ datasource.DataSourceWithConfigure = (*leasesDataSource)(nil)

// leasesDataSource lists every live lease of a table, as spannerlock status
// does, for dashboards and check blocks.
type leasesDataSource struct {
	data *providerData
}

func newLeasesDataSource() datasource.DataSource { return &leasesDataSource{} }

type leasesModel struct {
	ID       types.String `tfsdk:"id"`
	Database types.String `tfsdk:"database"`
	Table    types.String `tfsdk:"table"`
	Leases   types.List   `tfsdk:"leases"`
}

var liveLeaseType = types.ObjectType{AttrTypes: map[string]attr.Type{
	"kind":        types.StringType,
	"name":        types.StringType,
	"slot":        types.Int64Type,
	"holder_id":   types.StringType,
	"token":       types.Int64Type,
	"acquired_at": types.StringType,
	"renewed_at":  types.StringType,
	"expires_at":  types.StringType,
}}

func (d *leasesDataSource) Metadata(_ context.Context, req datasource.MetadataRequest, resp *datasource.MetadataResponse) {
	resp.TypeName = req.ProviderTypeName + "_leases"
}

func (d *leasesDataSource) Schema(_ context.Context, _ datasource.SchemaRequest, resp *datasource.SchemaResponse) {
	resp.Schema = schema.Schema{
		MarkdownDescription: "Every live lease of a lock table (locks, RunOnce slots, semaphore permits and worker " +
			"IDs), read exactly as `lease.Client.Holders` and `spannerlock status` read them, in one read-only " +
			"transaction. For dashboards and `check` blocks; it reads the whole table.",
		Attributes: map[string]schema.Attribute{
			"id": schema.StringAttribute{
				Computed:            true,
				MarkdownDescription: "`<database>/tables/<table>`.",
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
			"leases": schema.ListNestedAttribute{
				Computed: true,
				MarkdownDescription: "The live leases: locks first, then permits and worker IDs. Empty when nobody " +
					"holds anything.",
				NestedObject: schema.NestedAttributeObject{Attributes: map[string]schema.Attribute{
					"kind": schema.StringAttribute{
						Computed:            true,
						MarkdownDescription: "`lock` (a lock, an election or a RunOnce slot), `permit` (of a semaphore) or `worker_id`.",
					},
					"name": schema.StringAttribute{
						Computed:            true,
						MarkdownDescription: "The lock's name, or the semaphore's or worker pool's.",
					},
					"slot": schema.Int64Attribute{
						Computed:            true,
						MarkdownDescription: "A permit's slot, or the worker ID; null for a lock.",
					},
					"holder_id": schema.StringAttribute{
						Computed:            true,
						MarkdownDescription: "Identity the holder recorded (`lease.WithHolderID`).",
					},
					"token": schema.Int64Attribute{
						Computed:            true,
						MarkdownDescription: "Fencing token of the holder's acquisition.",
					},
					"acquired_at": schema.StringAttribute{
						Computed:            true,
						MarkdownDescription: "Commit time of the acquisition, RFC 3339 with nanoseconds, UTC.",
					},
					"renewed_at": schema.StringAttribute{
						Computed:            true,
						MarkdownDescription: "Commit time of the holder's last renewal, RFC 3339 with nanoseconds, UTC.",
					},
					"expires_at": schema.StringAttribute{
						Computed:            true,
						MarkdownDescription: "When the lease expires unless renewed, by Spanner's clock, RFC 3339 with nanoseconds, UTC.",
					},
				}},
			},
		},
	}
}

func (d *leasesDataSource) Configure(_ context.Context, req datasource.ConfigureRequest, resp *datasource.ConfigureResponse) {
	if data := configured(req.ProviderData, &resp.Diagnostics); data != nil {
		d.data = data
	}
}

func (d *leasesDataSource) Read(ctx context.Context, req datasource.ReadRequest, resp *datasource.ReadResponse) {
	var m leasesModel
	resp.Diagnostics.Append(req.Config.Get(ctx, &m)...)
	if resp.Diagnostics.HasError() {
		return
	}
	db, ok := d.data.readDatabase(m.Database, &resp.Diagnostics)
	if !ok {
		return
	}
	table := m.Table.ValueString()
	var holders []lease.Holder
	err := d.data.withLease(ctx, db, table, func(ctx context.Context, lc *lease.Client) error {
		var err error
		holders, err = lc.Holders(ctx)
		return err
	})
	if err != nil {
		resp.Diagnostics.AddError("Cannot read leases", fmt.Sprintf("reading the leases of table %s: %v", table, err))
		return
	}
	leases := make([]attr.Value, 0, len(holders))
	for _, h := range holders {
		slot := types.Int64Value(h.Slot)
		if h.Kind == "lock" {
			slot = types.Int64Null()
		}
		v, diags := types.ObjectValue(liveLeaseType.AttrTypes, map[string]attr.Value{
			"kind":        types.StringValue(h.Kind),
			"name":        types.StringValue(h.Name),
			"slot":        slot,
			"holder_id":   types.StringValue(h.HolderID),
			"token":       types.Int64Value(h.Token),
			"acquired_at": timestamp(h.AcquiredAt),
			"renewed_at":  timestamp(h.RenewedAt),
			"expires_at":  timestamp(h.ExpiresAt),
		})
		resp.Diagnostics.Append(diags...)
		leases = append(leases, v)
	}
	list, diags := types.ListValue(liveLeaseType, leases)
	resp.Diagnostics.Append(diags...)
	if resp.Diagnostics.HasError() {
		return
	}
	m.ID = types.StringValue(tableID(db, table))
	m.Database = types.StringValue(db)
	m.Leases = list
	resp.Diagnostics.Append(resp.State.Set(ctx, m)...)
}
