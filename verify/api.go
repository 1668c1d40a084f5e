package verify

import (
	"github.com/opensubstrate/sandbox/internal/grant"
	"github.com/opensubstrate/sandbox/internal/unit"
	"github.com/opensubstrate/sandbox/key"
)

// Unit is a unit of work, as unit.json holds it (docs/spec/unit.md).
type Unit = unit.Unit

// Grants is a grant set, as grants.json holds it (docs/spec/grants.md).
type Grants = grant.Set

// Decisions is a decision log, as decisions.json holds it.
type Decisions = grant.Log

// DecodeUnit reads a unit from its canonical JSON, refusing anything not
// canonical or not valid.
func DecodeUnit(b []byte) (Unit, error) { return unit.Decode(b) }

// DecodeGrants reads a grant set from its canonical JSON.
func DecodeGrants(b []byte) (Grants, error) { return grant.Decode(b) }

// DecodeDecisions reads a decision log from its canonical JSON.
func DecodeDecisions(b []byte) (Decisions, error) { return grant.DecodeLog(b) }

// Dir verifies the run directory dir, trusting exactly the keys given.
// It returns one Result per file and the first failure, nil when
// every check passed. A valid run signed by a key not given fails with
// reject.UntrustedKey.
func Dir(dir string, trusted ...key.Public) ([]Result, error) {
	v := &Verifier{Trust: key.NewTrust(trusted...)}
	rs := v.Path(dir)
	for _, r := range rs {
		if r.Err != nil {
			return rs, r.Err
		}
	}
	return rs, nil
}
