package confine

import (
	"fmt"
	"strings"
)

// Insn is one classic BPF instruction of the seccomp filter.
type Insn struct {
	Code uint16 `json:"c"`
	Jt   uint8  `json:"t"`
	Jf   uint8  `json:"f"`
	K    uint32 `json:"k"`
}

// InsnsText is a filter as the monitor jail takes it on its command line:
// each instruction as 16 hex digits (code, jt, jf, k).
func InsnsText(p []Insn) string {
	var b strings.Builder
	for _, in := range p {
		fmt.Fprintf(&b, "%04x%02x%02x%08x", in.Code, in.Jt, in.Jf, in.K)
	}
	return b.String()
}

// ParseInsns reads InsnsText's form back.
func ParseInsns(s string) ([]Insn, error) {
	if len(s) == 0 || len(s)%16 != 0 {
		return nil, fmt.Errorf("a filter of %d hex digits: want a multiple of 16", len(s))
	}
	out := make([]Insn, 0, len(s)/16)
	for i := 0; i < len(s); i += 16 {
		var in Insn
		if _, err := fmt.Sscanf(s[i:i+16], "%04x%02x%02x%08x", &in.Code, &in.Jt, &in.Jf, &in.K); err != nil {
			return nil, fmt.Errorf("filter instruction %d: %w", i/16, err)
		}
		out = append(out, in)
	}
	return out, nil
}
