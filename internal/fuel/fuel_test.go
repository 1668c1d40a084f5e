package fuel

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/tetratelabs/wazero"
	"github.com/tetratelabs/wazero/api"
)

// A tiny assembler for test modules.

type fn struct {
	typ    uint32
	locals []byte // encoded locals vector
	code   []byte // instructions including the final end
}

type mod struct {
	types   [][2][]byte // params, results
	imports []uint32    // imported functions ("env","f<i>") by type
	funcs   []fn
	exports map[string]uint32 // function exports
	memory  bool
	globals int // extra defined i32 globals
}

func vec(items ...[]byte) []byte {
	b := appendU32(nil, uint32(len(items)))
	for _, it := range items {
		b = append(b, it...)
	}
	return b
}

func (m mod) bytes() []byte {
	out := append([]byte{}, magic...)
	var ts [][]byte
	for _, t := range m.types {
		e := []byte{0x60}
		e = append(e, appendU32(nil, uint32(len(t[0])))...)
		e = append(e, t[0]...)
		e = append(e, appendU32(nil, uint32(len(t[1])))...)
		e = append(e, t[1]...)
		ts = append(ts, e)
	}
	out = appendSection(out, secType, vec(ts...))
	if len(m.imports) > 0 {
		var is [][]byte
		for i, t := range m.imports {
			e := append(appendU32(nil, 3), "env"...)
			name := "f" + string(rune('0'+i))
			e = append(e, appendU32(nil, uint32(len(name)))...)
			e = append(e, name...)
			e = append(e, 0x00)
			e = append(e, appendU32(nil, t)...)
			is = append(is, e)
		}
		out = appendSection(out, secImport, vec(is...))
	}
	var fs [][]byte
	for _, f := range m.funcs {
		fs = append(fs, appendU32(nil, f.typ))
	}
	out = appendSection(out, secFunction, vec(fs...))
	if m.memory {
		out = appendSection(out, secMemory, vec([]byte{0x00, 0x01}))
	}
	if m.globals > 0 {
		var gs [][]byte
		for range m.globals {
			gs = append(gs, []byte{0x7f, 0x01, 0x41, 0x00, 0x0b})
		}
		out = appendSection(out, secGlobal, vec(gs...))
	}
	var es [][]byte
	for name, idx := range m.exports {
		e := append(appendU32(nil, uint32(len(name))), name...)
		e = append(e, 0x00)
		es = append(es, append(e, appendU32(nil, idx)...))
	}
	if len(es) > 0 {
		out = appendSection(out, secExport, vec(es...))
	}
	var cs [][]byte
	for _, f := range m.funcs {
		body := append([]byte{}, f.locals...)
		if len(body) == 0 {
			body = []byte{0x00}
		}
		body = append(body, f.code...)
		cs = append(cs, append(appendU32(nil, uint32(len(body))), body...))
	}
	return appendSection(out, secCode, vec(cs...))
}

var (
	i32 = byte(0x7f)
	i64 = byte(0x7e)
)

// sumLoop: (func (param i32) (result i64) (local i64) loop ... ) adds the
// counter down to zero.
var sumLoop = fn{typ: 0, locals: []byte{0x01, 0x01, i64}, code: []byte{
	0x02, 0x40, // block
	0x03, 0x40, // loop
	0x20, 0x00, 0x45, 0x0d, 0x01, // local.get 0; i32.eqz; br_if 1
	0x20, 0x01, 0x20, 0x00, 0xad, 0x7c, 0x21, 0x01, // acc += i64(n)
	0x20, 0x00, 0x41, 0x01, 0x6b, 0x21, 0x00, // n -= 1
	0x0c, 0x00, // br 0
	0x0b, 0x0b, // end loop, end block
	0x20, 0x01, 0x0b, // local.get 1; end
}}

type runner struct {
	t   *testing.T
	rt  wazero.Runtime
	mod api.Module
}

func instantiate(t *testing.T, wasm []byte, hostFns int) *runner {
	t.Helper()
	ctx := context.Background()
	rt := wazero.NewRuntimeWithConfig(ctx, wazero.NewRuntimeConfig().WithCloseOnContextDone(true))
	t.Cleanup(func() { rt.Close(ctx) })
	if hostFns > 0 {
		b := rt.NewHostModuleBuilder("env")
		for i := range hostFns {
			b.NewFunctionBuilder().WithFunc(func() {}).Export("f" + string(rune('0'+i)))
		}
		if _, err := b.Instantiate(ctx); err != nil {
			t.Fatal(err)
		}
	}
	inst, err := Instrument(wasm)
	if err != nil {
		t.Fatalf("Instrument: %v", err)
	}
	m, err := rt.Instantiate(ctx, inst)
	if err != nil {
		t.Fatalf("instantiate instrumented module: %v", err)
	}
	return &runner{t, rt, m}
}

func (r *runner) fuel() api.MutableGlobal {
	g, ok := r.mod.ExportedGlobal(Export).(api.MutableGlobal)
	if !ok {
		r.t.Fatal("no mutable fuel global")
	}
	return g
}

// call runs fn with a budget and returns the fuel used and the error.
func (r *runner) call(name string, budget int64, args ...uint64) (used int64, res []uint64, err error) {
	g := r.fuel()
	g.Set(uint64(budget))
	res, err = r.mod.ExportedFunction(name).Call(context.Background(), args...)
	return budget - int64(g.Get()), res, err
}

func TestLoopCostIsLinearAndDeterministic(t *testing.T) {
	m := mod{types: [][2][]byte{{{i32}, {i64}}}, funcs: []fn{sumLoop}, exports: map[string]uint32{"sum": 0}}
	r := instantiate(t, m.bytes(), 0)
	used0, _, err := r.call("sum", 1<<40, 0)
	if err != nil {
		t.Fatal(err)
	}
	used1000, res, err := r.call("sum", 1<<40, 1000)
	if err != nil || res[0] != 500500 {
		t.Fatalf("sum(1000) = %v, %v", res, err)
	}
	again, _, _ := r.call("sum", 1<<40, 1000)
	if again != used1000 {
		t.Fatalf("not deterministic: %d then %d", used1000, again)
	}
	used2000, _, _ := r.call("sum", 1<<40, 2000)
	per := (used1000 - used0) / 1000
	if per < 10 || used2000-used0 != 2000*per || (used1000-used0)%1000 != 0 {
		t.Fatalf("fuel not linear: 0→%d, 1000→%d, 2000→%d", used0, used1000, used2000)
	}
}

func TestInfiniteLoopRunsOutOfFuel(t *testing.T) {
	spin := fn{typ: 0, code: []byte{0x03, 0x40, 0x0c, 0x00, 0x0b, 0x0b}} // loop br 0 end end
	m := mod{types: [][2][]byte{{nil, nil}}, funcs: []fn{spin}, exports: map[string]uint32{"spin": 0}}
	r := instantiate(t, m.bytes(), 0)
	used, _, err := r.call("spin", 100_000)
	if err == nil || !strings.Contains(err.Error(), "unreachable") {
		t.Fatalf("spin returned %v", err)
	}
	if int64(r.fuel().Get()) >= 0 || used < 100_000 || used > 100_010 {
		t.Fatalf("used %d of 100000, fuel now %d", used, int64(r.fuel().Get()))
	}
}

func TestRecursionIsCheckedAtEntry(t *testing.T) {
	rec := fn{typ: 0, code: []byte{0x10, 0x00, 0x0b}} // call 0 (itself)
	m := mod{types: [][2][]byte{{nil, nil}}, funcs: []fn{rec}, exports: map[string]uint32{"rec": 0}}
	r := instantiate(t, m.bytes(), 0)
	_, _, err := r.call("rec", 1000)
	if err == nil || !strings.Contains(err.Error(), "unreachable") || int64(r.fuel().Get()) >= 0 {
		t.Fatalf("recursion: %v, fuel %d", err, int64(r.fuel().Get()))
	}
}

func TestHostCallsAndBulkMemoryCost(t *testing.T) {
	callHost := fn{typ: 0, code: []byte{0x10, 0x00, 0x0b}}                                       // call import 0
	fill := fn{typ: 1, code: []byte{0x41, 0x00, 0x41, 0x00, 0x20, 0x00, 0xfc, 0x0b, 0x00, 0x0b}} // memory.fill(0, 0, n)
	m := mod{
		types:   [][2][]byte{{nil, nil}, {{i32}, nil}},
		imports: []uint32{0},
		funcs:   []fn{callHost, fill},
		exports: map[string]uint32{"host": 1, "fill": 2},
		memory:  true,
	}
	r := instantiate(t, m.bytes(), 1)
	used, _, err := r.call("host", 1<<30)
	if err != nil {
		t.Fatal(err)
	}
	if used != 2+HostCallCost { // call + end, and the host call
		t.Fatalf("host call used %d", used)
	}
	small, _, _ := r.call("fill", 1<<30, 0)
	big, _, err := r.call("fill", 1<<30, 6400)
	if err != nil || big-small != 100 {
		t.Fatalf("memory.fill of 6400 bytes cost %d more than of 0 (%v)", big-small, err)
	}
}

func TestBranchesAndBlocks(t *testing.T) {
	// (func (param i32) (result i32) local.get 0 if (result i32) i32.const 1 else i32.const 2 i32.const 3 i32.add end)
	ifElse := fn{typ: 0, code: []byte{0x20, 0x00, 0x04, i32, 0x41, 0x01, 0x05, 0x41, 0x02, 0x41, 0x03, 0x6a, 0x0b, 0x0b}}
	m := mod{types: [][2][]byte{{{i32}, {i32}}}, funcs: []fn{ifElse}, exports: map[string]uint32{"f": 0}, globals: 2}
	r := instantiate(t, m.bytes(), 0)
	thenCost, res, err := r.call("f", 1000, 1)
	if err != nil || res[0] != 1 {
		t.Fatal(res, err)
	}
	elseCost, res, err := r.call("f", 1000, 0)
	if err != nil || res[0] != 5 {
		t.Fatal(res, err)
	}
	// entry: local.get, if (2); then: const, else (2); else: const, const, add, end (4); after: end (1)
	if thenCost != 2+2+1 || elseCost != 2+4+1 {
		t.Fatalf("then cost %d, else cost %d", thenCost, elseCost)
	}
	// The new global comes after the two defined ones.
	if r.mod.ExportedGlobal(Export) == nil {
		t.Fatal("fuel global not exported")
	}
}

func TestRefusals(t *testing.T) {
	m := mod{types: [][2][]byte{{nil, nil}}, funcs: []fn{{typ: 0, code: []byte{0x12, 0x00, 0x0b}}}} // return_call
	if _, err := Instrument(m.bytes()); !errors.Is(err, ErrModule) || !strings.Contains(err.Error(), "0x12") {
		t.Fatalf("return_call: %v", err)
	}
	ok := mod{types: [][2][]byte{{nil, nil}}, funcs: []fn{{typ: 0, code: []byte{0x0b}}}}
	once, err := Instrument(ok.bytes())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := Instrument(once); err == nil || !strings.Contains(err.Error(), "already exports") {
		t.Fatalf("twice: %v", err)
	}
	for _, bad := range [][]byte{nil, []byte("\x00asm\x02\x00\x00\x00"), append(ok.bytes(), 0x0a, 0x05)} {
		if _, err := Instrument(bad); !errors.Is(err, ErrModule) {
			t.Errorf("Instrument(%x) = %v", bad, err)
		}
	}
}

// FuzzInstrument: whatever the instrumenter accepts of a module that wazero
// accepts, wazero accepts too; it never panics.
func FuzzInstrument(f *testing.F) {
	f.Add(mod{types: [][2][]byte{{{i32}, {i64}}}, funcs: []fn{sumLoop}, exports: map[string]uint32{"sum": 0}}.bytes())
	f.Add(mod{types: [][2][]byte{{nil, nil}, {{i32}, nil}}, imports: []uint32{0},
		funcs:  []fn{{typ: 0, code: []byte{0x10, 0x00, 0x0b}}, {typ: 1, code: []byte{0x41, 0x00, 0x41, 0x00, 0x20, 0x00, 0xfc, 0x0b, 0x00, 0x0b}}},
		memory: true}.bytes())
	ctx := context.Background()
	rt := wazero.NewRuntimeWithConfig(ctx, wazero.NewRuntimeConfig().WithCloseOnContextDone(true))
	defer rt.Close(ctx)
	f.Fuzz(func(t *testing.T, wasm []byte) {
		out, err := Instrument(wasm)
		if err != nil {
			return
		}
		orig, err := rt.CompileModule(ctx, wasm)
		if err != nil {
			return
		}
		orig.Close(ctx)
		c, err := rt.CompileModule(ctx, out)
		if err != nil {
			t.Fatalf("valid module became invalid: %v", err)
		}
		c.Close(ctx)
	})
}

func TestRefusedGrowIsFlagged(t *testing.T) {
	// (func (param i32) (result i32) local.get 0 memory.grow)
	grow := fn{typ: 0, code: []byte{0x20, 0x00, 0x40, 0x00, 0x0b}}
	m := mod{types: [][2][]byte{{{i32}, {i32}}}, funcs: []fn{grow}, exports: map[string]uint32{"grow": 0}, memory: true}
	r := instantiate(t, m.bytes(), 0)
	oom := r.mod.ExportedGlobal(ExportOOM)
	_, res, err := r.call("grow", 1000, 1)
	if err != nil || int32(res[0]) != 1 || oom.Get() != 0 {
		t.Fatalf("grow(1) = %v, %v, oom %d", res, err, oom.Get())
	}
	_, res, err = r.call("grow", 1000, 70000) // beyond 4 GiB: refused
	if err != nil || int32(res[0]) != -1 || oom.Get() != 1 {
		t.Fatalf("grow(70000) = %v, %v, oom %d", res, err, oom.Get())
	}
}
