package confine

import (
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"fmt"
)

// Insn is one classic BPF instruction of the seccomp filter.
type Insn struct {
	Code uint16 `json:"c"`
	Jt   uint8  `json:"t"`
	Jf   uint8  `json:"f"`
	K    uint32 `json:"k"`
}

// Program is a filter as a spec carries it: in JSON, one string in
// InsnsText's form, which an S1 init and its launcher read in a few
// microseconds where an array of objects took a cold process about a
// third of a millisecond, on the path of every run.
type Program []Insn

// MarshalJSON writes the program as InsnsText's string.
func (p Program) MarshalJSON() ([]byte, error) { return json.Marshal(InsnsText(p)) }

// UnmarshalJSON reads InsnsText's string (null or "" is no program).
func (p *Program) UnmarshalJSON(b []byte) error {
	var s string
	if err := json.Unmarshal(b, &s); err != nil {
		return fmt.Errorf("a seccomp filter: %w", err)
	}
	if s == "" {
		*p = nil
		return nil
	}
	insns, err := ParseInsns(s)
	if err != nil {
		return err
	}
	*p = insns
	return nil
}

// InsnsText is a filter as the monitor jail takes it on its command line
// (and a spec carries it): each instruction as 16 hex digits (code, jt,
// jf, k).
func InsnsText(p []Insn) string {
	b := make([]byte, 0, 8*len(p))
	for _, in := range p {
		b = binary.BigEndian.AppendUint16(b, in.Code)
		b = append(b, in.Jt, in.Jf)
		b = binary.BigEndian.AppendUint32(b, in.K)
	}
	return hex.EncodeToString(b)
}

// ParseInsns reads InsnsText's form back.
func ParseInsns(s string) ([]Insn, error) {
	if len(s) == 0 || len(s)%16 != 0 {
		return nil, fmt.Errorf("a filter of %d hex digits: want a multiple of 16", len(s))
	}
	out := make([]Insn, 0, len(s)/16)
	var b [8]byte
	for i := 0; i < len(s); i += 16 {
		if _, err := hex.Decode(b[:], []byte(s[i:i+16])); err != nil {
			return nil, fmt.Errorf("filter instruction %d: %w", i/16, err)
		}
		out = append(out, Insn{Code: binary.BigEndian.Uint16(b[0:]), Jt: b[2], Jf: b[3], K: binary.BigEndian.Uint32(b[4:])})
	}
	return out, nil
}
