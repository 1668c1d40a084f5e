package record

import (
	"encoding/base64"
	"fmt"

	"github.com/opensubstrate/sandbox/internal/jcs"
	"github.com/opensubstrate/sandbox/key"
	"github.com/opensubstrate/sandbox/reject"
)

// Placed is the segment that says where the run was placed, by which
// host, among which candidates and why (docs/cluster.md): the deciding
// host's signed word, sealed into the record by the host that runs it.
const Placed Kind = "placed"

// PlacementDomain separates a placement's signature from every other
// message a host key signs.
const PlacementDomain = "sandbox.placement/1"

// MaxCandidates bounds a placement's candidates.
const MaxCandidates = 64

// Placement is a host's choice of where a run goes.
type Placement struct {
	// Host is the host chosen, By the host that chose (the one the
	// request reached; often the same).
	Host key.Public `json:"host"`
	By   key.Public `json:"by"`
	// Tier is the tier the run needs: every candidate gives it.
	Tier string `json:"tier"`
	// Candidates are the hosts weighed, with what each was weighed on.
	Candidates []Candidate `json:"candidates"`
	// Why says how Host won, in words.
	Why string `json:"why"`
	// Sig is By's Ed25519 signature (base64url, no padding) over
	// PlacementDomain, a newline and the placement's canonical JSON
	// without "sig".
	Sig string `json:"sig"`
}

// Candidate is a host weighed for a placement: its capacity, the
// sandboxes it held live then, and its rated idle power.
type Candidate struct {
	Host     key.Public `json:"host"`
	Capacity int64      `json:"capacity"`
	Live     int64      `json:"live"`
	IdleMW   int64      `json:"idle_mw"`
	// CostMW is the score: the share of its idle power one more run
	// there would carry (IdleMW over Live+1); lowest wins.
	CostMW int64 `json:"cost_mw"`
}

// signed is what Sig covers.
func (p Placement) signed() ([]byte, error) {
	q := p
	q.Sig = ""
	b, err := jcs.Marshal(struct {
		Host       key.Public  `json:"host"`
		By         key.Public  `json:"by"`
		Tier       string      `json:"tier"`
		Candidates []Candidate `json:"candidates"`
		Why        string      `json:"why"`
	}{q.Host, q.By, q.Tier, q.Candidates, q.Why})
	if err != nil {
		return nil, err
	}
	return append([]byte(PlacementDomain+"\n"), b...), nil
}

// Sign signs p as k, which must be p.By.
func (p *Placement) Sign(k key.Private) error {
	if k.Public() != p.By {
		return fmt.Errorf("record: a placement by %s signed by %s", p.By, k.Public())
	}
	b, err := p.signed()
	if err != nil {
		return err
	}
	p.Sig = base64.RawURLEncoding.EncodeToString(k.Sign(b))
	return nil
}

// Check says whether p is whole and signed by p.By: its host among its
// candidates, each candidate once, figures that are not negative.
func (p Placement) Check() error {
	switch {
	case p.Why == "":
		return reject.New(reject.MissingField, "placement.why", "a placement says why")
	case p.Tier == "":
		return reject.New(reject.MissingField, "placement.tier", "a placement names the tier it gives")
	case len(p.Candidates) == 0 || len(p.Candidates) > MaxCandidates:
		return reject.New(reject.Invalid, "placement.candidates", "%d candidates: 1 to %d", len(p.Candidates), MaxCandidates)
	}
	seen := map[key.Public]bool{}
	for i, c := range p.Candidates {
		where := fmt.Sprintf("placement.candidates[%d]", i)
		if seen[c.Host] {
			return reject.New(reject.Invalid, where, "host %s twice", c.Host)
		}
		seen[c.Host] = true
		if c.Capacity < 0 || c.Live < 0 || c.IdleMW < 0 || c.CostMW < 0 {
			return reject.New(reject.Invalid, where, "a negative figure")
		}
	}
	if !seen[p.Host] {
		return reject.New(reject.Invalid, "placement.host", "%s is none of the candidates", p.Host)
	}
	sig, err := base64.RawURLEncoding.DecodeString(p.Sig)
	if err != nil {
		return reject.New(reject.Malformed, "placement.sig", "not base64url")
	}
	b, err := p.signed()
	if err != nil {
		return err
	}
	if !p.By.Verify(b, sig) {
		return reject.New(reject.Signature, "placement.sig", "does not verify under %s", p.By)
	}
	return nil
}

type placedWire struct {
	Kind      Kind      `json:"kind"`
	Placement Placement `json:"placement"`
}
