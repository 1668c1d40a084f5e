package executor

import (
	"context"

	"github.com/opensubstrate/sandbox/internal/cgroup"
	"github.com/opensubstrate/sandbox/internal/tee"
	"github.com/opensubstrate/sandbox/key"

	"github.com/opensubstrate/sandbox/addr"
	"github.com/opensubstrate/sandbox/device"
	"github.com/opensubstrate/sandbox/internal/unit"
	"github.com/opensubstrate/sandbox/tier"
)

// Executor runs units of one kind at one tier. It is all the engine
// needs of an executor; what else one can do it offers through the
// capabilities below, which the engine asks for with a type assertion.
type Executor interface {
	// Name names the executor in probes, refusals and records
	// ("linux-s1", "wasm-wazero", "bare").
	Name() string
	// Tier is the rung of the ladder its runs are confined at.
	Tier() tier.Tier
	// Kind is the kind of unit it runs.
	Kind() tier.Kind
	// Probe shows whether the tier's confinement really applies here:
	// available, or unavailable with the reason (Reason is never empty
	// then). A probe that could not decide says so in its reason and is
	// unavailable: it is retried, never taken as available.
	Probe(ctx context.Context) tier.Probe
	// Run runs one job to its end. An error means the job did not run
	// (a grant the executor cannot honour, bad input, a host failure);
	// once the program has started, how it ended is the Result's
	// Outcome, never an error. Run returns only when nothing the job
	// started runs any more: the job's Cgroup (when it has one) can be
	// removed. A deadline (Job.Deadline) or a cancelled ctx ends it;
	// cancelled with the cause ErrBudget, at once.
	Run(ctx context.Context, j *Job) (*Result, error)
}

// DeviceGiver is an Executor that gives a run devices besides the CPU
// (device nodes, a passthrough), so that a unit asking for them gets
// them. An executor that is not one gives the CPU only.
type DeviceGiver interface {
	Gives(device.Class) bool
}

// DeviceProber is a DeviceGiver that can say why it cannot give a class
// here (no such device on this host, its driver missing): the engine
// refuses a unit with that reason.
type DeviceProber interface {
	DeviceProbe(device.Class) tier.Probe
}

// Limiter is an Executor with limits of its own (set when it was made):
// a unit records them as the limits it runs under where its request sets
// none. They never hold a deadline (that is the request's).
type Limiter interface {
	DefaultLimits() unit.Limits
}

// Prewarmer is an Executor that can start preparing its next run ahead
// of it (a warm init); the engine calls Prewarm before it prepares a
// run's records.
type Prewarmer interface {
	Prewarm()
}

// Placer is an Executor that keeps the process its next run starts in
// ready in a control group made ahead for that run, so that the run does
// not wait to move it there: on a kernel whose cgroup hierarchies do not
// favour dynamic changes (favordynmods), the first move of a process
// waits for an RCU grace period, milliseconds. The engine asks for the
// group instead of making one; it calls Unplace for a group it took,
// whether or not a Run used it, before it removes the group.
type Placer interface {
	// PlacedGroup is a group with controllers ctls holding the process
	// the next Run given it as Job.Cgroup starts in, or nil (none ready:
	// the engine makes the group). Its CPU is counted from that Run's
	// start (cgroup.Group.MarkCPU).
	PlacedGroup(ctls []string) *cgroup.Group
	// Unplace ends what PlacedGroup kept in g, where no Run took it.
	Unplace(g *cgroup.Group)
}

// RootProber is an Executor that can run a unit in an image's root
// filesystem, and probe that its confinement applies there (from inside
// a child whose root it is) before it is used.
type RootProber interface {
	ProbeRoot(ctx context.Context, root string) tier.Probe
}

// ProbeKeyer is an Executor whose probe result holds for as long as the
// machine runs the same kernel since the same boot and the executor's
// key (what it runs with: its helper's content address, its
// configuration) is the same: the engine keeps it in the state
// directory, and a later process uses it instead of probing again.
type ProbeKeyer interface {
	ProbeKey() (string, error)
}

// BootImager is an Executor whose runs boot an image of their own (S5's
// kernel and initramfs): a memory image resumes only under the one it
// was taken with, so the environment a live sandbox records names it.
type BootImager interface {
	BootImage() (addr.Addr, error)
}

// Helpers is an Executor that has the host run programs of sandbox's
// own besides sandbox itself (S1's helper, which also jails QEMU): no
// writable grant may reach them.
type Helpers interface {
	Helpers() []string
}

// An Executor that holds something between runs (a warm init, a
// compilation cache) is an io.Closer too: the engine closes it when it
// closes.

// Evidencer is an Executor whose runs hardware vouches for (S6, S7):
// after a run, the engine asks it for evidence whose report_data is the
// run's binding (attest.Binding), and seals the evidence into the
// attestation. An Evidencer that cannot give evidence fails the seal.
type Evidencer interface {
	Evidence(ctx context.Context, data [tee.ReportDataSize]byte) (tee.Evidence, error)
}

// Localizer is an Executor whose runs carry a locality claim (S7):
// after a run, the engine asks it for a claim (sandbox.locality/1) that
// the holder of the host key was within the region named, bound to the
// run (attest.LocalityBinding), and seals it into the attestation.
type Localizer interface {
	// Region refuses, before a run, a region it cannot claim.
	Region(name string) error
	Locality(ctx context.Context, region string, host key.Private, binding addr.Addr) ([]byte, error)
}

// DeviceEvidencer is an S6 or S7 Executor that gives runs devices besides
// the CPU and can have each vouch for itself: after a run granted
// devices of classes, the engine asks it for each device's evidence over
// nonce (attest.DeviceNonce of the run's binding), and seals them as
// their own lines beside the CPU's evidence. An S6 executor that gives a
// device and is not one cannot run a unit granted that device.
type DeviceEvidencer interface {
	DeviceEvidence(ctx context.Context, classes []device.Class, nonce [32]byte) ([]tee.DeviceEvidence, error)
}
