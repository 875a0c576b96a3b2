package provider

import (
	"context"
	"fmt"
	"math/big"

	"cloud.google.com/go/spanner"
	"github.com/hashicorp/terraform-plugin-framework-timeouts/resource/timeouts"
	"github.com/hashicorp/terraform-plugin-framework/diag"
	"github.com/hashicorp/terraform-plugin-framework/list"
	listschema "github.com/hashicorp/terraform-plugin-framework/list/schema"
	"github.com/hashicorp/terraform-plugin-framework/resource"
	"github.com/hashicorp/terraform-plugin-framework/schema/validator"
	"github.com/hashicorp/terraform-plugin-framework/types"

	"github.com/spannerlock/terraform-provider-spannerlock/internal/locktable"
	"github.com/spannerlock/terraform-provider-spannerlock/lease"
)

// List resources (Terraform 1.14 and later): terraform query lists the
// lock tables of a database and the semaphores of a table, with the
// identity and attributes that terraform query -generate-config-out turns
// into resource and import blocks.

var (
	_ list.ListResourceWithConfigure = (*tableListResource)(nil)
	_ list.ListResourceWithConfigure = (*semaphoreListResource)(nil)
)

type tableListResource struct {
	data *providerData
}

func newTableListResource() list.ListResource { return &tableListResource{} }

type tableListModel struct {
	Database types.String `tfsdk:"database"`
}

func (l *tableListResource) Metadata(_ context.Context, req resource.MetadataRequest, resp *resource.MetadataResponse) {
	resp.TypeName = req.ProviderTypeName + "_table"
}

func listDatabaseAttribute() listschema.StringAttribute {
	return listschema.StringAttribute{
		Optional:            true,
		MarkdownDescription: "Database to list in, `projects/P/instances/I/databases/D`. Defaults to the provider's `database`.",
		Validators:          []validator.String{databasePath()},
	}
}

func (l *tableListResource) ListResourceConfigSchema(_ context.Context, _ list.ListResourceSchemaRequest, resp *list.ListResourceSchemaResponse) {
	resp.Schema = listschema.Schema{
		MarkdownDescription: "The lock tables of a database: every top-level table that satisfies some version of " +
			"spannerlock's schema (one that drifted so far that it satisfies none is not listed).",
		Attributes: map[string]listschema.Attribute{
			"database": listDatabaseAttribute(),
		},
	}
}

func (l *tableListResource) Configure(_ context.Context, req resource.ConfigureRequest, resp *resource.ConfigureResponse) {
	if data := configured(req.ProviderData, &resp.Diagnostics); data != nil {
		l.data = data
	}
}

func (l *tableListResource) List(ctx context.Context, req list.ListRequest, stream *list.ListResultsStream) {
	var m tableListModel
	var diags diag.Diagnostics
	diags.Append(req.Config.Get(ctx, &m)...)
	db, ok := "", false
	if !diags.HasError() {
		db, ok = l.data.readDatabase(m.Database, &diags)
	}
	if !ok {
		stream.Results = list.ListResultsStreamDiagnostics(diags)
		return
	}
	var tables []locktable.Inspection
	err := l.data.call(ctx, db, "", func(ctx context.Context, sc *spanner.Client, d locktable.Dialect) error {
		var err error
		tables, err = d.LockTables(ctx, sc)
		return err
	})
	if err != nil {
		diags.AddError("Cannot list tables", fmt.Sprintf("listing the lock tables of %s: %v", db, err))
		stream.Results = list.ListResultsStreamDiagnostics(diags)
		return
	}
	stream.Results = func(push func(list.ListResult) bool) {
		for i, ins := range tables {
			if req.Limit > 0 && int64(i) >= req.Limit {
				return
			}
			r := req.NewListResult(ctx)
			name := ins.LiveName()
			r.DisplayName = name
			setTableIdentity(ctx, r.Identity, db, name, &r.Diagnostics)
			if req.IncludeResource {
				r.Diagnostics.Append(r.Resource.Set(ctx, listedTable(ctx, db, name, ins))...)
			}
			if !push(r) {
				return
			}
		}
	}
}

// listedTable is a table's state as an import of it would read it: the
// Terraform-only settings at their defaults, the rest from Spanner.
func listedTable(ctx context.Context, db, name string, ins locktable.Inspection) tableModel {
	m := tableModel{
		ID:                 types.StringValue(tableID(db, name)),
		Name:               types.StringValue(name),
		Database:           types.StringValue(db),
		DeletionProtection: types.BoolValue(true),
		ForceDestroy:       types.BoolValue(false),
		CleanupAfter:       types.StringNull(),
		PlannedDDL:         ddlList(nil),
	}
	// As in an import: no timeouts block.
	t, ok := timeoutsBlock(ctx).Type().(timeouts.Type)
	if !ok {
		panic(fmt.Sprintf("the timeouts block's type is %T, not timeouts.Type", timeoutsBlock(ctx).Type()))
	}
	m.Timeouts.Object = types.ObjectNull(t.AttrTypes)
	m.refresh(ins)
	return m
}

type semaphoreListResource struct {
	data *providerData
}

func newSemaphoreListResource() list.ListResource { return &semaphoreListResource{} }

type semaphoreListModel struct {
	Database types.String `tfsdk:"database"`
	Table    types.String `tfsdk:"table"`
}

func (l *semaphoreListResource) Metadata(_ context.Context, req resource.MetadataRequest, resp *resource.MetadataResponse) {
	resp.TypeName = req.ProviderTypeName + "_semaphore"
}

func (l *semaphoreListResource) ListResourceConfigSchema(_ context.Context, _ list.ListResourceSchemaRequest, resp *list.ListResourceSchemaResponse) {
	resp.Schema = listschema.Schema{
		MarkdownDescription: "The semaphores declared in a lock table, read as `lease.Client.Semaphores` reads them.",
		Attributes: map[string]listschema.Attribute{
			"database": listDatabaseAttribute(),
			"table": listschema.StringAttribute{
				Required:            true,
				MarkdownDescription: "Name of the lock table.",
				Validators:          []validator.String{tableName()},
			},
		},
	}
}

func (l *semaphoreListResource) Configure(_ context.Context, req resource.ConfigureRequest, resp *resource.ConfigureResponse) {
	if data := configured(req.ProviderData, &resp.Diagnostics); data != nil {
		l.data = data
	}
}

func (l *semaphoreListResource) List(ctx context.Context, req list.ListRequest, stream *list.ListResultsStream) {
	var m semaphoreListModel
	var diags diag.Diagnostics
	diags.Append(req.Config.Get(ctx, &m)...)
	db, ok := "", false
	if !diags.HasError() {
		db, ok = l.data.readDatabase(m.Database, &diags)
	}
	if !ok {
		stream.Results = list.ListResultsStreamDiagnostics(diags)
		return
	}
	table := m.Table.ValueString()
	var sems []lease.Semaphore
	err := l.data.withLease(ctx, db, table, func(ctx context.Context, lc *lease.Client) error {
		var err error
		sems, err = lc.Semaphores(ctx)
		return err
	})
	if err != nil {
		diags.AddError("Cannot list semaphores", fmt.Sprintf("listing the semaphores of table %s: %v", table, err))
		stream.Results = list.ListResultsStreamDiagnostics(diags)
		return
	}
	stream.Results = func(push func(list.ListResult) bool) {
		for i, s := range sems {
			if req.Limit > 0 && int64(i) >= req.Limit {
				return
			}
			r := req.NewListResult(ctx)
			r.DisplayName = fmt.Sprintf("%s (%d permits)", s.Name, s.Permits)
			setSemaphoreIdentity(ctx, r.Identity, db, table, s.Name, &r.Diagnostics)
			if req.IncludeResource {
				r.Diagnostics.Append(r.Resource.Set(ctx, semaphoreModel{
					ID:       types.StringValue(semaphoreID(db, table, s.Name)),
					Database: types.StringValue(db),
					Table:    types.StringValue(table),
					Name:     types.StringValue(s.Name),
					Permits:  types.NumberValue(new(big.Float).SetInt64(s.Permits)),
				})...)
			}
			if !push(r) {
				return
			}
		}
	}
}
