package fuel

import (
	"fmt"
)

// Instrument returns wasm rewritten to meter its own execution (see the
// package documentation). It refuses modules it cannot meter completely.
func Instrument(wasm []byte) ([]byte, error) {
	secs, err := splitSections(wasm)
	if err != nil {
		return nil, err
	}
	if err := checkCounts(secs); err != nil {
		return nil, err
	}
	var (
		types                []uint32 // param count per type
		funcTypes            []uint32 // type index per defined function
		importedFuncs        uint32
		importedGlobals      uint32
		definedGlobals       uint32
		globalIdx, exportIdx = -1, -1
	)
	for i, s := range secs {
		r := &reader{b: s.body}
		switch s.id {
		case secType:
			if types, err = parseTypes(r); err != nil {
				return nil, err
			}
		case secImport:
			if importedFuncs, importedGlobals, err = parseImports(r); err != nil {
				return nil, err
			}
		case secFunction:
			n, err := r.u32()
			if err != nil {
				return nil, err
			}
			for range n {
				t, err := r.u32()
				if err != nil {
					return nil, err
				}
				funcTypes = append(funcTypes, t)
			}
		case secGlobal:
			if definedGlobals, err = r.u32(); err != nil {
				return nil, err
			}
			globalIdx = i
		case secExport:
			if err := checkExports(r); err != nil {
				return nil, err
			}
			exportIdx = i
		}
	}
	g := importedGlobals + definedGlobals // index of the new global

	// The new globals: the fuel (i64) and the out-of-memory flag (i32),
	// mutable, initialised to 0, exported.
	newGlobal := []byte{0x7e, 0x01, 0x42, 0x00, 0x0b, 0x7f, 0x01, 0x41, 0x00, 0x0b}
	var newExport []byte
	for i, name := range []string{Export, ExportOOM} {
		newExport = appendU32(newExport, uint32(len(name)))
		newExport = append(newExport, name...)
		newExport = append(newExport, 0x03) // global
		newExport = appendU32(newExport, g+uint32(i))
	}

	var out []byte
	out = append(out, magic...)
	insertedGlobal, insertedExport := globalIdx >= 0, exportIdx >= 0
	emitMissing := func(before byte) {
		pos, known := order[before]
		if !insertedGlobal && (known && pos > order[secGlobal]) {
			out = appendSection(out, secGlobal, append(appendU32(nil, 2), newGlobal...))
			insertedGlobal = true
		}
		if !insertedExport && (known && pos > order[secExport]) {
			out = appendSection(out, secExport, append(appendU32(nil, 2), newExport...))
			insertedExport = true
		}
	}
	for _, s := range secs {
		if s.id != secCustom {
			emitMissing(s.id)
		}
		body := s.body
		switch s.id {
		case secGlobal:
			body, err = appendToVec(s.body, 2, newGlobal)
		case secExport:
			body, err = appendToVec(s.body, 2, newExport)
		case secCode:
			body, err = rewriteCode(s.body, types, funcTypes, importedFuncs, g)
		}
		if err != nil {
			return nil, err
		}
		out = appendSection(out, s.id, body)
	}
	if !insertedGlobal {
		out = appendSection(out, secGlobal, append(appendU32(nil, 2), newGlobal...))
	}
	if !insertedExport {
		out = appendSection(out, secExport, append(appendU32(nil, 2), newExport...))
	}
	return out, nil
}

// checkCounts refuses vector sections that claim more elements than they
// have bytes. Decoders (wazero's among them) size their tables from these
// counts, so a hostile module could otherwise make the host allocate
// gigabytes before anything else is checked.
func checkCounts(secs []section) error {
	for _, s := range secs {
		switch s.id {
		case secType, secImport, secFunction, secTable, secMemory, secGlobal, secExport, secElement, secCode, secData, secTag:
			r := &reader{b: s.body}
			n, err := r.u32()
			if err != nil {
				return err
			}
			if uint64(n) > uint64(len(s.body)-r.i) {
				return fmt.Errorf("%w: section %d claims %d entries in %d bytes", ErrModule, s.id, n, len(s.body))
			}
		}
	}
	return nil
}

// appendToVec adds k pre-encoded elements to a vector section body.
func appendToVec(body []byte, k uint32, elem []byte) ([]byte, error) {
	r := &reader{b: body}
	n, err := r.u32()
	if err != nil {
		return nil, err
	}
	out := appendU32(nil, n+k)
	out = append(out, body[r.i:]...)
	return append(out, elem...), nil
}

func parseTypes(r *reader) ([]uint32, error) {
	n, err := r.u32()
	if err != nil {
		return nil, err
	}
	var params []uint32
	for range n {
		form, err := r.byte()
		if err != nil {
			return nil, err
		}
		if form != 0x60 {
			return nil, r.fail("type form 0x%02x is not a function type (GC types are not supported)", form)
		}
		np, err := skipValtypes(r)
		if err != nil {
			return nil, err
		}
		if _, err := skipValtypes(r); err != nil {
			return nil, err
		}
		params = append(params, np)
	}
	return params, nil
}

func skipValtypes(r *reader) (uint32, error) {
	n, err := r.u32()
	if err != nil {
		return 0, err
	}
	for range n {
		if err := valtype(r); err != nil {
			return 0, err
		}
	}
	return n, nil
}

func valtype(r *reader) error {
	t, err := r.byte()
	if err != nil {
		return err
	}
	switch t {
	case 0x7f, 0x7e, 0x7d, 0x7c, 0x7b, 0x70, 0x6f:
		return nil
	}
	return r.fail("unsupported value type 0x%02x", t)
}

func limits(r *reader) error {
	flag, err := r.byte()
	if err != nil {
		return err
	}
	if flag > 3 {
		return r.fail("unsupported limits flag 0x%02x", flag)
	}
	if _, err := r.u32(); err != nil {
		return err
	}
	if flag&1 != 0 {
		_, err = r.u32()
	}
	return err
}

func parseImports(r *reader) (funcs, globals uint32, err error) {
	n, err := r.u32()
	if err != nil {
		return 0, 0, err
	}
	for range n {
		if _, err := r.name(); err != nil {
			return 0, 0, err
		}
		if _, err := r.name(); err != nil {
			return 0, 0, err
		}
		kind, err := r.byte()
		if err != nil {
			return 0, 0, err
		}
		switch kind {
		case 0x00:
			_, err = r.u32()
			funcs++
		case 0x01:
			if err = valtype(r); err == nil {
				err = limits(r)
			}
		case 0x02:
			err = limits(r)
		case 0x03:
			if err = valtype(r); err == nil {
				_, err = r.byte()
			}
			globals++
		default:
			return 0, 0, r.fail("unsupported import kind 0x%02x", kind)
		}
		if err != nil {
			return 0, 0, err
		}
	}
	return funcs, globals, nil
}

func checkExports(r *reader) error {
	n, err := r.u32()
	if err != nil {
		return err
	}
	for range n {
		name, err := r.name()
		if err != nil {
			return err
		}
		if name == Export {
			return fmt.Errorf("%w: it already exports %q (instrumented twice?)", ErrModule, Export)
		}
		if _, err := r.byte(); err != nil {
			return err
		}
		if _, err := r.u32(); err != nil {
			return err
		}
	}
	return nil
}

func rewriteCode(body []byte, types, funcTypes []uint32, importedFuncs, g uint32) ([]byte, error) {
	r := &reader{b: body}
	n, err := r.u32()
	if err != nil {
		return nil, err
	}
	if int(n) != len(funcTypes) {
		return nil, r.fail("code section has %d bodies for %d functions", n, len(funcTypes))
	}
	out := appendU32(nil, n)
	for i := range n {
		size, err := r.u32()
		if err != nil {
			return nil, err
		}
		start := r.i
		fb, err := r.bytes(int(size))
		if err != nil {
			return nil, err
		}
		t := funcTypes[i]
		if int(t) >= len(types) {
			return nil, r.fail("function %d has type %d of %d", i, t, len(types))
		}
		nb, err := rewriteBody(fb, start, types[t], importedFuncs, g)
		if err != nil {
			return nil, fmt.Errorf("function %d: %w", importedFuncs+i, err)
		}
		out = appendU32(out, uint32(len(nb)))
		out = append(out, nb...)
	}
	if r.i != len(r.b) {
		return nil, r.fail("trailing bytes in code section")
	}
	return out, nil
}

// inst is one decoded instruction.
type inst struct {
	start, end int // byte range in the body
	op         byte
	sub        uint32 // for 0xFC and 0xFD
	cost       int64
	split      bool // a metered block starts after this instruction
	check      bool // ...and it is a loop header: check the fuel there
	bulk       bool // memory.copy or memory.fill: charge by length
	grow       bool // memory.grow: flag a refusal
}

func rewriteBody(fb []byte, off int, nParams, importedFuncs, g uint32) ([]byte, error) {
	r := &reader{b: fb, off: off}
	// Locals.
	nl, err := r.u32()
	if err != nil {
		return nil, err
	}
	var total uint64
	for range nl {
		c, err := r.u32()
		if err != nil {
			return nil, err
		}
		if err := valtype(r); err != nil {
			return nil, err
		}
		total += uint64(c)
	}
	localsEnd := r.i
	if total+uint64(nParams) > 50000 {
		return nil, r.fail("too many locals")
	}

	var insts []inst
	depth := 0
	scratchNeeded := false
	for {
		if r.i >= len(fb) {
			return nil, r.fail("function body ends without its final end")
		}
		in := inst{start: r.i, cost: 1}
		op, _ := r.byte()
		in.op = op
		if err := immediates(r, &in, importedFuncs); err != nil {
			return nil, err
		}
		in.end = r.i
		switch op {
		case 0x02, 0x04: // block, if
			depth++
			in.split = op == 0x04
		case 0x03: // loop
			depth++
			in.split, in.check = true, true
		case 0x05: // else
			in.split = true
		case 0x0b: // end
			depth--
			in.split = depth >= 0
		}
		scratchNeeded = scratchNeeded || in.bulk || in.grow
		insts = append(insts, in)
		if depth < 0 {
			break
		}
	}
	if r.i != len(fb) {
		return nil, r.fail("bytes after the function's final end")
	}

	scratch := uint32(total) + nParams
	out := make([]byte, 0, len(fb)+len(fb)/2+32)
	if scratchNeeded {
		out = appendU32(out, nl+1)
		out = append(out, fb[len(appendU32(nil, nl)):localsEnd]...)
		out = append(out, 0x01, 0x7f) // one i32 scratch local
	} else {
		out = append(out, fb[:localsEnd]...)
	}
	// Emit, charging each metered block at its start.
	segStart, check := 0, true
	for k := 0; k <= len(insts); k++ {
		if k == len(insts) || (k > 0 && insts[k-1].split) {
			if k > segStart || k == len(insts) {
				// flush the previous segment [segStart, k)
				var cost int64
				for _, in := range insts[segStart:k] {
					cost += in.cost
				}
				out = charge(out, g, cost, check)
				for _, in := range insts[segStart:k] {
					if in.bulk {
						out = chargeBulk(out, g, scratch)
					}
					out = append(out, fb[in.start:in.end]...)
					if in.grow {
						out = flagRefusedGrow(out, g+1, scratch)
					}
				}
			}
			if k == len(insts) {
				break
			}
			segStart, check = k, insts[k-1].check
		}
	}
	return out, nil
}

// charge emits fuel -= cost, and when check is set, a trap if fuel < 0.
func charge(out []byte, g uint32, cost int64, check bool) []byte {
	if cost == 0 && !check {
		return out
	}
	out = append(out, 0x23) // global.get
	out = appendU32(out, g)
	out = append(out, 0x42) // i64.const
	out = appendS64(out, cost)
	out = append(out, 0x7d, 0x24) // i64.sub, global.set
	out = appendU32(out, g)
	if check {
		out = append(out, 0x23) // global.get
		out = appendU32(out, g)
		// i64.const 0; i64.lt_s; if (empty) unreachable end
		out = append(out, 0x42, 0x00, 0x53, 0x04, 0x40, 0x00, 0x0b)
	}
	return out
}

// chargeBulk emits, before memory.copy or memory.fill (whose length is on
// top of the stack), fuel -= length/64.
func chargeBulk(out []byte, g, scratch uint32) []byte {
	out = append(out, 0x22) // local.tee
	out = appendU32(out, scratch)
	out = append(out, 0x23) // global.get
	out = appendU32(out, g)
	out = append(out, 0x20) // local.get
	out = appendU32(out, scratch)
	// i64.extend_i32_u; i64.const 6; i64.shr_u; i64.sub; global.set
	out = append(out, 0xad, 0x42, 0x06, 0x88, 0x7d, 0x24)
	return appendU32(out, g)
}

// flagRefusedGrow emits, after memory.grow (whose result is on top of the
// stack), oom = 1 if the result is -1; the result stays on the stack.
func flagRefusedGrow(out []byte, oom, scratch uint32) []byte {
	out = append(out, 0x22) // local.tee
	out = appendU32(out, scratch)
	// i32.const -1; i32.eq; if (empty) i32.const 1; global.set oom; end
	out = append(out, 0x41, 0x7f, 0x46, 0x04, 0x40, 0x41, 0x01, 0x24)
	out = appendU32(out, oom)
	out = append(out, 0x0b, 0x20) // end; local.get
	return appendU32(out, scratch)
}
