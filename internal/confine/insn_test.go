package confine

import (
	"encoding/json"
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

// TestProgramJSON: a spec carries its filter as one string of
// InsnsText's form, reads it back whole, takes null or "" as none, and
// refuses anything else, naming the filter.
func TestProgramJSON(t *testing.T) {
	p := Program{{Code: 0x20, K: 4}, {Code: 0x15, Jt: 1, K: 0xc000003e}, {Code: 0x06, K: 0x50001}}
	b, err := json.Marshal(struct {
		F Program `json:"f"`
	}{p})
	if err != nil || string(b) != `{"f":"`+InsnsText(p)+`"}` {
		t.Fatalf("%s %v", b, err)
	}
	var back struct {
		F Program `json:"f"`
	}
	if err := json.Unmarshal(b, &back); err != nil || InsnsText(back.F) != InsnsText(p) || len(back.F) != len(p) {
		t.Fatalf("%v %v", back.F, err)
	}
	for _, none := range []string{`{"f":null}`, `{"f":""}`, `{}`} {
		back.F = p
		if err := json.Unmarshal([]byte(none), &back); err != nil || (none != `{}` && back.F != nil) {
			t.Errorf("%s: %v %v", none, back.F, err)
		}
	}
	for _, tc := range []struct{ in, want string }{
		{`{"f":[{"c":32}]}`, "a seccomp filter"},
		{`{"f":"00200000000000"}`, "a filter of 14 hex digits"},
		{`{"f":"002000000000000g"}`, "filter instruction 0"},
	} {
		if err := json.Unmarshal([]byte(tc.in), &back); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want an error with %q", tc.in, err, tc.want)
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
