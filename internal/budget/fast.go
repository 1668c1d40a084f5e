package budget

import (
	"bytes"
	"encoding/hex"
	"encoding/json"
	"slices"
	"strconv"

	"github.com/opensubstrate/sandbox/addr"
	"github.com/opensubstrate/sandbox/device"
	"github.com/opensubstrate/sandbox/energy"
)

// The hot entries (reserve, post, release) are written and read without
// the general canonical-JSON path: fastLine writes the bytes jcs.Marshal
// makes of their wire forms (a test holds it to that), and fastParse
// accepts a line only if it is byte for byte fastLine's of what it
// decodes to, so it accepts nothing the strict path would refuse. What
// it does not accept goes the strict path, which names what is wrong.

// fastLine is e's canonical line, for the hot ops; ok is false for the
// others, and for a value outside what it writes (an n of 2^53 or more).
func (e *entry) fastLine() ([]byte, bool) {
	if e.n > maxUJ {
		return nil, false
	}
	b := make([]byte, 0, 160+70*len(e.path))
	switch e.op {
	case opReserve:
		b = append(b, `{"at":"`...)
		b = strconv.AppendInt(b, e.at, 10)
		b = append(b, `","inv":`...)
		b = appendAddr(b, e.inv)
		b = appendN(append(b, ','), e.n)
		b = append(b, `,"op":"reserve","path":[`...)
		for i, a := range e.path {
			if i > 0 {
				b = append(b, ',')
			}
			b = appendAddr(b, a)
		}
		b = append(b, `],"uj":`...)
		b = appendUJ(b, e.uj)
		b = append(b, `,"until":"`...)
		b = strconv.AppendInt(b, e.until, 10)
		b = append(b, `"}`...)
	case opPost:
		b = appendN(append(b, '{'), e.n)
		b = append(b, `,"op":"post","run":`...)
		b = appendAddr(b, e.run)
		b = append(b, `,"uj":`...)
		b = append(appendUJ(b, e.uj), '}')
	case opRelease:
		b = appendN(append(b, '{'), e.n)
		b = append(b, `,"op":"release","why":"`...)
		b = append(b, e.why...)
		b = append(b, `"}`...)
	default:
		return nil, false
	}
	return b, true
}

func appendN(b []byte, n uint64) []byte {
	return strconv.AppendUint(append(b, `"n":`...), n, 10)
}

func appendAddr(b []byte, a addr.Addr) []byte {
	b = append(b, `"`+addr.Prefix...)
	b = hex.AppendEncode(b, a[:])
	return append(b, '"')
}

// appendUJ writes an energy map, its members sorted by name.
func appendUJ(b []byte, uj map[device.Class]energy.Microjoules) []byte {
	var keys [nClasses]device.Class
	cs := keys[:0]
	for c := range uj {
		cs = append(cs, c)
	}
	slices.Sort(cs)
	b = append(b, '{')
	for i, c := range cs {
		if i > 0 {
			b = append(b, ',')
		}
		b = append(b, '"')
		b = append(b, c...)
		b = append(b, `":`...)
		b = strconv.AppendUint(b, uint64(uj[c]), 10)
	}
	return append(b, '}')
}

// fastParse reads a hot entry from a line that passed jcs.Check, if the
// line is exactly its canonical form; ok is false otherwise.
func fastParse(b []byte) (*entry, bool) {
	var e *entry
	switch {
	case bytes.Contains(b, []byte(`"op":"reserve"`)):
		var w reserveWire
		if json.Unmarshal(b, &w) != nil {
			return nil, false
		}
		e = &entry{op: opReserve, n: w.N, path: w.Path, uj: w.UJ, inv: w.Inv, at: int64(w.At), until: int64(w.Until)}
	case bytes.Contains(b, []byte(`"op":"post"`)):
		var w postWire
		if json.Unmarshal(b, &w) != nil {
			return nil, false
		}
		e = &entry{op: opPost, n: w.N, uj: w.UJ, run: w.Run}
	case bytes.Contains(b, []byte(`"op":"release"`)):
		var w releaseWire
		if json.Unmarshal(b, &w) != nil {
			return nil, false
		}
		e = &entry{op: opRelease, n: w.N, why: w.Why}
	default:
		return nil, false
	}
	if line, ok := e.fastLine(); !ok || !bytes.Equal(line, b) {
		return nil, false
	}
	return e, true
}
