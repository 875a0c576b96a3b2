//go:build generate

// Package tools pins the documentation generator in its own module, so its
// dependencies never reach the provider's go.mod. Run `make generate`.
package tools

import (
	_ "github.com/hashicorp/terraform-plugin-docs/cmd/tfplugindocs"
)

// Examples are embedded in the docs verbatim, so they are formatted first.
//go:generate terraform fmt -recursive ../examples/

// docs/ from templates/, examples/ and the provider's schema.
//go:generate go run github.com/hashicorp/terraform-plugin-docs/cmd/tfplugindocs generate --provider-dir .. -provider-name spannerlock
