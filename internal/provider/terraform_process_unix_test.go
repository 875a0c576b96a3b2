//go:build unix

package provider

import (
	"os/exec"
	"syscall"
	"time"
)

// inProcessGroup starts cmd in a process group of its own, which the
// processes it starts (the provider, provisioners' commands) join, and makes
// the end of the test's context kill the whole group.
func inProcessGroup(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	cmd.WaitDelay = 10 * time.Second
}

// signal sends sig to terraform alone, as kill PID does.
func (c *command) signal(sig syscall.Signal) {
	c.t.Helper()
	if err := syscall.Kill(c.cmd.Process.Pid, sig); err != nil {
		c.t.Fatalf("kill -%d %d: %v", sig, c.cmd.Process.Pid, err)
	}
}

// signalGroup sends sig to terraform's whole process group, as a terminal
// sends Ctrl-C to its foreground job.
func (c *command) signalGroup(sig syscall.Signal) {
	c.t.Helper()
	if err := syscall.Kill(-c.cmd.Process.Pid, sig); err != nil {
		c.t.Fatalf("kill -%d -%d: %v", sig, c.cmd.Process.Pid, err)
	}
}
