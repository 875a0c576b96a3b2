//go:build !unix && !windows

package provider

// watchTerraform does nothing where the provider cannot watch its parent;
// leases are still released when serving ends, and expire a TTL after the
// process does.
func watchTerraform(leases *leaseRegistry) (served func()) {
	return func() { leases.releaseAll(errShutdown) }
}

// guardProvider does nothing where the provider does not outlive Terraform.
func guardProvider() {}
