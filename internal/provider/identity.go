package provider

import (
	"context"
	"fmt"

	"github.com/hashicorp/terraform-plugin-framework/diag"
	"github.com/hashicorp/terraform-plugin-framework/resource"
	"github.com/hashicorp/terraform-plugin-framework/resource/identityschema"
	"github.com/hashicorp/terraform-plugin-framework/tfsdk"
	"github.com/hashicorp/terraform-plugin-framework/types"

	"github.com/spannerlock/terraform-provider-spannerlock/internal/locktable"
	"github.com/spannerlock/terraform-provider-spannerlock/lease"
)

// Resource identity (Terraform 1.12 and later): what names a table or a
// semaphore, as attributes rather than an ID string, so that
// import { identity = {...} } and terraform query's generated imports work.
// Read sets it every time, first thing, and Update whenever the plan has
// none, since the framework fails a Read or Update that leaves it unset
// ("Missing Resource Identity After Read"), on any Terraform, even a Read
// that finds the resource gone.

var (
	_ resource.ResourceWithIdentity = (*tableResource)(nil)
	_ resource.ResourceWithIdentity = (*semaphoreResource)(nil)
)

type tableIdentityModel struct {
	Database types.String `tfsdk:"database"`
	Name     types.String `tfsdk:"name"`
}

type semaphoreIdentityModel struct {
	Database types.String `tfsdk:"database"`
	Table    types.String `tfsdk:"table"`
	Name     types.String `tfsdk:"name"`
}

func databaseIdentityAttribute() identityschema.StringAttribute {
	return identityschema.StringAttribute{
		RequiredForImport: true,
		Description:       "Database of the table, projects/P/instances/I/databases/D.",
	}
}

func (r *tableResource) IdentitySchema(_ context.Context, _ resource.IdentitySchemaRequest, resp *resource.IdentitySchemaResponse) {
	resp.IdentitySchema = identityschema.Schema{
		Attributes: map[string]identityschema.Attribute{
			"database": databaseIdentityAttribute(),
			"name": identityschema.StringAttribute{
				RequiredForImport: true,
				Description:       "Name of the lock table.",
			},
		},
	}
}

func (r *semaphoreResource) IdentitySchema(_ context.Context, _ resource.IdentitySchemaRequest, resp *resource.IdentitySchemaResponse) {
	resp.IdentitySchema = identityschema.Schema{
		Attributes: map[string]identityschema.Attribute{
			"database": databaseIdentityAttribute(),
			"table": identityschema.StringAttribute{
				RequiredForImport: true,
				Description:       "Name of the lock table the semaphore is declared in.",
			},
			"name": identityschema.StringAttribute{
				RequiredForImport: true,
				Description:       "Name of the semaphore.",
			},
		},
	}
}

// setTableIdentity records the identity of table in db; identity is nil
// when Terraform predates identities.
func setTableIdentity(ctx context.Context, identity *tfsdk.ResourceIdentity, db, table string, diags *diag.Diagnostics) {
	if identity == nil {
		return
	}
	diags.Append(identity.Set(ctx, tableIdentityModel{Database: types.StringValue(db), Name: types.StringValue(table)})...)
}

func setSemaphoreIdentity(ctx context.Context, identity *tfsdk.ResourceIdentity, db, table, name string, diags *diag.Diagnostics) {
	if identity == nil {
		return
	}
	diags.Append(identity.Set(ctx, semaphoreIdentityModel{
		Database: types.StringValue(db), Table: types.StringValue(table), Name: types.StringValue(name),
	})...)
}

// keepTableIdentity sets the identity an update returns when the plan had
// none, as from a Terraform older than 1.12, which keeps no identities;
// otherwise the update keeps the planned one, which may not change.
func keepTableIdentity(ctx context.Context, identity *tfsdk.ResourceIdentity, db, table string, diags *diag.Diagnostics) {
	if identity != nil && identity.Raw.IsFullyNull() {
		setTableIdentity(ctx, identity, db, table, diags)
	}
}

// tableToImport is the table an import names, by its ID or, from an import
// block with identity, by its identity.
func tableToImport(ctx context.Context, req resource.ImportStateRequest, defaultDB string) (db, table string, err error) {
	if req.ID != "" || req.Identity == nil {
		return parseTableImportID(req.ID, defaultDB)
	}
	var id tableIdentityModel
	if diags := req.Identity.Get(ctx, &id); diags.HasError() {
		return "", "", fmt.Errorf("reading the identity: %v", diags)
	}
	db, table = id.Database.ValueString(), id.Name.ValueString()
	if !databasePattern.MatchString(db) {
		return "", "", fmt.Errorf("identity database %q must be a database path like projects/P/instances/I/databases/D", db)
	}
	if err := locktable.ValidateTableName(table); err != nil {
		return "", "", fmt.Errorf("identity name: %w", err)
	}
	return db, table, nil
}

// semaphoreToImport is tableToImport for a semaphore.
func semaphoreToImport(ctx context.Context, req resource.ImportStateRequest, defaultDB string) (db, table, name string, err error) {
	if req.ID != "" || req.Identity == nil {
		return parseSemaphoreImportID(req.ID, defaultDB)
	}
	var id semaphoreIdentityModel
	if diags := req.Identity.Get(ctx, &id); diags.HasError() {
		return "", "", "", fmt.Errorf("reading the identity: %v", diags)
	}
	db, table, name = id.Database.ValueString(), id.Table.ValueString(), id.Name.ValueString()
	if !databasePattern.MatchString(db) {
		return "", "", "", fmt.Errorf("identity database %q must be a database path like projects/P/instances/I/databases/D", db)
	}
	if err := locktable.ValidateTableName(table); err != nil {
		return "", "", "", fmt.Errorf("identity table: %w", err)
	}
	if err := lease.ValidateName(name); err != nil {
		return "", "", "", fmt.Errorf("identity name: %w", err)
	}
	return db, table, name, nil
}
