package main

import (
	"bytes"
	"errors"
	"flag"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"
)

// childSpec is CMD as spannerlock runs it.
type childSpec struct {
	// path is the resolved executable; argv[0] is as the user wrote it.
	path string
	argv []string
	env  []string
}

// shellPath runs CMD under --shell.
const shellPath = "/bin/sh"

// prepareCommand resolves CMD before anything is acquired, so that a typo
// costs no lease and no wait. It returns nil when there is no command
// (argv is nil: no "--").
func (a *app) prepareCommand(argv []string, shell bool) (*childSpec, error) {
	switch {
	case argv == nil && shell:
		return nil, usageError("--shell needs a command after --")
	case argv == nil:
		return nil, nil
	case len(argv) == 0:
		return nil, usageError("no command after --")
	}
	if shell {
		// Joined as consul lock -shell does, so `-- 'a && b'` and
		// `-- a '&&' b` both work.
		argv = []string{"sh", "-c", strings.Join(argv, " ")}
		return &childSpec{path: shellPath, argv: argv, env: a.environ}, nil
	}
	path, err := exec.LookPath(argv[0])
	switch {
	case (errors.Is(err, exec.ErrNotFound) || errors.Is(err, fs.ErrNotExist)) && strings.ContainsAny(argv[0], " \t|&;<>()$`\\\"'*?[]#~="):
		return nil, exitWith(exitNotFound, "%s: command not found (CMD runs without a shell: put shell syntax after --shell)", argv[0])
	case errors.Is(err, exec.ErrNotFound), errors.Is(err, fs.ErrNotExist):
		return nil, exitWith(exitNotFound, "%s: command not found", argv[0])
	case err != nil:
		return nil, exitWith(exitCannotRun, "cannot run %s: %v", argv[0], err)
	}
	if err := checkExecutable(argv[0], path); err != nil {
		return nil, err
	}
	return &childSpec{path: path, argv: argv, env: a.environ}, nil
}

// checkExecutable finds what would make exec refuse path, which LookPath
// does not check: a script without a #! line (a shell runs one with
// /bin/sh, exec does not), or one whose #! line names an interpreter that
// is not there. A file it cannot read, or in a format it does not know, is
// left to exec.
func checkExecutable(name, path string) error {
	f, err := os.Open(path)
	if err != nil {
		return nil
	}
	defer func() { _ = f.Close() }()
	head := make([]byte, 512)
	n, _ := io.ReadFull(f, head)
	head = head[:n]
	switch {
	case bytes.HasPrefix(head, []byte("#!")):
		line, _, _ := bytes.Cut(head[2:], []byte("\n"))
		fields := strings.Fields(string(line))
		if len(fields) == 0 {
			return exitWith(exitCannotRun, "cannot run %s: its #! line names no interpreter", name)
		}
		st, err := os.Stat(fields[0])
		if err != nil || st.IsDir() || st.Mode()&0o111 == 0 {
			return exitWith(exitCannotRun, "cannot run %s: its #! line names the interpreter %s, which is not an executable file here", name, fields[0])
		}
	case n > 0 && !bytes.HasPrefix(head, []byte("\x7fELF")) && looksLikeText(head):
		return exitWith(exitCannotRun, "cannot run %s: it is a script without a #! line, which only a shell runs: add #!/bin/sh "+
			"(or its interpreter) as its first line, or run it as sh %s", name, name)
	}
	return nil
}

// looksLikeText reports whether the start of a file is text: no NUL, and
// UTF-8 but for a last character the read may have cut in two.
func looksLikeText(head []byte) bool {
	if bytes.IndexByte(head, 0) >= 0 {
		return false
	}
	for cut := 0; cut < utf8.UTFMax && cut < len(head); cut++ {
		if utf8.Valid(head[:len(head)-cut]) {
			return true
		}
	}
	return false
}

// envSetForCMD lists, in CMD's environment, the SPANNERLOCK_* variables
// that spannerlock set for CMD (and those an outer spannerlock set): a
// spannerlock that CMD runs does not read them as flags, so that the outer
// lease's SPANNERLOCK_HOLDER_ID and SPANNERLOCK_SLOT are not its
// --holder-id and --slot.
const envSetForCMD = "SPANNERLOCK_SET_FOR_CMD"

// with returns the spec with vars (KEY=value) added to CMD's environment,
// replacing inherited values of the same keys, and listed in
// SPANNERLOCK_SET_FOR_CMD.
func (s *childSpec) with(vars ...string) *childSpec {
	out := *s
	v, _ := lookupIn(s.env, envSetForCMD)
	set := strings.Fields(v)
	for _, kv := range vars {
		if k, _, _ := strings.Cut(kv, "="); strings.HasPrefix(k, envPrefix) && !slices.Contains(set, k) {
			set = append(set, k)
		}
	}
	out.env = append(append([]string(nil), s.env...), vars...)
	if len(set) > 0 {
		out.env = append(out.env, envSetForCMD+"="+strings.Join(set, " "))
	}
	return &out
}

// leaseEnv is what CMD learns about the lease it runs under.
func leaseEnv(name string, token int64, holderID string) []string {
	return []string{
		"SPANNERLOCK_NAME=" + name,
		"SPANNERLOCK_TOKEN=" + strconv.FormatInt(token, 10),
		"SPANNERLOCK_HOLDER_ID=" + holderID,
	}
}

// childFlags are the flags of every command that runs CMD.
type childFlags struct {
	killAfter    time.Duration
	killAfterSet bool
	shell        bool
}

// maxDefaultKillAfter caps --kill-after's default, TTL/5.
const maxDefaultKillAfter = 10 * time.Second

func (f *childFlags) register(fs *flag.FlagSet) {
	fs.Var(durationValue{d: &f.killAfter, set: &f.killAfterSet}, "kill-after",
		"time CMD's process group gets between SIGTERM and SIGKILL when the lease may be lost, or CMD leaves processes behind: "+
			"SIGTERM comes this long before the lease's local deadline and SIGKILL at it, before any rival can acquire "+
			"(at most TTL/3; default TTL/5, at most 10s)")
	fs.BoolVar(&f.shell, "shell", false, "run CMD ARGS... joined with spaces by /bin/sh -c (default: run CMD directly)")
}

// check checks --kill-after against the TTL, or sets its default: SIGTERM
// comes --kill-after before the lease's local deadline, which renewals
// every TTL/3 keep more than TTL/3 ahead while the lease is healthy.
func (f *childFlags) check(ttl time.Duration) error {
	switch {
	case f.killAfter < 0:
		return usageError("--kill-after %s must not be negative", formatDuration(f.killAfter))
	case !f.killAfterSet:
		f.killAfter = min(ttl/5, maxDefaultKillAfter)
	case f.killAfter > ttl/3:
		return usageError("--kill-after %s is more than a third of --ttl %s: SIGKILL comes at the lease's local deadline "+
			"and SIGTERM --kill-after before it, which would stop CMD while the lease is healthy; "+
			"use at most %s, or a longer --ttl", formatDuration(f.killAfter), formatDuration(ttl), formatDuration(ttl/3))
	}
	return nil
}
