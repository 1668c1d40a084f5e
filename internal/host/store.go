package host

import (
	"fmt"
	"os"

	"github.com/opensubstrate/sandbox/attest"
	"github.com/opensubstrate/sandbox/internal/index"
	"github.com/opensubstrate/sandbox/internal/state"
	"github.com/opensubstrate/sandbox/internal/store"
)

// OpenIndex opens the state directory's index (internal/index) for s.
// An index that cannot be read (damaged, another schema) is derived
// data: it is moved aside and made again, and rebuilt by the next
// listing. Without one, runs are listed by a scan.
func OpenIndex(s *store.Store) error {
	db, err := index.Open(s.IndexPath())
	if err != nil {
		aside := s.IndexPath() + ".unreadable"
		os.Rename(s.IndexPath(), aside)
		os.Remove(s.IndexPath() + "-wal")
		os.Remove(s.IndexPath() + "-shm")
		if db, err = index.Open(s.IndexPath()); err != nil {
			return fmt.Errorf("%w: %v", store.ErrNoIndex, err)
		}
	}
	s.Index = db
	return nil
}

// Light is a host for the commands that only read the state directory
// (runs, show, records): its store, with its index where it opens.
func Light(d *state.Dir) *Host {
	s := store.Of(d)
	OpenIndex(s)
	return &Host{Store: s}
}

// What the run list and a run reference are, from the store.
type Summary = store.Summary

// ErrAmbiguous is wrapped when a run prefix matches several runs.
var ErrAmbiguous = store.ErrAmbiguous

// OpenRun reads a run directory's attestation, unverified (store.OpenRun).
func OpenRun(dir string) (*attest.Attestation, error) { return store.OpenRun(dir) }

// Damaged is the error for a file of a run directory that cannot be used.
func Damaged(dir, file string, err error) error { return store.Damaged(dir, file, err) }

// Runs lists stored runs, newest first (store.Runs).
func (h *Host) Runs() ([]Summary, error) { return h.Store.Runs() }

// Resolve turns a run reference into its directory (store.Resolve).
func (h *Host) Resolve(ref string) (string, error) { return h.Store.Resolve(ref) }
