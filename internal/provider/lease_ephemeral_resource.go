package provider

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"cloud.google.com/go/spanner"
	"github.com/hashicorp/terraform-plugin-framework/ephemeral"
	"github.com/hashicorp/terraform-plugin-framework/ephemeral/schema"
	"github.com/hashicorp/terraform-plugin-framework/path"
	"github.com/hashicorp/terraform-plugin-framework/schema/validator"
	"github.com/hashicorp/terraform-plugin-framework/types"
	"github.com/hashicorp/terraform-plugin-log/tflog"

	"github.com/spannerlock/terraform-provider-spannerlock/internal/locktable"
	"github.com/spannerlock/terraform-provider-spannerlock/lease"
)

var (
	_ ephemeral.EphemeralResourceWithConfigure = (*leaseEphemeralResource)(nil)
	_ ephemeral.EphemeralResourceWithClose     = (*leaseEphemeralResource)(nil)
)

// defaultLeaseWait is how long Open waits for a held lease by default: long
// enough to queue behind another pipeline's apply, short enough that a lease
// nobody releases fails the run with its holder's name.
const defaultLeaseWait = 10 * time.Minute

// privateLeaseKey is the key in the ephemeral resource's private data under
// which Open leaves the registry ID of its lease for Close.
const privateLeaseKey = "lease"

// leaseEphemeralResource holds a lease for as long as Terraform needs its
// value: Open acquires it, the lease.Client renews it, Close releases it.
type leaseEphemeralResource struct {
	data *providerData
}

func newLeaseEphemeralResource() ephemeral.EphemeralResource { return &leaseEphemeralResource{} }

type leaseModel struct {
	Database types.String `tfsdk:"database"`
	Table    types.String `tfsdk:"table"`
	Name     types.String `tfsdk:"name"`
	TTL      types.String `tfsdk:"ttl"`
	Wait     types.String `tfsdk:"wait"`
	HolderID types.String `tfsdk:"holder_id"`
	Acquire  types.Bool   `tfsdk:"acquire"`
	Token    types.Int64  `tfsdk:"token"`
}

func (r *leaseEphemeralResource) Metadata(_ context.Context, req ephemeral.MetadataRequest, resp *ephemeral.MetadataResponse) {
	resp.TypeName = req.ProviderTypeName + "_lease"
}

func (r *leaseEphemeralResource) Schema(_ context.Context, _ ephemeral.SchemaRequest, resp *ephemeral.SchemaResponse) {
	resp.Schema = schema.Schema{
		MarkdownDescription: "Holds a lease while Terraform runs, so that concurrent pipelines touching the same thing " +
			"take turns, and hands its fencing token to what they run. Terraform acquires it when it opens the ephemeral " +
			"resource and releases it when it closes it, separately in the plan and in the apply: the lease is held during " +
			"each, not from plan to apply.",
		Attributes: map[string]schema.Attribute{
			"database": schema.StringAttribute{
				Optional: true,
				Computed: true,
				MarkdownDescription: "Database of the table, `projects/P/instances/I/databases/D`. Defaults to the " +
					"provider's `database`.",
				Validators: []validator.String{databasePath()},
			},
			"table": schema.StringAttribute{
				Required:            true,
				MarkdownDescription: "Name of the lock table, usually `spannerlock_table.<name>.name`.",
				Validators:          []validator.String{tableName()},
			},
			"name": schema.StringAttribute{
				Required: true,
				MarkdownDescription: "Name of the lease: the same name as applications' `lease.Client.Acquire` calls use " +
					"for the same thing, so that Terraform and the applications exclude each other.",
				Validators: []validator.String{leaseName()},
			},
			"ttl": schema.StringAttribute{
				Optional: true,
				MarkdownDescription: "How long the lease lives after its last renewal, from `\"1s\"` to `\"24h\"`; default `\"" +
					lease.DefaultTTL.String() + "\"`. The provider renews it every third of that while Terraform runs, and " +
					"after a run that failed, was interrupted or lost Terraform, while what the run started still runs (see When " +
					"the run ends); if the provider itself is killed, the lease expires this long after the last renewal.",
				Validators: []validator.String{durationBetween(lease.MinTTL, lease.MaxTTL)},
			},
			"wait": schema.StringAttribute{
				Optional: true,
				MarkdownDescription: "How long to wait while another holder has the lease, as a duration; default `\"10m\"`. " +
					"`\"0s\"` fails at once when the lease is held. Either way the error names the holder.",
				Validators: []validator.String{durationBetween(0, 0)},
			},
			"holder_id": schema.StringAttribute{
				Optional: true,
				Computed: true,
				MarkdownDescription: "Identity recorded with the lease, which the `spannerlock_leader` data source and " +
					"other holders' errors show, such as a pipeline's run ID. Defaults to the lease package's " +
					"`<host>-<pid>-<random>`.",
				Validators: []validator.String{holderID()},
			},
			"acquire": schema.BoolAttribute{
				Optional: true,
				MarkdownDescription: "Whether Terraform takes the lease when it opens this resource; default `true`. Set it " +
					"to `terraform.applying` to take it only when Terraform applies: a plan then neither waits for the lease " +
					"nor keeps it from anyone, spends no token, and needs no permission to write to the table, but it is not " +
					"serialised with other pipelines, and `token` is unknown in it.",
			},
			"token": schema.Int64Attribute{
				Computed: true,
				MarkdownDescription: "Fencing token of this acquisition: larger than every earlier acquisition's of the " +
					"name. Hand it to what the run changes, which should reject writes with a token below the largest it has seen. " +
					"Unknown in a plan that does not take the lease (see `acquire` and what is held when).",
			},
		},
	}
}

func (r *leaseEphemeralResource) Configure(_ context.Context, req ephemeral.ConfigureRequest, resp *ephemeral.ConfigureResponse) {
	if data := configured(req.ProviderData, &resp.Diagnostics); data != nil {
		r.data = data
	}
}

func (r *leaseEphemeralResource) Open(ctx context.Context, req ephemeral.OpenRequest, resp *ephemeral.OpenResponse) {
	var m leaseModel
	resp.Diagnostics.Append(req.Config.Get(ctx, &m)...)
	if resp.Diagnostics.HasError() {
		return
	}
	// notHeld answers an Open that holds nothing: the token is unknown, as
	// the values of a plan are that only apply knows.
	notHeld := func() {
		m.Token = types.Int64Unknown()
		if m.Database.IsNull() {
			m.Database = types.StringUnknown()
		}
		if m.HolderID.IsNull() {
			m.HolderID = types.StringUnknown()
		}
		resp.Diagnostics.Append(resp.Result.Set(ctx, m)...)
	}
	if !m.Acquire.IsNull() && !m.Acquire.ValueBool() {
		notHeld()
		return
	}
	db, dbKnown, ok := r.data.defaultDatabase(m.Database, &resp.Diagnostics)
	if !ok {
		return
	}
	if !dbKnown || !r.data.canRead() {
		// The database, or how to reach it, comes from a resource that this
		// apply creates. Terraform opens the resource again when it applies,
		// with every value known; the plan cannot hold the lease.
		notHeld()
		return
	}
	table, name := m.Table.ValueString(), m.Name.ValueString()
	if r.changedByThisApply(ctx, db, table) {
		notHeld()
		return
	}
	ttl, wait := lease.DefaultTTL, defaultLeaseWait
	// The validators have accepted both.
	if !m.TTL.IsNull() {
		ttl, _ = time.ParseDuration(m.TTL.ValueString())
	}
	if !m.Wait.IsNull() {
		wait, _ = time.ParseDuration(m.Wait.ValueString())
	}
	opts := []lease.Option{lease.WithTTL(ttl)}
	if !m.HolderID.IsNull() {
		opts = append(opts, lease.WithHolderID(m.HolderID.ValueString()))
	}

	key := newLeaseKey(db, table, name)
	done, err := r.data.leases.reserve(key)
	if err != nil {
		resp.Diagnostics.AddAttributeError(path.Root("name"), "Lease already held by this run", sameRun(db, table, name))
		return
	}
	defer done()
	var lc *lease.Client
	err = r.data.call(ctx, db, table, func(_ context.Context, sc *spanner.Client, _ locktable.Dialect) error {
		var err error
		if lc, err = lease.NewClient(sc, table, opts...); err != nil {
			return fmt.Errorf("lease %q in table %s: %w", name, table, err)
		}
		return nil
	})
	var l *lease.Lease
	if err == nil {
		l, err = r.acquire(ctx, db, table, lc, name, wait)
		if err != nil {
			_ = lc.Close()
		}
	}
	if cause := r.data.leases.interrupted(); err != nil && cause != nil {
		// Whatever failed, it failed because Terraform stopped.
		err = notAcquired(name, cause)
	}
	if err != nil {
		resp.Diagnostics.AddError("Cannot acquire lease", err.Error())
		return
	}
	id, kept := r.data.leases.put(key, lc, l)
	if !kept {
		// The process is ending: what it acquired now, it releases.
		_ = lc.Close()
		resp.Diagnostics.AddError("Cannot acquire lease", fmt.Sprintf("lease %q in table %s was acquired as the provider "+
			"was shutting down, and released at once.", name, table))
		return
	}
	tflog.Debug(ctx, "Acquired lease", map[string]any{logFieldDatabase: db, logFieldTable: table, "name": name, "token": l.Token()})
	b, _ := json.Marshal(id) // a string always marshals
	resp.Diagnostics.Append(resp.Private.SetKey(ctx, privateLeaseKey, b)...)

	m.Database = types.StringValue(db)
	m.HolderID = types.StringValue(lc.HolderID())
	m.Token = types.Int64Value(l.Token())
	resp.Diagnostics.Append(resp.Result.Set(ctx, m)...)
}

// changedByThisApply reports that table cannot hold a lease yet because the
// plan being made creates it, or migrates it to the schema version the lease
// package needs (spannerlock_table.<name>.name makes Terraform open the
// lease after planning the table). Only the plan sees it so: the apply opens
// the lease again after creating or migrating the table.
func (r *leaseEphemeralResource) changedByThisApply(ctx context.Context, db, table string) bool {
	if !r.data.planned.changes(db, table) {
		return false
	}
	ins, err := r.data.inspect(ctx, db, table)
	return databaseGone(err) || err == nil && (!ins.Exists || ins.Version < locktable.Latest)
}

// acquire takes the lease, waiting up to wait while another holder has it,
// and explains a refusal with the holder. An interrupt of Terraform, or the
// end of the provider process, ends the wait at once, and no lease is
// acquired after it.
func (r *leaseEphemeralResource) acquire(ctx context.Context, db, table string, lc *lease.Client, name string, wait time.Duration) (*lease.Lease, error) {
	conns, err := r.data.connections()
	if err != nil {
		return nil, err
	}
	wctx, endWait, err := r.data.leases.waitContext(ctx)
	if err != nil {
		return nil, notAcquired(name, err)
	}
	defer endWait()
	var l *lease.Lease
	if wait == 0 {
		rctx, cancel := conns.request(wctx, db, table)
		defer cancel()
		l, err = lc.TryAcquire(rctx, name)
		var held *lease.HeldError
		if errors.As(err, &held) {
			return nil, fmt.Errorf("%s, and wait = \"0s\" does not wait for it", describeHeld(held.Holder))
		}
	} else {
		tctx, cancel := context.WithTimeout(withLogging(wctx, db, table), wait)
		defer cancel()
		l, err = lc.Acquire(tctx, name)
		if err != nil && wctx.Err() == nil && errors.Is(err, context.DeadlineExceeded) {
			// Say who kept it, as of now.
			rctx, cancel := conns.request(ctx, db, table)
			defer cancel()
			if h, herr := lc.Holder(rctx, name); herr == nil {
				return nil, fmt.Errorf("%s; it was still held after waiting %s (wait)", describeHeld(h), wait)
			}
			return nil, fmt.Errorf("lease %q was still held after waiting %s (wait)", name, wait)
		}
	}
	if cause := r.data.leases.interrupted(); cause != nil {
		if l != nil {
			// Acquired as the interrupt came: let go at once.
			_ = l.Release(context.WithoutCancel(ctx))
		}
		return nil, notAcquired(name, cause)
	}
	if err != nil {
		if explained := r.data.explainTable(ctx, db, table, err); explained != err {
			return nil, explained
		}
		return nil, conns.failure(ctx, db, err)
	}
	return l, nil
}

// notAcquired explains a wait that Terraform's interrupt or the end of the
// provider process ended.
func notAcquired(name string, cause error) error {
	return fmt.Errorf("stopped waiting for lease %q because %v; it was not acquired", name, cause)
}

func describeHeld(h lease.Holder) string {
	return fmt.Sprintf("lease %q is held by %q with token %d until %s", h.Name, h.HolderID, h.Token, h.ExpiresAt.UTC().Format(time.RFC3339))
}

func (r *leaseEphemeralResource) Close(ctx context.Context, req ephemeral.CloseRequest, resp *ephemeral.CloseResponse) {
	b, diags := req.Private.GetKey(ctx, privateLeaseKey)
	resp.Diagnostics.Append(diags...)
	var id string
	if resp.Diagnostics.HasError() || json.Unmarshal(b, &id) != nil {
		return
	}
	open := r.data.leases.take(id)
	if open == nil {
		return
	}
	defer func() { _ = open.client.Close() }()
	timeout := defaultRequestTimeout
	if r.data.canRead() {
		timeout = r.data.conns.settings.timeout
	}
	rctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	err := open.lease.Release(rctx)
	switch {
	case errors.Is(err, lease.ErrLeaseLost):
		resp.Diagnostics.AddError("Lease was lost before Terraform finished", fmt.Sprintf(
			"Lease %q (token %d) ended before Terraform closed it: %v\n\nAnother holder may have acquired it while "+
				"this run still worked under token %d; what the run changed should have rejected it by then if it checks tokens.",
			open.lease.Name(), open.lease.Token(), context.Cause(open.lease.Context()), open.lease.Token()))
	case err != nil:
		// The lease expires by itself after its TTL.
		resp.Diagnostics.AddWarning("Cannot release lease", fmt.Sprintf("Releasing lease %q failed, so it stays held until "+
			"its TTL runs out: %v", open.lease.Name(), err))
	}
}
