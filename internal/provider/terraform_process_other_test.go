//go:build !unix

package provider

import "os/exec"

// inProcessGroup does nothing where there are no process groups; the tests
// that signal Terraform run on Unix only.
func inProcessGroup(*exec.Cmd) {}
