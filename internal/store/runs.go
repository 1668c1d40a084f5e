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

// Runs lists every stored run, newest first (ListRuns).
func (s *Store) Runs() ([]Summary, error) { return s.ListRuns(RunQuery{}) }

// Scan lists stored runs, newest first, by reading every run directory:
// it reads claims without verifying them (verification is Verify's
// job), and says which directories are damaged.
func (s *Store) Scan() ([]Summary, error) {
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
		out = append(out, summarize(filepath.Join(runs, e.Name()), e.Name()))
	}
	sortRuns(out)
	return out, nil
}

// summarize reads the run directory dir, named name, for the run list.
func summarize(dir, name string) Summary {
	a, err := readAttestation(dir)
	if err != nil {
		// Listed, as damaged: its name is its id; its time, the
		// directory's.
		s := Summary{Dir: dir, Damaged: fmt.Sprintf("%s: %v", verify.FileAttestation, err)}
		s.ID, _ = addr.Parse(addr.Prefix + name)
		if fi, err := os.Lstat(dir); err == nil {
			s.Started = fi.ModTime()
		}
		return s
	}
	c := a.Claim
	s := Summary{ID: a.Addr, Dir: dir, Tier: c.Tier.Chosen, Status: c.Outcome.Status, Exit: c.Outcome.ExitCode}
	s.Started, _ = time.Parse(attest.TimeLayout, c.Started)
	if a.Addr.Hex() != name {
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
	return s
}

// RowOf is the index row of the run directory dir, which will be named
// by id: nil if it holds no readable attestation of that run.
func RowOf(dir string, id addr.Addr) *IndexedRun {
	s := summarize(dir, id.Hex())
	if s.Status == "" || s.ID != id {
		return nil
	}
	return &IndexedRun{ID: s.ID, Started: s.Started, Tier: s.Tier, Status: s.Status, Exit: s.Exit, Entry: s.Entry, Damaged: s.Damaged}
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
	if ref == "last" {
		runs, err := s.ListRuns(RunQuery{Limit: 1})
		if err != nil {
			return "", err
		}
		if len(runs) == 0 {
			return "", fmt.Errorf("no runs yet in %s: %w", s.Path("runs"), os.ErrNotExist)
		}
		return runs[0].Dir, nil
	}
	hex := strings.TrimPrefix(ref, addr.Prefix)
	if len(hex) < 6 {
		return "", fmt.Errorf("run %q: give \"last\", a directory, or at least 6 hex digits of a run id: %w", ref, os.ErrNotExist)
	}
	if strings.Trim(hex, "0123456789abcdef") != "" {
		return "", fmt.Errorf("no run %q in %s (sandbox runs lists them): %w", ref, s.Path("runs"), os.ErrNotExist)
	}
	runs, err := s.ListRuns(RunQuery{Prefix: hex})
	if err != nil {
		return "", err
	}
	var match []string
	for _, r := range runs {
		match = append(match, r.Dir)
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
