package wasm

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/tetratelabs/wazero"
	"github.com/tetratelabs/wazero/api"

	"github.com/opensubstrate/sandbox/internal/fuel"
	"github.com/opensubstrate/sandbox/tier"
)

// spinModule is (module (func (export "_start") (loop (br 0)))).
var spinModule = []byte{
	0x00, 0x61, 0x73, 0x6d, 0x01, 0x00, 0x00, 0x00,
	0x01, 0x04, 0x01, 0x60, 0x00, 0x00, // type: [] -> []
	0x03, 0x02, 0x01, 0x00, // one function of type 0
	0x07, 0x0a, 0x01, 0x06, '_', 's', 't', 'a', 'r', 't', 0x00, 0x00, // export _start
	0x0a, 0x09, 0x01, 0x07, 0x00, 0x03, 0x40, 0x0c, 0x00, 0x0b, 0x0b, // loop br 0 end end
}

// Probe earns the rung: it shows on this host that a spinning guest is
// stopped by fuel and by a deadline, that a module importing anything
// beyond WASI and the key-value module is refused, and that a path cannot
// be resolved out of a grant. Kept once available.
func (e *Executor) Probe(ctx context.Context) tier.Probe {
	return e.probe.Get(func() tier.Probe { return e.doProbe(ctx) })
}

func (e *Executor) doProbe(ctx context.Context) tier.Probe {
	inst, err := fuel.Instrument(spinModule)
	if err != nil {
		return tier.Probe{Reason: "instrumenting the probe module: " + err.Error()}
	}
	run := func(budget uint64, deadline time.Duration) (error, int64) {
		c, cancel := context.WithTimeout(ctx, deadline)
		defer cancel()
		rt := e.runtime(c, false, 0)
		defer rt.Close(context.Background())
		m, err := rt.InstantiateWithConfig(c, inst, wazero.NewModuleConfig().WithStartFunctions())
		if err != nil {
			return err, 0
		}
		g := m.ExportedGlobal(fuel.Export).(api.MutableGlobal)
		g.Set(budget)
		_, err = m.ExportedFunction("_start").Call(c)
		return err, int64(g.Get())
	}
	// Fuel: a small budget must trap with the counter below zero.
	err, left := run(1_000_000, 10*time.Second)
	if err == nil || left >= 0 {
		return tier.Probe{Reason: fmt.Sprintf("a spinning guest with 1e6 fuel was not stopped by fuel (err %v, fuel left %d)", err, left)}
	}
	// Deadline: an unlimited budget must be stopped by a 10 ms deadline (the same mechanism as any run's; short, because every host start runs it).
	t0 := time.Now()
	err, _ = run(1<<62, 10*time.Millisecond)
	if err == nil || !strings.Contains(err.Error(), "deadline") || time.Since(t0) > 5*time.Second {
		return tier.Probe{Reason: fmt.Sprintf("a spinning guest was not stopped by a 10 ms deadline (err %v after %v)", err, time.Since(t0))}
	}
	// Imports: a module importing env.f must be refused.
	rt := e.runtime(ctx, false, 0)
	defer rt.Close(context.Background())
	c, err := rt.CompileModule(ctx, importingModule)
	if err != nil {
		return tier.Probe{Reason: "compiling the import probe: " + err.Error()}
	}
	if checkImports(c) == nil {
		return tier.Probe{Reason: "a module importing env.f was not refused"}
	}
	// Paths: openat2(RESOLVE_BENEATH) must exist and refuse an escape.
	if err := probeBeneath(e.mkTemp); err != nil {
		return tier.Probe{Reason: err.Error()}
	}
	return tier.Probe{Available: true, Reason: "fuel and a 10 ms deadline stop a spinning guest; foreign imports are refused; openat2(RESOLVE_BENEATH) refuses a symlink out of a grant"}
}

// importingModule is (module (import "env" "f" (func))).
var importingModule = []byte{
	0x00, 0x61, 0x73, 0x6d, 0x01, 0x00, 0x00, 0x00,
	0x01, 0x04, 0x01, 0x60, 0x00, 0x00,
	0x02, 0x09, 0x01, 0x03, 'e', 'n', 'v', 0x01, 'f', 0x00, 0x00,
}
