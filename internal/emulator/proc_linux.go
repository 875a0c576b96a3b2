package emulator

import (
	"os/exec"
	"syscall"
)

// sysProcAttr gives the emulator its own process group (so Stop can kill
// anything it spawns) and has the kernel SIGKILL it when we die, so a crashed
// or timed-out test binary never leaves an emulator behind. (The kernel sends
// it when the starting thread exits; Go ends a thread only when a goroutine
// exits while locked to it with runtime.LockOSThread, so do not call Start
// from such a goroutine.)
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
}

// killGroup kills the emulator's whole process group; the emulator keeps no
// state worth a graceful shutdown.
func killGroup(cmd *exec.Cmd) {
	_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
}
