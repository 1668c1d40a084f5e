package record

import (
	"bytes"
	"crypto/rand"
	"errors"
	"strings"
	"testing"

	"github.com/opensubstrate/sandbox/internal/jcs"
	"github.com/opensubstrate/sandbox/key"
	"github.com/opensubstrate/sandbox/reject"
)

func placed(t testing.TB) (Segment, key.Private, key.Private) {
	t.Helper()
	by, _ := key.Generate(rand.Reader)
	other, _ := key.Generate(rand.Reader)
	p := &Placement{Host: other.Public(), By: by.Public(), Tier: "S1", Why: "least idle power per run",
		Candidates: []Candidate{{Host: by.Public(), Capacity: 4, Live: 0, IdleMW: 10000, CostMW: 10000}, {Host: other.Public(), Capacity: 4, Live: 1, IdleMW: 10000, CostMW: 5000}}}
	if err := p.Sign(by); err != nil {
		t.Fatal(err)
	}
	return Segment{Kind: Placed, Placement: p}, by, other
}

// TestPlacedSegment: a placement is sealed into the record as the
// deciding host signed it, reads back the same, and is refused when
// anything in it changed, when its host is none of its candidates, or
// while the record is parked.
func TestPlacedSegment(t *testing.T) {
	seg, by, other := placed(t)
	b, err := seg.Bytes()
	if err != nil {
		t.Fatal(err)
	}
	back, err := ParseSegment(b)
	if err != nil || back.Placement.Host != other.Public() || back.Placement.By != by.Public() {
		t.Fatalf("read back: %+v %v", back, err)
	}
	st := New(Header{Record: Domain, Unit: unit, Grants: grants})
	if err := st.Apply(seg, b); err != nil {
		t.Fatal(err)
	}
	for name, edit := range map[string]func(*Placement){
		"its host changed":     func(p *Placement) { p.Host = by.Public() },
		"a figure changed":     func(p *Placement) { p.Candidates[1].Live = 0 },
		"why changed":          func(p *Placement) { p.Why = "another reason" },
		"a candidate dropped":  func(p *Placement) { p.Candidates = p.Candidates[1:] },
		"signed by another":    func(p *Placement) { p.Sign(other); p.By = other.Public() },
		"no signature":         func(p *Placement) { p.Sig = "" },
		"a candidate twice":    func(p *Placement) { p.Candidates[0] = p.Candidates[1] },
		"a negative figure":    func(p *Placement) { p.Candidates[0].IdleMW = -1 },
		"no candidates":        func(p *Placement) { p.Candidates = nil },
		"not among candidates": func(p *Placement) { p.Host = key.Public{1} },
	} {
		s, _, _ := placed(t)
		edit(s.Placement)
		line, err := jcsLine(s)
		if err != nil {
			continue // refused on the way out: also a refusal
		}
		if _, err := ParseSegment(line); err == nil {
			t.Errorf("%s: read", name)
		} else if !errors.As(err, new(*reject.Error)) {
			t.Errorf("%s: not a named refusal: %v", name, err)
		}
	}
	// While parked: refused.
	st = New(Header{Record: Domain, Unit: unit, Grants: grants})
	s1 := suspend(snapA)
	b1, _ := s1.Bytes()
	st.Apply(s1, b1)
	if err := st.Check(seg); err == nil || !strings.Contains(err.Error(), "parked") {
		t.Fatalf("placed while parked: %v", err)
	}
	if !bytes.Contains(b, []byte(`"kind":"placed"`)) {
		t.Fatalf("the wire form: %s", b)
	}
}

// jcsLine writes a segment without Bytes' own read-back check.
func jcsLine(s Segment) ([]byte, error) {
	return jcs.Marshal(placedWire{s.Kind, *s.Placement})
}
