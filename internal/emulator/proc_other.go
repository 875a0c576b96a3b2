//go:build !linux

package emulator

import (
	"os/exec"
	"syscall"
)

// sysProcAttr is empty off Linux, where the emulator does not run natively;
// this file only keeps the package compiling for developers on other systems.
func sysProcAttr() *syscall.SysProcAttr { return nil }

func killGroup(cmd *exec.Cmd) { _ = cmd.Process.Kill() }
