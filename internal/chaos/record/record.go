// Package record is what the fault suite's worker processes and its checker
// share: the fenced resource's schema and the SQL that reads it, in either
// of Spanner's dialects (Spelling), the rows written to it, and the events a
// worker appends to its log, one JSON object per line.
package record

import (
	"encoding/json"
	"fmt"
	"os"
	"sync"
	"time"
)

// Table is the lock table the workers use.
const Table = "locks"

// Resource tables: a counter per lock or semaphore, and one row per accepted
// write. Neither has a token column the workers check themselves: the only
// fence is lease.Guard, so a Guard that lets stale holders through shows up
// as stale rows here.
const (
	CountersTable = "chaos_counters"
	WritesTable   = "chaos_writes"
)

// WritesColumns are the columns of WritesTable in Write's field order.
var WritesColumns = columnNames(writesColumns)

// Write is one accepted write: a row of WritesTable. A write to a lock's
// counter is the second of two transactions (read the counter, then write
// prev+1), so if two holders' critical sections overlap, prev repeats; a
// semaphore's is one transaction.
type Write struct {
	Op          string    `spanner:"op_id"`
	CommittedAt time.Time `spanner:"committed_at"`
	Name        string    `spanner:"name"`
	Sem         bool      `spanner:"sem"`
	Token       int64     `spanner:"token"`
	Holder      string    `spanner:"holder"`
	Prev        int64     `spanner:"prev"`
	Value       int64     `spanner:"value"`
}

// Event kinds a worker logs.
const (
	// EvStart: the worker process started (Holder, Detail: build).
	EvStart = "start"
	// EvAcquired: Name (Sem for a permit) acquired with Token; Commit is
	// the acquisition's commit timestamp (Lease.AcquiredAt).
	EvAcquired = "acquired"
	// EvAcquireFailed: an acquisition gave up (Err).
	EvAcquireFailed = "acquire-failed"
	// EvWrite: a guarded write Op under Name/Token is about to start.
	EvWrite = "write"
	// EvWriteDone: its Outcome, and Commit/Prev/Value when committed.
	EvWriteDone = "write-done"
	// EvEnded: the lease's Context ended (Detail: its cause).
	EvEnded = "ended"
	// EvReleased: Release returned (Outcome: released, lost or error).
	EvReleased = "released"
	// EvFault: the worker injected a fault itself (Fault, Detail).
	EvFault = "fault"
	// EvExit: the worker stopped cleanly.
	EvExit = "exit"
)

// Outcomes of a guarded write.
const (
	// Committed: the commit succeeded; the row must exist.
	Committed = "committed"
	// Rejected: the transaction function returned an error (Guard refused,
	// or a read failed), so nothing was committed; the row must not exist.
	Rejected = "rejected"
	// Unknown: the commit was sent and failed (DEADLINE_EXCEEDED,
	// cancellation, an outage); the row may or may not exist.
	Unknown = "unknown"
)

// RejectedByGuard is the Detail of a rejected write whose error matched
// lease.ErrLeaseLost.
const RejectedByGuard = "lease-lost"

// Why a lease's Context ended (the Outcome of EvEnded).
const (
	EndedLost     = "lost"
	EndedReleased = "released"
	EndedClosed   = "closed"
)

// Release outcomes.
const (
	Released     = "released"
	ReleaseLost  = "lost"
	ReleaseError = "error"
)

// Faults a worker injects or observes.
const (
	// FaultAmbiguousCommit: a Commit that succeeded was reported to the
	// client as DEADLINE_EXCEEDED.
	FaultAmbiguousCommit = "ambiguous-commit"
	// FaultEmulatorAbort: the emulator's fault injection aborted a Commit.
	FaultEmulatorAbort = "emulator-abort"
	// FaultPausePoint: the worker stopped itself (SIGSTOP) inside a guarded
	// write, after Guard, as the driver asked.
	FaultPausePoint = "pause-point"
	// FaultRecoveryBlackhole and FaultRecoveryPause: the second fault of a
	// compound nemesis struck the recovery from an ambiguous commit (Detail
	// names the commit's transaction).
	FaultRecoveryBlackhole = "recovery-blackhole"
	FaultRecoveryPause     = "recovery-pause"
)

// Event is one line of a worker's log.
type Event struct {
	T       time.Time `json:"t"`
	Holder  string    `json:"holder"`
	Ev      string    `json:"ev"`
	Name    string    `json:"name,omitempty"`
	Sem     bool      `json:"sem,omitempty"`
	Token   int64     `json:"token,omitempty"`
	Op      string    `json:"op,omitempty"`
	Outcome string    `json:"outcome,omitempty"`
	Commit  time.Time `json:"commit,omitzero"`
	Prev    int64     `json:"prev,omitempty"`
	Value   int64     `json:"value,omitempty"`
	Fault   string    `json:"fault,omitempty"`
	Detail  string    `json:"detail,omitempty"`
	Err     string    `json:"err,omitempty"`
}

// Log appends events to a file, one write(2) per line: a SIGKILL loses at
// most the line being written, never one already returned from Append.
type Log struct {
	mu     sync.Mutex
	f      *os.File
	holder string
}

// OpenLog opens (appending) the log at path for holder.
func OpenLog(path, holder string) (*Log, error) {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, err
	}
	return &Log{f: f, holder: holder}, nil
}

// Append records e with the current time and the log's holder.
func (l *Log) Append(e Event) {
	e.T = time.Now()
	e.Holder = l.holder
	b, err := json.Marshal(e)
	if err != nil {
		panic(fmt.Sprintf("record: marshal %+v: %v", e, err))
	}
	b = append(b, '\n')
	l.mu.Lock()
	defer l.mu.Unlock()
	if _, err := l.f.Write(b); err != nil {
		fmt.Fprintf(os.Stderr, "record: writing log: %v\n", err)
	}
}

// Close closes the file.
func (l *Log) Close() error { return l.f.Close() }
