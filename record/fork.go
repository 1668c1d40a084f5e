package record

import (
	"regexp"

	"github.com/opensubstrate/sandbox/addr"
	"github.com/opensubstrate/sandbox/reject"
)

// Forked is the first segment of a fork's record: the run began as a
// copy of another run's state, the snapshot named here, taken from the
// parent record at the head it cites. A fork is a new run (a new unit,
// its own genesis), like a continuation under other grants; the segment
// leaves the record parked at that snapshot, and the run starts by
// being resumed from it.
const Forked Kind = "forked"

// sandboxID is the form of a sandbox's id: "sb-" and 12 hex digits.
var sandboxID = regexp.MustCompile(`^sb-[0-9a-f]{12}$`)

// Parent is the record a fork was made from: its sandbox's id, its
// genesis (head₀) and the head it had when the state was taken.
type Parent struct {
	Record  string    `json:"record"`
	Genesis addr.Addr `json:"genesis"`
	Head    addr.Addr `json:"head"`
}

// Check says whether p names a record: a sandbox's id, two addresses
// that name something.
func (p Parent) Check() error {
	switch {
	case p.Record == "":
		return reject.New(reject.MissingField, "parent.record", "a fork names the record it was made from")
	case !sandboxID.MatchString(p.Record):
		return reject.New(reject.Invalid, "parent.record", "%q is no sandbox id (sb- and 12 hex digits)", p.Record)
	case p.Genesis.IsZero():
		return reject.New(reject.MissingField, "parent.genesis", "the all-zero address names nothing")
	case p.Head.IsZero():
		return reject.New(reject.MissingField, "parent.head", "the all-zero address names nothing")
	}
	return nil
}

type forkedWire struct {
	Kind     Kind     `json:"kind"`
	Parent   Parent   `json:"parent"`
	Snapshot Snapshot `json:"snapshot"`
}

// ForkedFrom checks a fork's parent against the parent's record in its
// wire form: the record is the one cited (its genesis), and it reaches
// the head cited (rule 7: it had that head, and may have grown since).
func ForkedFrom(parent []byte, p Parent) (State, error) {
	st, err := Reaches(parent, p.Head)
	if err != nil {
		return st, err
	}
	if g := Genesis(st.Header.Unit, st.Header.Grants); g != p.Genesis {
		return st, reject.New(reject.Splice, "parent.genesis", "the record's genesis is %s, the fork cites %s", g, p.Genesis)
	}
	return st, nil
}
