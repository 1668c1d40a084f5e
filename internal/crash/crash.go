package crash

import (
	"os"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"
)

// Env is the environment variable that names the point.
const Env = "SANDBOX_CRASH_AT"

// The points of a run, in order.
const (
	Probed  = "probed"  // the tier was probed; nothing of the run exists yet
	Partial = "partial" // its run directory exists, being written
	Init    = "init"    // S1: init started, building the root, no spec yet
	Started = "started" // the guest was started
	Ended   = "ended"   // the guest ended; nothing sealed yet
	Sealing = "sealing" // every record is written, not yet renamed into place
	Indexed = "indexed" // its index row is written, pending; not yet renamed
	Renamed = "renamed" // the run is in place; its index row still pending
	Sealed  = "sealed"  // the run is in place; the process has not exited
)

// Points lists the points of a run in order.
var Points = []string{Probed, Partial, Init, Started, Ended, Sealing, Indexed, Renamed, Sealed}

// The points of an append to a hash-chained log (internal/chain).
const (
	LogWritten = "log-written" // the entry's line is written, not yet fsynced
	LogSynced  = "log-synced"  // fsynced, not yet acknowledged
)

// The points of a live sandbox's suspension and resumption (internal/host).
const (
	SuspendStaged   = "suspend-staged"   // the workspace's objects are written to a batch, unsynced; none in the store yet
	SuspendCaptured = "suspend-captured" // the workspace is stored as a tree; Suspended not yet appended
	SuspendAppended = "suspend-appended" // Suspended is appended; the sandbox not yet torn down
	ResumeRestored  = "resume-restored"  // the workspace is back, the init started; Resumed not yet appended
	ResumeAppended  = "resume-appended"  // Resumed is appended; the caller not yet answered
)

// The points of a fork (internal/live).
const (
	ForkStaged = "fork-staged" // the parent's state is captured into the fork's stage and its children listed; no child's record yet
	ForkNamed  = "fork-named"  // every child's record names the snapshot; the staged objects not yet in the store, no child started
)

// ForkPoints lists them in order.
var ForkPoints = []string{ForkStaged, ForkNamed}

// The points of an image import (internal/image).
const (
	ImageUnpacked = "image-unpacked" // every layer applied and the root listed; not yet renamed into roots/
	ImageRenamed  = "image-renamed"  // the root is in roots/ under its address; the image's record not yet written
)

// The point of a warm pool's claim (internal/host).
const ClaimAppended = "claim-appended" // Claimed is in the record, the claimer may be answered; its owner not yet in the live file

// The point of a seed (internal/host).
const SeedMarked = "seed-marked" // the seed is marked pending, its operation reserved; the workspace not yet touched

// The points of a budget ledger entry (internal/budget).
const (
	BudgetDecided  = "budget-decided"  // the entry is decided in memory; not yet written
	BudgetAppended = "budget-appended" // the entry is written and fsynced; its caller not yet answered
)

// The point of a gated run (internal/host): its budget is reserved in the
// ledger, no executor invoked yet.
const JCPReserved = "jcp-reserved"

// BudgetPoints lists them in order.
var BudgetPoints = []string{BudgetDecided, BudgetAppended}

// ImagePoints lists them in order.
var ImagePoints = []string{ImageUnpacked, ImageRenamed}

// DurablePoints lists them in order.
var DurablePoints = []string{SuspendStaged, SuspendCaptured, SuspendAppended, ResumeRestored, ResumeAppended}

// LogPoints lists the points of an append in order.
var LogPoints = []string{LogWritten, LogSynced}

var at, sig = parse(os.Getenv(Env))

func parse(v string) (string, syscall.Signal) {
	name, s, _ := strings.Cut(v, ":")
	if s == "" {
		return name, unix.SIGKILL
	}
	if n := unix.SignalNum("SIG" + strings.ToUpper(s)); n != 0 {
		return name, n
	}
	return name, unix.SIGKILL
}

// At sends this process the configured signal if name is the configured
// point. For SIGKILL it does not return.
func At(name string) {
	if at == "" || name != at {
		return
	}
	unix.Kill(os.Getpid(), sig)
	if sig == unix.SIGKILL {
		select {}
	}
}
