// Command terraform-provider-spannerlock serves the spannerlock Terraform provider.
package main

import (
	"context"
	"flag"
	"log"

	"github.com/spannerlock/terraform-provider-spannerlock/internal/provider"
)

// version is set by goreleaser (-ldflags "-X main.version=...").
var version = "dev"

func main() {
	var debug bool
	flag.BoolVar(&debug, "debug", false, "run the provider with support for debuggers like delve")
	flag.Parse()

	if err := provider.Serve(context.Background(), version, debug); err != nil {
		log.Fatal(err)
	}
}
