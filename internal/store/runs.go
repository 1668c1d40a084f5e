package store

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/opensubstrate/sandbox/addr"
	"github.com/opensubstrate/sandbox/attest"
	"github.com/opensubstrate/sandbox/internal/unit"
	"github.com/opensubstrate/sandbox/key"
	"github.com/opensubstrate/sandbox/tier"
	"github.com/opensubstrate/sandbox/verify"
)

// Summary is one line of the run list.
type Summary struct {
	ID      addr.Addr
	Dir     string
	Tier    tier.Tier
	Status  attest.Status
	Exit    *int
	Started time.Time
	Entry   string
	// Damaged says what is wrong with a run directory whose attestation
	// cannot be read or that lacks a file it should hold; "" otherwise.
	// (Runs only looks; Verify checks everything.)
	Damaged string
}

// Runs lists stored runs, newest first. It reads claims without verifying
// them; verification is Verify's job.
func (s *Store) Runs() ([]Summary, error) {
	runs := s.Path("runs")
	ents, err := os.ReadDir(runs)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var out []Summary
	for _, e := range ents {
		if !e.IsDir() || strings.HasPrefix(e.Name(), ".") {
			continue
		}
		dir := filepath.Join(runs, e.Name())
		a, err := readAttestation(dir)
		if err != nil {
			// Listed, as damaged: its name is its id; its time, the
			// directory's.
			s := Summary{Dir: dir, Damaged: fmt.Sprintf("%s: %v", verify.FileAttestation, err)}
			s.ID, _ = addr.Parse(addr.Prefix + e.Name())
			if fi, err := e.Info(); err == nil {
				s.Started = fi.ModTime()
			}
			out = append(out, s)
			continue
		}
		c := a.Claim
		s := Summary{ID: a.Addr, Dir: dir, Tier: c.Tier.Chosen, Status: c.Outcome.Status, Exit: c.Outcome.ExitCode}
		s.Started, _ = time.Parse(attest.TimeLayout, c.Started)
		if a.Addr.Hex() != e.Name() {
			s.Damaged = fmt.Sprintf("its attestation is %s, not the run its directory names", a.Addr)
		}
		var missing []string
		for _, f := range []string{verify.FileUnit, verify.FileGrants, verify.FileDecisions, verify.FileReceipt, verify.FileStdout, verify.FileStderr} {
			if _, err := os.Lstat(filepath.Join(dir, f)); err != nil {
				missing = append(missing, f)
			}
		}
		if c.Journal != nil {
			if _, err := os.Lstat(filepath.Join(dir, verify.FileJournal)); err != nil {
				missing = append(missing, verify.FileJournal)
			}
		}
		if len(missing) > 0 && s.Damaged == "" {
			s.Damaged = "missing " + strings.Join(missing, ", ")
		}
		if ub, err := os.ReadFile(filepath.Join(dir, verify.FileUnit)); err == nil {
			if u, err := unit.Decode(ub); err == nil {
				s.Entry = u.Entry
			}
		}
		out = append(out, s)
	}
	sort.Slice(out, func(i, j int) bool {
		if !out[i].Started.Equal(out[j].Started) {
			return out[i].Started.After(out[j].Started)
		}
		return out[i].ID.Hex() < out[j].ID.Hex()
	})
	return out, nil
}

// OpenRun reads the attestation of the run directory dir (not verified:
// nothing is trusted here), saying so when dir is no run directory at
// all, and that the run is damaged when its attestation cannot be read.
func OpenRun(dir string) (*attest.Attestation, error) {
	if _, err := os.Lstat(filepath.Join(dir, verify.FileAttestation)); errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("%s is not a run directory: it holds no %s: %w", dir, verify.FileAttestation, os.ErrNotExist)
	}
	a, err := readAttestation(dir)
	if err != nil {
		return nil, Damaged(dir, verify.FileAttestation, err)
	}
	return a, nil
}

// Damaged is the error for a file of a run directory that cannot be used.
func Damaged(dir, file string, err error) error {
	return fmt.Errorf("run %s is damaged: %s: %w", dir, file, err)
}

// readAttestation parses a run's attestation; an untrusted signer is not an
// error here (nothing is trusted), any other failure is.
func readAttestation(dir string) (*attest.Attestation, error) {
	b, err := os.ReadFile(filepath.Join(dir, verify.FileAttestation))
	if err != nil {
		return nil, err
	}
	a, err := attest.Verify(b, key.Trust{})
	if a != nil {
		return a, nil
	}
	return nil, err
}

// ErrAmbiguous is wrapped when a run prefix matches several runs.
var ErrAmbiguous = errors.New("ambiguous run reference")

// Resolve turns a run reference into its directory: "last" (the newest
// run), a run id (b3:<hex>, or its hex, or a unique hex prefix of at
// least 6 digits), or a directory path.
func (s *Store) Resolve(ref string) (string, error) {
	if fi, err := os.Stat(ref); err == nil && fi.IsDir() {
		return ref, nil
	}
	runs, err := s.Runs()
	if err != nil {
		return "", err
	}
	if ref == "last" {
		if len(runs) == 0 {
			return "", fmt.Errorf("no runs yet in %s: %w", s.Path("runs"), os.ErrNotExist)
		}
		return runs[0].Dir, nil
	}
	hex := strings.TrimPrefix(ref, addr.Prefix)
	if len(hex) < 6 {
		return "", fmt.Errorf("run %q: give \"last\", a directory, or at least 6 hex digits of a run id: %w", ref, os.ErrNotExist)
	}
	var match []string
	for _, r := range runs {
		if strings.HasPrefix(filepath.Base(r.Dir), hex) {
			match = append(match, r.Dir)
		}
	}
	switch len(match) {
	case 0:
		return "", fmt.Errorf("no run %q in %s (sandbox runs lists them): %w", ref, s.Path("runs"), os.ErrNotExist)
	case 1:
		return match[0], nil
	}
	ids := make([]string, len(match))
	for i, m := range match {
		ids[i] = filepath.Base(m)
	}
	sort.Strings(ids)
	return "", fmt.Errorf("%w: %q matches %d runs; give more digits: %s", ErrAmbiguous, ref, len(match), strings.Join(ids, ", "))
}
