//go:build unix && !linux

package provider

import "os"

// parentWork watches Terraform as this process's parent: the process that
// Terraform started is the provider, and it cannot see Terraform's other
// processes, so a lease that Terraform did not close expires a TTL after
// its last renewal.
type parentWork struct{ parent int }

func newRunWork() runWork { return parentWork{parent: os.Getppid()} }

// terraformAlive reports whether this process still has the parent it
// started with: the kernel gives orphans to init or a subreaper.
func (w parentWork) terraformAlive() bool { return os.Getppid() == w.parent }

func (parentWork) scan() (int, bool) { return 0, false }

func (parentWork) detach() {}

// guardProvider does nothing here: the provider does not outlive Terraform.
func guardProvider() {}
