package verify

import (
	"fmt"
	"path/filepath"

	"github.com/opensubstrate/sandbox/addr"
	"github.com/opensubstrate/sandbox/attest"
	"github.com/opensubstrate/sandbox/internal/chain"
	"github.com/opensubstrate/sandbox/record"
	"github.com/opensubstrate/sandbox/reject"
)

// Record verifies a run record and every run it names: the record from
// its genesis (record.VerifyBytes), then, for each Executed segment, the
// run directory runDir gives for its attestation, completely (Path: the
// signature under a trusted key, every bound object), and that the run
// cites this record (sandbox.attestation/2: the record's genesis, and a
// head the record had before the run's segment). The results are the
// runs', in order; the error is the first failure.
func (v *Verifier) Record(b []byte, runDir func(addr.Addr) string) (record.State, []Result, error) {
	entries, torn, err := chain.Split(b)
	if err == nil && torn > 0 {
		err = reject.New(reject.Truncated, fmt.Sprintf("line %d", len(entries)+1), "%d bytes without their newline", torn)
	}
	if err != nil {
		return record.State{}, nil, err
	}
	st, err := record.Verify(entries)
	if err != nil {
		return st, nil, err
	}
	// Replayed again, stepping: the heads before each segment.
	h, _ := record.ParseHeader(entries[0])
	cur := record.New(h)
	genesis := cur.Head
	seen := map[addr.Addr]bool{cur.Head: true}
	var results []Result
	for i, e := range entries[1:] {
		seg, _ := record.ParseSegment(e)
		line := fmt.Sprintf("line %d", i+2)
		if seg.Kind == record.Executed {
			dir := runDir(seg.Attestation)
			rs := v.Path(dir)
			results = append(results, rs...)
			for _, r := range rs {
				if r.Err != nil {
					return st, results, fmt.Errorf("%s: run %s: %w", line, seg.Attestation, r.Err)
				}
			}
			if len(rs) == 0 || rs[0].Addr != seg.Attestation {
				return st, results, reject.New(reject.Address, line, "the run at %s is not attestation %s", dir, seg.Attestation)
			}
			env, err := v.read(filepath.Join(dir, FileAttestation))
			if err != nil {
				return st, results, err
			}
			a, err := attest.Verify(env, v.Trust)
			if err != nil {
				return st, results, err
			}
			switch c := a.Claim.Record; {
			case c == nil:
				return st, results, reject.New(reject.Invalid, line, "run %s does not cite a run record: it is not this record's segment", seg.Attestation)
			case c.Genesis != genesis:
				return st, results, reject.New(reject.Splice, line, "run %s cites the record of genesis %s, not this one (%s)", seg.Attestation, c.Genesis, genesis)
			case !seen[c.Head]:
				return st, results, reject.New(reject.HeadMismatch, line, "run %s continues from head %s, which this record did not have before it", seg.Attestation, c.Head)
			}
		}
		if err := cur.Apply(seg, e); err != nil {
			return st, results, err
		}
		seen[cur.Head] = true
	}
	return st, results, nil
}
