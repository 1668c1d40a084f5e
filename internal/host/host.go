package host

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"runtime"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/opensubstrate/sandbox/addr"
	"github.com/opensubstrate/sandbox/attest"
	"github.com/opensubstrate/sandbox/device"
	"github.com/opensubstrate/sandbox/energy"
	"github.com/opensubstrate/sandbox/internal/cgroup"
	"github.com/opensubstrate/sandbox/internal/crash"
	"github.com/opensubstrate/sandbox/internal/grant"
	"github.com/opensubstrate/sandbox/internal/hw"
	"github.com/opensubstrate/sandbox/internal/job"
	"github.com/opensubstrate/sandbox/internal/journal"
	"github.com/opensubstrate/sandbox/internal/kv"
	"github.com/opensubstrate/sandbox/internal/meter"
	"github.com/opensubstrate/sandbox/internal/safefile"
	"github.com/opensubstrate/sandbox/internal/state"
	"github.com/opensubstrate/sandbox/internal/unit"
	"github.com/opensubstrate/sandbox/key"
	"github.com/opensubstrate/sandbox/receipt"
	"github.com/opensubstrate/sandbox/tier"
	"github.com/opensubstrate/sandbox/verify"
)

// Executor runs units of one kind at one tier.
type Executor interface {
	Name() string
	Tier() tier.Tier
	Kind() tier.Kind
	// Probe shows whether the tier's confinement really applies here.
	Probe(ctx context.Context) tier.Probe
	Run(ctx context.Context, j *job.Job) (*job.Result, error)
}

// DeviceGiver is an Executor that gives a run devices besides the CPU
// (device nodes, a passthrough), so that a unit asking for them gets them.
type DeviceGiver interface {
	Gives(device.Class) bool
}

// DeviceError refuses a unit that asks for a device class its executor
// cannot give it: a run that asked for a GPU and got none would be metered
// and sealed as if it had one.
type DeviceError struct {
	Class    device.Class
	Executor string
	Tier     tier.Tier
}

func (e *DeviceError) Error() string {
	why := "it gives a run no device but the CPU"
	switch {
	case e.Tier == tier.S2:
		why = "a WebAssembly module reaches no device but the CPU"
	case e.Class == device.Simd:
		why = "SIMD units are the CPU's, metered with it: ask for cpu"
	case e.Tier == tier.S1:
		why = "S1 gives a run no device nodes (device passthrough is not built)"
	}
	return fmt.Sprintf("%v: the unit asks for %s (a %s:… grant puts it on the unit), and %s at %s cannot give it: %s",
		device.ErrUnavailable, e.Class, strings.ToLower(string(e.Class)), e.Executor, e.Tier, why)
}

func (e *DeviceError) Unwrap() error { return device.ErrUnavailable }

// admitDevices refuses a unit whose device classes the executor cannot
// give. Every executor gives the CPU.
func admitDevices(ex Executor, classes []device.Class) error {
	for _, c := range classes {
		if c == device.Cpu {
			continue
		}
		if g, ok := ex.(DeviceGiver); ok && g.Gives(c) {
			continue
		}
		return &DeviceError{Class: c, Executor: ex.Name(), Tier: ex.Tier()}
	}
	return nil
}

// Host runs and seals units.
type Host struct {
	Dir       *state.Dir
	Key       key.Private
	Executors []Executor
	Log       *slog.Logger
	ProcRoot  string // "/proc"
	// Meter measures each run's energy; nil means Estimator only, with a
	// TDP assumed from the CPU count.
	Meter *meter.Meter
	// Cgroups, when set, gives each run its own control group before it
	// starts, whose CPU time the meter apportions by.
	Cgroups *cgroup.Hierarchy
	// Lease names what runs make while they run (their partial
	// directories and cgroups), so that what a killed sandbox left is
	// found by its dead lease (GC). Nil: random names, never collected.
	Lease *state.Lease
	// Devices are the host's accelerators, for the attestation.
	Devices []attest.Device
	// BudgetInterval is how often a native run's energy is checked
	// against its budgets; 0 means BudgetSample.
	BudgetInterval time.Duration

	kvOnce sync.Once
	kv     *kv.Store
	kvErr  error
}

// Request is one unit to run.
type Request struct {
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
	Stdin  io.Reader
	Stdout io.Writer
	Stderr io.Writer
	// OnStart is called once the run has started, with its controls.
	OnStart func(job.Control)
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
	Result       *job.Result
	Choice       tier.Choice
	Journal      struct {
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

func (h *Host) logger() *slog.Logger {
	if h.Log != nil {
		return h.Log
	}
	return slog.New(slog.DiscardHandler)
}

// Limiter is an executor with limits of its own (set when it was made),
// which a unit records as it runs under them.
type Limiter interface {
	DefaultLimits() unit.Limits
}

// effectiveLimits are the limits a run gets: the request's where it sets
// them, else the executor's; the deadline is the request's.
func effectiveLimits(ex Executor, req Request) unit.Limits {
	var l unit.Limits
	if d, ok := ex.(Limiter); ok {
		l = d.DefaultLimits()
	}
	r := req.Limits
	for _, f := range []struct{ got, want *int64 }{
		{&r.MemoryBytes, &l.MemoryBytes}, {&r.Pids, &l.Pids}, {&r.CPUMillis, &l.CPUMillis}, {&r.MemoryPages, &l.MemoryPages},
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

// Prewarmer is an executor that can start preparing its next run ahead
// of it; Run calls Prewarm before preparing the run's records.
type Prewarmer interface {
	Prewarm()
}

// Close releases what the executors hold between runs (a warm init).
func (h *Host) Close() error {
	var first error
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
		a[t] = h.probe(ctx, t)
	}
	return a
}

// probe is one tier's availability: its first available executor's
// probe, or why none is.
func (h *Host) probe(ctx context.Context, t tier.Tier) tier.Probe {
	var reasons []string
	var layers []tier.Layer
	for _, e := range h.Executors {
		if e.Tier() != t {
			continue
		}
		p := e.Probe(ctx)
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

func (h *Host) executor(ctx context.Context, t tier.Tier, k tier.Kind) (Executor, error) {
	for _, e := range h.Executors {
		if e.Tier() == t && e.Kind() == k && e.Probe(ctx).Available {
			return e, nil
		}
	}
	if t == tier.S2 && k == tier.Native {
		return nil, fmt.Errorf("%w: a native program cannot run at S2, which runs WebAssembly modules only: native programs run at S1 (drop --tier), or above it where an executor runs them", tier.ErrUnavailable)
	}
	return nil, fmt.Errorf("%w: %w: tier %s has no executor for %s units on this host", tier.ErrUnavailable, ErrNoExecutor, t, k)
}

func (h *Host) kvStore() (*kv.Store, error) {
	h.kvOnce.Do(func() { h.kv, h.kvErr = kv.Open(h.Dir.Path("kv")) })
	return h.kv, h.kvErr
}

// outcomeOf is the journal's last entry for a run: how it ended and what
// it wrote.
func outcomeOf(res *job.Result, stdout, stderr *output) journal.Outcome {
	o := journal.Outcome{Status: string(res.Outcome.Status), ExitCode: -1,
		Stdout: stdout.Sum(), StdoutLen: stdout.n, Stderr: stderr.Sum(), StderrLen: stderr.n}
	if res.Outcome.ExitCode != nil {
		o.ExitCode = int64(*res.Outcome.ExitCode)
	}
	if res.Fuel != nil {
		o.Fuel = *res.Fuel
	}
	return o
}

// Run runs a unit and seals it.
func (h *Host) Run(ctx context.Context, req Request) (*Run, error) {
	g := req.Grants
	gb, ga, err := g.Canonical()
	if err != nil {
		return nil, err
	}
	devices := req.Devices
	if len(devices) == 0 {
		// The classes its compute grants give (a gpu:… grant puts Gpu on
		// the unit), Cpu at least.
		devices = []device.Class{device.Cpu}
		for _, c := range g.Compute {
			devices = append(devices, c.Class)
		}
	}
	u := unit.Unit{Kind: req.Kind, Image: addr.Of(req.Image), Entry: req.Entry, Args: req.Args, Env: req.Env, Devices: devices, Grants: ga, Dir: req.Dir}
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
	if p := h.probe(ctx, choice.Chosen); !p.Available {
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
	if p, ok := ex.(Prewarmer); ok {
		p.Prewarm()
	}
	u.Limits = effectiveLimits(ex, req)
	ub, ua, err := u.Canonical()
	if err != nil {
		return nil, err
	}
	if req.Kind == tier.Wasm { // kept for replay, which only S2 runs have
		if err := h.putBlob(u.Image, req.Image); err != nil {
			return nil, err
		}
	}
	store, err := h.kvStore()
	if err != nil {
		return nil, err
	}

	runs := h.Dir.Path("runs")
	if err := os.MkdirAll(runs, 0o700); err != nil {
		return nil, err
	}
	tmp, err := h.mkPartial(runs)
	if err != nil {
		return nil, err
	}
	keep := false
	defer func() {
		if !keep {
			os.RemoveAll(tmp)
		}
	}()
	jf, err := os.Create(filepath.Join(tmp, verify.FileJournal))
	if err != nil {
		return nil, err
	}
	defer jf.Close()
	outF, err := os.Create(filepath.Join(tmp, FileStdout))
	if err != nil {
		return nil, err
	}
	defer outF.Close()
	errF, err := os.Create(filepath.Join(tmp, FileStderr))
	if err != nil {
		return nil, err
	}
	defer errF.Close()
	outH, errH := newOutput(), newOutput()
	crash.At(crash.Partial)

	rec := journal.NewWriter(jf)
	enf := grant.NewEnforcer(g)
	runCtx, stopRun := context.WithCancelCause(ctx)
	defer stopRun(nil)
	outT := &tee{caller: orDiscard(req.Stdout), record: outF, hash: outH, gone: func() { stopRun(ErrOutputClosed) }}
	errT := &tee{caller: orDiscard(req.Stderr), record: errF, hash: errH}
	j := &job.Job{
		Unit: u, UnitAddr: ua, Image: req.Image, ImageAddr: u.Image, Grants: g, Enforcer: enf, Record: rec, KV: store,
		Stdout:   outT,
		Stderr:   errT,
		Deadline: time.Duration(u.Limits.DeadlineMS) * time.Millisecond,
		Stdin:    req.Stdin,
		OnStart:  req.OnStart,
	}
	h.logger().Info("run starting", "unit", ua, "tier", choice.Chosen, "executor", ex.Name())
	var cg *cgroup.Group
	if h.Cgroups != nil {
		if cg, err = h.Cgroups.Create(strings.TrimPrefix(filepath.Base(tmp), "."), "cpuacct", "cpu", "memory", "pids", "freezer"); err != nil {
			h.logger().Warn("no cgroup for the run", "err", err)
			cg = nil
		} else {
			defer cg.Remove()
			j.Cgroup = cg
		}
	}
	m := h.meter()
	logCompute(enf, u)
	span := m.Start()
	var spent budgetWatch
	if req.Kind == tier.Native { // S2's budget is its fuel, bought with it
		spent.watch(runCtx, stopRun, span, g, u.Devices, cg, h.budgetInterval())
	}
	res, err := ex.Run(runCtx, j)
	spent.stop()
	crash.At(crash.Ended)
	if err != nil {
		span.Stop(meter.RunCPU{}, nil)
		return nil, err
	}
	// From here on the guest has run: whatever fails, the caller learns
	// how it ended, and that no record was kept.
	notSealed := func(err error) error { return &NotSealedError{Result: res, Err: err} }
	if errors.Is(context.Cause(runCtx), ErrOutputClosed) {
		res.Outcome.Detail = "stopped like an interrupt: the reader of its output went away (a closed pipe)"
	}
	if err := errors.Join(outT.failed(), errT.failed()); err != nil {
		span.Stop(meter.RunCPU{}, nil)
		return nil, notSealed(fmt.Errorf("writing its output into the record: %w", err))
	}
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
	res.Readings = merge(measured, res.Readings)
	spentClass := device.Cpu
	if hit := spent.hit(); hit != nil && res.Outcome.Status == attest.BudgetExhausted {
		res.Outcome.Detail = hit.detail(res.Readings[hit.class])
		spentClass = hit.class
	}
	logSpent(enf, res, g, spentClass)
	if err := rec.Append(journal.OutcomeKind, nil, outcomeOf(res, outH, errH)); err != nil {
		return nil, notSealed(err)
	}
	if err := rec.Err(); err != nil {
		return nil, notSealed(err)
	}
	journalRoot := rec.Root()

	db, da, err := enf.Log().Canonical()
	if err != nil {
		return nil, notSealed(err)
	}
	rc := receipt.Receipt{Unit: ua, StartNS: uint64(res.Start.UnixNano()), EndNS: uint64(res.End.UnixNano()), Fuel: res.Fuel}
	for _, c := range device.Classes {
		if rs := res.Readings[c]; len(rs) > 0 {
			rc.Devices = append(rc.Devices, receipt.Device{Class: c, Readings: rs})
		}
	}
	if err := rc.FillTotals(); err != nil {
		return nil, notSealed(err)
	}
	rb, err := receipt.Seal(&rc, h.Key)
	if err != nil {
		return nil, notSealed(err)
	}
	hwd := hw.Describe(h.procRoot())
	hwd.Devices = append(hwd.Devices, h.Devices...)
	claim := attest.Claim{
		Unit: ua, Image: u.Image, Grants: ga, Decisions: da, Receipt: addr.Of(rb), Journal: &journalRoot,
		Tier:     attest.Tier{Required: choice.Required, Chosen: choice.Chosen, Reason: choice.Reason},
		Executor: res.Executor, Hardware: hwd, Outcome: res.Outcome,
		Started: attest.Time(res.Start), Ended: attest.Time(res.End),
	}
	for _, n := range res.Notes {
		if n != "" {
			claim.Notes = append(claim.Notes, n)
		}
	}
	a, err := attest.Seal(claim, h.Key)
	if err != nil {
		return nil, notSealed(err)
	}
	files := []*os.File{jf, outF, errF}
	for name, b := range map[string][]byte{
		verify.FileUnit: ub, verify.FileGrants: gb, verify.FileDecisions: db,
		verify.FileReceipt: rb, verify.FileAttestation: a.Envelope,
	} {
		f, err := os.OpenFile(filepath.Join(tmp, name), os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
		if err != nil {
			return nil, notSealed(err)
		}
		defer f.Close()
		if _, err := f.Write(b); err != nil {
			return nil, notSealed(err)
		}
		files = append(files, f)
	}
	if err := syncAll(files); err != nil {
		return nil, notSealed(err)
	}
	if err := safefile.SyncDir(tmp); err != nil {
		return nil, notSealed(err)
	}
	crash.At(crash.Sealing)
	final := filepath.Join(runs, a.Addr.Hex())
	if err := os.Rename(tmp, final); err != nil {
		return nil, notSealed(fmt.Errorf("host: store run: %w", err))
	}
	keep = true
	if err := safefile.SyncDir(runs); err != nil {
		return nil, fmt.Errorf("host: the run is stored at %s, but its directory could not be synced: %w", final, err)
	}
	crash.At(crash.Sealed)
	r := &Run{ID: a.Addr, Dir: final, Attestation: a, Receipt: &rc, Result: res, Choice: choice,
		OutputClosed: errors.Is(context.Cause(runCtx), ErrOutputClosed)}
	r.Journal.Entries, r.Journal.Bytes = rec.Len()
	h.logger().Info("run sealed", "run", a.Addr, "status", res.Outcome.Status, "dir", final)
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
func logSpent(enf *grant.Enforcer, res *job.Result, g grant.Set, c device.Class) {
	switch res.Outcome.Status {
	case attest.OutOfFuel:
		b, _ := g.Budget(device.Cpu)
		enf.Note(grant.KindCompute, grant.OpUse, string(device.Cpu), false, fmt.Sprintf("the fuel bought with cpu:%d µJ ran out", b))
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

func (w *budgetWatch) watch(ctx context.Context, stop context.CancelCauseFunc, span *meter.Span, g grant.Set, classes []device.Class, cg *cgroup.Group, every time.Duration) {
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
				if f := span.Figure(l.c, cpu, time.Time{}); f >= l.b {
					w.mu.Lock()
					w.at = &budgetHit{class: l.c, budget: l.b, figure: f, interval: every}
					w.mu.Unlock()
					stop(job.ErrBudget)
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

// meter returns the host's meter, or an Estimator-only one.
func (h *Host) meter() *meter.Meter {
	if h.Meter != nil {
		return h.Meter
	}
	n := runtime.NumCPU()
	return &meter.Meter{NumCPU: n, TDP: map[device.Class]meter.TDP{device.Cpu: meter.DetectTDP(hw.Describe(h.procRoot()).Host.CPU, n)}}
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

// syncAll fsyncs files concurrently: the flushes overlap in the device
// queue instead of waiting for each other, and every one still completes
// before the run directory is renamed into place.
func syncAll(files []*os.File) error {
	errs := make([]error, len(files))
	var wg sync.WaitGroup
	for i, f := range files {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = f.Sync()
		}()
	}
	wg.Wait()
	return errors.Join(errs...)
}

// putBlob stores content by address, once.
func (h *Host) putBlob(a addr.Addr, b []byte) error {
	dir := h.Dir.Path("blobs")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	p := filepath.Join(dir, a.Hex())
	if _, err := os.Stat(p); err == nil {
		return nil
	}
	if err := safefile.Create(p, b, 0o600); err != nil && !errors.Is(err, os.ErrExist) {
		return err
	}
	return nil
}

// Blob returns stored content, checking its address.
func (h *Host) Blob(a addr.Addr) ([]byte, error) {
	b, err := os.ReadFile(h.Dir.Path("blobs", a.Hex()))
	if err != nil {
		return nil, fmt.Errorf("image %s is not in the blob store: %w", a, err)
	}
	if addr.Of(b) != a {
		return nil, fmt.Errorf("blob %s is corrupt: it hashes to %s", a, addr.Of(b))
	}
	return b, nil
}

// Summary is one line of the run list.
type Summary struct {
	ID      addr.Addr
	Dir     string
	Tier    tier.Tier
	Status  attest.Status
	Exit    *int
	Started time.Time
	Entry   string
	// Damaged says what is wrong with a run directory whose attestation
	// cannot be read or that lacks a file it should hold; "" otherwise.
	// (Runs only looks; Verify checks everything.)
	Damaged string
}

// Runs lists stored runs, newest first. It reads claims without verifying
// them; verification is Verify's job.
func (h *Host) Runs() ([]Summary, error) {
	runs := h.Dir.Path("runs")
	ents, err := os.ReadDir(runs)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var out []Summary
	for _, e := range ents {
		if !e.IsDir() || strings.HasPrefix(e.Name(), ".") {
			continue
		}
		dir := filepath.Join(runs, e.Name())
		a, err := readAttestation(dir)
		if err != nil {
			// Listed, as damaged: its name is its id; its time, the
			// directory's.
			s := Summary{Dir: dir, Damaged: fmt.Sprintf("%s: %v", verify.FileAttestation, err)}
			s.ID, _ = addr.Parse(addr.Prefix + e.Name())
			if fi, err := e.Info(); err == nil {
				s.Started = fi.ModTime()
			}
			out = append(out, s)
			continue
		}
		c := a.Claim
		s := Summary{ID: a.Addr, Dir: dir, Tier: c.Tier.Chosen, Status: c.Outcome.Status, Exit: c.Outcome.ExitCode}
		s.Started, _ = time.Parse(attest.TimeLayout, c.Started)
		if a.Addr.Hex() != e.Name() {
			s.Damaged = fmt.Sprintf("its attestation is %s, not the run its directory names", a.Addr)
		}
		var missing []string
		for _, f := range []string{verify.FileUnit, verify.FileGrants, verify.FileDecisions, verify.FileReceipt, verify.FileStdout, verify.FileStderr} {
			if _, err := os.Lstat(filepath.Join(dir, f)); err != nil {
				missing = append(missing, f)
			}
		}
		if c.Journal != nil {
			if _, err := os.Lstat(filepath.Join(dir, verify.FileJournal)); err != nil {
				missing = append(missing, verify.FileJournal)
			}
		}
		if len(missing) > 0 && s.Damaged == "" {
			s.Damaged = "missing " + strings.Join(missing, ", ")
		}
		if ub, err := os.ReadFile(filepath.Join(dir, verify.FileUnit)); err == nil {
			if u, err := unit.Decode(ub); err == nil {
				s.Entry = u.Entry
			}
		}
		out = append(out, s)
	}
	sort.Slice(out, func(i, j int) bool {
		if !out[i].Started.Equal(out[j].Started) {
			return out[i].Started.After(out[j].Started)
		}
		return out[i].ID.Hex() < out[j].ID.Hex()
	})
	return out, nil
}

// OpenRun reads the attestation of the run directory dir (not verified:
// nothing is trusted here), saying so when dir is no run directory at
// all, and that the run is damaged when its attestation cannot be read.
func OpenRun(dir string) (*attest.Attestation, error) {
	if _, err := os.Lstat(filepath.Join(dir, verify.FileAttestation)); errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("%s is not a run directory: it holds no %s: %w", dir, verify.FileAttestation, os.ErrNotExist)
	}
	a, err := readAttestation(dir)
	if err != nil {
		return nil, Damaged(dir, verify.FileAttestation, err)
	}
	return a, nil
}

// Damaged is the error for a file of a run directory that cannot be used.
func Damaged(dir, file string, err error) error {
	return fmt.Errorf("run %s is damaged: %s: %w", dir, file, err)
}

// readAttestation parses a run's attestation; an untrusted signer is not an
// error here (nothing is trusted), any other failure is.
func readAttestation(dir string) (*attest.Attestation, error) {
	b, err := os.ReadFile(filepath.Join(dir, verify.FileAttestation))
	if err != nil {
		return nil, err
	}
	a, err := attest.Verify(b, key.Trust{})
	if a != nil {
		return a, nil
	}
	return nil, err
}

// ErrAmbiguous is wrapped when a run prefix matches several runs.
var ErrAmbiguous = errors.New("ambiguous run reference")

// Resolve turns a run reference into its directory: "last" (the newest
// run), a run id (b3:<hex>, or its hex, or a unique hex prefix of at
// least 6 digits), or a directory path.
func (h *Host) Resolve(ref string) (string, error) {
	if fi, err := os.Stat(ref); err == nil && fi.IsDir() {
		return ref, nil
	}
	runs, err := h.Runs()
	if err != nil {
		return "", err
	}
	if ref == "last" {
		if len(runs) == 0 {
			return "", fmt.Errorf("no runs yet in %s: %w", h.Dir.Path("runs"), os.ErrNotExist)
		}
		return runs[0].Dir, nil
	}
	hex := strings.TrimPrefix(ref, addr.Prefix)
	if len(hex) < 6 {
		return "", fmt.Errorf("run %q: give \"last\", a directory, or at least 6 hex digits of a run id: %w", ref, os.ErrNotExist)
	}
	var match []string
	for _, r := range runs {
		if strings.HasPrefix(filepath.Base(r.Dir), hex) {
			match = append(match, r.Dir)
		}
	}
	switch len(match) {
	case 0:
		return "", fmt.Errorf("no run %q in %s (sandbox runs lists them): %w", ref, h.Dir.Path("runs"), os.ErrNotExist)
	case 1:
		return match[0], nil
	}
	ids := make([]string, len(match))
	for i, m := range match {
		ids[i] = filepath.Base(m)
	}
	sort.Strings(ids)
	return "", fmt.Errorf("%w: %q matches %d runs; give more digits: %s", ErrAmbiguous, ref, len(match), strings.Join(ids, ", "))
}
