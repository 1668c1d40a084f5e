package wasm

import (
	"context"
	"io"
	"testing"
	"time"

	"github.com/tetratelabs/wazero"
	"github.com/tetratelabs/wazero/imports/wasi_snapshot_preview1"

	"github.com/opensubstrate/sandbox/internal/fuel"
	"github.com/opensubstrate/sandbox/internal/guestbuild"
)

func cGuest(b testing.TB, name string) []byte {
	b.Helper()
	return guestbuild.Read(b, guestbuild.C, name)
}

// plainRun runs a module under plain wazero (no broker, no fuel), with a
// compilation cache, as the baseline.
func plainRun(b *testing.B, rt wazero.Runtime, c wazero.CompiledModule, args ...string) {
	m, err := rt.InstantiateModule(context.Background(), c, wazero.NewModuleConfig().WithArgs(args...).WithStdout(io.Discard).WithName(""))
	if err != nil {
		b.Fatal(err)
	}
	m.Close(context.Background())
}

// BenchmarkCPUGuest compares the CPU-bound C guest instrumented for fuel
// with the same module uninstrumented, both compiled once, under wazero.
func BenchmarkCPUGuest(b *testing.B) {
	img := cGuest(b, "cpu")
	inst, err := fuel.Instrument(img)
	if err != nil {
		b.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		mod  []byte
	}{{"uninstrumented", img}, {"instrumented", inst}} {
		b.Run(tc.name, func(b *testing.B) {
			ctx := context.Background()
			rt := wazero.NewRuntimeWithConfig(ctx, wazero.NewRuntimeConfig().WithCloseOnContextDone(true))
			defer rt.Close(ctx)
			wasi_snapshot_preview1.MustInstantiate(ctx, rt)
			c, err := rt.CompileModule(ctx, tc.mod)
			if err != nil {
				b.Fatal(err)
			}
			b.ResetTimer()
			for b.Loop() {
				m, err := rt.InstantiateModule(ctx, c, wazero.NewModuleConfig().WithArgs("cpu", "20000000").WithStdout(io.Discard).WithName("").WithStartFunctions())
				if err != nil {
					b.Fatal(err)
				}
				if g := m.ExportedGlobal(fuel.Export); g != nil {
					g.(interface{ Set(uint64) }).Set(1 << 62)
				}
				if _, err := m.ExportedFunction("_start").Call(ctx); err != nil {
					b.Fatal(err)
				}
				m.Close(ctx)
			}
		})
	}
}

// BenchmarkFuelRate reports how much fuel the CPU-bound guest burns per
// second of one core: the calibration input of DefaultModel.
func BenchmarkFuelRate(b *testing.B) {
	img := cGuest(b, "cpu")
	var fuelUsed uint64
	var spent time.Duration
	for b.Loop() {
		t0 := time.Now()
		r := execute(b, img, nil, nil, 0, "20000000")
		spent += time.Since(t0)
		if r.err != nil {
			b.Fatal(r.err)
		}
		fuelUsed += *r.res.Fuel
	}
	b.ReportMetric(float64(fuelUsed)/spent.Seconds(), "fuel/s")
}

// BenchmarkHelloSealedVsPlain is in package host (a sealed run needs it);
// this is the plain-wazero half, for reference.
func BenchmarkHelloPlainWazero(b *testing.B) {
	img := goGuest(b, "hello")
	ctx := context.Background()
	cache := wazero.NewCompilationCache()
	rt := wazero.NewRuntimeWithConfig(ctx, wazero.NewRuntimeConfig().WithCompilationCache(cache).WithCloseOnContextDone(true))
	defer rt.Close(ctx)
	wasi_snapshot_preview1.MustInstantiate(ctx, rt)
	c, err := rt.CompileModule(ctx, img)
	if err != nil {
		b.Fatal(err)
	}
	for b.Loop() {
		plainRun(b, rt, c, "hello")
	}
}
