package provider

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"time"

	"cloud.google.com/go/spanner"
	"github.com/hashicorp/terraform-plugin-framework/ephemeral"
	"github.com/hashicorp/terraform-plugin-framework/ephemeral/schema"
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
					lease.DefaultTTL.String() + "\"`. The provider renews it every third of that while Terraform runs; if " +
					"Terraform dies, the lease expires this long after the last renewal.",
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
				Validators: []validator.String{leaseName()},
			},
			"token": schema.Int64Attribute{
				Computed: true,
				MarkdownDescription: "Fencing token of this acquisition: larger than every earlier acquisition's of the " +
					"name. Hand it to what the run changes, which should reject writes with a token below the largest it has seen.",
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
	db, ok := r.data.readDatabase(m.Database, &resp.Diagnostics)
	if !ok {
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
	table, name := m.Table.ValueString(), m.Name.ValueString()
	opts := []lease.Option{lease.WithTTL(ttl)}
	if !m.HolderID.IsNull() {
		opts = append(opts, lease.WithHolderID(m.HolderID.ValueString()))
	}

	var lc *lease.Client
	err := r.data.call(ctx, db, table, func(_ context.Context, sc *spanner.Client, _ locktable.Dialect) error {
		var err error
		lc, err = lease.NewClient(sc, table, opts...)
		return err
	})
	if err != nil {
		resp.Diagnostics.AddError("Cannot acquire lease", fmt.Sprintf("lease %q in table %s: %v", name, table, err))
		return
	}
	l, err := r.acquire(ctx, db, lc, name, wait)
	if err != nil {
		_ = lc.Close()
		resp.Diagnostics.AddError("Cannot acquire lease", r.data.explainMisspelling(ctx, db, table, err).Error())
		return
	}
	id := r.data.leases.put(lc, l)
	tflog.Debug(ctx, "Acquired lease", map[string]any{logFieldDatabase: db, logFieldTable: table, "name": name, "token": l.Token()})
	b, _ := json.Marshal(id) // a string always marshals
	resp.Diagnostics.Append(resp.Private.SetKey(ctx, privateLeaseKey, b)...)

	m.Database = types.StringValue(db)
	m.HolderID = types.StringValue(lc.HolderID())
	m.Token = types.Int64Value(l.Token())
	resp.Diagnostics.Append(resp.Result.Set(ctx, m)...)
}

// acquire takes the lease, waiting up to wait while another holder has it,
// and explains a refusal with the holder.
func (r *leaseEphemeralResource) acquire(ctx context.Context, db string, lc *lease.Client, name string, wait time.Duration) (*lease.Lease, error) {
	conns, err := r.data.connections()
	if err != nil {
		return nil, err
	}
	if wait == 0 {
		rctx, cancel := conns.request(ctx, db, "")
		defer cancel()
		l, err := lc.TryAcquire(rctx, name)
		var held *lease.HeldError
		if errors.As(err, &held) {
			return nil, fmt.Errorf("%s, and wait = \"0s\" does not wait for it", describeHeld(held.Holder))
		}
		if err != nil {
			return nil, conns.failure(rctx, db, err)
		}
		return l, nil
	}
	wctx, cancel := context.WithTimeout(withLogging(ctx, db, ""), wait)
	defer cancel()
	l, err := lc.Acquire(wctx, name)
	if err == nil {
		return l, nil
	}
	if ctx.Err() == nil && errors.Is(err, context.DeadlineExceeded) {
		// Say who kept it, as of now.
		rctx, cancel := conns.request(ctx, db, "")
		defer cancel()
		if h, herr := lc.Holder(rctx, name); herr == nil {
			return nil, fmt.Errorf("%s; it was still held after waiting %s (wait)", describeHeld(h), wait)
		}
		return nil, fmt.Errorf("lease %q was still held after waiting %s (wait)", name, wait)
	}
	return nil, conns.failure(wctx, db, err)
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

// openLeases are the ephemeral leases a provider process holds, between the
// Open that acquired each and its Close. Terraform opens and closes an
// ephemeral resource in the same provider process, and hands Close only the
// private data Open left, so a lease is found again by an ID kept there.
type openLeases struct {
	mu   sync.Mutex
	byID map[string]*openLease
}

type openLease struct {
	client *lease.Client
	lease  *lease.Lease
}

func (o *openLeases) put(lc *lease.Client, l *lease.Lease) string {
	b := make([]byte, 8)
	_, _ = rand.Read(b) // never fails on supported platforms
	id := hex.EncodeToString(b)
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.byID == nil {
		o.byID = map[string]*openLease{}
	}
	o.byID[id] = &openLease{client: lc, lease: l}
	return id
}

func (o *openLeases) take(id string) *openLease {
	o.mu.Lock()
	defer o.mu.Unlock()
	l := o.byID[id]
	delete(o.byID, id)
	return l
}
