package record

import (
	"encoding/json"
	"fmt"
	"strings"

	"github.com/opensubstrate/sandbox/addr"
	"github.com/opensubstrate/sandbox/internal/chain"
	"github.com/opensubstrate/sandbox/internal/jcs"
	"github.com/opensubstrate/sandbox/reject"
)

// Domain is the genesis's domain tag, and the genesis entry's "record".
const Domain = "sandbox.runrecord/1"

// Genesis is head₀ of the record of unit under grants.
func Genesis(unit, grants addr.Addr) addr.Addr {
	return chain.Genesis(Domain, unit[:], grants[:])
}

// Header is a record's first line: what its genesis binds.
type Header struct {
	Record string    `json:"record"` // Domain
	Unit   addr.Addr `json:"unit"`
	Grants addr.Addr `json:"grants"`
}

// Kind is a segment's kind.
type Kind string

// The segment kinds.
const (
	Executed  Kind = "executed"
	Suspended Kind = "suspended"
	Resumed   Kind = "resumed"
	Closed    Kind = "closed"
	// Claimed is a sandbox a warm pool kept ready, handed to the run that
	// claimed it: the first segment, with the idle energy spent keeping
	// it ready.
	Claimed Kind = "claimed"
)

// Snapshot is what a suspension retained, by content address.
type Snapshot struct {
	// Root is the retained filesystem tree (the workspace).
	Root addr.Addr `json:"root"`
	// Memory is the memory image, where the executor keeps one.
	Memory *addr.Addr `json:"memory,omitempty"`
	// Manifest is the environment manifest the run was created from: a
	// resumption's environment must satisfy it.
	Manifest addr.Addr `json:"manifest"`
}

// Equal reports whether two snapshots name the same objects.
func (s Snapshot) Equal(o Snapshot) bool {
	if s.Root != o.Root || s.Manifest != o.Manifest || (s.Memory == nil) != (o.Memory == nil) {
		return false
	}
	return s.Memory == nil || *s.Memory == *o.Memory
}

// diff names the members in which s differs from o (the suspended one).
func (s Snapshot) diff(o Snapshot) string {
	var d []string
	if s.Root != o.Root {
		d = append(d, fmt.Sprintf("root %s, suspended %s", s.Root, o.Root))
	}
	if s.Manifest != o.Manifest {
		d = append(d, fmt.Sprintf("manifest %s, suspended %s", s.Manifest, o.Manifest))
	}
	mem := func(m *addr.Addr) string {
		if m == nil {
			return "none"
		}
		return m.String()
	}
	if (s.Memory == nil) != (o.Memory == nil) || (s.Memory != nil && *s.Memory != *o.Memory) {
		d = append(d, fmt.Sprintf("memory %s, suspended %s", mem(s.Memory), mem(o.Memory)))
	}
	return strings.Join(d, "; ")
}

// Segment is one entry after the genesis.
type Segment struct {
	Kind Kind
	// Attestation is an Executed segment's sealed run.
	Attestation addr.Addr
	// Snapshot is a Suspended segment's, the one a Resumed segment
	// restored, and the one a Forked segment began from.
	Snapshot Snapshot
	// Parent is a Forked segment's: the record it was made from, at
	// which head (fork.go).
	Parent *Parent
	// IdleUJ is a Resumed segment's idle energy in µJ: what the retained
	// state drew while parked; IdleProvenance says how it was had
	// ("Measured <source>" or "Estimator <model>").
	IdleUJ         uint64
	IdleProvenance string
	// Reason is a Closed segment's, optional, and an Unexposed
	// segment's, required: why the preview was withdrawn.
	Reason string
	// Port is an Exposed or Unexposed segment's: the sandbox's TCP port
	// the preview reaches (expose.go).
	Port int
	// Preview is an Exposed or Unexposed segment's: the content address
	// of the preview's secret token, never the token.
	Preview addr.Addr
	// Until is an Exposed segment's: the preview's expiry, Unix seconds
	// by the host's clock.
	Until int64
	// Placement is a Placed segment's: where the run was placed, by
	// whom, and why (placement.go).
	Placement *Placement
	// Pool is a Claimed segment's: the warm pool it was claimed from.
	// A Claimed segment's IdleUJ is the energy spent keeping it ready; a
	// Closed segment's, optional, what a sandbox closed unclaimed (a
	// pool's eviction) spent: its overhead.
	Pool string
}

// The wire forms of the segments, one struct per kind: every member
// without omitempty is required.
type (
	executedWire struct {
		Kind        Kind      `json:"kind"`
		Attestation addr.Addr `json:"attestation"`
	}
	suspendedWire struct {
		Kind     Kind     `json:"kind"`
		Snapshot Snapshot `json:"snapshot"`
	}
	resumedWire struct {
		Kind           Kind     `json:"kind"`
		Snapshot       Snapshot `json:"snapshot"`
		IdleUJ         uint64   `json:"idle_uj"`
		IdleProvenance string   `json:"idle_provenance"`
	}
	closedWire struct {
		Kind           Kind   `json:"kind"`
		Reason         string `json:"reason,omitempty"`
		IdleUJ         uint64 `json:"idle_uj,omitempty"`
		IdleProvenance string `json:"idle_provenance,omitempty"`
	}
	claimedWire struct {
		Kind           Kind   `json:"kind"`
		Pool           string `json:"pool"`
		IdleUJ         uint64 `json:"idle_uj"`
		IdleProvenance string `json:"idle_provenance"`
	}
)

// MaxIdleUJ bounds idle_uj: the canonical profile's integers are below
// 2^53.
const MaxIdleUJ = 1<<53 - 1

// Bytes is the segment's canonical line (no newline): what is hashed.
func (s Segment) Bytes() ([]byte, error) {
	var v any
	switch s.Kind {
	case Executed:
		v = executedWire{s.Kind, s.Attestation}
	case Suspended:
		v = suspendedWire{s.Kind, s.Snapshot}
	case Resumed:
		if s.IdleUJ > MaxIdleUJ {
			return nil, reject.New(reject.IntRange, "idle_uj", "%d µJ is at or above 2^53", s.IdleUJ)
		}
		v = resumedWire{s.Kind, s.Snapshot, s.IdleUJ, s.IdleProvenance}
	case Closed:
		v = closedWire{s.Kind, s.Reason, s.IdleUJ, s.IdleProvenance}
	case Claimed:
		v = claimedWire{s.Kind, s.Pool, s.IdleUJ, s.IdleProvenance}
	case Placed:
		if s.Placement == nil {
			return nil, reject.New(reject.MissingField, "placement", "a placed segment carries its placement")
		}
		v = placedWire{s.Kind, *s.Placement}
	case Forked:
		if s.Parent == nil {
			return nil, reject.New(reject.MissingField, "parent", "a forked segment names its parent")
		}
		v = forkedWire{s.Kind, *s.Parent, s.Snapshot}
	case Exposed:
		v = exposedWire{s.Kind, s.Port, s.Preview, s.Until}
	case Unexposed:
		v = unexposedWire{s.Kind, s.Port, s.Preview, s.Reason}
	default:
		return nil, reject.New(reject.Invalid, "kind", "%q is no segment kind", s.Kind)
	}
	b, err := jcs.Marshal(v)
	if err != nil {
		return nil, err
	}
	if _, err := ParseSegment(b); err != nil {
		return nil, err // what this writes, it must read back
	}
	return b, nil
}

// ParseSegment decodes a segment's line strictly: canonical JSON, the
// members its kind defines and no others, addresses that name something.
func ParseSegment(b []byte) (Segment, error) {
	if s, ok := fastSegment(b); ok {
		return s, nil
	}
	return parseSegment(b)
}

// parseSegment is ParseSegment without the fast path.
func parseSegment(b []byte) (Segment, error) {
	if err := jcs.Check(b); err != nil {
		return Segment{}, err
	}
	var k struct {
		Kind Kind `json:"kind"`
	}
	if err := json.Unmarshal(b, &k); err != nil {
		return Segment{}, reject.Wrap(reject.Invalid, "kind", err)
	}
	var s Segment
	switch k.Kind {
	case Executed:
		var w executedWire
		if err := jcs.Decode(b, &w); err != nil {
			return Segment{}, err
		}
		s = Segment{Kind: w.Kind, Attestation: w.Attestation}
		if s.Attestation.IsZero() {
			return Segment{}, reject.New(reject.MissingField, "attestation", "the all-zero address names nothing")
		}
	case Suspended:
		var w suspendedWire
		if err := jcs.Decode(b, &w); err != nil {
			return Segment{}, err
		}
		s = Segment{Kind: w.Kind, Snapshot: w.Snapshot}
	case Resumed:
		var w resumedWire
		if err := jcs.Decode(b, &w); err != nil {
			return Segment{}, err
		}
		s = Segment{Kind: w.Kind, Snapshot: w.Snapshot, IdleUJ: w.IdleUJ, IdleProvenance: w.IdleProvenance}
		if !provenance(s.IdleProvenance) {
			return Segment{}, reject.New(reject.Invalid, "idle_provenance", "%q: want \"Measured <source>\" or \"Estimator <model>\"", s.IdleProvenance)
		}
	case Closed:
		var w closedWire
		if err := jcs.Decode(b, &w); err != nil {
			return Segment{}, err
		}
		s = Segment{Kind: w.Kind, Reason: w.Reason, IdleUJ: w.IdleUJ, IdleProvenance: w.IdleProvenance}
		switch {
		case s.IdleUJ > 0 && s.IdleProvenance == "":
			return Segment{}, reject.New(reject.MissingField, "idle_provenance", "idle_uj is given without the provenance of its figure")
		case s.IdleProvenance != "" && s.IdleUJ == 0:
			return Segment{}, reject.New(reject.MissingField, "idle_uj", "idle_provenance is given without the figure")
		case s.IdleProvenance != "" && !provenance(s.IdleProvenance):
			return Segment{}, reject.New(reject.Invalid, "idle_provenance", "%q: want \"Measured <source>\" or \"Estimator <model>\"", s.IdleProvenance)
		}
	case Claimed:
		var w claimedWire
		if err := jcs.Decode(b, &w); err != nil {
			return Segment{}, err
		}
		s = Segment{Kind: w.Kind, Pool: w.Pool, IdleUJ: w.IdleUJ, IdleProvenance: w.IdleProvenance}
		if s.Pool == "" {
			return Segment{}, reject.New(reject.MissingField, "pool", "a claim names its pool")
		}
		if !provenance(s.IdleProvenance) {
			return Segment{}, reject.New(reject.Invalid, "idle_provenance", "%q: want \"Measured <source>\" or \"Estimator <model>\"", s.IdleProvenance)
		}
	case Placed:
		var w placedWire
		if err := jcs.Decode(b, &w); err != nil {
			return Segment{}, err
		}
		if err := w.Placement.Check(); err != nil {
			return Segment{}, err
		}
		s = Segment{Kind: w.Kind, Placement: &w.Placement}
	case Forked:
		var w forkedWire
		if err := jcs.Decode(b, &w); err != nil {
			return Segment{}, err
		}
		if err := w.Parent.Check(); err != nil {
			return Segment{}, err
		}
		s = Segment{Kind: w.Kind, Parent: &w.Parent, Snapshot: w.Snapshot}
	case Exposed:
		var w exposedWire
		if err := jcs.Decode(b, &w); err != nil {
			return Segment{}, err
		}
		if err := w.check(); err != nil {
			return Segment{}, err
		}
		s = Segment{Kind: w.Kind, Port: w.Port, Preview: w.Preview, Until: w.Until}
	case Unexposed:
		var w unexposedWire
		if err := jcs.Decode(b, &w); err != nil {
			return Segment{}, err
		}
		if err := w.check(); err != nil {
			return Segment{}, err
		}
		s = Segment{Kind: w.Kind, Port: w.Port, Preview: w.Preview, Reason: w.Reason}
	case "":
		return Segment{}, reject.New(reject.MissingField, "kind", "a segment names its kind")
	default:
		return Segment{}, reject.New(reject.Invalid, "kind", "%q is no segment kind", k.Kind)
	}
	if s.Kind == Suspended || s.Kind == Resumed || s.Kind == Forked {
		switch {
		case s.Snapshot.Root.IsZero():
			return Segment{}, reject.New(reject.MissingField, "snapshot.root", "the all-zero address names nothing")
		case s.Snapshot.Manifest.IsZero():
			return Segment{}, reject.New(reject.MissingField, "snapshot.manifest", "the all-zero address names nothing")
		case s.Snapshot.Memory != nil && s.Snapshot.Memory.IsZero():
			return Segment{}, reject.New(reject.MissingField, "snapshot.memory", "the all-zero address names nothing")
		}
	}
	return s, nil
}

// provenance says whether p is "Measured <source>" or "Estimator <model>".
func provenance(p string) bool {
	for _, pre := range []string{"Measured ", "Estimator "} {
		if len(p) > len(pre) && p[:len(pre)] == pre {
			return true
		}
	}
	return false
}

// ParseHeader decodes a record's first line strictly.
func ParseHeader(b []byte) (Header, error) {
	var h Header
	if err := jcs.Unmarshal(b, &h); err != nil {
		return Header{}, err
	}
	switch {
	case h.Record != Domain:
		return Header{}, reject.New(reject.Unrecognised, "record", "%q: this verifier knows %q", h.Record, Domain)
	case h.Unit.IsZero():
		return Header{}, reject.New(reject.MissingField, "unit", "the all-zero address names nothing")
	case h.Grants.IsZero():
		return Header{}, reject.New(reject.MissingField, "grants", "the all-zero address names nothing")
	}
	return h, nil
}

// Phase is where a record stands.
type Phase string

// The phases.
const (
	Active Phase = "active" // it may execute, be suspended, be closed
	Parked Phase = "parked" // suspended: it may be resumed or closed
	Ended  Phase = "closed" // nothing more
)

// State is a record replayed to its head.
type State struct {
	Header   Header
	Head     addr.Addr
	Phase    Phase
	Segments int // after the genesis
	Executed int
	// Last is the last suspension's snapshot, or the one a fork began
	// from (nil before any).
	Last *Snapshot
	// IdleUJ is the idle energy of every resumption, summed.
	IdleUJ uint64
	// open are the previews open now, in the order they were exposed:
	// never changed in place, so that copies of a State share nothing
	// they could change (expose.go).
	open []preview
}

// New is the state of a record at its genesis.
func New(h Header) State {
	return State{Header: h, Head: Genesis(h.Unit, h.Grants), Phase: Active}
}

// Check says whether seg may follow st, naming the rule it breaks.
func (st *State) Check(seg Segment) error {
	where := fmt.Sprintf("segment %d", st.Segments+1)
	if st.Phase == Ended {
		return reject.New(reject.Closed, where, "a %s segment after the record was closed", seg.Kind)
	}
	if st.IdleUJ+seg.IdleUJ > MaxIdleUJ {
		return reject.New(reject.IntRange, where, "the record's idle energy reaches 2^53 µJ")
	}
	switch seg.Kind {
	case Executed, Suspended:
		if st.Phase == Parked {
			return reject.New(reject.Phase, where, "%s while parked: a parked run is resumed first", seg.Kind)
		}
	case Resumed:
		if st.Phase != Parked {
			return reject.New(reject.Phase, where, "resumed while active: only a suspended run is resumed")
		}
		if !seg.Snapshot.Equal(*st.Last) {
			return reject.New(reject.SnapshotMismatch, where, "the snapshot resumed is not the one suspended: %s", seg.Snapshot.diff(*st.Last))
		}
	case Forked:
		if st.Segments != 0 {
			return reject.New(reject.Phase, where, "forked after %d segments: a fork begins its record, before anything runs in it", st.Segments)
		}
	case Claimed:
		if st.Segments != 0 {
			return reject.New(reject.Phase, where, "claimed after %d segments: a sandbox is claimed from its pool before anything runs in it", st.Segments)
		}
	case Placed:
		// Where the next runs go: said before them, while it may run.
		if st.Phase == Parked {
			return reject.New(reject.Phase, where, "placed while parked: a parked run is resumed first")
		}
	case Exposed, Unexposed:
		return st.checkPreviews(seg, where)
	case Closed:
	default:
		return reject.New(reject.Invalid, where, "%q is no segment kind", seg.Kind)
	}
	return nil
}

// Apply checks seg against st and advances st over its line b.
func (st *State) Apply(seg Segment, b []byte) error {
	if err := st.Check(seg); err != nil {
		return err
	}
	st.Head = chain.Step(st.Head, b)
	st.Segments++
	st.applyPreviews(seg)
	switch seg.Kind {
	case Executed:
		st.Executed++
	case Suspended, Forked:
		// A fork begins parked at the snapshot it was made from: it runs
		// once resumed from it.
		snap := seg.Snapshot
		st.Last, st.Phase = &snap, Parked
	case Resumed:
		st.Phase = Active
		st.IdleUJ += seg.IdleUJ
	case Claimed:
		st.IdleUJ += seg.IdleUJ
	case Closed:
		st.Phase = Ended
		st.IdleUJ += seg.IdleUJ
	}
	return nil
}

// named is what a record's segments named that no later segment may
// name again, each with the number of its segment: the attestations its
// Executed segments named (one run is one execution, named once, so
// that its energy is counted once) and the previews its Exposed
// segments named (each preview is new). It grows with the record, so
// it is kept beside the State, not in it.
type named struct {
	runs, previews map[addr.Addr]int
}

func newNamed() named { return named{runs: map[addr.Addr]int{}, previews: map[addr.Addr]int{}} }

// check refuses an Executed segment, the n-th, naming a run named
// before, and an Exposed one naming a preview exposed before.
func (r named) check(seg Segment, n int) error {
	if seg.Kind == Executed {
		if first, ok := r.runs[seg.Attestation]; ok {
			return reject.New(reject.Invalid, fmt.Sprintf("segment %d", n), "attestation %s was executed at segment %d already: one run is one execution, named once", seg.Attestation, first)
		}
	}
	return exposedOnce(r.previews, seg, n)
}

// add notes seg, the n-th segment, once it is applied.
func (r named) add(seg Segment, n int) {
	switch seg.Kind {
	case Executed:
		r.runs[seg.Attestation] = n
	case Exposed:
		r.previews[seg.Preview] = n
	}
}

// Verify replays a record's entries from its genesis: the header, then
// every segment, each checked against the rules. The error names the
// line.
func Verify(entries [][]byte) (State, error) {
	st, _, err := replay(entries, nil)
	return st, err
}

// Walk verifies a record's wire form as VerifyBytes does, calling visit
// with each segment that passes the rules and the head the record had
// before it; an error from visit stops the walk, at that segment's line.
func Walk(b []byte, visit func(seg Segment, before addr.Addr) error) (State, error) {
	entries, err := wire(b)
	if err != nil {
		return State{}, err
	}
	st, _, err := replay(entries, visit)
	return st, err
}

// replay is Verify, calling visit (when set) before each segment's step;
// it returns the runs and previews the record names too.
func replay(entries [][]byte, visit func(Segment, addr.Addr) error) (State, named, error) {
	if len(entries) == 0 {
		return State{}, named{}, reject.New(reject.Missing, "line 1", "a record begins with its genesis entry")
	}
	h, err := ParseHeader(entries[0])
	if err != nil {
		if seg, serr := ParseSegment(entries[0]); serr == nil {
			err = reject.New(reject.Missing, "", "a record begins with its genesis entry, not an %s segment", seg.Kind)
		}
		return State{}, named{}, at(1, err)
	}
	st := New(h)
	rs := newNamed()
	for i, b := range entries[1:] {
		n := st.Segments + 1
		seg, err := ParseSegment(b)
		if err == nil {
			err = st.Check(seg)
		}
		if err == nil {
			err = rs.check(seg, n)
		}
		if err == nil && visit != nil {
			err = visit(seg, st.Head)
		}
		if err == nil {
			err = st.Apply(seg, b)
		}
		if err != nil {
			return st, rs, at(i+2, err)
		}
		rs.add(seg, n)
	}
	return st, rs, nil
}

// wire cuts a record's wire form into its entries: every entry whole.
func wire(b []byte) ([][]byte, error) {
	entries, torn, err := chain.Split(b)
	if err != nil {
		return nil, err
	}
	if torn > 0 {
		return nil, reject.New(reject.Truncated, fmt.Sprintf("line %d", len(entries)+1), "%d bytes without their newline", torn)
	}
	return entries, nil
}

// VerifyBytes verifies a record in its wire form: the file's bytes. A
// final line without its newline is refused (truncated): in the wire
// form every entry is whole.
func VerifyBytes(b []byte) (State, error) {
	entries, err := wire(b)
	if err != nil {
		return State{}, err
	}
	return Verify(entries)
}

// Reaches verifies a record's wire form and that it reaches cited: the
// head something cites for it (an attestation, an export) is its head
// now or was its head after some segment (the record grew since). A
// record whose entries were changed, dropped or spliced under another
// genesis does not reach a head cited before (head-mismatch).
func Reaches(b []byte, cited addr.Addr) (State, error) {
	seen := false
	st, err := Walk(b, func(_ Segment, before addr.Addr) error {
		seen = seen || before == cited
		return nil
	})
	if err != nil {
		return st, err
	}
	if !seen && st.Head != cited {
		return st, reject.New(reject.HeadMismatch, "", "the record never had head %s (its head is %s)", cited, st.Head)
	}
	return st, nil
}

// at puts a line number in front of where an error happened.
func at(line int, err error) error {
	if re, ok := err.(*reject.Error); ok {
		e := *re
		e.Where = fmt.Sprintf("line %d", line) + prefix(e.Where)
		return &e
	}
	return fmt.Errorf("line %d: %w", line, err)
}

func prefix(w string) string {
	if w == "" {
		return ""
	}
	return ": " + w
}
