package verify

import (
	"errors"
	"fmt"
	"io/fs"
	"path/filepath"

	"github.com/opensubstrate/sandbox/addr"
	"github.com/opensubstrate/sandbox/attest"
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
	var genesis addr.Addr
	seen := map[addr.Addr]bool{}
	var results []Result
	st, err := record.Walk(b, func(seg record.Segment, before addr.Addr) error {
		if len(seen) == 0 {
			genesis = before // the first segment follows head₀
		}
		seen[before] = true
		if seg.Kind != record.Executed {
			return nil
		}
		dir := runDir(seg.Attestation)
		rs := v.Path(dir)
		if len(rs) == 1 && reject.CodeOf(rs[0].Err) == "" && errors.Is(rs[0].Err, fs.ErrNotExist) {
			rs[0].Err = reject.New(reject.Missing, dir, "the record names run %s, and it is not here", seg.Attestation)
		}
		results = append(results, rs...)
		for _, r := range rs {
			if r.Err != nil {
				return fmt.Errorf("run %s: %w", seg.Attestation, r.Err)
			}
		}
		if len(rs) == 0 || rs[0].Addr != seg.Attestation {
			return reject.New(reject.Address, "", "the run at %s is not attestation %s", dir, seg.Attestation)
		}
		env, err := v.read(filepath.Join(dir, FileAttestation))
		if err != nil {
			return err
		}
		a, err := attest.Verify(env, v.Trust)
		if err != nil {
			return err
		}
		switch c := a.Claim.Record; {
		case c == nil:
			return reject.New(reject.Invalid, "", "run %s does not cite a run record: it is not this record's segment", seg.Attestation)
		case c.Genesis != genesis:
			return reject.New(reject.Splice, "", "run %s cites the record of genesis %s, not this one (%s)", seg.Attestation, c.Genesis, genesis)
		case !seen[c.Head]:
			return reject.New(reject.HeadMismatch, "", "run %s continues from head %s, which this record did not have before it", seg.Attestation, c.Head)
		}
		return nil
	})
	return st, results, err
}
