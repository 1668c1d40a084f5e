package proof

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/opensubstrate/sandbox/addr"
	"github.com/opensubstrate/sandbox/attest"
	"github.com/opensubstrate/sandbox/key"
	"github.com/opensubstrate/sandbox/reject"
	"github.com/opensubstrate/sandbox/tier"
	"github.com/opensubstrate/sandbox/verify"
)

// Verifier verifies cells (docs/spec/proof.md §3).
type Verifier struct {
	// Trust holds the keys a cell may be signed by; a cell that verifies
	// under a key it does not hold is refused with untrusted-key (and
	// Verify still returns what it found).
	Trust key.Trust
	// Runs is a directory of run directories, each named by its
	// address's hex ("": none): every green run the cell names that is
	// there is re-verified.
	Runs string
	// Run re-verifies one run directory, signed by host; nil: package
	// verify's, trusting host only.
	Run func(dir string, host key.Public) error
}

// Verified is a cell that was read and checked.
type Verified struct {
	*Opened
	Cell Cell
	// Trusted says the signer is one of the verifier's keys.
	Trusted bool
	// Runs are the green runs, in tier order, and what re-verifying each
	// found.
	Runs []RunCheck
}

// RunCheck is one green run's re-verification.
type RunCheck struct {
	Tier tier.Tier
	Run  addr.Addr
	Dir  string // "" when its run directory is not in Verifier.Runs
	Err  error
}

// Verify reads a cell file and checks it: the envelope's signature
// under the key the cell names as its host (proof-signature), that key
// trusted (untrusted-key), the predicate's schema (Check), the subjects
// the predicate's (proof-subject), then every green run whose directory
// is in v.Runs: its attestation hashes to its subject's digests
// (proof-subject) and the run verifies (proof-run). The error is the
// first failure; Verified is returned whenever the cell could be read,
// with each run's result in Runs.
func (v Verifier) Verify(b []byte) (*Verified, error) {
	o, err := Open(b)
	if err != nil {
		return nil, err
	}
	c := o.Statement.Predicate
	out := &Verified{Opened: o, Cell: c}
	if err := o.Envelope.Verify(c.Host); err != nil {
		return out, err
	}
	if err := Check(c); err != nil {
		return out, err
	}
	if err := checkSubjects(o.Statement); err != nil {
		return out, err
	}
	var first error
	for i, t := range c.Tiers {
		if t.State != Green {
			continue
		}
		a, _ := addr.Parse(t.Run)
		rc := RunCheck{Tier: t.Tier, Run: a}
		if v.Runs != "" {
			rc.Dir = filepath.Join(v.Runs, a.Hex())
			if _, err := os.Stat(rc.Dir); errors.Is(err, fs.ErrNotExist) {
				rc.Dir = ""
			}
		}
		if rc.Dir != "" {
			rc.Err = v.checkRun(rc.Dir, o.Statement.Subject, a, c.Host)
			if rc.Err != nil {
				rc.Err = reject.In(fmt.Sprintf("predicate.tiers[%d]", i), rc.Err)
			}
		}
		if first == nil {
			first = rc.Err
		}
		out.Runs = append(out.Runs, rc)
	}
	if first != nil {
		return out, first
	}
	out.Trusted = v.Trust.Trusts(c.Host)
	if !out.Trusted {
		return out, reject.New(reject.UntrustedKey, "predicate.host", "the cell verifies under %s, which is not trusted", c.Host)
	}
	return out, nil
}

// checkRun: the run directory's attestation is the subject's bytes, and
// the run verifies.
func (v Verifier) checkRun(dir string, subs []Subject, run addr.Addr, host key.Public) error {
	b, err := os.ReadFile(filepath.Join(dir, verify.FileAttestation))
	if err != nil {
		return reject.Wrap(ProofRun, run.String(), err)
	}
	var want map[string]string
	for _, s := range subs {
		if s.Name == RunSubject(run) {
			want = s.Digest
		}
	}
	got := Digests(b)
	if got["sha256"] != want["sha256"] || got["blake3"] != want["blake3"] {
		return reject.New(ProofSubject, RunSubject(run), "the attestation in %s hashes to sha256 %s, blake3 %s; the subject says sha256 %s, blake3 %s", dir, got["sha256"], got["blake3"], want["sha256"], want["blake3"])
	}
	if a, err := attest.Verify(b, key.NewTrust(host)); err != nil {
		return reject.Wrap(ProofRun, RunSubject(run), err)
	} else if a.Addr != run {
		return reject.New(ProofSubject, RunSubject(run), "the attestation in %s is the run %s's, not %s's", dir, a.Addr, run)
	}
	check := v.Run
	if check == nil {
		check = verifyRun
	}
	if err := check(dir, host); err != nil {
		return reject.Wrap(ProofRun, run.String(), err)
	}
	return nil
}

// verifyRun is package verify's check of a run directory, trusting host.
func verifyRun(dir string, host key.Public) error {
	vr := &verify.Verifier{Trust: key.NewTrust(host)}
	var errs []error
	for _, r := range vr.Path(dir) {
		if r.Err != nil {
			errs = append(errs, fmt.Errorf("%s %s: %w", r.Kind, r.Path, r.Err))
		}
	}
	return errors.Join(errs...)
}
