package chaos

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// BuildWorker compiles the worker program into dir, with the given build
// tags (spannerlock_plantedbug for the planted-bug run), and returns its
// path. It runs from anywhere inside the module.
func BuildWorker(ctx context.Context, dir string, tags ...string) (string, error) {
	name := "worker"
	if len(tags) > 0 {
		name += "-" + strings.Join(tags, "-")
	}
	out := filepath.Join(dir, name)
	args := []string{"build", "-o", out}
	if len(tags) > 0 {
		args = append(args, "-tags", strings.Join(tags, ","))
	}
	args = append(args, "github.com/spannerlock/terraform-provider-spannerlock/internal/chaos/worker")
	cmd := exec.CommandContext(ctx, goTool(), args...)
	if b, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("chaos: building the worker (go %s): %w\n%s", strings.Join(args, " "), err, b)
	}
	return out, nil
}

// goTool is the go command that runs this program, when it can be found.
func goTool() string {
	if g := os.Getenv("GO"); g != "" {
		return g
	}
	if root := os.Getenv("GOROOT"); root != "" {
		if p := filepath.Join(root, "bin", "go"); fileExists(p) {
			return p
		}
	}
	return "go"
}

func fileExists(p string) bool {
	_, err := os.Stat(p)
	return err == nil
}

// slot is one of the N worker positions; a killed worker is replaced by a
// new process (a new holder) in the same slot, behind the same proxy.
type slot struct {
	idx   int
	proxy *Proxy

	mu      sync.Mutex
	gen     int
	holder  string
	cmd     *exec.Cmd
	stdin   io.WriteCloser
	exited  chan struct{}
	held    map[string]int64 // what the current process holds, from HOLD/FREE lines
	waiter  chan stopNote    // set while a pause-point nemesis waits for STOPPING
	ready   chan struct{}
	logs    []string // every generation's event log
	stopped bool     // SIGSTOPped by a nemesis
}

// stopNote is a worker's report that it stopped itself at the pause point.
type stopNote struct {
	name  string
	token int64
	op    string
}

// workerArgs are the flags every worker process gets, less the per-process ones.
type workerArgs struct {
	binary    string
	database  string
	dir       string
	cfg       Config
	until     time.Time
	semaphore string
}

// start runs a new process in the slot; barrier makes it wait for release.
func (s *slot) start(a workerArgs, barrier bool, late func(*slot, stopNote)) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cmd != nil {
		s.gen++
	}
	s.holder = fmt.Sprintf("w%d.%d", s.idx, s.gen)
	logPath := filepath.Join(a.dir, s.holder+".jsonl")
	s.logs = append(s.logs, logPath)
	stderr, err := os.Create(filepath.Join(a.dir, s.holder+".stderr"))
	if err != nil {
		return err
	}
	args := []string{
		"-database", a.database,
		"-host", s.proxy.Addr(),
		"-holder", s.holder,
		"-locks", strconv.Itoa(a.cfg.Locks),
		"-semaphore", a.semaphore,
		"-sem-share", strconv.FormatFloat(a.cfg.SemShare, 'f', -1, 64),
		"-ttl", a.cfg.TTL.String(),
		"-until", strconv.FormatInt(a.until.UnixNano(), 10),
		"-seed", strconv.FormatUint(a.cfg.Seed*1000+uint64(s.idx*37+s.gen), 10),
		"-log", logPath,
		"-ambiguous", strconv.FormatFloat(a.cfg.Ambiguous, 'f', -1, 64),
	}
	if barrier {
		args = append(args, "-barrier", "-first", "lock-0")
	}
	cmd := exec.Command(a.binary, args...)
	cmd.Stderr = stderr
	cmd.Env = append(os.Environ(), "GOOGLE_CLOUD_SPANNER_MULTIPLEXED_SESSIONS=false")
	stdin, err := cmd.StdinPipe()
	if err != nil {
		_ = stderr.Close()
		return err
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		_ = stderr.Close()
		return err
	}
	if err := cmd.Start(); err != nil {
		_ = stderr.Close()
		return fmt.Errorf("chaos: starting worker %s: %w", s.holder, err)
	}
	exited := make(chan struct{})
	ready := make(chan struct{})
	s.cmd, s.stdin, s.exited, s.ready, s.held, s.stopped = cmd, stdin, exited, ready, map[string]int64{}, false
	go func() {
		s.read(cmd, stdout, ready, late)
		_ = cmd.Wait()
		_ = stderr.Close()
		close(exited)
	}()
	return nil
}

// read follows a worker's stdout protocol.
func (s *slot) read(cmd *exec.Cmd, stdout io.Reader, ready chan struct{}, late func(*slot, stopNote)) {
	sc := bufio.NewScanner(stdout)
	readyClosed := false
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) == 0 {
			continue
		}
		switch {
		case f[0] == "READY" && !readyClosed:
			close(ready)
			readyClosed = true
		case f[0] == "HOLD" && len(f) == 3:
			t, _ := strconv.ParseInt(f[2], 10, 64)
			s.mu.Lock()
			if s.cmd == cmd {
				s.held[f[1]] = t
			}
			s.mu.Unlock()
		case f[0] == "FREE" && len(f) == 3:
			t, _ := strconv.ParseInt(f[2], 10, 64)
			s.mu.Lock()
			if s.cmd == cmd && s.held[f[1]] == t {
				delete(s.held, f[1])
			}
			s.mu.Unlock()
		case f[0] == "STOPPING" && len(f) == 4:
			t, _ := strconv.ParseInt(f[2], 10, 64)
			n := stopNote{name: f[1], token: t, op: f[3]}
			s.mu.Lock()
			w := s.waiter
			s.waiter = nil
			s.mu.Unlock()
			if w != nil {
				w <- n
			} else {
				go late(s, n)
			}
		}
	}
}

// current returns the slot's live process, or nil when it has exited.
func (s *slot) current() (*exec.Cmd, string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	select {
	case <-s.exited:
		return nil, s.holder
	default:
	}
	return s.cmd, s.holder
}

// holding returns what the slot's process holds.
func (s *slot) holding() map[string]int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	m := make(map[string]int64, len(s.held))
	for k, v := range s.held {
		m[k] = v
	}
	return m
}

func (s *slot) signal(sig syscall.Signal) error {
	cmd, _ := s.current()
	if cmd == nil {
		return fmt.Errorf("slot %d has no process", s.idx)
	}
	return cmd.Process.Signal(sig)
}

// command sends a worker a command line ("pause lock", "ambiguous").
func (s *slot) command(cmd string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	select {
	case <-s.exited:
		return fmt.Errorf("slot %d has no process", s.idx)
	default:
	}
	_, err := io.WriteString(s.stdin, cmd+"\n")
	return err
}

// release lets a worker waiting at the start barrier go, telling it when
// the run ends.
func (s *slot) release(until time.Time) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	_, err := fmt.Fprintf(s.stdin, "go %d\n", until.UnixNano())
	return err
}

// processState returns the state letter of a process in /proc (T when
// stopped), or "" where there is no /proc.
func processState(pid int) string {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return ""
	}
	// pid (comm) S ...: comm may hold spaces, so look after the last ')'.
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 || i+2 >= len(s) {
		return ""
	}
	return s[i+2 : i+3]
}
