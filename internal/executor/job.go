package executor

import (
	"errors"
	"io"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/opensubstrate/sandbox/addr"
	"github.com/opensubstrate/sandbox/attest"
	"github.com/opensubstrate/sandbox/device"
	"github.com/opensubstrate/sandbox/internal/cgroup"
	"github.com/opensubstrate/sandbox/internal/grant"
	"github.com/opensubstrate/sandbox/internal/journal"
	"github.com/opensubstrate/sandbox/internal/kv"
	"github.com/opensubstrate/sandbox/internal/unit"
	"github.com/opensubstrate/sandbox/receipt"
)

// Job is one run for an executor.
type Job struct {
	Unit     unit.Unit
	UnitAddr addr.Addr
	Image    []byte
	// ImageAddr is the content address of Image, computed once by the host.
	ImageAddr addr.Addr
	Grants    grant.Set
	Enforcer  *grant.Enforcer
	// RootDir is the host directory of the image root filesystem a
	// native unit runs in (its Unit.Root); "" for the host's system
	// directories.
	RootDir string

	// Exactly one of Record and Replay is set.
	Record *journal.Writer
	Replay *journal.Reader

	KV             *kv.Store
	Stdin          io.Reader // nil: empty
	Stdout, Stderr io.Writer
	Deadline       time.Duration // 0 for none

	// Cgroup is the run's own control group, made by the host before the
	// run starts; nil where the host has none. An in-process executor
	// places the guest's OS thread in it, a process executor the process.
	Cgroup *cgroup.Group

	// OnStart, when set, is called once the run has started, with the
	// controls the executor offers over it.
	OnStart func(Control)

	// Continue, when set, continues a parked run (S2): the executor
	// replays Continue.Journal up to the park point, checks that it
	// reached the parked state, and goes on live from there; Record
	// must already hold those entries (Writer.AppendEntry). Live is
	// called at the park point: the guest's output before it was the
	// parked run's, and its caller has it.
	Continue *Parked
	Live     func()
	// Remap maps storage grants' paths, as the unit names them, to the
	// host directories that hold them now (a continuation whose
	// workspace was restored elsewhere); nil: the same.
	Remap map[string]string
}

// Parked is a run an executor stopped at a host-call boundary, to be
// continued (sandbox.s2-park/1, docs/spec/durable-s2.md).
type Parked struct {
	// Boundary counts the host calls the run made before the park
	// point; the call at Boundary+1 was not made.
	Boundary uint64
	// Journal is the run's journal up to the park point (the host
	// fills it in from the run's file).
	Journal []byte
	// Memory is the guest's linear memory at the park point, and
	// MemoryAddr its BLAKE3.
	Memory     []byte
	MemoryAddr addr.Addr
	// Handles are the guest's open files at the park point.
	Handles []Handle
	// NextHandle is the number the run's next open file gets.
	NextHandle uint64
	// Fuel is the fuel used up to the park point.
	Fuel uint64
}

// Handle is an open file of a parked run, by the handle number its
// journal names it by.
type Handle struct {
	H    uint64 `json:"h"`
	Path string `json:"path"`
	Flag uint32 `json:"flag"`
	// Offset is the file's position (regular files); DirRead the
	// directory entries already listed (directories).
	Offset  int64 `json:"offset"`
	Dir     bool  `json:"dir,omitempty"`
	DirRead int64 `json:"dir_read,omitempty"`
}

// ErrBudget is the cause of a run's context when the host stops it
// because the meter's figure for a device class reached its budget
// (context.WithCancelCause): an executor ends the run at once, with no
// grace period, and reports attest.BudgetExhausted.
var ErrBudget = errors.New("a compute budget is spent")

// ErrNotExecutable is wrapped by an executor's error for a program it
// found but cannot run: not a valid module, no entry point, an import
// the tier does not provide.
var ErrNotExecutable = errors.New("cannot be executed")

// Control steers a running run.
type Control struct {
	// Freeze stops every process of the run, detached children included,
	// until Thaw: the quiescence witness durable runs need.
	Freeze func() error
	Thaw   func() error
	// Park asks the run to stop at its next host-call boundary and
	// report Result.Parked (S2); nil where the executor cannot.
	Park func()
}

// Result is how a run ended and what it consumed.
type Result struct {
	Outcome    attest.Outcome
	Start, End time.Time
	// Fuel is the fuel consumed, for fuel-metered executors.
	Fuel *uint64
	// Readings are the executor's own energy figures per class (the fuel
	// model's, for S2); the meter adds its own.
	Readings map[device.Class][]receipt.Reading
	Executor string
	Devices  []attest.Device
	// ThreadCPU is the CPU time of the thread an in-process guest ran on
	// (CLOCK_THREAD_CPUTIME_ID), and whether it was measured.
	ThreadCPU      time.Duration
	ThreadCPUKnown bool
	// Placed says whether the guest was placed in Cgroup, so that the
	// group's CPU time is the run's.
	Placed bool
	// ExecErrno is set when the program could not be executed at all
	// (its status is then failed): ENOENT, EACCES, ENOEXEC, ...
	ExecErrno syscall.Errno
	// Signal is the signal that ended the program, where one did.
	Signal syscall.Signal
	// Notes are the executor's remarks on the run, for the person who
	// ran it: they go to the caller's stderr, never into what the run
	// wrote (stderr.log is the guest's alone).
	Notes []string
	// Parked is set when the run stopped at a park (Control.Park): it is
	// not over, and is not sealed; Outcome is then meaningless.
	Parked *Parked
}

// SignalOutcome is how a program a signal ended is recorded: trapped
// for a fault or an abort (SIGSEGV, SIGBUS, SIGILL, SIGFPE, SIGABRT,
// SIGSYS, SIGTRAP), killed for any other; where is said after the
// signal's name ("", or " in the guest").
func SignalOutcome(sig syscall.Signal, where string) attest.Outcome {
	detail := "terminated by " + unix.SignalName(sig) + where
	switch sig {
	case syscall.SIGSEGV, syscall.SIGBUS, syscall.SIGILL, syscall.SIGFPE, syscall.SIGABRT, syscall.SIGSYS, syscall.SIGTRAP:
		return attest.Outcome{Status: attest.Trapped, Detail: detail}
	}
	return attest.Outcome{Status: attest.Killed, Detail: detail}
}
