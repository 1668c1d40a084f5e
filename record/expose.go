package record

import (
	"fmt"
	"slices"

	"github.com/opensubstrate/sandbox/addr"
	"github.com/opensubstrate/sandbox/reject"
)

// Exposed is the segment that opens a preview: a TCP port of the live
// sandbox reached through the service at an unguessable URL until an
// expiry. It names the port, the content address of the preview's
// secret token (never the token: the record is handed to auditors, the
// token opens the port) and the expiry in Unix seconds by the host's
// clock. A preview that runs to its expiry needs no further segment:
// Until says when it ends.
const Exposed Kind = "exposed"

// Unexposed is the segment that withdraws a preview before its expiry
// (a revocation): the port and the preview it names, and why.
const Unexposed Kind = "unexposed"

// MaxPort is the greatest TCP port; a preview's port is 1 to MaxPort.
const MaxPort = 65535

// MaxUntil bounds an Exposed segment's Until: the canonical profile's
// integers are below 2^53.
const MaxUntil = 1<<53 - 1

// MaxReason bounds an Unexposed segment's reason, in bytes.
const MaxReason = 200

type (
	exposedWire struct {
		Kind    Kind      `json:"kind"`
		Port    int       `json:"port"`
		Preview addr.Addr `json:"preview"`
		Until   int64     `json:"until"`
	}
	unexposedWire struct {
		Kind    Kind      `json:"kind"`
		Port    int       `json:"port"`
		Preview addr.Addr `json:"preview"`
		Reason  string    `json:"reason"`
	}
)

// check says whether an Exposed segment's members are in range.
func (w exposedWire) check() error {
	if err := checkPreview(w.Port, w.Preview); err != nil {
		return err
	}
	if w.Until < 1 || w.Until > MaxUntil {
		return reject.New(reject.IntRange, "until", "%d: an expiry is 1 to 2^53-1 Unix seconds", w.Until)
	}
	return nil
}

// check says whether an Unexposed segment's members are in range.
func (w unexposedWire) check() error {
	if err := checkPreview(w.Port, w.Preview); err != nil {
		return err
	}
	switch {
	case w.Reason == "":
		return reject.New(reject.MissingField, "reason", "a withdrawal says why")
	case len(w.Reason) > MaxReason:
		return reject.New(reject.Invalid, "reason", "%d bytes, more than %d", len(w.Reason), MaxReason)
	}
	return nil
}

// checkPreview says whether port is a TCP port and preview names a
// token.
func checkPreview(port int, preview addr.Addr) error {
	switch {
	case port < 1 || port > MaxPort:
		return reject.New(reject.Invalid, "port", "%d is no TCP port (1 to %d)", port, MaxPort)
	case preview.IsZero():
		return reject.New(reject.MissingField, "preview", "the all-zero address names nothing")
	}
	return nil
}

// preview is a preview open in a record: exposed, neither withdrawn
// nor ended by a suspension.
type preview struct {
	preview addr.Addr
	port    int
}

// openAt is the index of p among st's open previews, or -1.
func (st *State) openAt(p addr.Addr) int {
	return slices.IndexFunc(st.open, func(o preview) bool { return o.preview == p })
}

// checkPreviews applies rules 3 and 8 (run-record.md) to an Exposed or
// Unexposed segment: only while active; an exposure opens a preview not
// open already (that it is new is named's check); a withdrawal names
// one open, on its port.
func (st *State) checkPreviews(seg Segment, where string) error {
	if st.Phase == Parked {
		return reject.New(reject.Phase, where, "%s while parked: a parked run has no process to reach, and a suspension ended its previews", seg.Kind)
	}
	i := st.openAt(seg.Preview)
	switch {
	case seg.Kind == Exposed && i >= 0:
		return reject.New(reject.Invalid, where, "preview %s is open already (port %d): each exposure is of a new preview", seg.Preview, st.open[i].port)
	case seg.Kind == Unexposed && i < 0:
		return reject.New(reject.Invalid, where, "preview %s is not open: never exposed, withdrawn already, or ended by a suspension", seg.Preview)
	case seg.Kind == Unexposed && st.open[i].port != seg.Port:
		return reject.New(reject.Invalid, where, "preview %s is of port %d, not %d", seg.Preview, st.open[i].port, seg.Port)
	}
	return nil
}

// applyPreviews advances st's open previews over seg. The slice is
// never changed in place: a copy of a State (File.State hands them out)
// keeps the previews it had.
func (st *State) applyPreviews(seg Segment) {
	switch seg.Kind {
	case Exposed:
		st.open = append(slices.Clip(st.open), preview{seg.Preview, seg.Port})
	case Unexposed:
		i := st.openAt(seg.Preview)
		st.open = slices.Delete(slices.Clone(st.open), i, i+1)
	case Suspended, Closed:
		// A preview does not survive a park, nor the record's end.
		st.open = nil
	}
	if len(st.open) == 0 {
		st.open = nil
	}
}

// exposedOnce refuses an Exposed segment, the n-th, naming a preview an
// earlier one named (exposed maps each to its segment's number): each
// preview is new, so that a withdrawn or ended one is never open again.
func exposedOnce(exposed map[addr.Addr]int, seg Segment, n int) error {
	if seg.Kind != Exposed {
		return nil
	}
	if first, ok := exposed[seg.Preview]; ok {
		return reject.New(reject.Invalid, fmt.Sprintf("segment %d", n), "preview %s was exposed at segment %d already: each preview is new", seg.Preview, first)
	}
	return nil
}
