//go:build linux

package provider

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"strconv"
	"strings"
	"sync"
	"syscall"

	"golang.org/x/sys/unix"
)

// procID names a process across pid reuse: its pid and its start time
// (field 22 of /proc/<pid>/stat, in clock ticks since boot).
type procID struct {
	pid   int
	start uint64
}

func (id procID) String() string { return fmt.Sprintf("%d:%d", id.pid, id.start) }

type procStat struct {
	id         procID
	ppid, pgid int
	// gone is a zombie: it has exited, and its parent has not reaped it.
	gone bool
}

// readStat reads /proc/<pid>/stat.
func readStat(pid int) (procStat, bool) {
	var buf [1024]byte
	return readStatInto(pid, buf[:])
}

// readStatInto is readStat with buf to read into, which a scan reuses: it
// reads every process's.
func readStatInto(pid int, buf []byte) (procStat, bool) {
	fd, err := unix.Open("/proc/"+strconv.Itoa(pid)+"/stat", unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return procStat{}, false
	}
	n, err := unix.Read(fd, buf)
	_ = unix.Close(fd)
	if err != nil || n <= 0 {
		return procStat{}, false
	}
	b := buf[:n]
	// The command name, in parentheses, may contain anything; the fields
	// after it start at the state (field 3).
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return procStat{}, false
	}
	var f [20][]byte
	nf := 0
	for _, field := range bytes.Fields(b[i+1:]) {
		if nf == len(f) {
			break
		}
		f[nf] = field
		nf++
	}
	if nf < len(f) {
		return procStat{}, false
	}
	ppid, err1 := strconv.Atoi(string(f[1]))
	pgid, err2 := strconv.Atoi(string(f[2]))
	start, err3 := strconv.ParseUint(string(f[19]), 10, 64)
	if err1 != nil || err2 != nil || err3 != nil {
		return procStat{}, false
	}
	state := f[0][0]
	return procStat{id: procID{pid: pid, start: start}, ppid: ppid, pgid: pgid, gone: state == 'Z' || state == 'X'}, true
}

// terraformEnv passes the Terraform that guardProvider serves, as a procID,
// to the provider process it starts.
const terraformEnv = "SPANNERLOCK_PROVIDER_TERRAFORM"

// guardFD is the file descriptor, in the provider process guardProvider
// starts, of the pipe to the guard: the provider writes a byte to it once
// it no longer needs the guard.
const guardFD = 3

// pluginCookie is in the environment of every plugin Terraform starts (the
// providers), and of what they start, and in nothing else of the run:
// Terraform's own environment, which local-exec commands inherit, lacks it.
const pluginCookie = "TF_PLUGIN_MAGIC_COOKIE="

// guardProvider makes the process Terraform started a guard, which serves
// nothing itself: it starts this executable again as the provider, with the
// same standard streams and environment, forwards termination signals to
// it, and exits with it; or as soon as the provider says that it no longer
// needs the guard (lifetime.end keeps leases while the run's work runs,
// and Terraform kills the process it started 2 seconds after it ends
// serving). Only the provider process, which guardProvider returns in,
// serves Terraform: it writes go-plugin's handshake to the stream Terraform
// reads. Where the executable cannot be started again, guardProvider
// returns and this process serves.
func guardProvider() {
	if os.Getenv(terraformEnv) != "" {
		return // this is the provider process
	}
	tf, ok := readStat(os.Getppid())
	if !ok {
		return
	}
	exe, err := os.Executable()
	if err != nil {
		return
	}
	r, w, err := os.Pipe()
	if err != nil {
		return
	}
	cmd := exec.Command(exe, os.Args[1:]...)
	cmd.Args[0] = os.Args[0]
	cmd.Env = append(os.Environ(), terraformEnv+"="+tf.id.String())
	cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, os.Stdout, os.Stderr
	cmd.ExtraFiles = []*os.File{w} // guardFD
	// Caught signals become default again in the provider; ignored ones
	// (nohup, a background job) stay ignored there, as here.
	var forward []os.Signal
	for _, sig := range []os.Signal{syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP} {
		if !signal.Ignored(sig) {
			forward = append(forward, sig)
		}
	}
	signals := make(chan os.Signal, 4)
	signal.Notify(signals, forward...)
	if err := cmd.Start(); err != nil {
		signal.Stop(signals)
		_ = r.Close()
		_ = w.Close()
		return
	}
	_ = w.Close()
	go func() {
		for sig := range signals {
			_ = cmd.Process.Signal(sig)
		}
	}()
	go func() {
		var b [1]byte
		if n, _ := r.Read(b[:]); n == 1 {
			os.Exit(0) // the provider lives on without the guard
		}
	}()
	err = cmd.Wait()
	var exit *exec.ExitError
	if errors.As(err, &exit) {
		if st, ok := exit.Sys().(syscall.WaitStatus); ok && st.Signaled() {
			signal.Reset(st.Signal())
			_ = syscall.Kill(os.Getpid(), st.Signal())
		}
		os.Exit(exit.ExitCode())
	}
	if err != nil {
		os.Exit(1)
	}
	os.Exit(0)
}

// procWork sees a Terraform run's work through /proc.
type procWork struct {
	terraform procID
	// group is Terraform's process group, which the commands it runs join
	// unless they leave it.
	group int
	// self are this process and its guard.
	self map[int]bool
	// guard is the pipe to the guard, or nil.
	guard *os.File

	mu sync.Mutex
	// work are the processes of the run that ran at the last scan: they
	// stay the run's once Terraform, or their parent, is gone.
	work map[procID]bool
	// plugins caches which processes are plugins (pluginCookie).
	plugins  map[procID]bool
	detached bool
}

func newRunWork() runWork {
	w := &procWork{self: map[int]bool{os.Getpid(): true}, work: map[procID]bool{}, plugins: map[procID]bool{}}
	if env := os.Getenv(terraformEnv); env != "" {
		// Started by guardProvider, whose parent is Terraform.
		w.self[os.Getppid()] = true
		var st unix.Stat_t
		if unix.Fstat(guardFD, &st) == nil && st.Mode&unix.S_IFMT == unix.S_IFIFO {
			syscall.CloseOnExec(guardFD)
			w.guard = os.NewFile(guardFD, "guard")
		}
		pid, start, _ := strings.Cut(env, ":")
		w.terraform.pid, _ = strconv.Atoi(pid)
		w.terraform.start, _ = strconv.ParseUint(start, 10, 64)
	} else if st, ok := readStat(os.Getppid()); ok {
		w.terraform = st.id
	}
	if st, ok := readStat(w.terraform.pid); ok && st.id == w.terraform {
		w.group = st.pgid
	}
	return w
}

func (w *procWork) terraformAlive() bool {
	st, ok := readStat(w.terraform.pid)
	return ok && st.id == w.terraform && !st.gone
}

// scan counts the processes of the run: those that descend from Terraform
// (by their parents, or, once re-parented, because an earlier scan saw
// them descend), and those that left their parent while in Terraform's
// process group after Terraform started (a command's child whose parent
// exited between two scans, say), except Terraform itself, its plugins and
// what they start, and this process and its guard.
func (w *procWork) scan() (int, bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.terraform.pid == 0 {
		return 0, false
	}
	dir, err := os.Open("/proc")
	if err != nil {
		return 0, false
	}
	names, err := dir.Readdirnames(-1)
	_ = dir.Close()
	if err != nil {
		return 0, false
	}
	procs := make(map[int]procStat, len(names))
	var buf [1024]byte
	for _, name := range names {
		pid, err := strconv.Atoi(name)
		if err != nil {
			continue
		}
		if st, ok := readStatInto(pid, buf[:]); ok && !st.gone {
			procs[pid] = st
		}
	}
	isWork := map[int]bool{}
	var check func(pid int) bool
	check = func(pid int) bool {
		if v, ok := isWork[pid]; ok {
			return v
		}
		isWork[pid] = false // until known: a cycle of stale parents is not work
		st, ok := procs[pid]
		if !ok || st.id == w.terraform || w.self[pid] {
			return false
		}
		parent, hasParent := procs[st.ppid]
		v := w.work[st.id] ||
			hasParent && parent.id == w.terraform ||
			hasParent && parent.id.start <= st.id.start && check(st.ppid) ||
			w.group != 0 && st.pgid == w.group && st.id.start >= w.terraform.start && (!hasParent || parent.pgid != w.group)
		if v && w.plugin(st.id) {
			v = false
		}
		isWork[pid] = v
		return v
	}
	work := map[procID]bool{}
	for pid, st := range procs {
		if check(pid) {
			work[st.id] = true
		}
	}
	w.work = work
	for id := range w.plugins {
		if _, ok := procs[id.pid]; !ok {
			delete(w.plugins, id)
		}
	}
	return len(work), true
}

// plugin reports whether id is a plugin or was started by one.
func (w *procWork) plugin(id procID) bool {
	if v, ok := w.plugins[id]; ok {
		return v
	}
	env, err := os.ReadFile("/proc/" + strconv.Itoa(id.pid) + "/environ")
	// What cannot be read counts as the run's.
	v := err == nil && (bytes.HasPrefix(env, []byte(pluginCookie)) || bytes.Contains(env, []byte("\x00"+pluginCookie)))
	w.plugins[id] = v
	return v
}

// detach points the standard streams at /dev/null, so that Terraform's
// reading of this process's output ends, and lets the guard exit.
func (w *procWork) detach() {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.detached {
		return
	}
	w.detached = true
	if null, err := os.OpenFile(os.DevNull, os.O_RDWR, 0); err == nil {
		for fd := 0; fd <= 2; fd++ {
			_ = unix.Dup3(int(null.Fd()), fd, 0)
		}
		_ = null.Close()
	}
	if w.guard != nil {
		_, _ = w.guard.Write([]byte{1})
		_ = w.guard.Close()
	}
}
