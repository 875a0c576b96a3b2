package provider

import (
	"context"
	"errors"
	"fmt"

	"github.com/hashicorp/terraform-plugin-framework/providerserver"
	"github.com/hashicorp/terraform-plugin-go/tfprotov6"
	"github.com/hashicorp/terraform-plugin-go/tfprotov6/tf6server"
)

// Serve serves the provider to Terraform until Terraform ends it, and makes
// sure that what the process holds lasts as long as the run's work and no
// longer, however the run ends:
//
//   - When Terraform is interrupted (StopProvider; or SIGINT reaching this
//     process, as Ctrl-C in a terminal does: Terraform does not stop its
//     providers during the plan of terraform apply), waits for leases end and
//     no lease is acquired any more.
//   - When the run ends (Terraform is done with the provider, Terraform is
//     gone, or this process is told to terminate), acquisitions stop and
//     leave their lines; a lease that Terraform did not close (the run failed
//     or was interrupted: Terraform does not close ephemeral resources then)
//     stays held while what the run started still runs, and is released once
//     it does not (see lifetime).
//
// With debug, the provider runs for a debugger rather than as Terraform's
// child, and only the first applies; serving's end releases everything.
func Serve(ctx context.Context, version string, debug bool) error {
	p := &spannerlockProvider{version: version}
	var opts []tf6server.ServeOpt
	served := func() { p.leases.releaseAll(errShutdown) }
	if debug {
		opts = append(opts, tf6server.WithManagedDebug())
	} else {
		guardProvider()
		served = watchTerraform(&p.leases)
	}
	err := tf6server.Serve(Address, func() tfprotov6.ProviderServer {
		return stopNotifier{fullServer: fullServerOf(providerserver.NewProtocol6(p)()), stop: func() { p.leases.interrupt(errInterrupted) }}
	}, opts...)
	served()
	return err
}

// stopNotifier tells the provider of StopProvider, which Terraform sends
// when it is interrupted. terraform-plugin-go cancels the requests in flight
// then, but not the ones that come after.
type stopNotifier struct {
	fullServer
	stop func()
}

func (s stopNotifier) StopProvider(ctx context.Context, req *tfprotov6.StopProviderRequest) (*tfprotov6.StopProviderResponse, error) {
	s.stop()
	return s.fullServer.StopProvider(ctx, req)
}

// fullServer is what the framework's server implements: terraform-plugin-go
// finds list resources and actions (Terraform 1.14) only on a server that
// has their methods, which a wrapper embedding tfprotov6.ProviderServer
// hides ("Provider ValidateActionConfig Not Implemented").
type fullServer interface {
	tfprotov6.ProviderServer
	tfprotov6.ListResourceServer
	tfprotov6.ActionServer
}

// fullServerOf returns s, which the framework's server always is, as a
// fullServer.
func fullServerOf(s tfprotov6.ProviderServer) fullServer {
	full, ok := s.(fullServer)
	if !ok {
		panic(fmt.Sprintf("the framework's provider server %T lacks list resource or action methods", s))
	}
	return full
}

// errTerraformGone ends waits when Terraform has died.
var errTerraformGone = errors.New("terraform exited while the provider was still serving it")
