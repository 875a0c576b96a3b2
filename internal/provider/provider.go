// Package provider adapts spannerlock to Terraform: schemas, CRUD and
// diagnostics only. Every Spanner statement lives in internal/locktable or lease.
package provider

import (
	"context"

	"github.com/hashicorp/terraform-plugin-framework/datasource"
	"github.com/hashicorp/terraform-plugin-framework/provider"
	"github.com/hashicorp/terraform-plugin-framework/provider/schema"
	"github.com/hashicorp/terraform-plugin-framework/resource"
)

var _ provider.Provider = (*spannerlockProvider)(nil)

type spannerlockProvider struct {
	version string
}

// New returns a constructor for the provider, as providerserver expects.
func New(version string) func() provider.Provider {
	return func() provider.Provider {
		return &spannerlockProvider{version: version}
	}
}

func (p *spannerlockProvider) Metadata(_ context.Context, _ provider.MetadataRequest, resp *provider.MetadataResponse) {
	resp.TypeName = "spannerlock"
	resp.Version = p.version
}

func (p *spannerlockProvider) Schema(_ context.Context, _ provider.SchemaRequest, resp *provider.SchemaResponse) {
	resp.Schema = schema.Schema{
		Description: "Distributed locks, leader election and semaphores on Google Cloud Spanner.",
	}
}

func (p *spannerlockProvider) Configure(context.Context, provider.ConfigureRequest, *provider.ConfigureResponse) {
}

func (p *spannerlockProvider) Resources(context.Context) []func() resource.Resource {
	return nil
}

func (p *spannerlockProvider) DataSources(context.Context) []func() datasource.DataSource {
	return nil
}
