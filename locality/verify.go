package locality

import (
	"fmt"

	"github.com/opensubstrate/sandbox/addr"
	"github.com/opensubstrate/sandbox/key"
	"github.com/opensubstrate/sandbox/reject"
)

// PublishedAnchor is a locality anchor as its operator publishes it: its
// key and its position. A verifier is given the anchors it trusts.
type PublishedAnchor struct {
	Key      key.Public `json:"key"`
	Position Position   `json:"position"`
}

// Bound is what one measurement says: the anchor, how far the region's
// centre is from it, how far the host can be from it, and by how many
// metres the disk of that bound fits inside the region (negative: it does
// not).
type Bound struct {
	Anchor    key.Public
	DistanceM int64 // DistanceM(anchor, centre)
	BoundM    int64 // BoundM(rtt)
	MarginM   int64 // radius - distance - bound
}

// Result is a verified claim: its region, one Bound per measurement in
// the claim's order, and the index of the first measurement whose disk
// lies inside the region.
type Result struct {
	Region  Region
	Bounds  []Bound
	Witness int
}

// Verify checks a locality claim against the anchors a verifier trusts,
// the host key and the run binding it expects, from the claim's bytes
// alone, and refuses at the first failure (docs/spec/locality.md §6). The
// claim holds when some measurement's disk (its anchor's published
// position, its bound) lies inside the claimed region; otherwise Verify
// refuses with locality-too-far and returns the Result, so a caller can
// see by how much.
func Verify(claim []byte, anchors []PublishedAnchor, binding addr.Addr, host key.Public) (*Result, error) {
	c, err := Parse(claim)
	if err != nil {
		return nil, err
	}
	return c.Verify(anchors, binding, host)
}

// Verify is the package's Verify on a parsed claim.
func (c *Claim) Verify(anchors []PublishedAnchor, binding addr.Addr, host key.Public) (*Result, error) {
	if c.Host != host {
		return nil, reject.New(reject.LocalityHost, "claim.host", "%s, and the run's host key is %s", c.Host, host)
	}
	if c.Binding != binding {
		return nil, reject.New(reject.LocalityBinding, "claim.binding", "%s, and the run's binding is %s", c.Binding, binding)
	}
	published := make(map[key.Public]Position, len(anchors))
	for _, a := range anchors {
		published[a.Key] = a.Position
	}
	r := &Result{Region: c.Region, Witness: -1}
	for i, m := range c.Measurements {
		where := fmt.Sprintf("claim.measurements[%d]", i)
		if err := m.verify(where, c, published); err != nil {
			return nil, err
		}
		s := m.Statement
		b := Bound{Anchor: s.Anchor, DistanceM: DistanceM(s.Position, c.Region.Centre), BoundM: BoundM(s.RTT)}
		b.MarginM = c.Region.RadiusM - b.DistanceM - b.BoundM
		r.Bounds = append(r.Bounds, b)
		if b.MarginM >= 0 && r.Witness < 0 {
			r.Witness = i
		}
	}
	if r.Witness < 0 {
		best := r.Bounds[0]
		for _, b := range r.Bounds[1:] {
			if b.MarginM > best.MarginM {
				best = b
			}
		}
		return r, reject.New(reject.LocalityTooFar, "claim.region",
			"no measurement places the host within %d m of %d,%d µ°: the nearest, from %s, reaches %d m past it (distance %d m + bound %d m)",
			c.Region.RadiusM, c.Region.Centre.Lat, c.Region.Centre.Lon, best.Anchor, -best.MarginM, best.DistanceM, best.BoundM)
	}
	return r, nil
}

// verify checks one measurement's signatures and what it is about, in the
// spec's order (§6 step 4).
func (m Measurement) verify(where string, c *Claim, published map[key.Public]Position) error {
	s := m.Statement
	sw := where + ".statement"
	if err := s.Anchor.Check(); err != nil {
		return reject.Wrap(reject.WeakKey, sw+".anchor", err)
	}
	if err := key.CheckSignature(m.Signature); err != nil {
		return reject.Wrap(reject.Signature, where+".signature", err)
	}
	msg, err := s.SignedBytes()
	if err != nil {
		return reject.Wrap(reject.Invalid, sw, err)
	}
	if !s.Anchor.Verify(msg, m.Signature) {
		return reject.New(reject.Signature, where+".signature", "does not verify under the anchor %s", s.Anchor)
	}
	pos, ok := published[s.Anchor]
	if !ok {
		return reject.New(reject.LocalityUnknownAnchor, sw+".anchor", "%s is not among the published anchors", s.Anchor)
	}
	if pos != s.Position {
		return reject.New(reject.LocalityAnchorPosition, sw+".position", "%d,%d µ°; the anchor is published at %d,%d µ°",
			s.Position.Lat, s.Position.Lon, pos.Lat, pos.Lon)
	}
	if s.Host != c.Host {
		return reject.New(reject.LocalityHost, sw+".host", "measured %s, and the claim is for %s", s.Host, c.Host)
	}
	if s.Binding != c.Binding {
		return reject.New(reject.LocalityBinding, sw+".binding", "measured for %s, and the claim binds %s", s.Binding, c.Binding)
	}
	if err := s.Host.Check(); err != nil {
		return reject.Wrap(reject.WeakKey, sw+".host", err)
	}
	if err := key.CheckSignature(s.HostSig); err != nil || !s.Host.Verify(AnswerBytes(s.Nonce, s.Anchor, s.Binding), s.HostSig) {
		return reject.New(reject.LocalityHost, sw+".host_sig", "the host's answer does not verify under %s", s.Host)
	}
	return nil
}
