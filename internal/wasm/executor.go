package wasm

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/tetratelabs/wazero"
	"github.com/tetratelabs/wazero/api"
	"github.com/tetratelabs/wazero/experimental/sysfs"
	"github.com/tetratelabs/wazero/imports/wasi_snapshot_preview1"
	"github.com/tetratelabs/wazero/sys"

	"github.com/opensubstrate/sandbox/addr"
	"github.com/opensubstrate/sandbox/attest"
	"github.com/opensubstrate/sandbox/device"
	"github.com/opensubstrate/sandbox/energy"
	"github.com/opensubstrate/sandbox/internal/crash"
	"github.com/opensubstrate/sandbox/internal/executor"
	"github.com/opensubstrate/sandbox/internal/fuel"
	"github.com/opensubstrate/sandbox/internal/hostpath"
	"github.com/opensubstrate/sandbox/internal/state"
	"github.com/opensubstrate/sandbox/internal/unit"
	"github.com/opensubstrate/sandbox/receipt"
	"github.com/opensubstrate/sandbox/tier"
)

var errNotSupported = errors.New("not supported on this platform")

// Model converts fuel to energy. It is a model, not a measurement: the
// figure it gives is tagged ModelBased, with the model's name and
// calibration in its basis.
type Model struct {
	Name              string
	NanojoulesPerFuel uint64
	Calibration       string
}

// DefaultModel is calibrated in docs/s2.md: on the reference machine
// (AMD EPYC, 2 vCPUs) the CPU-bound guest burns about 2.0e9 fuel per
// second of one CPU (BenchmarkFuelRate), and a CPU is taken to draw 4 W
// (the meter's assumption for an unknown model; not a measurement), so one
// fuel costs about 2 nJ.
var DefaultModel = Model{
	Name:              "wasm-fuel/1",
	NanojoulesPerFuel: 2,
	Calibration:       "2.0e9 fuel/s per CPU measured on an AMD EPYC host (BenchmarkFuelRate) × an assumed 4 W per CPU",
}

// Energy returns the model's figure for fuel, rounded to the nearest µJ.
func (m Model) Energy(f uint64) energy.Microjoules {
	return energy.Microjoules((f*m.NanojoulesPerFuel + 500) / 1000)
}

// Fuel returns the fuel that budget buys.
func (m Model) Fuel(budget energy.Microjoules) uint64 {
	return uint64(budget) * 1000 / m.NanojoulesPerFuel
}

// Config configures the executor.
type Config struct {
	// CacheDir holds wazero's compilation cache; empty for none.
	CacheDir string
	// CacheKey is the MAC key of the on-disk caches (derive it from the
	// host key with CacheKeyContext); required with a CacheDir. A cache
	// entry that does not carry its MAC is discarded, never used.
	CacheKey [32]byte
	// Warn receives warnings (a discarded cache entry); nil drops them.
	Warn func(string)
	// StateDir is the host's state directory: no storage grant may
	// reach it, nor write sandbox's own binary. Default: CacheDir (the
	// part of it S2 keeps executable code in).
	StateDir string
	// MemoryLimitPages caps guest memory in 64 KiB pages (default 4096,
	// 256 MiB; Go guests need at least 38).
	MemoryLimitPages uint32
	Model            Model
	// TempName names the temporary things the executor makes (its probe's
	// directory) so that a collector can tell whose they are
	// (state.Lease.Name); nil gives random names, which nothing collects.
	TempName func(prefix string) string
}

// mkTemp makes a temporary directory under parent, named by TempName.
func (e *Executor) mkTemp(parent, prefix string) (string, error) {
	return state.MkdirNamed(parent, prefix, e.cfg.TempName)
}

// Executor runs WebAssembly units at S2. One wazero runtime, with WASI
// and the key-value module instantiated once, serves every run; each run's
// broker reaches the host functions through the call's context.
type Executor struct {
	cfg     Config
	cache   wazero.CompilationCache
	version string

	probe tier.Kept

	guardOnce sync.Once
	guardVal  hostpath.Guard
	guardErr  error

	mu       sync.Mutex
	rts      map[rtKey]*runtimeEntry // by memory limit in pages, and cache
	compiled map[compiledKey]wazero.CompiledModule

	compileMu sync.Mutex     // one compile at a time through the sealed cache
	sealed    *compiledCache // nil without a cache directory
}

// maxCompiled bounds the in-memory cache of compiled modules.
const maxCompiled = 16

// runtimeEntry is one long-lived runtime, for one memory limit.
type runtimeEntry struct {
	once sync.Once
	rt   wazero.Runtime
	err  error
}

// rtKey names a long-lived runtime: its memory limit, and whether it
// compiles through the on-disk cache.
type rtKey struct {
	pages    uint32
	uncached bool
}

// compiledKey names a compiled module: its image in a runtime.
type compiledKey struct {
	rtKey
	image addr.Addr
}

// shared returns the executor's long-lived runtime for a memory limit in
// pages (a run's limit is sealed with its unit, and replay applies it).
func (e *Executor) shared(k rtKey) (wazero.Runtime, error) {
	e.mu.Lock()
	if e.rts == nil {
		e.rts = map[rtKey]*runtimeEntry{}
	}
	en, ok := e.rts[k]
	if !ok {
		en = &runtimeEntry{}
		e.rts[k] = en
	}
	e.mu.Unlock()
	en.once.Do(func() {
		ctx := context.Background()
		rt := e.runtime(ctx, !k.uncached, k.pages)
		if _, err := wasi_snapshot_preview1.Instantiate(ctx, rt); err != nil {
			en.err = fmt.Errorf("wasm: wasi: %w", err)
			return
		}
		if err := instantiateKV(ctx, rt); err != nil {
			en.err = err
			return
		}
		en.rt = rt
	})
	return en.rt, en.err
}

// What S2 is, by the executor contract. Its sandboxes run each exec as
// a run of its own (parked, not frozen): it opens no sessions.
var (
	_ executor.Executor = (*Executor)(nil)
	_ executor.Limiter  = (*Executor)(nil)
	_ io.Closer         = (*Executor)(nil)
)

// Close releases the runtimes and their compiled modules.
func (e *Executor) Close() error {
	e.mu.Lock()
	defer e.mu.Unlock()
	var first error
	for _, en := range e.rts {
		if en.rt != nil {
			if err := en.rt.Close(context.Background()); err != nil && first == nil {
				first = err
			}
		}
	}
	return first
}

// compile returns the instrumented, compiled module for image, from memory,
// from the on-disk caches (checked: cache.go), or fresh.
func (e *Executor) compile(ctx context.Context, k rtKey, a addr.Addr, image []byte) (wazero.Runtime, wazero.CompiledModule, error) {
	rt, err := e.shared(k)
	if err != nil {
		return nil, nil, err
	}
	key := compiledKey{k, a}
	e.mu.Lock()
	c, ok := e.compiled[key]
	e.mu.Unlock()
	if ok {
		return rt, c, nil
	}
	inst, err := e.instrumented(a, image)
	if err != nil {
		return nil, nil, fmt.Errorf("%w: it is not a valid WebAssembly module: %w", executor.ErrNotExecutable, err)
	}
	if k.uncached || e.cache == nil {
		c, err = rt.CompileModule(ctx, inst)
	} else if c, err = e.compileSealed(ctx, rt, inst); err != nil {
		// The on-disk cache may be what failed (a full or read-only
		// disk): compile without it. If that works, the run goes on,
		// and the caller is told the cache was skipped.
		k.uncached = true
		urt, uc, uerr := e.compile(ctx, k, a, image)
		if uerr == nil {
			e.warn(fmt.Sprintf("the compilation cache could not be used (%v); compiled without it", err))
		}
		return urt, uc, uerr
	}
	if err != nil {
		return nil, nil, fmt.Errorf("%w: wasm: compile: %w", executor.ErrNotExecutable, err)
	}
	if err := checkImports(c); err != nil {
		c.Close(ctx)
		return nil, nil, fmt.Errorf("%w: %w", executor.ErrNotExecutable, err)
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.compiled == nil {
		e.compiled = map[compiledKey]wazero.CompiledModule{}
	}
	if len(e.compiled) >= maxCompiled {
		for k := range e.compiled { // evict one; running instances keep their own reference
			delete(e.compiled, k)
			break
		}
	}
	e.compiled[key] = c
	return rt, c, nil
}

// compileSealed compiles through wazero's file cache only after every
// entry in it has been checked, and seals what the compile added.
func (e *Executor) compileSealed(ctx context.Context, rt wazero.Runtime, inst []byte) (wazero.CompiledModule, error) {
	if e.sealed == nil {
		return rt.CompileModule(ctx, inst)
	}
	e.compileMu.Lock()
	defer e.compileMu.Unlock()
	unlock, err := e.sealed.lock()
	if err != nil {
		return nil, fmt.Errorf("lock the compilation cache: %w", err)
	}
	defer unlock()
	if err := e.sealed.check(false); err != nil {
		return nil, fmt.Errorf("check the compilation cache: %w", err)
	}
	c, err := rt.CompileModule(ctx, inst)
	if err == nil {
		e.sealed.check(true)
	} else {
		e.sealed.dropTemps()
	}
	return c, err
}

// instrumented returns the fuel-instrumented image, cached on disk by the
// image's address when a cache directory is configured, under the host's
// MAC (cache.go).
func (e *Executor) instrumented(a addr.Addr, image []byte) ([]byte, error) {
	if e.cfg.CacheDir == "" {
		return fuel.Instrument(image)
	}
	if b := e.loadInstrumented(a); b != nil {
		return b, nil
	}
	inst, err := fuel.Instrument(image)
	if err != nil {
		return nil, err
	}
	e.storeInstrumented(a, inst)
	return inst, nil
}

// guard is what no storage grant may reach: the state directory (which
// holds the compilation caches) and sandbox's own binary. Made once.
func (e *Executor) guard() (hostpath.Guard, error) {
	e.guardOnce.Do(func() {
		state := e.cfg.StateDir
		if state == "" {
			state = e.cfg.CacheDir
		}
		exe, _ := os.Executable()
		e.guardVal, e.guardErr = hostpath.NewGuard(state, exe)
	})
	return e.guardVal, e.guardErr
}

// New returns an executor.
func New(cfg Config) (*Executor, error) {
	if cfg.MemoryLimitPages == 0 {
		cfg.MemoryLimitPages = 4096
	}
	if cfg.MemoryLimitPages < 38 {
		return nil, fmt.Errorf("wasm: memory limit of %d pages is below the 38 a Go guest needs", cfg.MemoryLimitPages)
	}
	if cfg.Model.NanojoulesPerFuel == 0 {
		cfg.Model = DefaultModel
	}
	e := &Executor{cfg: cfg, version: wazeroVersion()}
	if cfg.CacheDir != "" && cfg.CacheKey == ([32]byte{}) {
		return nil, fmt.Errorf("wasm: a cache directory needs a cache key: cached machine code is used only under the host's MAC")
	}
	if cfg.CacheDir != "" {
		// The cache is keyed by wazero's version, which is "dev" in test
		// binaries: keep one directory per dependency version instead.
		dir := filepath.Join(cfg.CacheDir, "wazero-"+e.version)
		if err := os.MkdirAll(dir, 0o700); err != nil {
			return nil, err
		}
		c, err := wazero.NewCompilationCacheWithDir(dir)
		if err != nil {
			return nil, fmt.Errorf("wasm: compilation cache: %w", err)
		}
		e.cache = c
		e.sealed = &compiledCache{dir: dir, key: cfg.CacheKey, warn: e.warn}
	}
	return e, nil
}

func wazeroVersion() string {
	if bi, ok := debug.ReadBuildInfo(); ok {
		for _, d := range bi.Deps {
			if d.Path == "github.com/tetratelabs/wazero" {
				return d.Version
			}
		}
	}
	return "unknown"
}

// DefaultLimits are the limits a run gets from this executor's
// configuration, as a unit records them.
func (e *Executor) DefaultLimits() unit.Limits {
	return unit.Limits{MemoryPages: int64(e.cfg.MemoryLimitPages)}
}

// Name names the executor and its engine version.
func (e *Executor) Name() string { return "wazero/" + e.version }

// Tier is S2.
func (e *Executor) Tier() tier.Tier { return tier.S2 }

// Kind is wasm.
func (e *Executor) Kind() tier.Kind { return tier.Wasm }

// runtime makes a runtime, with the on-disk compilation cache when
// withCache (only the shared runtime: its compiles go through
// compileSealed).
func (e *Executor) runtime(ctx context.Context, withCache bool, pages uint32) wazero.Runtime {
	if pages == 0 {
		pages = e.cfg.MemoryLimitPages
	}
	cfg := wazero.NewRuntimeConfig().
		WithCloseOnContextDone(true).
		WithMemoryLimitPages(pages).
		WithCoreFeatures(api.CoreFeaturesV2)
	if withCache && e.cache != nil {
		cfg = cfg.WithCompilationCache(e.cache)
	}
	return wazero.NewRuntimeWithConfig(ctx, cfg)
}

// Run executes the job's module to completion, a deadline, cancellation or
// the end of its fuel.
func (e *Executor) Run(ctx context.Context, j *executor.Job) (*executor.Result, error) {
	if len(j.Grants.Net) > 0 {
		return nil, fmt.Errorf("S2 cannot honour network grants (%s): WASI preview 1 has no way to open a connection; run the program natively (S1) for network access", j.Grants.Net[0])
	}
	budget, ok := j.Grants.Budget(device.CPU)
	if !ok {
		return nil, fmt.Errorf("a wasm unit runs on fuel bought from a Cpu compute grant; add one, e.g. --grant cpu:10J")
	}
	fuelBudget := e.cfg.Model.Fuel(budget)
	if fuelBudget > 1<<62 {
		fuelBudget = 1 << 62
	}
	pages := e.cfg.MemoryLimitPages
	if p := j.Unit.Limits.MemoryPages; p > 0 {
		if p < 38 || p > 65536 {
			return nil, fmt.Errorf("wasm: a memory limit of %d pages is outside 38..65536", p)
		}
		pages = uint32(p)
	}
	ia := j.ImageAddr
	if ia.IsZero() {
		ia = addr.Of(j.Image)
	}
	rt, compiled, err := e.compile(ctx, rtKey{pages: pages}, ia, j.Image)
	if err != nil {
		if errors.Is(err, executor.ErrNotExecutable) {
			return nil, fmt.Errorf("%s (%s) %w", j.Unit.Entry, ia, err)
		}
		return nil, err
	}

	runCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	if j.Deadline > 0 {
		var c2 context.CancelFunc
		runCtx, c2 = context.WithTimeout(runCtx, j.Deadline)
		defer c2()
	}
	b := newBroker(j.Enforcer, j.Record, j.Replay, j.UnitAddr, cancel)
	b.kv = j.KV
	if j.Continue != nil {
		if j.Replay == nil {
			return nil, fmt.Errorf("wasm: a continuation replays its parked part: it needs its journal")
		}
		b.cont, b.live = j.Continue, j.Live
	}
	runCtx = context.WithValue(runCtx, brokerKey{}, b)
	var host hostFS
	if j.Replay == nil || j.Continue != nil {
		guard, err := e.guard()
		if err != nil {
			return nil, err
		}
		if host, err = newHostFS(j.Enforcer, j.Grants.Storage, j.Remap, guard); err != nil {
			return nil, err
		}
	}
	bfs := newBrokerFS(b, host, j.Grants.Storage)
	b.fs = bfs
	defer bfs.closeAll()

	fsCfg := wazero.NewFSConfig().(sysfs.FSConfig).WithSysFSMount(bfs, "/")
	mc := wazero.NewModuleConfig().
		WithName("").
		WithArgs(j.Unit.Args...).
		WithStdout(outWriter{b, j.Stdout}).
		WithStderr(outWriter{b, j.Stderr}).
		WithFSConfig(fsCfg).
		WithWalltime(b.walltime, 1).
		WithNanotime(b.nanotime, 1).
		WithNanosleep(b.nanosleep).
		WithOsyield(func() {}).
		WithRandSource(b).
		WithStartFunctions() // _start is called below, after the fuel is set
	if j.Stdin != nil {
		mc = mc.WithStdin(j.Stdin)
	}
	keys := make([]string, 0, len(j.Unit.Env))
	for k := range j.Unit.Env {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		mc = mc.WithEnv(k, j.Unit.Env[k])
	}

	res := &executor.Result{Executor: e.Name(), Start: time.Now()}
	mod, err := rt.InstantiateModule(runCtx, compiled, mc)
	if err != nil {
		return nil, fmt.Errorf("wasm: instantiate: %w", err)
	}
	fuelG, _ := mod.ExportedGlobal(fuel.Export).(api.MutableGlobal)
	oomG := mod.ExportedGlobal(fuel.ExportOOM)
	fuelG.Set(fuelBudget)
	start := mod.ExportedFunction("_start")
	if start == nil {
		return nil, fmt.Errorf("%w: wasm: the module exports no _start function (a WASI command is required)", executor.ErrNotExecutable)
	}
	b.mu.Lock()
	b.mod, b.fuel = mod, fuelG
	b.mu.Unlock()
	if j.OnStart != nil && (j.Replay == nil || j.Continue != nil) {
		j.OnStart(executor.Control{Park: b.requestPark})
	}
	crash.At(crash.Started)
	callErr := e.call(runCtx, start, j, res)
	res.End = time.Now()
	if p := b.Parked(); p != nil {
		// Not over: what it used so far is the park's; the continuation
		// counts it again, from the start, as an unparked run would.
		p.Fuel = fuelBudget - p.Fuel
		res.Parked = p
		res.Outcome = attest.Outcome{Status: attest.Killed, Detail: fmt.Sprintf("parked after %d host calls", p.Boundary)}
		mod.Close(context.Background())
		return res, nil
	}
	if b.cont != nil && b.Err() == nil {
		b.fail(&ParkDivergence{Detail: fmt.Sprintf("the replay ended (%v) before host call %d, where the run was parked", callErr, b.cont.Boundary+1)})
	}
	left := int64(fuelG.Get())
	used := uint64(int64(fuelBudget) - left)
	if used > 0 { // a run stopped before its first instruction counted none: no fuel (docs/spec/canonical.md)
		res.Fuel = &used
	}
	oom := oomG != nil && oomG.Get() != 0
	res.Outcome = outcome(callErr, left < 0, oom, b.Err(), ctx.Err())
	mod.Close(context.Background())

	// The run's Cpu figure is its fuel, priced as the budget bought it:
	// never more than the budget. (The host shows the meter's figure
	// beside it.)
	res.Readings = map[device.Class][]receipt.Reading{device.CPU: {{
		Provenance: receipt.ModelBased, Scope: receipt.ScopeRun, Source: e.cfg.Model.Name,
		StartNS: uint64(res.Start.UnixNano()), EndNS: uint64(res.End.UnixNano()),
		UJ:    e.cfg.Model.Energy(used),
		Basis: fmt.Sprintf("fuel %d × %d nJ per fuel (model %s: %s)", used, e.cfg.Model.NanojoulesPerFuel, e.cfg.Model.Name, e.cfg.Model.Calibration),
	}}}
	if err := b.Err(); err != nil && j.Replay != nil {
		return res, err
	}
	return res, nil
}

// call runs _start on a locked OS thread, so that the guest's CPU time can
// be attributed: the thread is placed in the run's cgroup when the host
// can, and its own CPU clock is read around the call either way.
func (e *Executor) call(ctx context.Context, start api.Function, j *executor.Job, res *executor.Result) error {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	tid := gettid()
	var restore func() error
	if j.Cgroup != nil && tid > 0 {
		if r, err := j.Cgroup.AddThread(tid); err == nil {
			restore, res.Placed = r, true
		}
	}
	t0, ok0 := threadCPU()
	_, err := start.Call(ctx)
	t1, ok1 := threadCPU()
	if restore != nil {
		restore()
	}
	if ok0 && ok1 {
		res.ThreadCPU, res.ThreadCPUKnown = t1-t0, true
	}
	return err
}

// outcome classifies how _start returned.
func outcome(err error, outOfFuel, oom bool, journalErr, parentErr error) attest.Outcome {
	var exit *sys.ExitError
	switch {
	case err == nil:
		zero := 0
		return attest.Outcome{Status: attest.Exited, ExitCode: &zero}
	case errors.As(err, &exit):
		switch code := exit.ExitCode(); code {
		case sys.ExitCodeDeadlineExceeded:
			return attest.Outcome{Status: attest.Deadline, Detail: "the wall-clock deadline passed"}
		case sys.ExitCodeContextCanceled:
			if journalErr != nil {
				return attest.Outcome{Status: attest.Failed, Detail: journalErr.Error()}
			}
			return attest.Outcome{Status: attest.Killed, Detail: "cancelled"}
		default:
			c := int(code)
			if oom && c != 0 {
				return attest.Outcome{Status: attest.OutOfMem, Detail: fmt.Sprintf("memory.grow was refused at the memory cap; the guest then exited with status %d", c)}
			}
			return attest.Outcome{Status: attest.Exited, ExitCode: &c}
		}
	case outOfFuel:
		return attest.Outcome{Status: attest.OutOfFuel, Detail: "the fuel bought by the Cpu grant ran out"}
	case oom:
		return attest.Outcome{Status: attest.OutOfMem, Detail: "memory.grow was refused at the memory cap, then the guest trapped"}
	}
	msg := err.Error()
	if i := strings.IndexByte(msg, '\n'); i >= 0 {
		msg = msg[:i]
	}
	return attest.Outcome{Status: attest.Trapped, Detail: msg}
}

// checkImports refuses a module that imports anything but WASI preview 1
// and the key-value module, before it runs.
func checkImports(c wazero.CompiledModule) error {
	for _, f := range c.ImportedFunctions() {
		mod, name, _ := f.Import()
		if mod != wasi_snapshot_preview1.ModuleName && mod != kvModule {
			return fmt.Errorf("wasm: the module imports %s.%s; S2 provides only %s and %s", mod, name, wasi_snapshot_preview1.ModuleName, kvModule)
		}
	}
	if len(c.ImportedMemories()) > 0 {
		return fmt.Errorf("wasm: the module imports a memory; S2 modules define their own")
	}
	return nil
}
