package provider

import (
	"context"
	"errors"
	"fmt"

	"github.com/hashicorp/terraform-plugin-framework/attr"
	"github.com/hashicorp/terraform-plugin-framework/datasource"
	"github.com/hashicorp/terraform-plugin-framework/datasource/schema"
	"github.com/hashicorp/terraform-plugin-framework/path"
	"github.com/hashicorp/terraform-plugin-framework/schema/validator"
	"github.com/hashicorp/terraform-plugin-framework/types"

	"github.com/spannerlock/terraform-provider-spannerlock/lease"
)

var _ datasource.DataSourceWithConfigure = (*semaphoreDataSource)(nil)

type semaphoreDataSource struct {
	data *providerData
}

func newSemaphoreDataSource() datasource.DataSource { return &semaphoreDataSource{} }

type semaphoreStateModel struct {
	ID       types.String `tfsdk:"id"`
	Database types.String `tfsdk:"database"`
	Table    types.String `tfsdk:"table"`
	Name     types.String `tfsdk:"name"`
	Permits  types.Int64  `tfsdk:"permits"`
	InUse    types.Int64  `tfsdk:"in_use"`
	Holders  types.List   `tfsdk:"holders"`
}

type permitHolderModel struct {
	HolderID  types.String `tfsdk:"holder_id"`
	Token     types.Int64  `tfsdk:"token"`
	ExpiresAt types.String `tfsdk:"expires_at"`
}

var permitHolderType = types.ObjectType{AttrTypes: map[string]attr.Type{
	"holder_id":  types.StringType,
	"token":      types.Int64Type,
	"expires_at": types.StringType,
}}

func (d *semaphoreDataSource) Metadata(_ context.Context, req datasource.MetadataRequest, resp *datasource.MetadataResponse) {
	resp.TypeName = req.ProviderTypeName + "_semaphore"
}

func (d *semaphoreDataSource) Schema(_ context.Context, _ datasource.SchemaRequest, resp *datasource.SchemaResponse) {
	resp.Schema = schema.Schema{
		MarkdownDescription: "A semaphore's limit and the holders of its live permits, read exactly as " +
			"`lease.Client.Semaphore` reads them. A semaphore that is not declared is an error.",
		Attributes: map[string]schema.Attribute{
			"id": schema.StringAttribute{
				Computed:            true,
				MarkdownDescription: "`<database>/tables/<table>/semaphores/<name>`.",
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
				MarkdownDescription: "Name of the semaphore, usually `spannerlock_semaphore.<name>.name`.",
				Validators:          []validator.String{semaphoreName()},
			},
			"permits": schema.Int64Attribute{
				Computed:            true,
				MarkdownDescription: "The semaphore's limit: how many permits may be held at once.",
			},
			"in_use": schema.Int64Attribute{
				Computed: true,
				MarkdownDescription: "How many permits are held by live holders. It exceeds `permits` for a while " +
					"after the limit is lowered, until enough holders release.",
			},
			"holders": schema.ListNestedAttribute{
				Computed:            true,
				MarkdownDescription: "The live permits, in slot order; empty when none is held.",
				NestedObject: schema.NestedAttributeObject{
					Attributes: map[string]schema.Attribute{
						"holder_id": schema.StringAttribute{
							Computed:            true,
							MarkdownDescription: "Identity the holder recorded (`lease.WithHolderID`).",
						},
						"token": schema.Int64Attribute{
							Computed: true,
							MarkdownDescription: "Fencing token of the permit. Tokens grow across all permits of the " +
								"semaphore, so no two permits ever share one.",
						},
						"expires_at": schema.StringAttribute{
							Computed: true,
							MarkdownDescription: "When the permit expires unless its holder renews it, by Spanner's " +
								"clock, RFC 3339 with nanoseconds, UTC.",
						},
					},
				},
			},
		},
	}
}

func (d *semaphoreDataSource) Configure(_ context.Context, req datasource.ConfigureRequest, resp *datasource.ConfigureResponse) {
	if data := configured(req.ProviderData, &resp.Diagnostics); data != nil {
		d.data = data
	}
}

func (d *semaphoreDataSource) Read(ctx context.Context, req datasource.ReadRequest, resp *datasource.ReadResponse) {
	var m semaphoreStateModel
	resp.Diagnostics.Append(req.Config.Get(ctx, &m)...)
	if resp.Diagnostics.HasError() {
		return
	}
	db, ok := d.data.readDatabase(m.Database, &resp.Diagnostics)
	if !ok {
		return
	}
	table, name := m.Table.ValueString(), m.Name.ValueString()
	s, err := readSemaphore(ctx, d.data, db, table, name)
	switch {
	case errors.Is(err, lease.ErrUnknownSemaphore):
		resp.Diagnostics.AddAttributeError(path.Root("name"), fmt.Sprintf("Semaphore %s is not declared", name),
			fmt.Sprintf("Semaphore %q is not declared in table %s of %s, so it has no limit to read. Declare it with a "+
				"spannerlock_semaphore resource (and refer to its name here, so that Terraform reads this after "+
				"declaring it), or from Go with lease.Client.SetPermits.", name, table, db))
		return
	case err != nil:
		resp.Diagnostics.AddError("Cannot read semaphore", semaphoreFailure(table, name, err))
		return
	}

	holders := make([]permitHolderModel, len(s.Holders))
	for i, h := range s.Holders {
		holders[i] = permitHolderModel{
			HolderID:  types.StringValue(h.HolderID),
			Token:     types.Int64Value(h.Token),
			ExpiresAt: timestamp(h.ExpiresAt),
		}
	}
	list, diags := types.ListValueFrom(ctx, permitHolderType, holders)
	resp.Diagnostics.Append(diags...)
	if resp.Diagnostics.HasError() {
		return
	}
	m.ID = types.StringValue(semaphoreID(db, table, name))
	m.Database = types.StringValue(db)
	m.Permits = types.Int64Value(s.Permits)
	m.InUse = types.Int64Value(int64(s.InUse()))
	m.Holders = list
	resp.Diagnostics.Append(resp.State.Set(ctx, m)...)
}
