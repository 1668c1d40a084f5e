package fuel

import (
	"bytes"
	"errors"
	"fmt"
)

// Version names this instrumentation; it changes whenever the output of
// Instrument for the same input would, so caches of instrumented modules
// can be keyed by it.
const Version = "fuel1"

// Export is the name under which the fuel global is exported.
const Export = "__sandbox_fuel"

// ExportOOM is the name of the i32 global set to 1 when memory.grow is
// refused (returns -1), so that the host can tell a guest that died for
// want of memory from one that failed otherwise.
const ExportOOM = "__sandbox_oom"

// HostCallCost is the fuel charged for each call of an imported function,
// on top of the call instruction itself.
const HostCallCost = 100

// ErrModule is wrapped by every error about the input module.
var ErrModule = errors.New("fuel: cannot instrument module")

// Section ids.
const (
	secCustom    = 0
	secType      = 1
	secImport    = 2
	secFunction  = 3
	secTable     = 4
	secMemory    = 5
	secGlobal    = 6
	secExport    = 7
	secStart     = 8
	secElement   = 9
	secCode      = 10
	secData      = 11
	secDataCount = 12
	secTag       = 13
)

// order gives each known section's position in the binary format.
var order = map[byte]int{secType: 1, secImport: 2, secFunction: 3, secTable: 4, secMemory: 5, secTag: 6,
	secGlobal: 7, secExport: 8, secStart: 9, secElement: 10, secDataCount: 11, secCode: 12, secData: 13}

type section struct {
	id   byte
	body []byte
}

// reader reads the binary format.
type reader struct {
	b   []byte
	i   int
	off int // offset of b[0] in the whole module, for messages
}

func (r *reader) fail(format string, args ...any) error {
	return fmt.Errorf("%w: at byte %d: %s", ErrModule, r.off+r.i, fmt.Sprintf(format, args...))
}

func (r *reader) byte() (byte, error) {
	if r.i >= len(r.b) {
		return 0, r.fail("unexpected end")
	}
	c := r.b[r.i]
	r.i++
	return c, nil
}

func (r *reader) bytes(n int) ([]byte, error) {
	if n < 0 || n > len(r.b)-r.i {
		return nil, r.fail("unexpected end (want %d bytes)", n)
	}
	s := r.b[r.i : r.i+n]
	r.i += n
	return s, nil
}

// u32 reads an unsigned LEB128 of at most 32 bits.
func (r *reader) u32() (uint32, error) {
	var v uint64
	for shift := uint(0); ; shift += 7 {
		c, err := r.byte()
		if err != nil {
			return 0, err
		}
		if shift == 28 && c&0x70 != 0 {
			return 0, r.fail("u32 LEB128 out of range")
		}
		v |= uint64(c&0x7f) << shift
		if c&0x80 == 0 {
			return uint32(v), nil
		}
		if shift >= 28 {
			return 0, r.fail("u32 LEB128 too long")
		}
	}
}

// sleb skips a signed LEB128 of at most maxBits bits.
func (r *reader) sleb(maxBits uint) error {
	for n := uint(0); ; n++ {
		c, err := r.byte()
		if err != nil {
			return err
		}
		if c&0x80 == 0 {
			return nil
		}
		if (n+1)*7 >= maxBits+7 {
			return r.fail("signed LEB128 too long")
		}
	}
}

func (r *reader) name() (string, error) {
	n, err := r.u32()
	if err != nil {
		return "", err
	}
	b, err := r.bytes(int(n))
	return string(b), err
}

func appendU32(b []byte, v uint32) []byte {
	for {
		c := byte(v & 0x7f)
		v >>= 7
		if v != 0 {
			b = append(b, c|0x80)
			continue
		}
		return append(b, c)
	}
}

func appendS64(b []byte, v int64) []byte {
	for {
		c := byte(v & 0x7f)
		v >>= 7
		if (v == 0 && c&0x40 == 0) || (v == -1 && c&0x40 != 0) {
			return append(b, c)
		}
		b = append(b, c|0x80)
	}
}

func appendSection(out []byte, id byte, body []byte) []byte {
	out = append(out, id)
	out = appendU32(out, uint32(len(body)))
	return append(out, body...)
}

var magic = []byte{0x00, 0x61, 0x73, 0x6d, 0x01, 0x00, 0x00, 0x00}

func splitSections(wasm []byte) ([]section, error) {
	if len(wasm) < 8 || !bytes.Equal(wasm[:8], magic) {
		return nil, fmt.Errorf("%w: not a WebAssembly 1.0 binary (bad magic or version)", ErrModule)
	}
	r := &reader{b: wasm, i: 8}
	var secs []section
	last := 0
	for r.i < len(r.b) {
		id, err := r.byte()
		if err != nil {
			return nil, err
		}
		n, err := r.u32()
		if err != nil {
			return nil, err
		}
		body, err := r.bytes(int(n))
		if err != nil {
			return nil, err
		}
		if id != secCustom {
			pos, ok := order[id]
			if !ok {
				return nil, r.fail("unknown section id %d", id)
			}
			if pos <= last {
				return nil, r.fail("section %d out of order or repeated", id)
			}
			last = pos
		}
		secs = append(secs, section{id, body})
	}
	return secs, nil
}
