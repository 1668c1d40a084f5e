package job

import (
	"io"
	"time"

	"github.com/opensubstrate/sandbox/addr"
	"github.com/opensubstrate/sandbox/attest"
	"github.com/opensubstrate/sandbox/device"
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

	// Exactly one of Record and Replay is set.
	Record *journal.Writer
	Replay *journal.Reader

	KV             *kv.Store
	Stdout, Stderr io.Writer
	Deadline       time.Duration // 0 for none

	// PlaceThread, when set, is called by an in-process executor with the
	// OS thread the guest will run on, before it starts; the returned
	// function undoes the placement after the guest stops.
	PlaceThread func(tid int) (restore func() error, err error)
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
	// Placed says whether PlaceThread succeeded.
	Placed bool
}
