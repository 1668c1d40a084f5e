package host

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"runtime"
	"strings"
	"sync"
	"time"

	"github.com/opensubstrate/sandbox/addr"
	"github.com/opensubstrate/sandbox/attest"
	"github.com/opensubstrate/sandbox/device"
	"github.com/opensubstrate/sandbox/energy"
	"github.com/opensubstrate/sandbox/internal/authority"
	"github.com/opensubstrate/sandbox/internal/budget"
	"github.com/opensubstrate/sandbox/internal/cgroup"
	"github.com/opensubstrate/sandbox/internal/crash"
	"github.com/opensubstrate/sandbox/internal/executor"
	"github.com/opensubstrate/sandbox/internal/gate"
	"github.com/opensubstrate/sandbox/internal/grant"
	"github.com/opensubstrate/sandbox/internal/hostpath"
	"github.com/opensubstrate/sandbox/internal/hw"
	images "github.com/opensubstrate/sandbox/internal/image"
	"github.com/opensubstrate/sandbox/internal/journal"
	"github.com/opensubstrate/sandbox/internal/meter"
	"github.com/opensubstrate/sandbox/internal/store"
	"github.com/opensubstrate/sandbox/internal/trail"
	"github.com/opensubstrate/sandbox/internal/unit"
	"github.com/opensubstrate/sandbox/key"
	"github.com/opensubstrate/sandbox/receipt"
	"github.com/opensubstrate/sandbox/tier"
	"github.com/opensubstrate/sandbox/verify"
)

// DeviceError refuses a unit that asks for a device class its executor
// cannot give it: a run that asked for a GPU and got none would be metered
// and sealed as if it had one.
type DeviceError struct {
	Class    device.Class
	Executor string
	Tier     tier.Tier
	// Reason is the executor's own probe's, where it has one (no such
	// device on this host, its driver missing).
	Reason string
}

func (e *DeviceError) Error() string {
	why := "it gives a run no device but the CPU"
	switch {
	case e.Tier == tier.S2:
		why = "a WebAssembly module reaches no device but the CPU"
	case e.Class == device.SIMD:
		why = "SIMD units are the CPU's, metered with it: ask for cpu"
	case e.Reason != "":
		why = e.Reason
	case e.Tier == tier.S1:
		why = "S1 gives a run no " + string(e.Class) + " device"
	}
	return fmt.Sprintf("%v: the unit asks for %s (a %s:… grant puts it on the unit), and %s at %s cannot give it: %s",
		device.ErrUnavailable, e.Class, strings.ToLower(string(e.Class)), e.Executor, e.Tier, why)
}

func (e *DeviceError) Unwrap() error { return device.ErrUnavailable }

// admitDevices refuses a unit whose device classes the executor cannot
// give. Every executor gives the CPU.
func admitDevices(ex executor.Executor, classes []device.Class) error {
	for _, c := range classes {
		if c == device.CPU {
			continue
		}
		if g, ok := ex.(executor.DeviceGiver); ok && g.Gives(c) {
			continue
		}
		de := &DeviceError{Class: c, Executor: ex.Name(), Tier: ex.Tier()}
		if p, ok := ex.(executor.DeviceProber); ok {
			de.Reason = p.DeviceProbe(c).Reason
		}
		return de
	}
	return nil
}

// Host runs and seals units.
type Host struct {
	// Store is the state directory: runs, blobs, caches, the key.
	Store *store.Store
	// Images are the imported images, whose root filesystems native
	// units can run in (STATE/images).
	Images    images.Store
	Key       key.Private
	Executors []executor.Executor
	// Trail, where set, is the S7 audit trail S7 runs are appended to
	// (a cluster's, shared by its hosts); nil: STATE/audit.jsonl.
	Trail trail.Trail
	// SharedLedger, where set, is where the JCP budget ledger is kept (a
	// cluster's, shared by its hosts); nil: STATE/jcp/ledger.jsonl.
	SharedLedger budget.Shared
	Log          *slog.Logger
	ProcRoot     string // "/proc"
	// Meter measures each run's energy; nil means Estimator only, with a
	// TDP assumed from the CPU count.
	Meter *meter.Meter
	// GPUExclusive declares that this host gives each GPU to one run at a
	// time and that nothing outside sandbox uses them: a run given a GPU
	// leases it (GPULeaseDir, default DefaultGPULeaseDir) from before its
	// meter span until it is sealed, a run that finds it held is refused,
	// and the GPU counter's whole delta over the span is the run's figure.
	GPUExclusive bool
	GPULeaseDir  string
	// Cgroups, when set, gives each run its own control group before it
	// starts, whose CPU time the meter apportions by.
	Cgroups *cgroup.Hierarchy
	// Devices are the host's accelerators, for the attestation.
	Devices []attest.Device
	// BudgetInterval is how often a native run's energy is checked
	// against its budgets; 0 means BudgetSample.
	BudgetInterval time.Duration
	// OutputMax is how many bytes of each of a run's streams its record
	// keeps (the caller receives all); 0 means DefaultOutputMax.
	OutputMax int64

	// Reprobe makes every probe run now (doctor), refreshing the probes
	// kept in the state directory.
	Reprobe bool
	probeMu sync.Mutex
	probes  map[string]probed

	// Clock is the time (nil: time.Now): a parked sandbox's idle energy
	// is priced by it.
	Clock func() time.Time

	// Policies are what principals other than the operator may grant,
	// by owner ("token:…"): an owner not in it gets authority.Default.
	// Set before the host serves anyone; read-only after.
	Policies map[string]authority.Policy
	// OperatorPolicy is the local owner's (nil: authority.Operator).
	OperatorPolicy *authority.Policy
	// Workspaces lists the workspaces of the live sandboxes and whose
	// they are (package live sets it): every principal may grant its
	// own, and none but the operator another's.
	Workspaces func() []Workspace

	// closeLease: Close releases the store's lease (New took it).
	closeLease bool
	trailOnce  sync.Once
	trail      *trail.Log
	trailErr   error
	// guardOnce makes guardVal: what no storage grant may reach (reach.go).
	guardOnce sync.Once
	guardVal  hostpath.Guard
	guardErr  error
	// jcp is the JCP gate, opened at the first presented run (jcp.go).
	jcp jcpState
}

// Request is one unit to run.
type Request struct {
	// Owner is the principal it runs for ("": the operator): its grants
	// must be within what Owner may grant (Principal), checked before
	// anything runs.
	Owner    string
	Kind     tier.Kind
	Image    []byte
	Entry    string
	Args     []string // argv[0] first
	Env      map[string]string
	Devices  []device.Class // default: Cpu
	Grants   grant.Set
	Tier     *tier.Tier
	Escalate bool
	Deadline time.Duration
	// Limits override the executor's own where set (its memory, pids,
	// CPUs, WebAssembly pages); the deadline is Deadline.
	Limits unit.Limits
	Dir    string // a native unit's working directory
	// Root is the image root filesystem a native unit runs in (its
	// listing's address, in h.Images); zero: the host's system
	// directories.
	Root   addr.Addr
	Stdin  io.Reader
	Stdout io.Writer
	Stderr io.Writer
	// OnStart is called once the run has started, with its controls.
	OnStart func(executor.Control)
	// Notes are recorded in the attestation's notes (the sandbox a run
	// is an exec of).
	Notes []string
	// Record is the run record the run is a segment of, and the head it
	// continues from: cited by its attestation (sandbox.attestation/2).
	Record *attest.RecordCite
	// JCP is the chain the run is presented with, and its invocation:
	// the gate decides it before anything runs (docs/spec/jcp.md §5).
	JCP *gate.Presentation
}

// Run is a sealed run.
type Run struct {
	// OutputClosed says the run was stopped because the reader of its
	// output went away.
	OutputClosed bool
	ID           addr.Addr // the attestation's content address
	Dir          string
	Attestation  *attest.Attestation
	Receipt      *receipt.Receipt
	Result       *executor.Result
	Choice       tier.Choice
	// Denied counts the refused decisions in its decision log.
	Denied  int64
	Journal struct {
		Entries int
		Bytes   int64
	}
}

// Run file names beside the sealed records.
const (
	FileStdout = verify.FileStdout
	FileStderr = verify.FileStderr
)

// ErrNoExecutor is wrapped when no executor can run a kind at a tier.
var ErrNoExecutor = errors.New("no executor")

// Logger is the host's logger (Log, else one that discards).
func (h *Host) Logger() *slog.Logger {
	if h.Log != nil {
		return h.Log
	}
	return slog.New(slog.DiscardHandler)
}

// effectiveLimits are the limits a run gets: the request's where it sets
// them, else the executor's; the deadline is the request's.
func effectiveLimits(ex executor.Executor, req Request) unit.Limits {
	var l unit.Limits
	if d, ok := ex.(executor.Limiter); ok {
		l = d.DefaultLimits()
	}
	r := req.Limits
	for _, f := range []struct{ got, want *int64 }{
		{&r.MemoryBytes, &l.MemoryBytes}, {&r.Pids, &l.Pids}, {&r.CPUMillis, &l.CPUMillis}, {&r.MemoryPages, &l.MemoryPages}, {&r.WorkspaceBytes, &l.WorkspaceBytes},
	} {
		if *f.got > 0 {
			*f.want = *f.got
		}
	}
	l.DeadlineMS = req.Deadline.Milliseconds()
	if req.Deadline > 0 && l.DeadlineMS == 0 {
		l.DeadlineMS = 1 // under a millisecond: still a deadline
	}
	return l
}

// Close releases what the executors hold between runs (a warm init),
// and the lease New took. (A live.Manager ends its sandboxes first.)
func (h *Host) Close() error {
	var first error
	defer func() {
		if h.Store != nil {
			h.Store.Close()
			if h.Store.Index != nil {
				h.Store.Index.Close()
			}
		}
		if h.closeLease && h.Store.Lease != nil {
			h.Store.Lease.Close()
		}
	}()
	if h.trail != nil {
		h.trail.Close()
	}
	if err := h.closeJCP(); err != nil {
		first = err
	}
	for _, e := range h.Executors {
		if c, ok := e.(io.Closer); ok {
			if err := c.Close(); err != nil && first == nil {
				first = err
			}
		}
	}
	return first
}

// Availability probes every tier.
func (h *Host) Availability(ctx context.Context) tier.Availability {
	a := tier.Availability{}
	for _, t := range tier.All {
		a[t] = h.Probe(ctx, t)
	}
	return a
}

// ExecutorProbe is one executor's probe.
type ExecutorProbe struct {
	Name  string
	Tier  tier.Tier
	Kind  tier.Kind
	Probe tier.Probe
}

// ExecutorProbes probes every executor, the ones a tier's first
// available executor hides included (doctor lists them).
func (h *Host) ExecutorProbes(ctx context.Context) []ExecutorProbe {
	var out []ExecutorProbe
	for _, e := range h.Executors {
		out = append(out, ExecutorProbe{Name: e.Name(), Tier: e.Tier(), Kind: e.Kind(), Probe: h.ProbeOf(ctx, e)})
	}
	return out
}

// Probe is one tier's availability: its first available executor's
// probe, or why none is.
func (h *Host) Probe(ctx context.Context, t tier.Tier) tier.Probe {
	var reasons []string
	var layers []tier.Layer
	for _, e := range h.Executors {
		if e.Tier() != t {
			continue
		}
		p := h.ProbeOf(ctx, e)
		if p.Available {
			return p
		}
		layers = append(layers, p.Layers...)
		reasons = append(reasons, fmt.Sprintf("%s: %s", e.Name(), p.Reason))
	}
	switch {
	case len(reasons) > 0:
		return tier.Probe{Reason: strings.Join(reasons, "; "), Layers: layers}
	case t == tier.S3 || t == tier.S4:
		return tier.Probe{Reason: "a reserved rung: no executor exists for it yet"}
	default:
		return tier.Probe{Reason: "no executor for this tier in this build"}
	}
}

// Gives says an available executor at tier t gives a run a device of
// class c here (the CPU always).
func (h *Host) Gives(ctx context.Context, t tier.Tier, c device.Class) bool {
	for _, e := range h.Executors {
		if e.Tier() != t || !h.ProbeOf(ctx, e).Available {
			continue
		}
		if admitDevices(e, []device.Class{c}) == nil {
			return true
		}
	}
	return false
}

func (h *Host) executor(ctx context.Context, t tier.Tier, k tier.Kind) (executor.Executor, error) {
	for _, e := range h.Executors {
		if e.Tier() == t && e.Kind() == k && h.ProbeOf(ctx, e).Available {
			return e, nil
		}
	}
	if t == tier.S2 && k == tier.Native {
		return nil, fmt.Errorf("%w: a native program cannot run at S2, which runs WebAssembly modules only: native programs run at S1 (drop --tier), or above it where an executor runs them", tier.ErrUnavailable)
	}
	return nil, fmt.Errorf("%w: %w: tier %s has no executor for %s units on this host", tier.ErrUnavailable, ErrNoExecutor, t, k)
}

// Plan is a request made a run: its unit and grants as recorded, the
// tier chosen for it and the executor that runs it. A live sandbox's
// exec sets the knobs below before Execute.
type Plan struct {
	req    Request
	grants grant.Set
	gb     []byte // the grants, canonical
	ga     addr.Addr
	unit   unit.Unit
	ub     []byte // the unit, canonical
	ua     addr.Addr
	choice tier.Choice
	ex     executor.Executor
	// Live says the run joins a live sandbox, which has its own init
	// (its grants were reached when it was made).
	Live bool
	// CgroupControllers are those of the run's own group (default: all
	// it is limited and accounted by; a live sandbox's exec: cpuacct).
	CgroupControllers []string
	// LeftoverGroup takes the run's group when it cannot be removed at
	// the end (a live sandbox's background processes are in it).
	LeftoverGroup func(*cgroup.Group)
	// Continue continues a parked run.
	Continue *Continuation
	// rootDir is the image root filesystem's directory ("": the host's).
	rootDir string
	// decided is the JCP gate's allow, where the run was presented with
	// a chain: sealed beside the run and cited by its attestation.
	decided *gate.Decided
}

// Executor is the executor the plan runs on.
func (p *Plan) Executor() executor.Executor { return p.ex }

// UnitAddr and UnitBytes are the unit as the record holds it;
// GrantsAddr and GrantsBytes its grants; Request what it was made from.
func (p *Plan) UnitAddr() addr.Addr   { return p.ua }
func (p *Plan) UnitBytes() []byte     { return p.ub }
func (p *Plan) GrantsAddr() addr.Addr { return p.ga }
func (p *Plan) GrantsBytes() []byte   { return p.gb }
func (p *Plan) Request() Request      { return p.req }

// Plan assembles a run from a request: the unit as the record will hold
// it, the tier its grants require (refused, with the reason, if this host
// cannot give it), the executor and the limits.
func (h *Host) Plan(ctx context.Context, req Request) (*Plan, error) {
	g := req.Grants
	gb, ga, err := g.Canonical()
	if err != nil {
		return nil, err
	}
	devices := req.Devices
	if len(devices) == 0 {
		// The classes its compute grants give (a gpu:… grant puts Gpu on
		// the unit), Cpu at least.
		devices = []device.Class{device.CPU}
		for _, c := range g.Compute {
			devices = append(devices, c.Class)
		}
	}
	u := unit.Unit{Kind: req.Kind, Image: addr.Of(req.Image), Entry: req.Entry, Args: req.Args, Env: req.Env, Devices: devices, Grants: ga, Dir: req.Dir, Root: req.Root}
	if err := u.Normalize(); err != nil { // as the record will hold it: each class once, in order
		return nil, err
	}
	need, err := u.Requirement(g)
	if err != nil {
		return nil, err
	}
	// Only the chosen tier is probed (a probe runs a confined child); the
	// rest only when it is unavailable, to say which are.
	choice, err := tier.Select(need, tier.Request{Tier: req.Tier, Escalate: req.Escalate})
	if err != nil {
		return nil, err
	}
	action := "run"
	if req.Record != nil {
		action = "exec"
	}
	if err := h.authorize(ctx, req.Owner, authority.Ask{Action: action, Grants: g, Tier: choice.Chosen, Devices: u.Devices, Image: req.Root}); err != nil {
		return nil, err
	}
	if p := h.Probe(ctx, choice.Chosen); !p.Available {
		return nil, &tier.UnavailableError{Tier: choice.Chosen, Reason: p.Reason, Available: h.Availability(ctx).Available()}
	}
	crash.At(crash.Probed)
	ex, err := h.executor(ctx, choice.Chosen, req.Kind)
	if err != nil {
		return nil, err
	}
	if err := admitDevices(ex, u.Devices); err != nil {
		return nil, err
	}
	if _, ok := ex.(executor.Evidencer); ok && len(devicesBesidesCPU(u.Devices)) > 0 {
		// At S6 and S7 every device vouches for itself, or the run does
		// not start: a GPU no evidence binds is not confidential.
		if _, ok := ex.(executor.DeviceEvidencer); !ok {
			return nil, &DeviceError{Class: devicesBesidesCPU(u.Devices)[0], Executor: ex.Name(), Tier: ex.Tier()}
		}
	}
	if lz, ok := ex.(executor.Localizer); ok && choice.Chosen == tier.S7 {
		// A region the host cannot claim is refused before the run, not
		// found when it is sealed.
		if err := lz.Region(g.Locality); err != nil {
			return nil, err
		}
	}
	rootDir, err := h.RootDir(ctx, ex, u.Root)
	if err != nil {
		return nil, err
	}
	u.Limits = effectiveLimits(ex, req)
	ub, ua, err := u.Canonical()
	if err != nil {
		return nil, err
	}
	return &Plan{req: req, grants: g, gb: gb, ga: ga, unit: u, ub: ub, ua: ua, choice: choice, ex: ex, rootDir: rootDir}, nil
}

// RootDir is where the root filesystem a is on this host ("" for zero),
// checked by ex's probe from inside a child whose root it is.
func (h *Host) RootDir(ctx context.Context, ex executor.Executor, a addr.Addr) (string, error) {
	if a.IsZero() {
		return "", nil
	}
	d, err := h.Images.RootDir(a)
	if err != nil {
		return "", err
	}
	rp, ok := ex.(executor.RootProber)
	if !ok {
		return "", fmt.Errorf("%w: the %s executor cannot run in an image's root filesystem", tier.ErrUnavailable, ex.Name())
	}
	if p := rp.ProbeRoot(ctx, d); !p.Available {
		return "", fmt.Errorf("%w: S1 in the root filesystem %s: %s", tier.ErrUnavailable, a.Short(), p.Reason)
	}
	return d, nil
}

// Run runs a unit and seals it.
func (h *Host) Run(ctx context.Context, req Request) (*Run, error) {
	p, err := h.Plan(ctx, req)
	if err != nil {
		return nil, err
	}
	return h.Execute(ctx, p, p.ex.Run)
}

// RunFunc runs a job: an executor's Run, or a live sandbox's.
type RunFunc func(context.Context, *executor.Job) (*executor.Result, error)

// Execute runs a planned unit with run, meters it and seals it. A run
// that parked (a continuation's executor parked it) is a *ParkedRun
// error, not sealed.
func (h *Host) Execute(ctx context.Context, p *Plan, run RunFunc) (*Run, error) {
	req, g, u := p.req, p.grants, p.unit
	if !p.Live { // a live sandbox's were reached when it was made
		var remap map[string]string
		if p.Continue != nil {
			remap = p.Continue.Remap
		}
		if err := h.ReachGrants(g.Storage, remap); err != nil {
			return nil, err
		}
	}
	if pw, ok := p.ex.(executor.Prewarmer); ok && !p.Live {
		pw.Prewarm()
	}
	if req.Kind == tier.Wasm { // kept for replay, which only S2 runs have
		if err := h.Store.PutBlob(u.Image, req.Image); err != nil {
			return nil, err
		}
	}
	// The gate decides before any executor is invoked. Its reservation is
	// posted with what the sealed run spent, or released if no run was
	// sealed; a post that fails here is made when the ledger is next
	// opened, from the sealed receipt (Gate.Recover).
	d, err := h.decide(p)
	if err != nil {
		return nil, err
	}
	p.decided = d
	if d != nil {
		crash.At(crash.JCPReserved)
	}
	var sealed *Run
	if d != nil {
		defer func() {
			g := h.jcp.gate
			if sealed == nil {
				if err := g.Release(d.Reservation, "failed"); err != nil {
					h.Logger().Error("JCP reservation not released", "reservation", d.Reservation, "err", err)
				}
				return
			}
			if err := g.Settle(d.Reservation, sealed.Receipt, sealed.ID); err != nil {
				h.Logger().Error("JCP spending not posted (the next opening of the ledger posts it)", "reservation", d.Reservation, "run", sealed.ID, "err", err)
			}
		}()
	}
	kvs, err := h.Store.KV()
	if err != nil {
		return nil, err
	}
	rec, err := h.Store.Begin()
	if err != nil {
		return nil, err
	}
	defer rec.Abort()
	files, err := openRecords(rec)
	if err != nil {
		return nil, err
	}
	crash.At(crash.Partial)

	enf := grant.NewEnforcer(g)
	runCtx, stopRun := context.WithCancelCause(ctx)
	defer stopRun(nil)
	outT := &splitter{caller: orDiscard(req.Stdout), record: files.out, hash: files.outH, kept: files.outK, limit: h.outputMax(), gone: func() { stopRun(ErrOutputClosed) }}
	errT := &splitter{caller: orDiscard(req.Stderr), record: files.err, hash: files.errH, kept: files.errK, limit: h.outputMax()}
	j := &executor.Job{
		Unit: u, UnitAddr: p.ua, Image: req.Image, ImageAddr: u.Image, Grants: g, Enforcer: enf, Record: files.journal, KV: kvs,
		Stdout:   outT,
		Stderr:   errT,
		Deadline: time.Duration(u.Limits.DeadlineMS) * time.Millisecond,
		Stdin:    req.Stdin,
		OnStart:  req.OnStart,
		RootDir:  p.rootDir,
	}
	if c := p.Continue; c != nil {
		// The parked part again, from its journal: its output is
		// recorded, and its caller had it already.
		for _, e := range c.Entries {
			if err := files.journal.AppendEntry(e); err != nil {
				return nil, err
			}
		}
		outT.mute(true)
		errT.mute(true)
		j.Replay, j.Continue, j.Remap = journal.NewReader(c.Entries), c.Parked, c.Remap
		j.Live = func() {
			outT.mute(false)
			errT.mute(false)
		}
	}
	h.Logger().Info("run starting", "unit", p.ua, "tier", p.choice.Chosen, "executor", p.ex.Name())
	var cg *cgroup.Group
	// dropGroup removes the run's group, once: begun as soon as the
	// run's CPU and energy are read, beside the sealing (whose syncs
	// wait on the disk), and waited for before Execute returns.
	dropGroup := func() {}
	if h.Cgroups != nil {
		ctls := p.CgroupControllers
		if ctls == nil {
			ctls = []string{"cpuacct", "cpu", "memory", "pids", "freezer", "devices"}
		}
		// A run of the executor's own (not a live sandbox's exec) may
		// start in a process it placed in a group ahead.
		pl, _ := p.ex.(executor.Placer)
		if pl != nil && !p.Live {
			cg = pl.PlacedGroup(ctls)
		}
		if cg == nil {
			pl = nil
			if cg, err = h.Cgroups.Create(rec.Name(), ctls...); err != nil {
				h.Logger().Warn("no cgroup for the run", "err", err)
				cg = nil
			}
		}
		if cg != nil {
			dropGroup = sync.OnceFunc(func() {
				if pl != nil {
					pl.Unplace(cg)
				}
				if err := cg.Remove(); err != nil && p.LeftoverGroup != nil {
					p.LeftoverGroup(cg)
				}
			})
			defer dropGroup()
			j.Cgroup = cg
		}
	}
	m := h.MeterOf()
	logCompute(enf, u)
	lease, err := h.leaseGPUs(u.Devices)
	if err != nil {
		return nil, err
	}
	defer lease.release()
	span := m.Start()
	if lease != nil {
		span.Hold(device.GPU)
		enf.Note(grant.KindCompute, grant.OpUse, string(device.GPU), true, "held alone: this host gives each GPU to one run at a time (SANDBOX_GPU_EXCLUSIVE); the GPU counter's whole delta over the run is its figure")
	}
	var spent budgetWatch
	if req.Kind == tier.Native { // S2's budget is its fuel, bought with it
		spent.watch(runCtx, stopRun, span, g, u.Devices, cg, h.budgetInterval(), h.allowance(d))
	}
	res, err := run(runCtx, j)
	spent.stop()
	crash.At(crash.Ended)
	if err != nil {
		span.Stop(meter.RunCPU{}, nil)
		return nil, err
	}
	if res.Parked != nil {
		// Not over, so not sealed: what it is at its park point goes
		// to the caller (a suspension keeps it).
		span.Stop(meter.RunCPU{}, nil)
		if err := files.journal.Err(); err != nil {
			return nil, &NotSealedError{Result: res, Err: fmt.Errorf("the parked run's journal: %w", err)}
		}
		jb, err := partialJournal(rec.Dir)
		if err != nil {
			return nil, err
		}
		return nil, &ParkedRun{Plan: p, Parked: res.Parked, Journal: jb}
	}
	// From here on the guest has run: whatever fails, the caller learns
	// how it ended, and that no record was kept.
	if errors.Is(context.Cause(runCtx), ErrOutputClosed) {
		res.Outcome.Detail = "stopped like an interrupt: the reader of its output went away (a closed pipe)"
	}
	if err := errors.Join(outT.failed(), errT.failed()); err != nil {
		span.Stop(meter.RunCPU{}, nil)
		return nil, &NotSealedError{Result: res, Err: fmt.Errorf("writing its output into the record: %w", err)}
	}
	if d != nil && u.Kind == tier.Native {
		res.Notes = append(res.Notes, fmt.Sprintf("JCP: the decision names the program by the bytes the host read at %s (%s); they were not checked again at the exec, so a file another writer changed in between ran as it then was", u.Entry, u.Image))
	}
	res.Notes = append(res.Notes, cutNotes(outcomeOf(res, files.outH, files.errH, files.outK, files.errK), h.outputMax())...)
	for _, n := range res.Notes { // the caller's, not stderr.log: not the guest's output
		fmt.Fprintf(orDiscard(req.Stderr), "sandbox: %s\n", n)
	}
	cpu := meter.RunCPU{}
	switch {
	case cg != nil && (res.Placed || req.Kind != tier.Wasm):
		if d, src, err := cg.CPU(); err == nil {
			cpu = meter.RunCPU{Time: d, Known: true, Source: src}
		}
	case res.ThreadCPUKnown:
		cpu = meter.RunCPU{Time: res.ThreadCPU, Known: true, Source: "the CPU clock (CLOCK_THREAD_CPUTIME_ID) of the OS thread the guest ran on"}
	}
	measured := span.StopAt(cpu, u.Devices, res.Start, res.End)
	// After the meter's last reading: the removal's own work is not in
	// the span the run's energy is taken from.
	dropped := make(chan struct{})
	go func() {
		defer close(dropped)
		dropGroup()
	}()
	defer func() { <-dropped }()
	res.Readings = merge(measured, res.Readings)
	spentClass := device.CPU
	if hit := spent.hit(); hit != nil && res.Outcome.Status == attest.BudgetExhausted {
		res.Outcome.Detail = hit.detail(res.Readings[hit.class])
		spentClass = hit.class
	}
	logSpent(enf, res, g, spentClass)
	r, err := h.seal(p, rec, files, enf, res)
	if err != nil {
		return nil, err
	}
	sealed = r
	r.OutputClosed = errors.Is(context.Cause(runCtx), ErrOutputClosed)
	return r, nil
}

// BudgetSample is how often a native run's energy is checked against its
// budget, by default.
const BudgetSample = 10 * time.Millisecond

func (h *Host) budgetInterval() time.Duration {
	if h.BudgetInterval > 0 {
		return h.BudgetInterval
	}
	return BudgetSample
}

// merge adds an executor's own readings to the meter's. Where the
// executor gives a run-scope figure for a class (S2: its fuel, which the
// budget bought), that is the figure the receipt states for the class,
// and the meter's run-scope readings for it become alt: shown beside it,
// not summed, so that the receipt never states more than the budget.
func merge(measured, own map[device.Class][]receipt.Reading) map[device.Class][]receipt.Reading {
	for c, rs := range own {
		runScope := false
		for _, r := range rs {
			runScope = runScope || r.Scope == receipt.ScopeRun
		}
		if runScope {
			for i := range measured[c] {
				if measured[c][i].Scope == receipt.ScopeRun {
					measured[c][i].Scope = receipt.ScopeAlt
				}
			}
		}
		measured[c] = append(rs, measured[c]...)
	}
	return measured
}

// logCompute records each device class the unit uses as a compute
// decision, before it runs: what the budget is.
func logCompute(enf *grant.Enforcer, u unit.Unit) {
	for _, c := range u.Devices {
		enf.Compute(c)
	}
}

// logSpent records the end of a budget (class c's) as a refused compute
// use.
func logSpent(enf *grant.Enforcer, res *executor.Result, g grant.Set, c device.Class) {
	switch res.Outcome.Status {
	case attest.OutOfFuel:
		b, _ := g.Budget(device.CPU)
		enf.Note(grant.KindCompute, grant.OpUse, string(device.CPU), false, fmt.Sprintf("the fuel bought with cpu:%d µJ ran out", b))
	case attest.BudgetExhausted:
		enf.Note(grant.KindCompute, grant.OpUse, string(c), false, res.Outcome.Detail)
	}
}

// budgetWatch follows a native run's energy while it runs and stops it
// when the meter's figure for a class reaches that class's budget.
type budgetWatch struct {
	mu   sync.Mutex
	done chan struct{}
	quit chan struct{}
	at   *budgetHit
}

// budgetHit is what the watch saw when it stopped a run.
type budgetHit struct {
	class    device.Class
	budget   energy.Microjoules
	figure   energy.Microjoules
	interval time.Duration
}

func (h *budgetHit) detail(rs []receipt.Reading) string {
	m, e, _ := receipt.Sums(rs)
	return fmt.Sprintf("stopped when the %s budget of %s was spent: the meter's figure was %s at the check that stopped it (checked every %v); the receipt's figure, %s, is what the meter counted to the end, at most one interval more",
		h.class, h.budget, h.figure, h.interval, m+e)
}

func (w *budgetWatch) watch(ctx context.Context, stop context.CancelCauseFunc, span *meter.Span, g grant.Set, classes []device.Class, cg *cgroup.Group, every time.Duration, allow func(device.Class) energy.Microjoules) {
	type limit struct {
		c device.Class
		b energy.Microjoules
	}
	var limits []limit
	for _, c := range classes {
		if b, ok := g.Budget(c); ok {
			limits = append(limits, limit{c, b})
		}
	}
	if len(limits) == 0 {
		return
	}
	w.done, w.quit = make(chan struct{}), make(chan struct{})
	go func() {
		defer close(w.done)
		t := time.NewTicker(every)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-w.quit:
				return
			case <-t.C:
			}
			cpu := meter.RunCPU{}
			if cg != nil {
				if d, src, err := cg.CPU(); err == nil {
					cpu = meter.RunCPU{Time: d, Known: true, Source: src}
				}
			}
			for _, l := range limits {
				b := l.b
				if allow != nil {
					b = min(b, allow(l.c)) // an amendment may have tightened it
				}
				if f := span.Figure(l.c, cpu, time.Time{}); f >= b {
					w.mu.Lock()
					w.at = &budgetHit{class: l.c, budget: b, figure: f, interval: every}
					w.mu.Unlock()
					stop(executor.ErrBudget)
					return
				}
			}
		}
	}()
}

func (w *budgetWatch) stop() {
	if w.done == nil {
		return
	}
	close(w.quit)
	<-w.done
}

func (w *budgetWatch) hit() *budgetHit {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.at
}

// MeterOf returns the host's meter, or an Estimator-only one.
func (h *Host) MeterOf() *meter.Meter {
	if h.Meter != nil {
		return h.Meter
	}
	n := runtime.NumCPU()
	return &meter.Meter{NumCPU: n, TDP: map[device.Class]meter.TDP{device.CPU: meter.DetectTDP(hw.Describe(h.procRoot()).Host.CPU, n)}}
}

// output hashes and counts what a run writes to one stream.
type output struct {
	*addr.Hasher
	n uint64
}

func newOutput() *output { return &output{Hasher: addr.NewHasher()} }

func (o *output) Write(p []byte) (int, error) {
	o.n += uint64(len(p))
	return o.Hasher.Write(p)
}

func orDiscard(w io.Writer) io.Writer {
	if w == nil {
		return io.Discard
	}
	return w
}

func (h *Host) procRoot() string {
	if h.ProcRoot != "" {
		return h.ProcRoot
	}
	return "/proc"
}
