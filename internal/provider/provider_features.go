package provider

import (
	"context"

	"github.com/hashicorp/terraform-plugin-framework/action"
	"github.com/hashicorp/terraform-plugin-framework/list"
	"github.com/hashicorp/terraform-plugin-framework/provider"
)

// What Terraform 1.14 added: actions (terraform apply -invoke) and list
// resources (terraform query). An older Terraform ignores both.
var (
	_ provider.ProviderWithActions       = (*spannerlockProvider)(nil)
	_ provider.ProviderWithListResources = (*spannerlockProvider)(nil)
)

func (p *spannerlockProvider) Actions(context.Context) []func() action.Action {
	return []func() action.Action{newForceReleaseAction}
}

func (p *spannerlockProvider) ListResources(context.Context) []func() list.ListResource {
	return []func() list.ListResource{newTableListResource, newSemaphoreListResource}
}
