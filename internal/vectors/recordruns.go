package vectors

import (
	"os"
	"path/filepath"

	"github.com/opensubstrate/sandbox/addr"
	"github.com/opensubstrate/sandbox/attest"
	"github.com/opensubstrate/sandbox/internal/jcs"
	"github.com/opensubstrate/sandbox/key"
	"github.com/opensubstrate/sandbox/record"
	"github.com/opensubstrate/sandbox/reject"
	"github.com/opensubstrate/sandbox/verify"
)

// KindRecordRuns is the kind of a run record verified with the runs it
// names (`sandbox record verify --runs`, verify.Verifier.Record): a
// directory holding FileRecord and, under runs/, a run directory per
// run, named by the hex of its attestation's address.
const KindRecordRuns = "record-runs"

// FileRecord is the record in a record-runs vector.
const FileRecord = "record.jsonl"

// recordRunsVectors adds a record of one execution with its run, and the
// same record without it.
func recordRunsVectors(p *pack, k key.Private) error {
	unit, grants := addr.Of([]byte("vector sandbox unit")), addr.Of([]byte("vector sandbox grants"))
	g0 := record.Genesis(unit, grants)
	r, err := sampleRunWith(k, func(pt *parts) { pt.c.Record = &attest.RecordCite{Genesis: g0, Head: g0} })
	if err != nil {
		return err
	}
	a := attestAddr(r.files[verify.FileAttestation])
	hb, err := jcs.Marshal(record.Header{Record: record.Domain, Unit: unit, Grants: grants})
	if err != nil {
		return err
	}
	sb, err := record.Segment{Kind: record.Executed, Attestation: a}.Bytes()
	if err != nil {
		return err
	}
	rec := []byte(string(hb) + "\n" + string(sb) + "\n")
	st, err := record.VerifyBytes(rec)
	if err != nil {
		return err
	}
	whole := map[string][]byte{FileRecord: rec}
	for n, b := range p.runDir("runs/"+a.Hex(), r.files) {
		whole[n] = b
	}
	head := st.Head
	p.add(Entry{Name: "record-runs", Path: "positive/record-runs", Kind: KindRecordRuns, Expect: ExpectOK, Addr: &head,
		About: "a run record of one execution and, under runs/, that run (sandbox.attestation/2 citing the record's genesis as the head it began at): the record verifies with its runs, to this head"},
		p.runDir("positive/record-runs", whole))
	p.add(Entry{Name: "record-runs-missing-run", Path: "negative/record-runs-missing-run", Kind: KindRecordRuns, Expect: string(reject.Missing),
		About: "the same record without the run it names: a run the record names that is not there is missing"},
		p.runDir("negative/record-runs-missing-run", map[string][]byte{FileRecord: rec}))
	return nil
}

// checkRecordRuns verifies a record-runs vector as `sandbox record
// verify --runs` does.
func checkRecordRuns(v *verify.Verifier, dir string) verify.Result {
	r := verify.Result{Path: dir, Kind: KindRecordRuns}
	b, err := os.ReadFile(filepath.Join(dir, FileRecord))
	if err != nil {
		r.Err = err
		return r
	}
	st, _, err := v.Record(b, func(a addr.Addr) string { return filepath.Join(dir, "runs", a.Hex()) })
	r.Err = err
	if err == nil {
		r.Addr = st.Head
		r.Note = "the record and every run it names verify"
	}
	return r
}
