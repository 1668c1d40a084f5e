package grant

import (
	"bytes"
	"fmt"
	"slices"

	"github.com/opensubstrate/sandbox/internal/jcs"
	"github.com/opensubstrate/sandbox/reject"
)

// Decode reads a grant set from its canonical JSON, refusing any other
// spelling. Errors are *reject.Error.
func Decode(b []byte) (Set, error) {
	var s Set
	if err := jcs.Unmarshal(b, &s); err != nil {
		return Set{}, err
	}
	if s.Type != Type {
		return Set{}, reject.New(reject.Invalid, "type", "%q, want %q", s.Type, Type)
	}
	again, _, err := s.Canonical()
	if err != nil {
		return Set{}, reject.New(reject.Invalid, "", "%v", err)
	}
	if !bytes.Equal(again, b) {
		return Set{}, reject.New(reject.NonCanonical, "", "grants are not in normal form (lists sorted, duplicates merged)")
	}
	return s, nil
}

// DecodeLog reads a decision log from its canonical JSON and checks that
// sequence numbers increase by each entry's count. Errors are *reject.Error.
func DecodeLog(b []byte) (Log, error) {
	var l Log
	if err := jcs.Unmarshal(b, &l); err != nil {
		return Log{}, err
	}
	if l.Type != LogType {
		return Log{}, reject.New(reject.Invalid, "type", "%q, want %q", l.Type, LogType)
	}
	var next int64
	for i, d := range l.Decisions {
		where := fmt.Sprintf("decisions[%d]", i)
		if d.Seq != next {
			return Log{}, reject.New(reject.Invalid, where+".seq", "%d, want %d (the first entry is 0; entries are contiguous)", d.Seq, next)
		}
		if d.Count < 1 {
			return Log{}, reject.New(reject.Invalid, where+".count", "must be at least 1")
		}
		if d.Kind == "" || d.Op == "" || d.Rule == "" {
			return Log{}, reject.New(reject.MissingField, where, "kind, op and rule are required")
		}
		if !slices.Contains(Kinds, d.Kind) {
			return Log{}, reject.New(reject.Invalid, where+".kind", "%q is not a decision kind (%v)", d.Kind, Kinds)
		}
		if !slices.Contains(Ops, d.Op) {
			return Log{}, reject.New(reject.Invalid, where+".op", "%q is not a decision op (%v)", d.Op, Ops)
		}
		if i > 0 {
			p := l.Decisions[i-1]
			if p.Kind == d.Kind && p.Op == d.Op && p.Target == d.Target && p.Allow == d.Allow && p.Rule == d.Rule {
				return Log{}, reject.New(reject.NonCanonical, where, "identical to the entry before it: identical consecutive decisions are one entry, with a count")
			}
		}
		next += d.Count
	}
	return l, nil
}
