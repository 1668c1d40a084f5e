package confine

import (
	"strings"
	"testing"
)

// TestInsnsTextRoundTrip: a filter's text form reads back as the same
// instructions, and what is not whole instructions is refused, saying
// where.
func TestInsnsTextRoundTrip(t *testing.T) {
	p := []Insn{{Code: 0x20, K: 4}, {Code: 0x15, Jt: 1, K: 0xc000003e}, {Code: 0x06, K: 0x50001}, {Code: 0xffff, Jt: 0xff, Jf: 0xff, K: 0xffffffff}}
	got, err := ParseInsns(InsnsText(p))
	if err != nil || len(got) != len(p) {
		t.Fatalf("%v %v", got, err)
	}
	for i := range p {
		if got[i] != p[i] {
			t.Fatalf("instruction %d: %+v, want %+v", i, got[i], p[i])
		}
	}
	for _, tc := range []struct{ in, want string }{
		{"", "a filter of 0 hex digits"},
		{"0020000000000004" + "00", "a filter of 18 hex digits"},
		{"0020000000000004" + "0015zz01c000003e", "filter instruction 1"},
	} {
		if _, err := ParseInsns(tc.in); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%q: %v, want an error with %q", tc.in, err, tc.want)
		}
	}
}

// FuzzParseInsns: whatever the text, a filter is refused or reads back
// to the same text.
func FuzzParseInsns(f *testing.F) {
	f.Add("0020000000000004")
	f.Add("")
	f.Add("zz")
	f.Fuzz(func(t *testing.T, s string) {
		p, err := ParseInsns(s)
		if err != nil {
			return
		}
		if q, err := ParseInsns(InsnsText(p)); err != nil || InsnsText(q) != InsnsText(p) {
			t.Fatalf("%q read as %v, which does not read back (%v)", s, p, err)
		}
	})
}
