package lifecycle

import (
	"bytes"
	"encoding/json"
	"fmt"
	"time"
)

// Version is the lifecycle record version this package reads and writes.
const Version = 1

// The states a v1 record is in.
const (
	StateUnseeded = "unseeded" // classified before its start: no seed, nobody's checkout
	StatePending  = "pending"  // a seed was attempted (marked before it began), not yet bound
	StateBound    = "bound"    // a seed bound its claim; Verified once its checkout was checked
	StateClosing  = "closing"  // its end has begun
)

// Record is a sandbox's lifecycle record (sandbox.lifecycle/1): what its
// seed bound and what its preservation may rely on. It is kept beside
// the run record and written whole (temp, fsync, rename).
type Record struct {
	V           int         `json:"v"`
	Sandbox     string      `json:"sandbox"`
	State       string      `json:"state"`
	Verified    bool        `json:"verified,omitempty"`
	Incarnation string      `json:"incarnation"`
	Claim       *Claim      `json:"claim,omitempty"`
	Origin      string      `json:"origin,omitempty"`
	Seed        *Seed       `json:"seed,omitempty"`
	Checkpoint  *Checkpoint `json:"checkpoint,omitempty"`
	Window      Window      `json:"window"`
}

// Seed is what a seed was asked to do: its identity, which a repeated
// seed checks (never the checkout's HEAD, which moves with its work).
type Seed struct {
	Source    string    `json:"source"`
	Ref       string    `json:"ref"`
	Head      string    `json:"head"`
	Attempted time.Time `json:"attempted"`
}

// Checkpoint is a complete capture of a sandbox's checkout (its .git
// too, nothing left out by ignore rules): the tree's root address, whose
// and which incarnation's it is, and how long it is kept.
type Checkpoint struct {
	Root        string    `json:"root"`
	Owner       string    `json:"owner"` // the claim's Digest
	Incarnation string    `json:"incarnation"`
	Taken       time.Time `json:"taken"`
	RetainUntil time.Time `json:"retain_until"`
}

// legacy is the record written before versions: an owner and a
// checkpoint, nothing else.
type legacy struct {
	Owner      *Claim      `json:"owner"`
	Checkpoint *Checkpoint `json:"checkpoint"`
}

// Class is what a read record is, for preservation.
type Class int

const (
	Unknown         Class = iota // missing, or in a state this reader does not know
	Malformed                    // not a record: unparseable, or a field wrong
	Unavailable                  // of a version this reader does not support
	Unseeded                     // classified unseeded before its start
	Pending                      // a seed attempted, not bound
	BoundUnverified              // bound, its checkout not yet checked against the claim
	Bound                        // bound and verified
	Closing                      // its end has begun
	Legacy                       // a complete record of before versions
)

var classNames = [...]string{"unknown", "malformed", "unavailable", "unseeded", "pending", "bound-unverified", "bound", "closing", "legacy"}

func (c Class) String() string {
	if int(c) < len(classNames) {
		return classNames[c]
	}
	return fmt.Sprintf("class(%d)", int(c))
}

// View is a decoded record: its class, why, and the record where one
// could be read. It gives an owner only where the record proves one.
type View struct {
	Class  Class
	Reason string
	Record *Record // nil unless Class is Unseeded, Pending, BoundUnverified, Bound or Closing
	legacy *legacy
}

// Owner is the claim the record proves: a bound, verified record's, or a
// complete legacy record's. Any other class proves no owner.
func (v View) Owner() (Claim, bool) {
	switch {
	case v.Class == Bound && v.Record != nil && v.Record.Claim != nil:
		return *v.Record.Claim, true
	case v.Class == Legacy && v.legacy != nil:
		return *v.legacy.Owner, true
	}
	return Claim{}, false
}

// Checkpoint is the record's checkpoint, if it names one.
func (v View) Checkpoint() *Checkpoint {
	switch {
	case v.Record != nil:
		return v.Record.Checkpoint
	case v.legacy != nil:
		return v.legacy.Checkpoint
	}
	return nil
}

// MaxRecord is the largest lifecycle record read, in bytes.
const MaxRecord = 1 << 20

// Decode classifies b, a lifecycle record as stored; nil is a missing
// record (Unknown). It never fails: what it cannot read is Malformed,
// Unavailable or Unknown, each with its reason.
func Decode(b []byte) View {
	if b == nil {
		return View{Class: Unknown, Reason: "no lifecycle record"}
	}
	if len(b) > MaxRecord {
		return View{Class: Malformed, Reason: fmt.Sprintf("%d bytes, more than %d", len(b), MaxRecord)}
	}
	var probe map[string]json.RawMessage
	if err := json.Unmarshal(b, &probe); err != nil {
		return View{Class: Malformed, Reason: "not a JSON object: " + err.Error()}
	}
	vraw, versioned := probe["v"]
	if !versioned {
		return decodeLegacy(b)
	}
	var v int
	if err := json.Unmarshal(vraw, &v); err != nil {
		return View{Class: Malformed, Reason: "v: not an integer"}
	}
	if v != Version {
		return View{Class: Unavailable, Reason: fmt.Sprintf("version %d: this reader supports %d", v, Version)}
	}
	var r Record
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&r); err != nil {
		return View{Class: Malformed, Reason: err.Error()}
	}
	if dec.More() {
		return View{Class: Malformed, Reason: "data after the record"}
	}
	if err := r.check(); err != nil {
		return View{Class: Malformed, Reason: err.Error()}
	}
	view := View{Record: &r}
	switch r.State {
	case StateUnseeded:
		view.Class = Unseeded
	case StatePending:
		view.Class = Pending
	case StateBound:
		view.Class = BoundUnverified
		if r.Verified {
			view.Class = Bound
		}
	case StateClosing:
		view.Class = Closing
	default:
		return View{Class: Unknown, Reason: fmt.Sprintf("state %q: not one this reader knows", r.State)}
	}
	return view
}

func decodeLegacy(b []byte) View {
	var l legacy
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&l); err != nil {
		return View{Class: Malformed, Reason: "unversioned, and not a legacy record: " + err.Error()}
	}
	switch {
	case l.Owner == nil || l.Checkpoint == nil:
		return View{Class: Malformed, Reason: "an incomplete legacy record (an owner and a checkpoint are both needed)"}
	}
	if err := l.Owner.Validate(); err != nil {
		return View{Class: Malformed, Reason: "legacy owner: " + err.Error()}
	}
	if err := l.Checkpoint.check(); err != nil {
		return View{Class: Malformed, Reason: "legacy " + err.Error()}
	}
	return View{Class: Legacy, legacy: &l}
}

// check is what every v1 record must be, whatever its state.
func (r *Record) check() error {
	if err := identity("sandbox", r.Sandbox); err != nil {
		return err
	}
	if err := CheckIncarnation(r.Incarnation); err != nil {
		return err
	}
	if r.Claim != nil {
		if err := r.Claim.Validate(); err != nil {
			return fmt.Errorf("claim: %w", err)
		}
	}
	if r.Origin != "" {
		if _, err := CheckOrigin(r.Origin); err != nil {
			return err
		}
	}
	if r.Seed != nil {
		if r.Seed.Source == "" || r.Seed.Attempted.IsZero() {
			return invalid("seed", "its source and when it was attempted are both needed")
		}
		if err := CheckRef(r.Seed.Ref); err != nil {
			return fmt.Errorf("seed: %w", err)
		}
		if r.Seed.Head != "" {
			if err := CheckHead(r.Seed.Head); err != nil {
				return fmt.Errorf("seed: %w", err)
			}
		}
	}
	if r.Checkpoint != nil {
		if err := r.Checkpoint.check(); err != nil {
			return err
		}
	}
	switch r.State {
	case StatePending:
		if r.Seed == nil {
			return invalid("seed", "a pending record names the seed it attempted")
		}
	case StateBound:
		if r.Seed == nil || r.Claim == nil || r.Seed.Head == "" {
			return invalid("claim", "a bound record names its claim and its seed's head")
		}
	}
	if r.Verified && r.State != StateBound {
		return invalid("verified", "only a bound record is verified")
	}
	return r.Window.check()
}

func (c *Checkpoint) check() error {
	if c.Root == "" || c.Owner == "" || c.Taken.IsZero() || c.RetainUntil.IsZero() {
		return invalid("checkpoint", "its root, owner, time taken and retention are all needed")
	}
	if err := CheckIncarnation(c.Incarnation); err != nil {
		return fmt.Errorf("checkpoint: %w", err)
	}
	return nil
}

// CheckIncarnation checks an incarnation's name: 32 lower-case hex digits.
func CheckIncarnation(s string) error {
	if len(s) != 32 {
		return invalid("incarnation", "%q is not 32 hex digits", s)
	}
	for i := 0; i < len(s); i++ {
		if c := s[i]; (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return invalid("incarnation", "%q is not lower-case hex", s)
		}
	}
	return nil
}

// Encode is r as stored. It refuses a record that Decode would not read
// back as what it is.
func Encode(r *Record) ([]byte, error) {
	if r.V != Version {
		return nil, invalid("v", "this writer writes version %d, not %d", Version, r.V)
	}
	if err := r.check(); err != nil {
		return nil, err
	}
	return json.MarshalIndent(r, "", "  ")
}
