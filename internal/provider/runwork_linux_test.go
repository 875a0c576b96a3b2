package provider

import (
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// A stand-in for Terraform (a shell, in a process group of its own) runs
// the run's work: a command, a command that double-forks out of its parent,
// and a plugin, which is not work. The provider counts the work while the
// stand-in lives, after it is killed (its children re-parented to init),
// and none once the work has ended.
func TestProcWork_countsTheRunsProcesses(t *testing.T) {
	dir := t.TempDir()
	// $! of each child goes to a file, so the test can end them.
	script := `sleep 300 & echo $! > ` + dir + `/command
(sleep 300 & echo $! > ` + dir + `/escaped) 
TF_PLUGIN_MAGIC_COOKIE=x sleep 300 & echo $! > ` + dir + `/plugin
echo ready > ` + dir + `/ready
wait`
	tf := exec.Command("sh", "-c", script)
	tf.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := tf.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = syscall.Kill(-tf.Process.Pid, syscall.SIGKILL); _ = tf.Wait() })
	pidIn := func(name string) int {
		t.Helper()
		b, err := os.ReadFile(dir + "/" + name)
		if err != nil {
			t.Fatal(err)
		}
		pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
		if err != nil {
			t.Fatal(err)
		}
		return pid
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		if _, err := os.Stat(dir + "/ready"); err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the stand-in for Terraform did not start its children")
		}
		time.Sleep(10 * time.Millisecond)
	}
	st, ok := readStat(tf.Process.Pid)
	if !ok {
		t.Fatal("cannot read the stand-in's stat")
	}
	w := &procWork{terraform: st.id, group: st.pgid, self: map[int]bool{os.Getpid(): true}, work: map[procID]bool{}, plugins: map[procID]bool{}}
	if !w.terraformAlive() {
		t.Fatal("terraformAlive: false while it runs")
	}
	// The escaped one's parent (the subshell) exited before any scan: it is
	// found by its process group, and the plugin is not counted.
	if n, known := w.scan(); !known || n != 2 {
		t.Fatalf("scan = %d, %t while the stand-in runs; want 2 (the command and the escaped one), true", n, known)
	}
	if err := syscall.Kill(tf.Process.Pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	_ = tf.Wait()
	if w.terraformAlive() {
		t.Fatal("terraformAlive: true after it was killed")
	}
	if n, _ := w.scan(); n != 2 {
		t.Fatalf("scan = %d after the stand-in was killed; want its 2 children, re-parented", n)
	}
	for _, name := range []string{"command", "escaped"} {
		pid := pidIn(name)
		if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
			t.Fatal(err)
		}
		// Gone once reaped by init, or a zombie, which scan skips.
		for !processGone(pid) {
			if time.Now().After(deadline) {
				t.Fatalf("process %d did not exit", pid)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	if n, _ := w.scan(); n != 0 {
		t.Fatalf("scan = %d once the work has ended; want 0", n)
	}
}
