package fuel

// immediates reads the immediates of the instruction whose opcode was just
// read, and sets its cost extras.
func immediates(r *reader, in *inst, importedFuncs uint32) error {
	op := in.op
	switch {
	case op == 0x00 || op == 0x01 || op == 0x05 || op == 0x0b || op == 0x0f || op == 0x1a || op == 0x1b:
		// unreachable nop else end return drop select
		return nil
	case op == 0x02 || op == 0x03 || op == 0x04:
		return blocktype(r)
	case op == 0x0c || op == 0x0d: // br, br_if
		_, err := r.u32()
		return err
	case op == 0x0e: // br_table
		n, err := r.u32()
		if err != nil {
			return err
		}
		for range n + 1 {
			if _, err := r.u32(); err != nil {
				return err
			}
		}
		return nil
	case op == 0x10: // call
		x, err := r.u32()
		if x < importedFuncs {
			in.cost += HostCallCost
		}
		return err
	case op == 0x11: // call_indirect typeidx tableidx
		if _, err := r.u32(); err != nil {
			return err
		}
		_, err := r.u32()
		return err
	case op == 0x1c: // select t*
		_, err := skipValtypes(r)
		return err
	case op >= 0x20 && op <= 0x26: // local.*, global.*, table.get/set
		_, err := r.u32()
		return err
	case op >= 0x28 && op <= 0x3e: // loads and stores
		return memarg(r)
	case op == 0x3f || op == 0x40: // memory.size, memory.grow
		in.grow = op == 0x40
		_, err := r.byte()
		return err
	case op == 0x41:
		return r.sleb(32)
	case op == 0x42:
		return r.sleb(64)
	case op == 0x43:
		_, err := r.bytes(4)
		return err
	case op == 0x44:
		_, err := r.bytes(8)
		return err
	case op >= 0x45 && op <= 0xc4: // numeric, sign extension
		return nil
	case op == 0xd0: // ref.null t
		_, err := r.byte()
		return err
	case op == 0xd1: // ref.is_null
		return nil
	case op == 0xd2: // ref.func
		_, err := r.u32()
		return err
	case op == 0xfc:
		return prefixFC(r, in)
	case op == 0xfd:
		return prefixFD(r, in)
	}
	r.i--
	return r.fail("unsupported opcode 0x%02x (only WebAssembly 2.0 can be metered)", op)
}

func blocktype(r *reader) error {
	if r.i >= len(r.b) {
		return r.fail("unexpected end")
	}
	switch r.b[r.i] {
	case 0x40, 0x7f, 0x7e, 0x7d, 0x7c, 0x7b, 0x70, 0x6f:
		r.i++
		return nil
	}
	return r.sleb(33) // a type index
}

func memarg(r *reader) error {
	align, err := r.u32()
	if err != nil {
		return err
	}
	if align >= 64 {
		return r.fail("memory index in memarg (multiple memories) is not supported")
	}
	_, err = r.u32()
	return err
}

func prefixFC(r *reader, in *inst) error {
	sub, err := r.u32()
	if err != nil {
		return err
	}
	in.sub = sub
	switch {
	case sub <= 7: // saturating truncation
		return nil
	case sub == 8: // memory.init dataidx 0x00
		if _, err := r.u32(); err != nil {
			return err
		}
		_, err = r.byte()
		return err
	case sub == 9: // data.drop
		_, err = r.u32()
		return err
	case sub == 10: // memory.copy 0x00 0x00
		in.bulk = true
		_, err = r.bytes(2)
		return err
	case sub == 11: // memory.fill 0x00
		in.bulk = true
		_, err = r.byte()
		return err
	case sub == 12 || sub == 14: // table.init elem table, table.copy table table
		if _, err := r.u32(); err != nil {
			return err
		}
		_, err = r.u32()
		return err
	case sub == 13 || sub == 15 || sub == 16 || sub == 17: // elem.drop, table.grow/size/fill
		_, err = r.u32()
		return err
	}
	return r.fail("unsupported 0xFC opcode %d", sub)
}

func prefixFD(r *reader, in *inst) error {
	sub, err := r.u32()
	if err != nil {
		return err
	}
	in.sub = sub
	switch {
	case sub <= 11 || sub == 92 || sub == 93: // v128 loads and stores
		return memarg(r)
	case sub == 12 || sub == 13: // v128.const, i8x16.shuffle
		_, err = r.bytes(16)
		return err
	case sub >= 21 && sub <= 34: // extract and replace lane
		_, err = r.byte()
		return err
	case sub >= 84 && sub <= 91: // load and store lane
		if err := memarg(r); err != nil {
			return err
		}
		_, err = r.byte()
		return err
	case sub <= 255:
		// Every other SIMD opcode of WebAssembly 2.0 has no immediate; the
		// numbering has gaps, which wazero's validation refuses.
		return nil
	}
	return r.fail("unsupported 0xFD opcode %d (relaxed SIMD is not WebAssembly 2.0)", sub)
}
