package detcbor

import (
	"bytes"
	"encoding/binary"
	"math"
	"strconv"
	"unicode/utf8"

	"github.com/opensubstrate/sandbox/reject"
)

// MaxDepth is the deepest nesting of arrays, maps and tags Check accepts.
const MaxDepth = 32

// Check reports whether b is exactly one core-deterministic CBOR data item.
// Errors are *reject.Error with Where set to the byte offset.
func Check(b []byte) error {
	c := checker{b: b}
	if err := c.item(0); err != nil {
		return err
	}
	if c.i != len(b) {
		return c.failAt(c.i, reject.Malformed, "%d trailing bytes after the data item", len(b)-c.i)
	}
	return nil
}

type checker struct {
	b []byte
	i int
}

func (c *checker) failAt(off int, code reject.Code, format string, args ...any) error {
	return reject.New(code, "offset "+strconv.Itoa(off), format, args...)
}

// head reads one initial byte and its argument. For additional information
// 31 it returns indef=true and no argument.
func (c *checker) head() (major byte, ai byte, arg uint64, indef bool, err error) {
	start := c.i
	if c.i >= len(c.b) {
		return 0, 0, 0, false, c.failAt(start, reject.Truncated, "input ends where a data item should start")
	}
	ib := c.b[c.i]
	c.i++
	major, ai = ib>>5, ib&0x1f
	var n int
	switch {
	case ai < 24:
		return major, ai, uint64(ai), false, nil
	case ai == 24:
		n = 1
	case ai == 25:
		n = 2
	case ai == 26:
		n = 4
	case ai == 27:
		n = 8
	case ai == 31:
		return major, ai, 0, true, nil
	default:
		return 0, 0, 0, false, c.failAt(start, reject.Malformed, "reserved additional information %d", ai)
	}
	if len(c.b)-c.i < n {
		return 0, 0, 0, false, c.failAt(start, reject.Truncated, "input ends inside a %d-byte argument", n)
	}
	p := c.b[c.i : c.i+n]
	c.i += n
	switch n {
	case 1:
		arg = uint64(p[0])
	case 2:
		arg = uint64(binary.BigEndian.Uint16(p))
	case 4:
		arg = uint64(binary.BigEndian.Uint32(p))
	case 8:
		arg = binary.BigEndian.Uint64(p)
	}
	if major == 7 {
		return major, ai, arg, false, nil // floats and simple values: checked by the caller
	}
	if min := [...]uint64{1: 24, 2: 0x100, 4: 0x10000, 8: 0x100000000}[n]; arg < min {
		return 0, 0, 0, false, c.failAt(start, reject.NonShortest, "argument %d is encoded in %d bytes; it fits a shorter head", arg, n)
	}
	return major, ai, arg, false, nil
}

func (c *checker) item(depth int) error {
	start := c.i
	if depth > MaxDepth {
		return c.failAt(start, reject.Malformed, "nesting deeper than %d", MaxDepth)
	}
	major, ai, arg, indef, err := c.head()
	if err != nil {
		return err
	}
	if indef {
		switch major {
		case 2, 3, 4, 5:
			return c.failAt(start, reject.Indefinite, "indefinite-length %s", [...]string{2: "byte string", 3: "text string", 4: "array", 5: "map"}[major])
		case 7:
			return c.failAt(start, reject.Malformed, "break code outside an indefinite-length item")
		default:
			return c.failAt(start, reject.Malformed, "additional information 31 is not allowed for major type %d", major)
		}
	}
	switch major {
	case 0, 1:
		return nil
	case 2, 3:
		if arg > uint64(len(c.b)-c.i) {
			return c.failAt(start, reject.Truncated, "string of %d bytes, %d remain", arg, len(c.b)-c.i)
		}
		s := c.b[c.i : c.i+int(arg)]
		c.i += int(arg)
		if major == 3 && !utf8.Valid(s) {
			return c.failAt(start, reject.Malformed, "text string is not valid UTF-8")
		}
		return nil
	case 4:
		if arg > uint64(len(c.b)-c.i) {
			return c.failAt(start, reject.Truncated, "array of %d items, %d bytes remain", arg, len(c.b)-c.i)
		}
		for k := uint64(0); k < arg; k++ {
			if err := c.item(depth + 1); err != nil {
				return err
			}
		}
		return nil
	case 5:
		if arg > uint64(len(c.b)-c.i)/2 {
			return c.failAt(start, reject.Truncated, "map of %d pairs, %d bytes remain", arg, len(c.b)-c.i)
		}
		var prev []byte
		for k := uint64(0); k < arg; k++ {
			ks := c.i
			if err := c.item(depth + 1); err != nil {
				return err
			}
			key := c.b[ks:c.i]
			if k > 0 {
				switch bytes.Compare(prev, key) {
				case 0:
					return c.failAt(ks, reject.DuplicateKey, "map key %x appears twice", key)
				case 1:
					return c.failAt(ks, reject.UnsortedKeys, "map key %x sorts before the key %x that precedes it", key, prev)
				}
			}
			prev = key
			if err := c.item(depth + 1); err != nil {
				return err
			}
		}
		return nil
	case 6:
		return c.item(depth + 1)
	default: // 7
		return c.simple(start, ai, arg)
	}
}

// simple checks major type 7: simple values and floats in shortest form.
func (c *checker) simple(start int, ai byte, arg uint64) error {
	switch ai {
	case 24:
		if arg < 32 {
			return c.failAt(start, reject.Malformed, "simple value %d must use the one-byte form", arg)
		}
	case 25:
		if isNaN16(uint16(arg)) && arg != 0x7e00 {
			return c.failAt(start, reject.NonShortest, "NaN must be encoded as f97e00")
		}
	case 26:
		f := math.Float32frombits(uint32(arg))
		if f != f {
			return c.failAt(start, reject.NonShortest, "NaN must be encoded as f97e00")
		}
		if fitsHalf(float64(f)) {
			return c.failAt(start, reject.NonShortest, "single-precision float %v fits half precision", f)
		}
	case 27:
		f := math.Float64frombits(arg)
		if f != f {
			return c.failAt(start, reject.NonShortest, "NaN must be encoded as f97e00")
		}
		if float64(float32(f)) == f {
			return c.failAt(start, reject.NonShortest, "double-precision float %v fits single precision", f)
		}
	}
	return nil
}

func isNaN16(h uint16) bool { return h&0x7c00 == 0x7c00 && h&0x03ff != 0 }

// fitsHalf reports whether f (not NaN) is exactly representable as an IEEE
// 754 half-precision float, subnormals and infinities included.
func fitsHalf(f float64) bool {
	if math.IsInf(f, 0) || f == 0 {
		return true
	}
	a := math.Abs(f)
	if a > 65504 {
		return false
	}
	// The smallest half subnormal is 2^-24; every half value is a multiple
	// of 2^-24, and normal halves carry 11 significant bits.
	frac, exp := math.Frexp(a) // a = frac * 2^exp, frac in [0.5, 1)
	if exp < -23 {
		return false
	}
	var bits int
	if exp >= -13 {
		bits = 11 // normal
	} else {
		bits = 11 - (-13 - exp) // subnormal: fewer significant bits
	}
	scaled := math.Ldexp(frac, bits)
	return scaled == math.Trunc(scaled)
}
